// Process tests of the message queue (SPEC.md TURN-01/02) through the real binary
// over loopback HTTP and the CLI: a message sent during a run queues, a user
// interrupt pauses the queue, `knife threads queue --resume` starts it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use knife_protocol::*;
use reqwest::StatusCode;
use serde_json::json;

/// A slow first answer (about 3.5 s) keeps run 1 active; the queued one is fast.
const SCRIPT: &str = r#"
[[response]]
text = "slow answer that keeps streaming for a long while so the run stays active"
deltas = 70
stream_deltas_ms = 50

[[response]]
text = "answer to the queued message"
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn turn_01_turn_02_queue_over_http_and_cli_pauses_on_interrupt_and_resumes() {
    let mock = MockLlm::script(SCRIPT, &[]).await;
    let server = Server::start(&mock.base_url()).await;
    let api = &server.api;
    let url = server.proc.url();
    let cwd = server.path().to_owned();
    let project = api.create_project(&server.project_dir()).await;
    let thread = api.create_thread(&project).await;
    let run1 = api.post_message(&thread, "start a slow answer").await;
    poll_until("the slow answer to start streaming", RUN_TIMEOUT, || async {
        let p = api.projection(&thread).await;
        p.turn_items
            .iter()
            .any(|i| matches!(&i.kind, TurnItemKind::AssistantMessage { text, .. } if !text.is_empty()))
            .then_some(())
    })
    .await;

    // Queued from the CLI (default mode), visible in the API with its position.
    let out = run_cli(
        &cwd,
        &[
            "run",
            "--server",
            &url,
            "--thread",
            &thread,
            "queued from the cli",
        ],
    )
    .await;
    assert!(out.status.success(), "{}", out.stderr);
    assert!(
        out.stderr.contains("queued at position 1"),
        "{}",
        out.stderr
    );
    let (s, q) = api.get(&format!("/api/threads/{thread}/queue")).await;
    assert_eq!(s, StatusCode::OK, "{q}");
    assert_eq!(q["entries"][0]["text"], "queued from the cli", "{q}");
    assert_eq!(q["active_run_id"], run1.as_str(), "{q}");

    // A user interrupt pauses the queue: nothing starts on its own.
    let (s, b) = api
        .post(&format!("/api/threads/{thread}/interrupt"), &json!({}))
        .await;
    assert_eq!(s, StatusCode::OK, "{b}");
    let (_, done) = api.follow_run(&thread, &run1, 0).await;
    assert_eq!(done.status, RunStatus::Interrupted);
    let paused = poll_until("the queue to be paused", RUN_TIMEOUT, || async {
        let (_, q) = api.get(&format!("/api/threads/{thread}/queue")).await;
        (q["paused"]["reason"] == "user_interrupt").then_some(q)
    })
    .await;
    assert_eq!(paused["entries"].as_array().unwrap().len(), 1, "{paused}");
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    assert_eq!(
        api.projection(&thread).await.runs.len(),
        1,
        "paused: no run 2"
    );
    let shown = run_cli(&cwd, &["threads", "queue", &thread, "--server", &url]).await;
    assert!(shown.status.success(), "{}", shown.stderr);
    assert!(shown.stdout.contains("queue paused"), "{}", shown.stdout);
    assert!(
        shown.stdout.contains("queued from the cli"),
        "{}",
        shown.stdout
    );

    // Resuming starts it at once (the thread is idle) as run 2; a unique prefix of the
    // id names the thread (UX-04).
    let prefix = &thread[..thread.len() - 6];
    let resumed = run_cli(
        &cwd,
        &["threads", "queue", prefix, "--resume", "--server", &url],
    )
    .await;
    assert!(resumed.status.success(), "{}", resumed.stderr);
    let run2 = RunId::for_thread(&ThreadId::from(thread.as_str()), 2).to_string();
    let (_, done) = api.follow_run(&thread, &run2, 0).await;
    assert_eq!(done.status, RunStatus::Completed, "{done:?}");
    let p = api.projection(&thread).await;
    assert!(p.thread.queue.is_empty(), "{:?}", p.thread.queue);
    assert!(p.turn_items.iter().any(|i| matches!(&i.kind,
            TurnItemKind::UserMessage { text, .. } if text == "queued from the cli")),);
}
