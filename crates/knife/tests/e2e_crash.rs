// Crash tests with the real binary (durable execution, docs/2026-11-29-durable-execution.md): SIGKILL / SIGTERM mid-turn, restart on
// the same data dir, and what the restart sweep makes of the claimed work. The mock
// LLM runs in this test process, gated, so each test stops a stream where it wants.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::*;
use knife_protocol::*;
use knife_store::{ProcessGroupRecord, StreamFilter};
use knife_testkit::mock_llm::{MockLlm, MockLlmConfig, MockLlmHandle, Script, ScriptResponse};

const CONTINUE: &str = "The server restarted while you were working. Continue from where you \
     left off without repeating completed work.";

/// A gated mock: request N gets `texts[N-1]` (the last one again afterwards), each
/// streamed in 12 deltas that wait for the gate.
async fn gated_mock(texts: &[&str]) -> MockLlmHandle {
    let responses = texts
        .iter()
        .map(|t| ScriptResponse {
            deltas: Some(12),
            ..ScriptResponse::text(*t)
        })
        .collect();
    MockLlm::start(MockLlmConfig::script(Script::new(responses).repeat_last(true)).gated())
        .await
        .unwrap()
}

/// Creates a thread (a child of `parent` when given) in the server's project.
async fn thread(server: &Server, parent: Option<&str>) -> String {
    let project = server.api.create_project(&server.project_dir()).await;
    let mut body = serde_json::json!({ "project_id": project, "title": "crash" });
    if let Some(p) = parent {
        body["parent_thread_id"] = serde_json::json!(p);
    }
    let (status, body) = server.api.post("/api/threads", &body).await;
    assert_eq!(status, reqwest::StatusCode::CREATED, "{body}");
    body["id"].as_str().unwrap().to_owned()
}

/// Waits until the mock received `n` chat requests.
async fn wait_requests(mock: &MockLlmHandle, n: usize) {
    poll_until(&format!("{n} chat requests"), RUN_TIMEOUT, || async {
        (mock.chat_requests().len() >= n).then_some(())
    })
    .await;
}

/// Waits until `thread` is idle with `runs` runs, all terminal; returns its projection.
async fn wait_settled(server: &Server, thread: &str, runs: usize) -> ThreadProjection {
    poll_until(
        &format!("thread {thread} to settle with {runs} runs"),
        RUN_TIMEOUT,
        || async {
            let p = server.api.projection(thread).await;
            (p.thread.active_run_id.is_none()
                && p.runs.len() == runs
                && p.runs.iter().all(|r| r.status.is_terminal()))
            .then_some(p)
        },
    )
    .await
}

/// Every event of the data dir's log (the server must be stopped).
async fn event_log(server: &Server) -> Vec<StoredEvent> {
    let store = knife_store_sqlite::open(server.data_dir().join("knife.db"))
        .await
        .unwrap();
    store
        .read_events(&StreamFilter::after(0), 1_000_000)
        .await
        .unwrap()
}

