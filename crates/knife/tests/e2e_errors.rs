// Process tests of failure paths: a broken model stream (garbage, cut, HTTP 500), invalid
// API input (400/404/409), interrupting a streaming run, and an unwritable data directory.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use knife_protocol::*;
use reqwest::StatusCode;
use serde_json::json;

/// A good answer served after the bad one (a new thread), then to the failed thread again.
const GOOD_TAIL: &str = r#"
[[response]]
text = "recovered answer one"

[[response]]
text = "recovered answer two"
"#;

/// A server on `mock` whose provider instance never retries a failed model call
/// (`max_retry_attempts = 1`), so a bad response fails the run at once.
async fn server_without_retries(mock: &MockLlm) -> Server {
    let config = format!("{}max_retry_attempts = 1\n", config_toml(&mock.base_url()));
    Server::start_with_config(&config).await
}

/// Runs one bad turn on thread A, then a good turn on a new thread B and a second
/// (good) turn on A. Returns A's run error and A's projection after the bad run.
async fn bad_turn_then_recover(bad_response: &str) -> (RunError, ThreadProjection) {
    let script = format!("{bad_response}\n{GOOD_TAIL}");
    let mock = MockLlm::script(&script, &[]).await;
    let server = server_without_retries(&mock).await;
    let api = &server.api;
    let project = api.create_project(&server.project_dir()).await;

    let a = api.create_thread(&project).await;
    let run_a = api.post_message(&a, "please answer").await;
    let (_, done) = api.follow_run(&a, &run_a, 0).await;
    assert_eq!(done.status, RunStatus::Failed, "run: {done:?}");
    let error = done.error.clone().expect("a failed run carries its error");
    assert!(!error.message.is_empty(), "empty error message: {error:?}");

    let failed = api.projection(&a).await;
    assert_eq!(failed.runs.len(), 1);
    assert_eq!(failed.runs[0].status, RunStatus::Failed);
    assert_eq!(
        failed.runs[0].error.as_ref(),
        Some(&error),
        "run.error in GET"
    );
    assert_eq!(failed.thread.status, ThreadStatus::Failed);
    assert!(failed.thread.active_run_id.is_none());
    assert_eq!(
        failed.thread.last_error.as_ref(),
        Some(&error),
        "thread.last_error"
    );
    // Nothing lost: the user message is there.
    let user = failed.turn_items.iter().find(
        |i| matches!(&i.kind, TurnItemKind::UserMessage { text, .. } if text == "please answer"),
    );
    assert!(
        user.is_some(),
        "user message lost: {:#?}",
        failed.turn_items
    );
    // Nothing left pretending to run.
    for item in &failed.turn_items {
        assert!(
            !matches!(
                item.status,
                TurnItemStatus::Pending | TurnItemStatus::Running | TurnItemStatus::Waiting
            ),
            "item left {:?} after a failed run: {item:?}",
            item.status
        );
        if let TurnItemKind::AssistantMessage { streaming, .. } = &item.kind {
            assert!(!streaming, "assistant message still streaming: {item:?}");
        }
    }

    // The server keeps serving.
    assert!(api.healthy().await, "healthz after a failed run");
    let b = api.create_thread(&project).await;
    let run_b = api.post_message(&b, "try again").await;
    let (_, done_b) = api.follow_run(&b, &run_b, 0).await;
    assert_eq!(
        done_b.status,
        RunStatus::Completed,
        "run on a new thread: {done_b:?}"
    );
    assert_eq!(
        last_assistant_text(&api.projection(&b).await),
        "recovered answer one"
    );

    // The failed thread can run again, and the new run clears its error.
    let after = failed.latest_sequence;
    let run_a2 = api.post_message(&a, "once more").await;
    let (_, done_a2) = api.follow_run(&a, &run_a2, after).await;
    assert_eq!(
        done_a2.status,
        RunStatus::Completed,
        "second run on A: {done_a2:?}"
    );
    let a_now = api.projection(&a).await;
    assert_eq!(a_now.thread.status, ThreadStatus::Idle);
    assert!(a_now.thread.last_error.is_none(), "last_error not cleared");
    assert_eq!(
        a_now.runs[0].error.as_ref(),
        Some(&error),
        "run 1 keeps its error"
    );
    assert_eq!(last_assistant_text(&a_now), "recovered answer two");
    (error, failed)
}

