// Process tests of turn controls through the real binary (SPEC.md TURN-03, TURN-05,
// TURN-10): knife.toml's compaction and limits, the model per run, checked on the
// model requests the mock received.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use knife_protocol::*;
use knife_testkit::mock_llm::{MockLlm, MockLlmConfig, MockLlmHandle, Script};

/// An in-process mock serving the TOML `script`.
async fn mock(script: &str) -> MockLlmHandle {
    let script = Script::from_toml_str(script).unwrap();
    MockLlm::start(MockLlmConfig::script(script)).await.unwrap()
}

/// Sends `text` on a new thread of `server`'s project and follows its run to the end.
async fn run_once(server: &Server, text: &str) -> (String, Run) {
    let project = server.api.create_project(&server.project_dir()).await;
    let thread = server.api.create_thread(&project).await;
    let run = server.api.post_message(&thread, text).await;
    let (_, done) = server.api.follow_run(&thread, &run, 0).await;
    (thread, done)
}

/// True when a recorded request body asks for a summary (the compaction prompt).
fn is_summary_request(body: &str) -> bool {
    body.contains(knife_agent::compaction::COMPACTION_PROMPT)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn turn_03_compaction_off_in_knife_toml_fails_the_overflow_without_a_summary_request() {
    let mock = mock(
        r#"
repeat_last = true
[[response]]
text = "A long answer."
usage = { prompt_tokens = 9000, completion_tokens = 100 }
"#,
    )
    .await;
    let config = format!(
        "{}context_limit = 8000\noutput_limit = 1000\ncompaction = \"off\"\n",
        config_toml(&mock.base_url())
    );
    let server = Server::start_with_config(&config).await;
    let (thread, run) = run_once(&server, "What is here?").await;

    assert_eq!(run.status, RunStatus::Failed);
    let error = run.error.unwrap();
    assert_eq!(error.error_type, "provider.context_overflow");
    assert!(error.message.contains("compaction is off"), "{error:?}");
    let requests = mock.chat_requests();
    assert_eq!(requests.len(), 1, "the model got more than the one step");
    assert!(!requests.iter().any(|r| is_summary_request(&r.body_text)));
    let projection = server.api.projection(&thread).await;
    assert!(
        !projection
            .turn_items
            .iter()
            .any(|i| matches!(i.kind, TurnItemKind::Compaction { .. })),
        "{:?}",
        projection.turn_items
    );
}

/// `context_limit = 8000` without `output_limit` (the default reserve is 32 000):
/// a 500-token step is far below the window and must not compact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn turn_05_a_step_far_below_a_small_window_never_compacts() {
    let mock = mock(
        r#"
repeat_last = true
[[response]]
text = "A short answer."
usage = { prompt_tokens = 500, completion_tokens = 20 }
"#,
    )
    .await;
    let config = format!("{}context_limit = 8000\n", config_toml(&mock.base_url()));
    let server = Server::start_with_config(&config).await;
    let (thread, run) = run_once(&server, "Hello").await;

    assert_eq!(run.status, RunStatus::Completed, "{:?}", run.error);
    let requests = mock.chat_requests();
    assert_eq!(requests.len(), 1, "a summary was asked for");
    assert!(!is_summary_request(&requests[0].body_text));
    let projection = server.api.projection(&thread).await;
    assert!(
        !projection
            .turn_items
            .iter()
            .any(|i| matches!(i.kind, TurnItemKind::Compaction { .. }))
    );
    // The load warned with the numbers to set.
    assert!(
        server.proc.stderr().contains("output_limit = 2000"),
        "{}",
        server.proc.stderr()
    );
}

/// `output_limit >= context_limit` stops `knife serve` at load, naming the numbers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn turn_05_a_reserve_that_leaves_no_context_stops_the_server_at_load() {
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "{}context_limit = 8000\noutput_limit = 8000\n",
        config_toml("http://127.0.0.1:9/v1")
    );
    std::fs::write(dir.path().join("knife.toml"), config).unwrap();
    let out = run_cli(
        dir.path(),
        &[
            "serve",
            "--config",
            "knife.toml",
            "--listen",
            "127.0.0.1:0",
            "--data-dir",
            "data",
        ],
    )
    .await;
    assert!(!out.status.success());
    assert!(
        out.stderr.contains("output_limit = 8000") && out.stderr.contains("context_limit = 8000"),
        "{}",
        out.stderr
    );
}

/// The `model` field of each chat request the mock received, in order.
fn requested_models(mock: &MockLlmHandle) -> Vec<String> {
    mock.chat_requests()
        .iter()
        .map(|r| {
            r.body.as_ref().unwrap()["model"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn turn_10_the_model_changes_between_runs_and_is_recorded_on_each() {
    let mock = mock(
        r#"
repeat_last = true
[[response]]
text = "Done."
"#,
    )
    .await;
    let server = Server::start(&mock.base_url()).await;
    let url = server.proc.url();
    let project = server.api.create_project(&server.project_dir()).await;
    let thread = server.api.create_thread(&project).await;

    // Run 1: the message names a model.
    let (status, body) = server
        .api
        .post(
            &format!("/api/threads/{thread}/messages"),
            &serde_json::json!({"text": "one", "model": "model-b"}),
        )
        .await;
    assert_eq!(status, reqwest::StatusCode::ACCEPTED, "{body}");
    let run = body["run_id"].as_str().unwrap().to_owned();
    let (_, done) = server.api.follow_run(&thread, &run, 0).await;
    assert_eq!(done.status, RunStatus::Completed);
    assert_eq!(done.model.as_deref(), Some("model-b"));

    // Run 2: `knife run --thread --model`.
    let cwd = server.path().to_owned();
    let out = run_cli(
        &cwd,
        &[
            "run", "--server", &url, "--thread", &thread, "--model", "model-c", "two",
        ],
    )
    .await;
    assert!(out.status.success(), "{}", out.stderr);

    // Run 3: no model: the thread's (here the instance's default).
    let run = server.api.post_message(&thread, "three").await;
    let (_, done) = server.api.follow_run(&thread, &run, 0).await;
    assert_eq!(done.model, None);

    assert_eq!(
        requested_models(&mock),
        ["model-b", "model-c", "gpt-4o-mini"]
    );
    let projection = server.api.projection(&thread).await;
    let models: Vec<Option<&str>> = projection.runs.iter().map(|r| r.model.as_deref()).collect();
    assert_eq!(models, [Some("model-b"), Some("model-c"), None]);
    assert_eq!(
        projection.thread.model, None,
        "the thread's own model stays"
    );

    let show = run_cli(&cwd, &["threads", "show", &thread, "--server", &url]).await;
    assert!(show.status.success(), "{}", show.stderr);
    assert!(
        show.stdout.contains("run 1 · completed · model-b")
            && show.stdout.contains("run 2 · completed · model-c")
            && show.stdout.contains("run 3 · completed"),
        "{}",
        show.stdout
    );

    // A blank model is bad input, answered 400 with what to do.
    let (status, body) = server
        .api
        .post(
            &format!("/api/threads/{thread}/messages"),
            &serde_json::json!({"text": "four", "model": " "}),
        )
        .await;
    assert_eq!(status, reqwest::StatusCode::BAD_REQUEST, "{body}");
    assert!(body.to_string().contains("leave `model` out"), "{body}");
}