fn continuations(p: &ThreadProjection) -> Vec<&TurnItem> {
    p.turn_items
        .iter()
        .filter(|i| {
            matches!(&i.kind, TurnItemKind::UserMessage { origin: MessageOrigin::System, text, description: Some(d) }
                if text == CONTINUE && d == "Continuing after restart")
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_crash_sigkill_mid_stream_resumes_exactly_once() {
    let mock = gated_mock(&[
        "one two three four five six seven eight nine ten eleven twelve",
        "resumed and finished",
    ])
    .await;
    let mut server = Server::start(&mock.base_url()).await;
    let thread = thread(&server, None).await;
    let run1 = server.api.post_message(&thread, "do the work").await;
    // Let part of the answer out and wait until it is durable.
    mock.gate().release(4);
    let api = server.api.clone();
    poll_until("the first answer to stream", RUN_TIMEOUT, || async {
        let p = api.projection(&thread).await;
        p.turn_items
            .iter()
            .any(|i| matches!(&i.kind, TurnItemKind::AssistantMessage { text, .. } if !text.is_empty()))
            .then_some(())
    })
    .await;
    let claimed = server.api.projection(&thread).await.thread;
    assert!(claimed.is_claimed(), "claimed while running: {claimed:?}");

    server.proc.kill_hard().await;
    let before = event_log(&server).await;
    mock.gate().open();
    server.respawn().await;

    let p = wait_settled(&server, &thread, 2).await;
    let first = p.runs.iter().find(|r| r.id.as_str() == run1).unwrap();
    assert_eq!(first.status, RunStatus::Interrupted, "{first:?}");
    let second = &p.runs[1];
    assert_eq!(second.status, RunStatus::Completed, "{second:?}");
    assert_eq!(continuations(&p).len(), 1, "{:#?}", p.turn_items);
    assert_eq!(
        p.turn_items
            .iter()
            .filter(|i| matches!(&i.kind, TurnItemKind::AssistantMessage { text, .. } if text == "resumed and finished"))
            .count(),
        1
    );
    assert!(!p.thread.is_claimed(), "{:?}", p.thread);
    assert_eq!(p.thread.resume_attempts, 0);
    assert_eq!(mock.chat_requests().len(), 2);
    assert!(
        mock.chat_requests()[1]
            .body_text
            .contains("The server restarted"),
        "the model sees the continuation"
    );
    // `knife threads show` says so.
    let show = run_cli(
        server.path(),
        &["threads", "show", &thread, "--server", &server.proc.url()],
    )
    .await;
    assert!(
        show.stdout.contains("(continuing after restart)"),
        "{}",
        show.stdout
    );
    assert!(show.stdout.contains("claim    none"), "{}", show.stdout);

    server.proc.terminate().await;
    let after = event_log(&server).await;
    assert!(after.len() > before.len());
    assert_eq!(
        &after[..before.len()],
        &before[..],
        "the log before the kill is a prefix"
    );
    // A later restart does nothing.
    server.respawn().await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(server.api.projection(&thread).await.runs.len(), 2);
    assert_eq!(mock.chat_requests().len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_crash_sigkill_during_every_resume_spends_the_budget_then_aborts() {
    let mock = gated_mock(&["never finishes"]).await;
    let mut server = Server::start_with(&mock.base_url(), "max_resume_attempts = 2").await;
    let thread = thread(&server, None).await;
    server.api.post_message(&thread, "do the work").await;
    wait_requests(&mock, 1).await;
    for attempt in 1..=2u32 {
        server.proc.kill_hard().await;
        server.respawn().await;
        // The resume counted its attempt and asked the model again; kill it mid-turn.
        wait_requests(&mock, 1 + attempt as usize).await;
        let t = server.api.projection(&thread).await.thread;
        assert_eq!(t.resume_attempts, attempt);
        assert!(t.is_claimed());
    }
    server.proc.kill_hard().await;
    server.respawn().await;
    let p = wait_settled(&server, &thread, 3).await;
    let last = p.runs.last().unwrap();
    assert_eq!(last.status, RunStatus::Failed);
    assert_eq!(last.error.as_ref().unwrap().error_type, "aborted");
    assert_eq!(p.thread.last_error.as_ref().unwrap().error_type, "aborted");
    assert!(!p.thread.is_claimed());
    assert_eq!(p.thread.resume_attempts, 0);
    assert_eq!(continuations(&p).len(), 2);
    assert_eq!(mock.chat_requests().len(), 3);
    let metrics = server
        .api
        .http
        .get(format!("{}/metrics", server.api.base))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("knife_resume_budget_exhausted_total 1"),
        "{metrics}"
    );
    // Later restarts do nothing.
    server.proc.kill_hard().await;
    server.respawn().await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(server.api.projection(&thread).await.runs.len(), 3);
    assert_eq!(mock.chat_requests().len(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_crash_user_interrupt_then_sigkill_is_not_resumed() {
    let mock = gated_mock(&["never finishes"]).await;
    let mut server = Server::start(&mock.base_url()).await;
    let thread = thread(&server, None).await;
    server.api.post_message(&thread, "do the work").await;
    wait_requests(&mock, 1).await;
    let (status, body) = server
        .api
        .post(
            &format!("/api/threads/{thread}/interrupt"),
            &serde_json::json!({}),
        )
        .await;
    assert!(status.is_success(), "{body}");
    let p = wait_settled(&server, &thread, 1).await;
    assert_eq!(p.runs[0].status, RunStatus::Interrupted);
    assert!(
        !p.thread.is_claimed(),
        "a user interrupt releases the claim"
    );

    server.proc.kill_hard().await;
    server.respawn().await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let p = server.api.projection(&thread).await;
    assert_eq!(p.runs.len(), 1);
    assert!(continuations(&p).is_empty());
    assert_eq!(mock.chat_requests().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_crash_sigterm_mid_turn_exits_0_and_the_restart_resumes() {
    let mock = gated_mock(&["never finishes", "resumed and finished"]).await;
    let mut server = Server::start(&mock.base_url()).await;
    let thread = thread(&server, None).await;
    server.api.post_message(&thread, "do the work").await;
    wait_requests(&mock, 1).await;

    let started = tokio::time::Instant::now();
    let status = server.proc.terminate().await;
    assert!(status.success(), "exit after SIGTERM: {status}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    // The shutdown interrupt kept the claim.
    {
        let store = knife_store_sqlite::open(server.data_dir().join("knife.db"))
            .await
            .unwrap();
        let t = store
            .get_thread(&ThreadId::from(thread.as_str()))
            .await
            .unwrap()
            .unwrap();
        assert!(t.is_claimed(), "{t:?}");
        let run = store
            .get_run(&RunId::for_thread(&t.id, 1))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(run.status, RunStatus::Interrupted);
        assert_eq!(run.error.unwrap().code.as_deref(), Some("shutdown"));
    }
    mock.gate().open();
    server.respawn().await;
    let p = wait_settled(&server, &thread, 2).await;
    assert_eq!(p.runs[1].status, RunStatus::Completed, "{:?}", p.runs[1]);
    assert_eq!(continuations(&p).len(), 1);
    assert!(!p.thread.is_claimed());
    assert_eq!(p.thread.resume_attempts, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_crash_parent_and_child_claimed_only_the_parent_resumes() {
    let mock = gated_mock(&["never finishes"]).await;
    let mut server = Server::start(&mock.base_url()).await;
    let parent = thread(&server, None).await;
    let child = thread(&server, Some(&parent)).await;
    server.api.post_message(&parent, "parent work").await;
    server.api.post_message(&child, "child work").await;
    wait_requests(&mock, 2).await;

    server.proc.kill_hard().await;
    mock.gate().open();
    server.respawn().await;
    let p = wait_settled(&server, &parent, 2).await;
    assert_eq!(continuations(&p).len(), 1);
    let c = wait_settled(&server, &child, 1).await;
    assert_eq!(c.runs[0].status, RunStatus::Interrupted);
    assert!(continuations(&c).is_empty());
    assert!(!c.thread.is_claimed());
    assert!(!p.thread.is_claimed());
    assert_eq!(mock.chat_requests().len(), 3);
}

/// True when `/proc/<pid>` exists and is not a zombie.
fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_crash_process_groups_left_by_a_killed_server_are_killed_at_boot() {
    use std::os::unix::process::CommandExt;
    let mock = gated_mock(&["never finishes"]).await;
    let mut server = Server::start(&mock.base_url()).await;
    let server_pid = server.proc.pid();
    // A tool's command: a shell in its own process group that leaves `sleep` behind
    // (the shell exits at once, so the sleep is nobody's child here: an orphan).
    let out = std::process::Command::new("sh")
        .args(["-c", "sleep 300 >/dev/null 2>&1 & echo $!"])
        .process_group(0)
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output()
        .unwrap();
    let sleep_pid: u32 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
    let pgid = std::fs::read_to_string(format!("/proc/{sleep_pid}/stat"))
        .unwrap()
        .rsplit_once(')')
        .unwrap()
        .1
        .split_whitespace()
        .nth(2)
        .unwrap()
        .parse::<i32>()
        .unwrap();
    assert!(alive(sleep_pid));

    server.proc.kill_hard().await;
    // The killed server had recorded the group (what the bash tool's spawn hook does).
    {
        let store = knife_store_sqlite::open(server.data_dir().join("knife.db"))
            .await
            .unwrap();
        store
            .register_process_group(ProcessGroupRecord {
                node: knife_store::LOCAL_NODE.into(),
                pgid,
                owner_pid: server_pid,
                leader_start: None,
                thread_id: None,
                label: "bash: sleep 300".into(),
                registered_at: chrono::Utc::now(),
            })
            .await
            .unwrap();
    }
    assert!(alive(sleep_pid), "the orphan outlived its server");
    server.respawn().await;
    poll_until(
        "the orphaned sleep to be killed",
        Duration::from_secs(5),
        || async { (!alive(sleep_pid)).then_some(()) },
    )
    .await;
    assert!(
        server.proc.stderr().contains("killed a process group"),
        "{}",
        server.proc.stderr()
    );
    server.proc.terminate().await;
    let store = knife_store_sqlite::open(server.data_dir().join("knife.db"))
        .await
        .unwrap();
    assert!(store.list_process_groups().await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_crash_two_quick_signals_exit_promptly_and_the_claim_survives() {
    let mock = gated_mock(&["never finishes", "resumed and finished"]).await;
    let mut server = Server::start(&mock.base_url()).await;
    let thread = thread(&server, None).await;
    server.api.post_message(&thread, "do the work").await;
    wait_requests(&mock, 1).await;

    // Two SIGTERMs back to back: the second may arrive while the graceful shutdown
    // runs (exit 130 at once) or be merged with the first by the kernel (exit 0);
    // either way the process exits promptly and the claim is not lost.
    let pid = server.proc.pid().to_string();
    for _ in 0..2 {
        let sent = std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap();
        assert!(sent.success());
    }
    let started = tokio::time::Instant::now();
    let status = server.proc.wait().await;
    assert!(
        status.success() || status.code() == Some(130),
        "exit after two signals: {status}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    // However far the shutdown got, the claim is there and the next start resumes.
    mock.gate().open();
    server.respawn().await;
    let p = wait_settled(&server, &thread, 2).await;
    assert_eq!(p.runs[1].status, RunStatus::Completed, "{:?}", p.runs[1]);
    assert_eq!(continuations(&p).len(), 1);
    assert!(!p.thread.is_claimed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_crash_a_resumed_turn_replays_its_tool_history_validly() {
    // Request 1: a tool call; request 2: a slow answer the server is killed in;
    // request 3 (the continuation): a quick answer.
    let mut slow = ScriptResponse::text("x ".repeat(80).trim().to_owned());
    slow.deltas = Some(80);
    slow.stream_deltas_ms = Some(50);
    let script = Script::new(vec![
        ScriptResponse::tool_call("list", r#"{"path":"."}"#),
        slow,
        ScriptResponse::text("resumed and finished"),
    ]);
    let mock = MockLlm::start(MockLlmConfig::script(script)).await.unwrap();
    let mut server = Server::start(&mock.base_url()).await;
    std::fs::write(server.project_dir().join("notes.txt"), "hello").unwrap();
    let thread = thread(&server, None).await;
    server.api.post_message(&thread, "look around").await;
    wait_requests(&mock, 2).await;
    let api = server.api.clone();
    poll_until("the second answer to stream", RUN_TIMEOUT, || async {
        let p = api.projection(&thread).await;
        p.turn_items
            .iter()
            .any(|i| matches!(&i.kind, TurnItemKind::AssistantMessage { text, .. } if text.starts_with('x')))
            .then_some(())
    })
    .await;

    server.proc.kill_hard().await;
    server.respawn().await;
    let p = wait_settled(&server, &thread, 2).await;
    assert_eq!(p.runs[1].status, RunStatus::Completed, "{:?}", p.runs[1]);
    assert_eq!(mock.chat_requests().len(), 3);
    // The continuation request carries the finished tool call with its result, the
    // partial answer and the continuation text, in a shape the provider accepts.
    assert_eq!(mock.tool_call_violations(), Vec::<String>::new());
    let body = &mock.chat_requests()[2].body_text;
    assert!(
        body.contains("notes.txt"),
        "the tool result is replayed: {body}"
    );
    assert!(body.contains("The server restarted"), "{body}");
    assert_eq!(
        p.turn_items
            .iter()
            .filter(|i| matches!(&i.kind, TurnItemKind::ToolCall { .. }))
            .count(),
        1,
        "the tool ran once: {:#?}",
        p.turn_items
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_crash_knife_run_reports_a_lost_server_not_a_model_error() {
    let mock =
        gated_mock(&["one two three four five six seven eight nine ten eleven twelve"]).await;
    let mut server = Server::start(&mock.base_url()).await;
    let url = server.proc.url();
    let project = server.project_dir().display().to_string();
    let mut cmd = knife_command(server.path());
    cmd.args([
        "run",
        "--server",
        &url,
        "--project",
        &project,
        "do the work",
    ])
    .stdout(std::process::Stdio::piped())
    .stderr(std::process::Stdio::piped());
    let child = cmd.spawn().unwrap();
    mock.gate().release(4);
    wait_requests(&mock, 1).await;
    let api = server.api.clone();
    poll_until("the answer to start streaming", RUN_TIMEOUT, || async {
        let (_, threads) = api.get("/api/threads").await;
        let thread = threads.as_array()?.first()?["id"].as_str()?.to_owned();
        let p = api.projection(&thread).await;
        p.turn_items
            .iter()
            .any(|i| matches!(&i.kind, TurnItemKind::AssistantMessage { text, .. } if !text.is_empty()))
            .then_some(())
    })
    .await;
    // Give the CLI a moment to print the partial answer.
    tokio::time::sleep(Duration::from_millis(300)).await;
    server.proc.kill_hard().await;
    let out = tokio::time::timeout(CLI_TIMEOUT, child.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "stdout: {stdout}\nstderr: {stderr}");
    assert!(
        stderr.contains(&format!(
            "lost the connection to the knife server at {url}; the turn is kept and resumes when the server starts again"
        )),
        "stderr: {stderr}"
    );
    assert!(
        !stderr.contains("the model's event stream"),
        "blames the model: {stderr}"
    );
    assert!(
        !stderr.contains("send the message again"),
        "stderr: {stderr}"
    );
    assert!(stdout.starts_with("one"), "partial answer: {stdout:?}");
    assert!(
        stdout.ends_with('\n'),
        "partial answer ends its line: {stdout:?}"
    );
}