fn last_assistant_text(p: &ThreadProjection) -> String {
    p.turn_items
        .iter()
        .rev()
        .find_map(|i| match &i.kind {
            TurnItemKind::AssistantMessage { text, .. } => Some(text.clone()),
            _ => None,
        })
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_garbage_data_line_fails_the_run_with_provider_decode() {
    let (error, _) = bad_turn_then_recover(
        r#"
[[response]]
raw = "data: this is not json\n\n"
"#,
    )
    .await;
    assert_eq!(error.error_type, "provider.decode", "{error:?}");
    assert!(error.http_status.is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_stream_cut_mid_event_fails_the_run_and_keeps_serving() {
    let (error, failed) = bad_turn_then_recover(
        r#"
[[response]]
text = "partial answer"
cut = true
"#,
    )
    .await;
    // The mock aborts the chunked body mid-event: whether the decoder sees EOF inside an
    // event or a broken body read, the endpoint was reached, so it is a stream failure.
    assert_eq!(error.error_type, "provider.stream", "{error:?}");
    assert!(error.http_status.is_none());
    // Whatever text arrived before the cut is a prefix of what was sent, never more.
    let partial = last_assistant_text(&failed);
    assert!(
        "partial answer".starts_with(&partial),
        "unexpected partial text {partial:?}"
    );
}

const CUT_STREAM: &str = r#"
[[response]]
text = "partial answer"
cut = true
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_stream_cut_error_message_does_not_blame_the_endpoint_address() {
    let mock = MockLlm::script(CUT_STREAM, &[]).await;
    let server = server_without_retries(&mock).await;
    let project = server.api.create_project(&server.project_dir()).await;
    let thread = server.api.create_thread(&project).await;
    let run = server.api.post_message(&thread, "please answer").await;
    let (_, done) = server.api.follow_run(&thread, &run, 0).await;
    assert_eq!(done.status, RunStatus::Failed);
    let error = done.error.unwrap();
    // The endpoint was reached (it answered 200 and streamed text); the stream broke.
    assert!(
        !error.message.contains("could not reach") && !error.message.contains("base_url"),
        "misleading message for a stream cut mid-event: {error:?}"
    );
    assert_eq!(error.error_type, "provider.stream", "{error:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_http_500_fails_the_run_with_provider_http() {
    let (error, _) = bad_turn_then_recover(
        r#"
[[response]]
status = 500
body = '{"error":{"message":"boom","type":"server_error"}}'
"#,
    )
    .await;
    assert_eq!(error.error_type, "provider.http", "{error:?}");
    assert_eq!(error.http_status, Some(500));
    assert!(error.message.contains("boom"), "{error:?}");
    assert_eq!(error.code.as_deref(), Some("server_error"), "{error:?}");
    assert_eq!(
        error.detail,
        Some(json!({"error":{"message":"boom","type":"server_error"}}))
    );
}

/// A slow answer (70 deltas 50 ms apart, about 3.5 s) keeps a run active, then a fast one.
const SLOW_ANSWER: &str = r#"
[[response]]
text = "slow answer that keeps streaming for a long while so the run stays active"
deltas = 70
stream_deltas_ms = 50

[[response]]
text = "fast answer after the interrupt"
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_invalid_api_input_is_rejected_with_json_errors() {
    let mock = MockLlm::script(SLOW_ANSWER, &[]).await;
    let server = Server::start(&mock.base_url()).await;
    let api = &server.api;

    // Projects: malformed JSON, missing field, unknown field, root that does not exist.
    let (s, b) = api.post_raw("/api/projects", "{\"root\": ").await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{b}");
    assert_api_error(&b, "invalid_request");
    let (s, b) = api.post("/api/projects", &json!({})).await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{b}");
    assert_api_error(&b, "invalid_request");
    assert!(
        b["error"]["message"].as_str().unwrap().contains("root"),
        "{b}"
    );
    let root = server.project_dir().display().to_string();
    let (s, b) = api
        .post("/api/projects", &json!({"root": root, "colour": "red"}))
        .await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{b}");
    assert_api_error(&b, "invalid_request");
    assert!(
        b["error"]["message"].as_str().unwrap().contains("colour"),
        "{b}"
    );
    let missing = server.path().join("no-such-folder");
    let (s, b) = api
        .post(
            "/api/projects",
            &json!({"root": missing.display().to_string()}),
        )
        .await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{b}");
    assert_api_error(&b, "invalid_request");
    assert!(
        b["error"]["message"]
            .as_str()
            .unwrap()
            .contains("no-such-folder"),
        "the message names the path: {b}"
    );
    let (s, b) = api.get("/api/projects").await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(b, json!([]), "a rejected project was stored");

    let project = api.create_project(&server.project_dir()).await;

    // Threads: missing field, unknown field, unknown project, unknown provider.
    let (s, b) = api.post("/api/threads", &json!({"title": "x"})).await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{b}");
    assert_api_error(&b, "invalid_request");
    let (s, b) = api
        .post(
            "/api/threads",
            &json!({"project_id": project, "bogus": true}),
        )
        .await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{b}");
    assert_api_error(&b, "invalid_request");
    let (s, b) = api
        .post("/api/threads", &json!({"project_id": "project_nope"}))
        .await;
    assert_eq!(s, StatusCode::NOT_FOUND, "{b}");
    assert_api_error(&b, "not_found");
    let (s, b) = api
        .post(
            "/api/threads",
            &json!({"project_id": project, "provider_instance_id": "nope"}),
        )
        .await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{b}");
    assert_api_error(&b, "unknown_provider_instance");

    let thread = api.create_thread(&project).await;

    // Messages: malformed JSON, missing field, unknown field, empty and blank text.
    let path = format!("/api/threads/{thread}/messages");
    for raw in [
        "not json",
        "{\"text\": 1}",
        "{}",
        "{\"text\":\"hi\",\"extra\":1}",
    ] {
        let (s, b) = api.post_raw(&path, raw).await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{raw}: {b}");
        assert_api_error(&b, "invalid_request");
    }
    for text in ["", "   \n"] {
        let (s, b) = api.post(&path, &json!({"text": text})).await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{text:?}: {b}");
        assert_api_error(&b, "invalid_request");
    }
    let p = api.projection(&thread).await;
    assert!(p.runs.is_empty(), "a rejected message started a run");
    assert!(p.turn_items.is_empty(), "a rejected message was recorded");

    // Unknown thread: 404 everywhere.
    let nope = "thread_does_not_exist";
    let (s, b) = api.get(&format!("/api/threads/{nope}")).await;
    assert_eq!(s, StatusCode::NOT_FOUND, "{b}");
    assert_api_error(&b, "not_found");
    let (s, b) = api
        .post(
            &format!("/api/threads/{nope}/messages"),
            &json!({"text": "hi"}),
        )
        .await;
    assert_eq!(s, StatusCode::NOT_FOUND, "{b}");
    assert_api_error(&b, "not_found");
    let (s, b) = api
        .post(&format!("/api/threads/{nope}/interrupt"), &json!({}))
        .await;
    assert_eq!(s, StatusCode::NOT_FOUND, "{b}");
    assert_api_error(&b, "not_found");
    let (s, b) = api
        .get(&format!("/api/threads/{nope}/events?after=0"))
        .await;
    assert_eq!(s, StatusCode::NOT_FOUND, "{b}");
    assert_api_error(&b, "not_found");
    let (s, b) = api.get("/api/no-such-route").await;
    assert_eq!(s, StatusCode::NOT_FOUND, "{b}");
    assert_api_error(&b, "not_found");

    // Interrupting an idle thread is fine and names no run.
    let (s, b) = api
        .post(&format!("/api/threads/{thread}/interrupt"), &json!({}))
        .await;
    assert_eq!(s, StatusCode::OK, "{b}");
    assert!(b["run_id"].is_null(), "{b}");

    // A second message while a run is active: 409 when it asks to be rejected
    // (`mode: reject`; the default queues it, TURN-01); then interrupt it.
    let run = api.post_message(&thread, "start a slow answer").await;
    // Wait until the model is streaming (an assistant item exists) so the run is truly active.
    poll_until("the slow answer to start streaming", RUN_TIMEOUT, || async {
        let p = api.projection(&thread).await;
        p.turn_items
            .iter()
            .any(|i| matches!(&i.kind, TurnItemKind::AssistantMessage { text, .. } if !text.is_empty()))
            .then_some(())
    })
    .await;
    // An unknown mode: 400.
    let (s, b) = api
        .post(&path, &json!({"text": "me too", "mode": "reject"}))
        .await;
    assert_eq!(s, StatusCode::CONFLICT, "{b}");
    assert_api_error(&b, "run_in_progress");
    let (s, b) = api
        .post(&path, &json!({"text": "me too", "mode": "later"}))
        .await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{b}");
    let message = b["error"]["message"].as_str().unwrap();
    assert!(
        ["queue", "interrupt", "steer", "reject"]
            .iter()
            .all(|m| message.contains(m)),
        "the 400 names the allowed modes: {b}"
    );
    let (s, b) = api
        .post(&format!("/api/threads/{thread}/interrupt"), &json!({}))
        .await;
    assert_eq!(s, StatusCode::OK, "{b}");
    assert_eq!(b["run_id"], run.as_str(), "{b}");
    let (_, done) = api.follow_run(&thread, &run, 0).await;
    assert_eq!(done.status, RunStatus::Interrupted, "run: {done:?}");
    let p = api.projection(&thread).await;
    assert_eq!(
        p.runs.len(),
        1,
        "the 409 message must not have created a run"
    );
    assert!(p.thread.active_run_id.is_none());
    assert_ne!(p.thread.status, ThreadStatus::Running);
    let partial = last_assistant_text(&p);
    assert!(
        !partial.is_empty()
            && "slow answer that keeps streaming for a long while so the run stays active"
                .starts_with(&partial),
        "partial text {partial:?}"
    );
    for item in &p.turn_items {
        assert!(
            !matches!(
                item.status,
                TurnItemStatus::Pending | TurnItemStatus::Running | TurnItemStatus::Waiting
            ),
            "item left {:?} after the interrupt: {item:?}",
            item.status
        );
    }

    // The thread accepts a new message after the interrupt.
    let run2 = api.post_message(&thread, "and now quickly").await;
    let (_, done2) = api.follow_run(&thread, &run2, p.latest_sequence).await;
    assert_eq!(done2.status, RunStatus::Completed, "run: {done2:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_unwritable_data_dir_exits_non_zero_with_a_clear_message() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("file.txt");
    std::fs::write(&file, "not a directory").unwrap();
    let data_dir = file.join("data");
    let data_arg = data_dir.display().to_string();
    let out = run_cli(
        tmp.path(),
        &["serve", "--listen", "127.0.0.1:0", "--data-dir", &data_arg],
    )
    .await;
    assert!(!out.status.success(), "serve succeeded on {data_arg}");
    assert!(
        out.stderr.contains("data directory") && out.stderr.contains(&data_arg),
        "stderr does not name the data dir: {}",
        out.stderr
    );
    assert!(
        out.stderr.contains("--data-dir"),
        "stderr does not say what to do: {}",
        out.stderr
    );
    assert!(
        !out.stdout.contains("listening on"),
        "serve claimed to listen: {}",
        out.stdout
    );
}
