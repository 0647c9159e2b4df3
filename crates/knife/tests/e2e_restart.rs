// Process tests of stopping the server mid-run: SIGTERM (graceful: the run is settled
// before exit, its claim kept) and SIGKILL (crash); either way the restarted server
// resumes the claimed work with a continuation run and then takes new messages.
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

/// Waits until `thread` has no active run; returns its projection.
async fn wait_idle(server: &Server, thread: &str) -> ThreadProjection {
    poll_until("the thread to go idle", RUN_TIMEOUT, || async {
        let p = server.api.projection(thread).await;
        p.thread.active_run_id.is_none().then_some(p)
    })
    .await
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

    // The run was settled by the old process; the restart resumed the work in a
    // continuation run ("quick answer one"), which ends on its own.
    let p = wait_idle(&server, &thread).await;
    let run1 = p.runs.iter().find(|r| r.id.as_str() == run).unwrap();
    assert!(
        matches!(run1.status, RunStatus::Interrupted | RunStatus::Completed),
        "run after SIGTERM: {run1:?}"
    );
    assert_nothing_running(&p);
    assert!(!p.thread.is_claimed(), "{:?}", p.thread);
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

    // The restart ends the run the killed process left active and resumes the work
    // in a continuation run; everything must reach a terminal status.
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

/// SIGTERM while clients follow the thread (SSE) and idle on another (SSE and
/// WebSocket): the active run ends `interrupted` with reason `shutdown`, the
/// followers see that terminal event, their streams end, and the process exits 0
/// promptly instead of waiting for clients that never disconnect.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_sigterm_with_open_streams_interrupts_runs_then_closes_streams() {
    use futures::StreamExt;
    let mock = MockLlm::script(SLOW_THEN_FAST, &[]).await;
    let mut server = Server::start(&mock.base_url()).await;
    let (thread, run) = start_slow_run(&server).await;
    let project = server.api.create_project(&server.project_dir()).await;
    let idle_thread = server.api.create_thread(&project).await;

    // An SSE client on the idle thread and a WebSocket client: both would stay open forever.
    let idle_sse = server
        .api
        .http
        .get(format!(
            "{}/api/threads/{idle_thread}/events?after=0",
            server.api.base
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(idle_sse.status(), reqwest::StatusCode::OK);
    let ws_url = format!("{}/api/ws", server.api.base.replacen("http", "ws", 1));
    let (mut ws, _) = tokio_tungstenite::connect_async(ws_url).await.unwrap();
    let subscribe = serde_json::json!({"type": "subscribe", "thread_id": idle_thread, "after": 0});
    futures::SinkExt::send(&mut ws, subscribe.to_string().into())
        .await
        .unwrap();

    // Follow the running thread, then stop the server while it streams.
    let api = server.api.clone();
    let (t, r) = (thread.clone(), run.clone());
    let follower = tokio::spawn(async move { api.follow_run(&t, &r, 0).await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let started = tokio::time::Instant::now();
    let status = server.proc.terminate().await;
    let took = started.elapsed();
    assert!(status.success(), "exit status after SIGTERM: {status}");
    assert!(
        took < Duration::from_secs(8),
        "shutdown with open streams took {took:?}"
    );

    let (_, ended) = follower.await.unwrap();
    assert_eq!(ended.status, RunStatus::Interrupted, "{ended:?}");
    let message = ended.error.map(|e| e.message).unwrap_or_default();
    assert!(message.contains("shutdown"), "{message}");
    // The idle clients' streams ended (they did not hold the process).
    let rest = tokio::time::timeout(Duration::from_secs(5), idle_sse.bytes()).await;
    assert!(rest.is_ok(), "the idle SSE stream was not closed");
    let closed = tokio::time::timeout(Duration::from_secs(5), async {
        while let Some(Ok(msg)) = ws.next().await {
            if msg.is_close() {
                break;
            }
        }
    })
    .await;
    assert!(closed.is_ok(), "the WebSocket was not closed");
}
