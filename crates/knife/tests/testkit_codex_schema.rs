// The Codex app-server schema check (knife_testkit::peers) against the real `codex` binary
// (here, not in knife-testkit, so the knife_has_codex cfg rebuilds only this crate): messages
// captured from codex 0.169.0 (docs in /tmp/coord/codex-wire.md at the time)
// must match the schema it generates, and wrong ones must not.
// Gated on `knife_has_codex`: ignored without codex, unless KNIFE_PEERS selects it
// (then they run and fail saying what to install).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use knife_testkit::peers::{CodexSchema, PeerError};
use serde_json::json;

fn schema() -> CodexSchema {
    CodexSchema::from_installed_codex()
        .unwrap()
        .unwrap_or_else(|| {
            panic!(
                "{}",
                knife_prereqs::peer_bin("codex")
                    .err()
                    .map_or_else(String::new, |m| m.to_string())
            )
        })
}

#[test]
#[cfg_attr(
    not(knife_has_codex),
    ignore = "needs codex: run scripts/test (or scripts/install-peers.sh --only codex)"
)]
fn client_requests_knife_sends_match_the_schema() {
    let schema = schema();
    assert!(schema.dir().join("ServerRequest.json").is_file());
    schema
        .check(
            "v2/ThreadStartParams.json",
            &json!({
                "cwd": "/tmp/work", "approvalPolicy": "untrusted", "sandbox": "workspace-write",
                "model": "mock-model",
                "config": {"mcp_servers": {"knife": {"url": "http://127.0.0.1:1/mcp",
                    "http_headers": {"Authorization": "Bearer t"}}}},
            }),
        )
        .unwrap();
    schema
        .check(
            "v2/ThreadResumeParams.json",
            &json!({"threadId": "01a2", "cwd": "/tmp/work", "excludeTurns": true}),
        )
        .unwrap();
    schema
        .check(
            "v2/TurnStartParams.json",
            &json!({"threadId": "01a2", "input": [{"type": "text", "text": "hi", "text_elements": []}]}),
        )
        .unwrap();
    schema
        .check(
            "v2/TurnInterruptParams.json",
            &json!({"threadId": "a", "turnId": "b"}),
        )
        .unwrap();
    schema
        .check("v2/ThreadUnsubscribeParams.json", &json!({"threadId": "a"}))
        .unwrap();
    schema
        .check(
            "CommandExecutionRequestApprovalResponse.json",
            &json!({"decision": "accept"}),
        )
        .unwrap();
    schema
        .check(
            "McpServerElicitationRequestResponse.json",
            &json!({"action": "accept", "content": {}}),
        )
        .unwrap();
}

#[test]
#[cfg_attr(
    not(knife_has_codex),
    ignore = "needs codex: run scripts/test (or scripts/install-peers.sh --only codex)"
)]
fn server_messages_codex_sent_match_the_schema() {
    let schema = schema();
    // Captured from codex 0.169.0 (trimmed ids).
    let approval = json!({"method": "item/commandExecution/requestApproval", "id": 0, "params": {
        "threadId": "t", "turnId": "u", "itemId": "call_shell_1", "startedAtMs": 1,
        "environmentId": "local", "command": "/bin/bash -lc 'touch approved.txt'", "cwd": "/tmp/cap/work",
        "commandActions": [{"type": "unknown", "command": "touch approved.txt"}],
        "proposedExecpolicyAmendment": ["touch", "approved.txt"],
        "availableDecisions": ["accept", {"acceptWithExecpolicyAmendment": {"execpolicy_amendment": ["touch", "approved.txt"]}}, "cancel"]}});
    schema.check("ServerRequest.json", &approval).unwrap();
    let elicitation = json!({"method": "mcpServer/elicitation/request", "id": 1, "params": {
        "threadId": "t", "turnId": "u", "serverName": "orch", "mode": "form",
        "_meta": {"codex_approval_kind": "mcp_tool_call", "persist": ["session", "always"], "tool_name": "whoami"},
        "message": "Allow the orch MCP server to run tool \"whoami\"?",
        "requestedSchema": {"type": "object", "properties": {}}}});
    schema.check("ServerRequest.json", &elicitation).unwrap();
    let delta = json!({"method": "item/agentMessage/delta", "params": {
        "threadId": "t", "turnId": "u", "itemId": "msg_1", "delta": "Hello"}});
    schema.check("ServerNotification.json", &delta).unwrap();
    // A command's output as it runs (fake_codex `run_command`; LIVE-02).
    let output = json!({"method": "item/commandExecution/outputDelta", "params": {
        "threadId": "t", "turnId": "u", "itemId": "call_1", "delta": "out 1\n"}});
    schema.check("ServerNotification.json", &output).unwrap();
    let completed = json!({"method": "turn/completed", "params": {"threadId": "t", "turn": {
        "id": "u", "items": [], "status": "interrupted", "error": null,
        "startedAt": 1, "completedAt": 2, "durationMs": 952}}});
    schema.check("ServerNotification.json", &completed).unwrap();
}

#[test]
#[cfg_attr(
    not(knife_has_codex),
    ignore = "needs codex: run scripts/test (or scripts/install-peers.sh --only codex)"
)]
fn wrong_messages_are_reported() {
    let schema = schema();
    let err = schema
        .check("v2/TurnStartParams.json", &json!({"threadId": 5}))
        .unwrap_err();
    let PeerError::Mismatch { problems, .. } = &err else {
        panic!("{err}")
    };
    let text = problems.join("\n");
    assert!(text.contains("missing required field `input`"), "{text}");
    assert!(text.contains("$.threadId: expected string"), "{text}");
    let err = schema
        .check(
            "CommandExecutionRequestApprovalResponse.json",
            &json!({"decision": "approve"}),
        )
        .unwrap_err();
    assert!(err.to_string().contains("$.decision"), "{err}");
    // A server request whose params do not fit its method.
    let bad = json!({"method": "mcpServer/elicitation/request", "id": 1,
        "params": {"threadId": "t", "serverName": 5}});
    let err = schema.check("ServerRequest.json", &bad).unwrap_err();
    assert!(err.to_string().contains("matches no branch"), "{err}");
    let err = schema.check("v2/NoSuchFile.json", &json!({})).unwrap_err();
    assert!(matches!(err, PeerError::SchemaFile { .. }), "{err}");
}
