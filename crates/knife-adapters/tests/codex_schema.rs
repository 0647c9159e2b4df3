//! The codex driver's serde types against the JSON schema the installed codex prints
//! (`codex app-server generate-json-schema`, generated into a temp dir at test time,
//! not committed). codex is found like the peer suite finds it: `KNIFE_PEER_CODEX_BIN`,
//! else `$KNIFE_PEERS_DIR` (default `~/.cache/knife-peers`)`/codex/node_modules/.bin/codex`
//! (`scripts/install-peers.sh --only codex`). Gated on `knife_has_codex`
//! (docs/2026-12-01-test-prerequisites.md): without codex the tests are ignored, unless
//! `KNIFE_PEERS` selects codex (or `KNIFE_TEST_REQUIRE` names it): then they run and fail.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use knife_adapters::codex::wire::{self, ITEM_FIELDS, SCHEMA_FIELDS, method};
use serde_json::{Value, json};

/// The generated schema directory; panics saying what to install when codex is missing.
fn schema() -> tempfile::TempDir {
    let codex = knife_prereqs::peer_bin("codex").unwrap_or_else(|missing| panic!("{missing}"));
    let dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(&codex)
        .args(["app-server", "generate-json-schema", "--out"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    dir
}

fn load(dir: &Path, file: &str) -> Value {
    let text = std::fs::read_to_string(dir.join(file))
        .unwrap_or_else(|e| panic!("schema file {file} is missing: {e}"));
    serde_json::from_str(&text).unwrap()
}

/// Property names of a schema object, including those of its `oneOf` / `anyOf` branches.
fn properties(schema: &Value) -> Vec<String> {
    let mut names: Vec<String> = schema["properties"]
        .as_object()
        .map(|o| o.keys().cloned().collect())
        .unwrap_or_default();
    for key in ["oneOf", "anyOf", "allOf"] {
        for branch in schema[key].as_array().into_iter().flatten() {
            names.extend(properties(branch));
        }
    }
    names
}

fn required(schema: &Value) -> Vec<String> {
    schema["required"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// Every method of a `ClientRequest.json`-style file (`oneOf` over `method` enums).
fn methods(schema: &Value) -> Vec<String> {
    schema["oneOf"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|b| {
            b["properties"]["method"]["enum"][0]
                .as_str()
                .map(str::to_owned)
        })
        .collect()
}

/// The string values a decision definition allows (its string `enum` branches).
fn string_values(definition: &Value) -> Vec<String> {
    let mut values: Vec<String> = definition["enum"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v.as_str().map(str::to_owned))
        .collect();
    for branch in definition["oneOf"].as_array().into_iter().flatten() {
        values.extend(string_values(branch));
    }
    values
}

/// `value`'s keys are all schema properties and the schema's required ones are present.
fn assert_fits(dir: &Path, file: &str, value: &Value) {
    let schema = load(dir, file);
    let allowed = properties(&schema);
    let object = value.as_object().unwrap();
    for key in object.keys() {
        assert!(
            allowed.contains(key),
            "{file}: knife sends `{key}`, which the schema lacks"
        );
    }
    for key in required(&schema) {
        assert!(
            object.contains_key(&key),
            "{file}: knife omits required `{key}`"
        );
    }
}

#[test]
#[cfg_attr(
    not(knife_has_codex),
    ignore = "needs codex: run scripts/test (or scripts/install-peers.sh --only codex)"
)]
fn the_fields_the_codex_types_use_exist_in_the_schema() {
    let dir = schema();
    for (file, fields) in SCHEMA_FIELDS {
        let schema = load(dir.path(), file);
        let known = properties(&schema);
        for field in *fields {
            assert!(
                known.contains(&field.to_string()),
                "{file} has no field `{field}`"
            );
        }
    }
    let items = load(dir.path(), "ServerNotification.json");
    let branches = items["definitions"]["ThreadItem"]["oneOf"]
        .as_array()
        .unwrap();
    for (kind, fields) in ITEM_FIELDS {
        let branch = branches
            .iter()
            .find(|b| b["properties"]["type"]["enum"][0] == *kind)
            .unwrap_or_else(|| panic!("ThreadItem has no `{kind}`"));
        for field in *fields {
            assert!(
                branch["properties"].get(*field).is_some(),
                "ThreadItem `{kind}` has no `{field}`"
            );
        }
    }
}

#[test]
#[cfg_attr(
    not(knife_has_codex),
    ignore = "needs codex: run scripts/test (or scripts/install-peers.sh --only codex)"
)]
fn every_method_the_driver_uses_exists() {
    let dir = schema();
    for (file, used) in [
        ("ClientRequest.json", method::CLIENT_REQUESTS),
        ("ClientNotification.json", method::CLIENT_NOTIFICATIONS),
        ("ServerNotification.json", method::SERVER_NOTIFICATIONS),
        ("ServerRequest.json", method::SERVER_REQUESTS),
    ] {
        let known = methods(&load(dir.path(), file));
        for m in used {
            assert!(known.contains(&m.to_string()), "{file} has no method `{m}`");
        }
    }
}

