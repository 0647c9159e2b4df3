// Process test of the stream processor through the real binary: `knife run`
// against `knife mock-llm` survives a 503 (retry) and an answer whose usage
// overflows the configured context (compaction), then finishes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use knife_protocol::*;

const SCRIPT: &str = r#"
[[response]]
status = 503
body = '{"error":{"message":"busy","type":"server_error"}}'
headers = { "retry-after-ms" = "0" }

[[response]]
text = "A long first answer."
usage = { prompt_tokens = 9000, completion_tokens = 100 }

[[response]]
text = "The user asked about the project; it is empty."

[[response]]
text = "Final answer after compaction."
usage = { prompt_tokens = 50, completion_tokens = 5 }
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_run_retries_then_compacts_an_overflowing_answer_and_finishes() {
    let mock = MockLlm::script(SCRIPT, &[]).await;
    // 9100 tokens of an 8000-token context (1000 reserved) overflow.
    let config = format!(
        "{}context_limit = 8000\noutput_limit = 1000\n",
        config_toml(&mock.base_url())
    );
    let server = Server::start_with_config(&config).await;
    let url = server.proc.url();
    let project = server.project_dir().display().to_string();
    let cwd = server.path().to_owned();

    let out = run_cli(
        &cwd,
        &[
            "run",
            "--server",
            &url,
            "--project",
            &project,
            "What is here?",
        ],
    )
    .await;
    assert!(out.status.success(), "knife run failed: {}", out.stderr);
    assert!(
        out.stdout.contains("Final answer after compaction."),
        "stdout: {}",
        out.stdout
    );
    assert!(out.stderr.contains("compacted"), "stderr: {}", out.stderr);

    let (_, threads) = server.api.get("/api/threads").await;
    let threads: Vec<Thread> = serde_json::from_value(threads).unwrap();
    let thread = threads[0].id.to_string();
    let settled = server.api.settled_thread_json(&thread).await;
    assert_eq!(
        settled["thread"]["agent_status"]["type"], "idle",
        "{settled}"
    );
    let projection = server.api.projection(&thread).await;
    let summary = projection.turn_items.iter().find_map(|i| match &i.kind {
        TurnItemKind::Compaction { summary } => Some(summary.clone()),
        _ => None,
    });
    assert_eq!(
        summary.as_deref(),
        Some("The user asked about the project; it is empty.")
    );

    let run = projection.runs[0].id.to_string();
    let (events, done) = server.api.follow_run(&thread, &run, 0).await;
    assert_eq!(done.status, RunStatus::Completed);
    let retries: Vec<u32> = events
        .iter()
        .filter_map(|e| match &e.event.body {
            EventBody::ThreadStatusChanged {
                status: AgentStatus::Retry { attempt, .. },
                ..
            } => Some(*attempt),
            _ => None,
        })
        .collect();
    assert_eq!(retries, [1]);
}
