// SEC-09 fuzz target of the API's request parsing (proptest, stable Rust): random
// methods, paths built from the real routes with random ids and segments, random
// query strings, headers and bodies (JSON shaped like the API's, or raw bytes) go
// through the full router; every answer is a JSON error or a success, never a panic
// or a 5xx. Cases: `PROPTEST_CASES` (default 256), the CI smoke.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::HashMap;

use axum::body::Body;
use axum::http::{Method, Request};
use knife_server::AppState;
use proptest::prelude::*;
use serde_json::{Map, Value, json};
use tower::ServiceExt;

const ROUTES: &[&str] = &[
    "/api/projects",
    "/api/threads",
    "/api/threads/{id}",
    "/api/threads/{id}/messages",
    "/api/threads/{id}/interrupt",
    "/api/threads/{id}/requests",
    "/api/threads/{id}/requests/{id}",
    "/api/threads/{id}/events",
    "/api/events/latest",
    "/api/providers",
    "/api/sessions",
    "/api/sessions/{id}/close",
    "/healthz",
    "/metrics",
    "/",
    "/ui/{id}",
    "/{id}",
];
const KEYS: &[&str] = &[
    "root",
    "name",
    "project_id",
    "title",
    "provider_instance_id",
    "model",
    "parent_thread_id",
    "text",
    "decision",
    "message",
    "after",
    "type",
];

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        prop::sample::select(&["allow_once", "deny", "/tmp", ".", "thread_x", ""][..])
            .prop_map(|s| json!(s)),
        ".{0,16}".prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 24, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::vec((prop::sample::select(KEYS), inner), 0..6).prop_map(|kv| {
                Value::Object(
                    kv.into_iter()
                        .map(|(k, v)| (k.to_owned(), v))
                        .collect::<Map<String, Value>>(),
                )
            }),
        ]
    })
}

fn segment() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("thread_0193".to_owned()),
        Just("..".to_owned()),
        Just("%2e%2e".to_owned()),
        Just("%ff%00".to_owned()),
        "[a-zA-Z0-9_:%-]{0,24}",
    ]
}

fn state(store: knife_store::Store) -> AppState {
    support::app_state(&store, HashMap::new())
}

/// One runtime and one router over one store for every case (opening a store per
/// case would dominate the run).
fn shared() -> &'static (tokio::runtime::Runtime, axum::Router) {
    static CELL: std::sync::OnceLock<(tokio::runtime::Runtime, axum::Router)> =
        std::sync::OnceLock::new();
    CELL.get_or_init(|| {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let dir = Box::leak(Box::new(tempfile::tempdir().unwrap()));
        let router = rt.block_on(async {
            let store = knife_store_sqlite::open(dir.path().join("knife.db"))
                .await
                .unwrap();
            knife_server::router(state(store))
        });
        (rt, router)
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: ProptestConfig::default().cases.min(256), ..ProptestConfig::default() })]
    #[test]
    fn sec_09_api_request_parsing_never_panics_or_answers_5xx(
        method in prop::sample::select(&["GET", "POST", "DELETE", "PATCH", "PUT"][..]),
        route in prop::sample::select(ROUTES),
        ids in prop::collection::vec(segment(), 2),
        query in prop::option::of("[a-z_=&%0-9]{0,24}"),
        json_body in prop::option::of(json_value()),
        raw_body in prop::collection::vec(any::<u8>(), 0..64),
        content_type in prop::sample::select(&["application/json", "text/plain", "", "application/json; charset=utf-8"][..]),
    ) {
        let (rt, router) = shared();
        let answer = rt.block_on(async {
            let router = router.clone();
            let mut path = route.replacen("{id}", &ids[0], 1).replacen("{id}", &ids[1], 1);
            if let Some(q) = &query {
                path = format!("{path}?{q}");
            }
            let body = match &json_body {
                Some(v) => Body::from(v.to_string()),
                None => Body::from(raw_body.clone()),
            };
            let mut request = Request::builder()
                .method(Method::from_bytes(method.as_bytes()).unwrap())
                .uri(path.as_str())
                .header("host", "127.0.0.1");
            if !content_type.is_empty() {
                request = request.header("content-type", content_type);
            }
            let Ok(request) = request.body(body) else {
                // Not a valid URI: hyper would refuse it before the router.
                return None;
            };
            // The events route streams: only the status line matters here.
            let response = router.oneshot(request).await.unwrap();
            Some((path, response.status()))
        });
        if let Some((path, status)) = answer {
            prop_assert!(!status.is_server_error(), "{method} {path}: {status}");
        }
    }
}
