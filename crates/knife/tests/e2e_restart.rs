// Process tests of stopping the server mid-run: SIGTERM (graceful: the run is settled
// before exit) and SIGKILL (crash: the restarted server must not leave the run running).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::*;
use knife_protocol::*;

/// A slow first answer (about 4 s) that the test stops mid-stream, then quick answers.
const SLOW_THEN_FAST: &str = r#"
[[response]]
text = "a slow answer that is still streaming when the server goes away"
deltas = 80
stream_deltas_ms = 50

[[response]]
text = "quick answer one"

[[response]]
text = "quick answer two"
"#;

/// Starts the slow run and waits until its assistant text is streaming.
async fn start_slow_run(server: &Server) -> (String, String) {
    let project = server.api.create_project(&server.project_dir()).await;
    let thread = server.api.create_thread(&project).await;
    let run = server.api.post_message(&thread, "answer slowly").await;
    let api = &server.api;
    let t = thread.clone();
    poll_until("the slow answer to stream", RUN_TIMEOUT, || async {
        let p = api.projection(&t).await;
        p.turn_items
            .iter()
            .any(|i| {
                matches!(&i.kind, TurnItemKind::AssistantMessage { text, .. } if !text.is_empty())
            })
            .then_some(())
    })
    .await;
    (thread, run)
}

fn assert_nothing_running(p: &ThreadProjection) {
    assert!(
        p.thread.active_run_id.is_none(),
        "thread still names an active run: {:?}",
        p.thread
    );
    assert_ne!(p.thread.status, ThreadStatus::Running, "{:?}", p.thread);
    for run in &p.runs {
        assert!(
            run.status.is_terminal(),
            "run left {:?}: {run:?}",
            run.status
        );
    }
    for item in &p.turn_items {
        assert!(
            !matches!(
                item.status,
                TurnItemStatus::Pending | TurnItemStatus::Running | TurnItemStatus::Waiting
            ),
            "item left {:?}: {item:?}",
            item.status
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_sigterm_mid_run_settles_the_run_before_exit() {
    let mock = MockLlm::script(SLOW_THEN_FAST, &[]).await;
    let mut server = Server::start(&mock.base_url()).await;
    let (thread, run) = start_slow_run(&server).await;

    let started = tokio::time::Instant::now();
    server.restart().await;
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "graceful shutdown with an active run took {:?}",
        started.elapsed()
    );

    // The run was settled by the old process (or by the new one before it serves).
    let p = server.api.projection(&thread).await;
    let run1 = p.runs.iter().find(|r| r.id.as_str() == run).unwrap();
    assert!(
        matches!(run1.status, RunStatus::Interrupted | RunStatus::Completed),
        "run after SIGTERM: {run1:?}"
    );
    assert_nothing_running(&p);
    // The user message survived.
    assert!(p.turn_items.iter().any(
        |i| matches!(&i.kind, TurnItemKind::UserMessage { text, .. } if text == "answer slowly")
    ));

    // The thread takes a new message on the restarted server.
    let run2 = server.api.post_message(&thread, "go on").await;
    let (_, done) = server
        .api
        .follow_run(&thread, &run2, p.latest_sequence)
        .await;
    assert_eq!(done.status, RunStatus::Completed, "{done:?}");
    assert_nothing_running(&server.api.projection(&thread).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_sigkill_mid_run_restart_does_not_leave_the_run_running() {
    let mock = MockLlm::script(SLOW_THEN_FAST, &[]).await;
    let mut server = Server::start(&mock.base_url()).await;
    let (thread, run) = start_slow_run(&server).await;

    let pid = server.proc.pid().to_string();
    let killed = std::process::Command::new("kill")
        .args(["-KILL", &pid])
        .status()
        .unwrap();
    assert!(killed.success());
    let status = server.proc.wait().await;
    assert!(!status.success(), "SIGKILL exit: {status}");
    server.respawn().await;

    // Boot reconciliation settles the run the killed process left active (the
    // durable-execution issue will resume it instead); it must reach a terminal status.
    let deadline = tokio::time::Instant::now() + RUN_TIMEOUT;
    let p = loop {
        let p = server.api.projection(&thread).await;
        let run1 = p.runs.iter().find(|r| r.id.as_str() == run).unwrap();
        if run1.status.is_terminal() && p.thread.active_run_id.is_none() {
            break p;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{RUN_TIMEOUT:?} after the restart, run {run} is still {:?} and the thread is {:?} \
             with active_run_id {:?}",
            run1.status,
            p.thread.status,
            p.thread.active_run_id
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_nothing_running(&p);
    let run2 = server.api.post_message(&thread, "go on").await;
    let (_, done2) = server
        .api
        .follow_run(&thread, &run2, p.latest_sequence)
        .await;
    assert_eq!(done2.status, RunStatus::Completed, "{done2:?}");
}
