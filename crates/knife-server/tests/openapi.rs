//! Drift test of the API document (as codex-rs tests its app-server schema): what
//! `knife_server::openapi` generates must equal the copies checked in under `docs/api/`.
//! After changing an API type or route, regenerate them with
//! `KNIFE_UPDATE_API_DOCS=1 cargo test -p knife-server --test openapi` and commit them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;

use knife_server::openapi::{REGENERATE, document, events_schema};

fn docs_api() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/api")
}

/// Compares `generated` with the checked-in `file`, or writes it when
/// `KNIFE_UPDATE_API_DOCS` is set.
fn check(file: &str, generated: &serde_json::Value) {
    let path = docs_api().join(file);
    let text = serde_json::to_string_pretty(generated).unwrap() + "\n";
    if std::env::var_os("KNIFE_UPDATE_API_DOCS").is_some() {
        std::fs::create_dir_all(docs_api()).unwrap();
        std::fs::write(&path, &text).unwrap();
        return;
    }
    let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
    if checked_in != text {
        let first = checked_in
            .lines()
            .zip(text.lines())
            .position(|(a, b)| a != b)
            .unwrap_or_else(|| checked_in.lines().count().min(text.lines().count()));
        panic!(
            "docs/api/{file} is not what the code generates (first difference at line {}: \
             checked in {:?}, generated {:?}). The API types or routes changed: regenerate \
             it with `{REGENERATE}` and commit docs/api/.",
            first + 1,
            checked_in.lines().nth(first).unwrap_or("<end of file>"),
            text.lines().nth(first).unwrap_or("<end of file>"),
        );
    }
}

#[test]
fn the_checked_in_openapi_document_matches_the_code() {
    check("openapi.json", &serde_json::to_value(document()).unwrap());
}

#[test]
fn the_checked_in_event_schema_matches_the_code() {
    check("events.schema.json", &events_schema());
}

#[test]
fn the_document_is_openapi_3_1_and_names_every_event_type() {
    let doc = serde_json::to_value(document()).unwrap();
    assert_eq!(doc["openapi"], "3.1.0");
    let paths = doc["paths"].as_object().unwrap();
    for path in [
        "/api/threads/{id}/messages",
        "/api/openapi.json",
        "/api/threads/{id}/events",
    ] {
        assert!(paths.contains_key(path), "{path} missing");
    }
    let events = events_schema().to_string();
    for event_type in knife_protocol::EVENT_TYPES {
        assert!(
            events.contains(&format!("\"{event_type}\"")),
            "{event_type} is not in the event schema"
        );
    }
}

/// Every `/api` route `routes.rs` serves is in the route table of `openapi.rs` (read
/// from the source: axum's router does not list its routes). A route added without
/// its entry fails here.
#[test]
fn every_served_api_route_is_documented() {
    let source = include_str!("../src/routes.rs");
    let api = source
        .split("let api = Router::new()")
        .nth(1)
        .and_then(|rest| rest.split("let metrics").next())
        .expect("routes.rs builds the /api router as `let api = Router::new()`");
    let doc = serde_json::to_value(document()).unwrap();
    let documented = doc["paths"].as_object().unwrap();
    let mut missing = Vec::new();
    let mut checked = 0;
    for piece in api.split(".route(").skip(1) {
        let Some(path) = piece
            .trim_start()
            .strip_prefix('"')
            .and_then(|p| p.split('"').next())
        else {
            continue;
        };
        checked += 1;
        let full = format!("/api{path}");
        if !documented.contains_key(&full) {
            missing.push(full);
        }
    }
    assert!(checked >= 20, "read only {checked} routes from routes.rs");
    assert!(
        missing.is_empty(),
        "served but not in the API document: {missing:?}. Add each to `routes()` in \
         crates/knife-server/src/openapi.rs, then regenerate docs/api/ with `{REGENERATE}`."
    );
}