#[test]
#[cfg_attr(
    not(knife_has_codex),
    ignore = "needs codex: run scripts/test (or scripts/install-peers.sh --only codex)"
)]
fn what_the_driver_sends_fits_the_schema() {
    let dir = schema();
    let d = dir.path();
    let init = wire::InitializeParams {
        client_info: wire::ClientInfo {
            name: "knife".into(),
            title: Some("knife".into()),
            version: "0.1.0".into(),
        },
        capabilities: wire::InitializeCapabilities {
            experimental_api: false,
        },
    };
    assert_fits(
        d,
        "v1/InitializeParams.json",
        &serde_json::to_value(&init).unwrap(),
    );
    let mut params = wire::ThreadParams {
        thread_id: None,
        cwd: "/work".into(),
        approval_policy: Some("on-request".into()),
        sandbox: Some("workspace-write".into()),
        model: Some("mock-model".into()),
        config: Some(json!({"mcp_servers": {}})),
        exclude_turns: None,
    };
    assert_fits(
        d,
        "v2/ThreadStartParams.json",
        &serde_json::to_value(&params).unwrap(),
    );
    params.thread_id = Some("t".into());
    params.exclude_turns = Some(true);
    assert_fits(
        d,
        "v2/ThreadResumeParams.json",
        &serde_json::to_value(&params).unwrap(),
    );
    let turn = wire::TurnStartParams {
        thread_id: "t".into(),
        input: vec![wire::UserInput::Text { text: "hi".into() }],
        model: Some("m".into()),
    };
    let turn = serde_json::to_value(&turn).unwrap();
    assert_fits(d, "v2/TurnStartParams.json", &turn);
    assert_eq!(turn["input"][0]["type"], "text");
    let interrupt = wire::TurnInterruptParams {
        thread_id: "t".into(),
        turn_id: "u".into(),
    };
    assert_fits(
        d,
        "v2/TurnInterruptParams.json",
        &serde_json::to_value(&interrupt).unwrap(),
    );
    let unsubscribe = wire::ThreadUnsubscribeParams {
        thread_id: "t".into(),
    };
    assert_fits(
        d,
        "v2/ThreadUnsubscribeParams.json",
        &serde_json::to_value(&unsubscribe).unwrap(),
    );

    // The decisions and actions knife answers with are values the schema allows.
    let command = load(d, "CommandExecutionRequestApprovalResponse.json");
    let command_values = string_values(&command["definitions"]["CommandExecutionApprovalDecision"]);
    let file = load(d, "FileChangeRequestApprovalResponse.json");
    let file_values = string_values(&file["definitions"]["FileChangeApprovalDecision"]);
    for decision in ["accept", "acceptForSession", "decline"] {
        assert!(
            command_values.contains(&decision.to_owned()),
            "{command_values:?}"
        );
        assert!(
            file_values.contains(&decision.to_owned()),
            "{file_values:?}"
        );
        let answer = serde_json::to_value(wire::ApprovalResponse { decision }).unwrap();
        assert_fits(d, "CommandExecutionRequestApprovalResponse.json", &answer);
    }
    let elicitation = load(d, "McpServerElicitationRequestResponse.json");
    let actions = string_values(&elicitation["definitions"]["McpServerElicitationAction"]);
    for (action, content, meta) in [
        (
            "accept",
            Some(json!({})),
            Some(json!({"persist": "session"})),
        ),
        ("decline", None, None),
    ] {
        assert!(actions.contains(&action.to_owned()), "{actions:?}");
        let answer = serde_json::to_value(wire::ElicitationResponse {
            action,
            content,
            meta,
        })
        .unwrap();
        assert_fits(d, "McpServerElicitationRequestResponse.json", &answer);
    }
}
