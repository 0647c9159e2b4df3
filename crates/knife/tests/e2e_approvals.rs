// Tool approvals over the real HTTP API with the real binary (docs/2026-11-29-approvals.md): the
// mock model asks for a `bash` call, the default rule asks, the request shows up on
// the thread's event stream, and `POST /api/threads/{id}/requests/{request_id}`
// answers it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use futures::StreamExt;
use knife_protocol::*;
use reqwest::StatusCode;
use serde_json::json;

const SCRIPT: &str = r#"
[[response]]
[[response.tool_calls]]
name = "bash"
arguments = { command = "echo approved > approved.txt && echo wrote it" }

[[response]]
text = "all done"
"#;

/// Follows the thread's SSE stream until a `pending` runtime request appears.
async fn pending_request_on_stream(api: &Api, thread: &str) -> RuntimeRequest {
    let fut = async {
        let resp = api
            .http
            .get(format!("{}/api/threads/{thread}/events?after=0", api.base))
            .timeout(RUN_TIMEOUT + std::time::Duration::from_secs(5))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        let mut sse = Box::pin(knife_llm::sse::decode_stream(resp.bytes_stream()));
        while let Some(item) = sse.next().await {
            let item = item.expect("the SSE stream broke");
            if item.event == "delta" || item.event == "reset" {
                continue; // live text, not an event
            }
            let event: StoredEvent = serde_json::from_str(&item.data).unwrap();
            if let EventBody::RuntimeRequestUpdated(r) = event.event.body
                && r.status == RuntimeRequestStatus::Pending
            {
                assert_eq!(item.event, "runtime-request.updated");
                return r;
            }
        }
        panic!("the event stream ended before a runtime request appeared");
    };
    tokio::time::timeout(RUN_TIMEOUT, fut)
        .await
        .expect("no runtime request appeared on the event stream")
}

async fn answer(
    api: &Api,
    thread: &str,
    request: &RuntimeRequestId,
    body: serde_json::Value,
) -> (StatusCode, serde_json::Value) {
    api.post(&format!("/api/threads/{thread}/requests/{request}"), &body)
        .await
}

struct Started {
    _mock: MockLlm,
    server: Server,
    thread: String,
    run: String,
    request: RuntimeRequest,
}

async fn start_and_wait_for_the_request() -> Started {
    let mock = MockLlm::script(SCRIPT, &[]).await;
    let server = Server::start(&mock.base_url()).await;
    let api = &server.api;
    let project = api.create_project(&server.project_dir()).await;
    let thread = api.create_thread(&project).await;
    let run = api.post_message(&thread, "write the file").await;
    let request = pending_request_on_stream(api, &thread).await;
    Started {
        _mock: mock,
        server,
        thread,
        run,
        request,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_approvals_allow_once_runs_the_command_and_the_turn_finishes() {
    let s = start_and_wait_for_the_request().await;
    let api = &s.server.api;
    assert_eq!(s.request.kind, RuntimeRequestKind::Command);
    let detail = s.request.tool_approval.clone().unwrap();
    assert_eq!(detail.tool, "bash");
    assert_eq!(
        detail.subject,
        "echo approved > approved.txt && echo wrote it"
    );
    // The turn waits: the item shows it, nothing ran.
    let p = api.projection(&s.thread).await;
    assert!(!s.server.project_dir().join("approved.txt").exists());
    let item = p
        .turn_items
        .iter()
        .find(|i| i.id.as_str() == format!("item:{}", s.request.id))
        .unwrap_or_else(|| panic!("no approval item: {:#?}", p.turn_items));
    assert_eq!(item.status, TurnItemStatus::Waiting);
    let (status, listed) = api
        .get(&format!("/api/threads/{}/requests", s.thread))
        .await;
    assert_eq!(status, StatusCode::OK, "{listed}");
    assert_eq!(listed[0]["id"], s.request.id.as_str());
    assert_eq!(listed[0]["status"], "pending");

    let (status, body) = answer(
        api,
        &s.thread,
        &s.request.id,
        json!({"decision": "allow_once"}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let resolved: RuntimeRequest = serde_json::from_value(body).unwrap();
    assert_eq!(resolved.status, RuntimeRequestStatus::Resolved);
    assert_eq!(resolved.decision, Some(ApprovalDecision::AllowOnce));

    let (events, run) = api.follow_run(&s.thread, &s.run, 0).await;
    assert_eq!(run.status, RunStatus::Completed, "{run:?}");
    let tool_output = events.iter().rev().find_map(|e| match &e.event.body {
        EventBody::TurnItemUpdated(TurnItem {
            kind: TurnItemKind::ToolCall {
                output: Some(out), ..
            },
            ..
        }) => Some(out.clone()),
        _ => None,
    });
    assert!(
        tool_output
            .as_deref()
            .unwrap_or_default()
            .contains("wrote it"),
        "{tool_output:?}"
    );
    assert_eq!(
        std::fs::read_to_string(s.server.project_dir().join("approved.txt")).unwrap(),
        "approved\n"
    );
    let p = api.projection(&s.thread).await;
    let answer_text = p.turn_items.iter().find_map(|i| match &i.kind {
        TurnItemKind::AssistantMessage { text, .. } => Some(text.clone()),
        _ => None,
    });
    assert_eq!(answer_text.as_deref(), Some("all done"));
    let node = p.nodes.iter().find(|n| n.id == s.request.node_id).unwrap();
    assert_eq!(node.status, NodeStatus::Completed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_approvals_deny_puts_the_denial_and_message_in_the_transcript() {
    let s = start_and_wait_for_the_request().await;
    let api = &s.server.api;
    let (status, body) = answer(
        api,
        &s.thread,
        &s.request.id,
        json!({"decision": "deny", "message": "not in this repo"}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["status"], "resolved");
    assert_eq!(body["decision"], "deny");

    let (_, run) = api.follow_run(&s.thread, &s.run, 0).await;
    assert_eq!(run.status, RunStatus::Completed, "{run:?}");
    assert!(!s.server.project_dir().join("approved.txt").exists());
    let p = api.projection(&s.thread).await;
    let tool = p
        .turn_items
        .iter()
        .find(|i| matches!(i.kind, TurnItemKind::ToolCall { .. }))
        .unwrap();
    assert_eq!(tool.status, TurnItemStatus::Failed);
    match &tool.kind {
        TurnItemKind::ToolCall { error: Some(e), .. } => assert!(
            e.starts_with("the user denied this bash call: not in this repo"),
            "{e}"
        ),
        other => panic!("{other:?}"),
    }
    let approval = p
        .turn_items
        .iter()
        .find(|i| matches!(i.kind, TurnItemKind::Approval { .. }))
        .unwrap();
    assert_eq!(approval.status, TurnItemStatus::Completed);
    assert!(matches!(&approval.kind, TurnItemKind::Approval {
        decision: Some(ApprovalDecision::Deny), message: Some(m), ..
    } if m == "not in this repo"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_approvals_answering_twice_is_a_conflict_and_unknown_ids_are_not_found() {
    let s = start_and_wait_for_the_request().await;
    let api = &s.server.api;
    let (status, body) = answer(
        api,
        &s.thread,
        &s.request.id,
        json!({"decision": "allow_always"}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, body) = answer(api, &s.thread, &s.request.id, json!({"decision": "deny"})).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_api_error(&body, "request_not_pending");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("already answered with allow_always"),
        "{body}"
    );

    let unknown = RuntimeRequestId::from("request_nope");
    let (status, body) = answer(api, &s.thread, &unknown, json!({"decision": "deny"})).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    assert_api_error(&body, "not_found");
    let (status, body) = answer(
        api,
        "thread_nope",
        &s.request.id,
        json!({"decision": "deny"}),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    let (status, body) = answer(api, &s.thread, &s.request.id, json!({"decision": "maybe"})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let (_, run) = api.follow_run(&s.thread, &s.run, 0).await;
    assert_eq!(run.status, RunStatus::Completed);
}

/// `knife run` without a terminal prints how to answer; `knife approve` from
/// "another terminal" lists the pending request and answers it; the run finishes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_approvals_knife_approve_answers_a_knife_run_from_another_terminal() {
    use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
    let mock = MockLlm::script(SCRIPT, &[]).await;
    let server = Server::start(&mock.base_url()).await;
    let url = server.proc.url();
    let project = server.project_dir().display().to_string();
    let mut run = knife_command(server.path());
    run.args(["run", "--server", &url, "--project", &project, "write it"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = run.spawn().unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap()).lines();
    let hint = tokio::time::timeout(RUN_TIMEOUT, async {
        while let Some(line) = stderr.next_line().await.unwrap() {
            eprintln!("[knife run] {line}");
            if let Some(rest) = line.trim().strip_prefix("answer with: ") {
                return rest.to_owned();
            }
        }
        panic!("knife run ended without printing how to answer");
    })
    .await
    .expect("knife run printed no approval hint");
    // `knife approve <thread> <request> --allow|--always|--deny [--message TEXT]`
    let words: Vec<&str> = hint.split_whitespace().collect();
    assert_eq!(&words[..2], ["knife", "approve"], "{hint}");
    let (thread, request) = (words[2].to_owned(), words[3].to_owned());

    let shown = run_cli(
        server.path(),
        &["threads", "show", &thread, "--server", &url],
    )
    .await;
    assert!(shown.status.success(), "{}", shown.stderr);
    assert!(
        shown.stdout.contains("approval bash echo approved")
            && shown
                .stdout
                .contains(&format!("answer: knife approve {thread} {request}")),
        "{}",
        shown.stdout
    );
    let listed = run_cli(server.path(), &["approve", "--server", &url, &thread]).await;
    assert!(listed.status.success(), "{}", listed.stderr);
    assert!(
        listed.stdout.contains(&request) && listed.stdout.contains("bash: echo approved"),
        "{}",
        listed.stdout
    );
    let answered = run_cli(
        server.path(),
        &["approve", "--server", &url, &thread, &request, "--allow"],
    )
    .await;
    assert!(answered.status.success(), "{}", answered.stderr);
    assert!(
        answered.stdout.contains(&format!(
            "request {request} allowed once: bash: echo approved"
        )),
        "{}",
        answered.stdout
    );

    let status = tokio::time::timeout(RUN_TIMEOUT, child.wait())
        .await
        .expect("knife run did not finish after the approval")
        .unwrap();
    let mut out = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .await
        .unwrap();
    assert!(status.success(), "knife run exited with {status}");
    assert!(out.contains("all done"), "stdout: {out}");
    assert!(server.project_dir().join("approved.txt").exists());

    let again = run_cli(
        server.path(),
        &["approve", "--server", &url, &thread, &request, "--deny"],
    )
    .await;
    assert!(!again.status.success());
    assert!(
        again.stderr.contains("already answered"),
        "{}",
        again.stderr
    );
}

/// A request pending when its server dies is expired / not resumable after the
/// restart (MGR-41 at boot): answering it is a 409 that says so, and its approval
/// item, node and tool item are settled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_approvals_a_request_pending_at_a_crash_is_expired_after_the_restart() {
    let mut s = start_and_wait_for_the_request().await;
    s.server.proc.kill_hard().await;
    s.server.respawn().await;
    let api = s.server.api.clone();
    let settled = poll_until("the request to expire", RUN_TIMEOUT, || async {
        let (_, r) = api
            .get(&format!(
                "/api/threads/{}/requests/{}",
                s.thread, s.request.id
            ))
            .await;
        (r["status"] != "pending").then_some(r)
    })
    .await;
    let settled: RuntimeRequest = serde_json::from_value(settled).unwrap();
    assert_eq!(settled.status, RuntimeRequestStatus::Expired);
    assert!(matches!(
        settled.response_capability,
        ResponseCapability::NotResumable { .. }
    ));
    let (status, body) = answer(
        &api,
        &s.thread,
        &s.request.id,
        json!({"decision": "allow_once"}),
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("expired"),
        "{body}"
    );
    let p = api.settled_thread_json(&s.thread).await;
    let p: ThreadProjection = serde_json::from_value(p).unwrap();
    let item = p
        .turn_items
        .iter()
        .find(|i| i.id.as_str() == format!("item:{}", s.request.id))
        .unwrap();
    assert!(
        matches!(
            item.status,
            TurnItemStatus::Failed | TurnItemStatus::Interrupted
        ),
        "{item:?}"
    );
    let node = p.nodes.iter().find(|n| n.id == s.request.node_id).unwrap();
    assert_eq!(node.status, NodeStatus::Failed, "{node:?}");
    assert!(!s.server.project_dir().join("approved.txt").exists());
}

/// Interrupting a run that waits for an approval cancels the request, aborts the
/// tool call (PROC-08 wording) and leaves the thread idle; a late answer is a 409.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_approvals_interrupt_while_waiting_cancels_the_request() {
    let s = start_and_wait_for_the_request().await;
    let api = &s.server.api;
    let (status, body) = api
        .post(&format!("/api/threads/{}/interrupt", s.thread), &json!({}))
        .await;
    assert!(status.is_success(), "{body}");
    let (_, run) = api.follow_run(&s.thread, &s.run, 0).await;
    assert_eq!(run.status, RunStatus::Interrupted, "{run:?}");
    let p: ThreadProjection =
        serde_json::from_value(api.settled_thread_json(&s.thread).await).unwrap();
    let request = p
        .runtime_requests
        .iter()
        .find(|r| r.id == s.request.id)
        .unwrap();
    assert_eq!(request.status, RuntimeRequestStatus::Cancelled);
    let tool = p
        .turn_items
        .iter()
        .find(|i| matches!(i.kind, TurnItemKind::ToolCall { .. }))
        .unwrap();
    assert!(
        matches!(&tool.kind, TurnItemKind::ToolCall { error: Some(e), .. } if e == "Tool execution aborted"),
        "{tool:?}"
    );
    assert_eq!(p.thread.agent_status, Some(AgentStatus::Idle));
    let (status, body) = answer(
        api,
        &s.thread,
        &s.request.id,
        json!({"decision": "allow_once"}),
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("cancelled"),
        "{body}"
    );
    assert!(!s.server.project_dir().join("approved.txt").exists());
}

/// `knife run` on a terminal (a pty from util-linux `script`) asks and takes `y`.
#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_approvals_knife_run_asks_on_a_terminal() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mock = MockLlm::script(SCRIPT, &[]).await;
    let server = Server::start(&mock.base_url()).await;
    let url = server.proc.url();
    let project = server.project_dir().display().to_string();
    let line = format!(
        "'{}' run --server '{url}' --project '{project}' 'write it'",
        knife_bin().display()
    );
    // `script` runs the command on a pseudo-terminal and relays our stdin to it.
    let mut cmd = tokio::process::Command::new("script");
    cmd.args(["-qec", &line, "/dev/null"])
        .env_remove("KNIFE_CONFIG")
        .env_remove("KNIFE_DATA_DIR")
        .env_remove("KNIFE_SERVER")
        .env_remove("KNIFE_API_TOKEN")
        .env_remove("RUST_LOG")
        .env("NO_COLOR", "1")
        .env("XDG_CONFIG_HOME", server.path())
        .current_dir(server.path())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    let mut child = cmd
        .spawn()
        .expect("util-linux `script` is needed for this test");
    let mut stdin = child.stdin.take().unwrap();
    // Typed ahead: the prompt reads it once the request appears.
    stdin.write_all(b"y\n").await.unwrap();
    let status = tokio::time::timeout(RUN_TIMEOUT, child.wait())
        .await
        .expect("knife run on a terminal did not finish")
        .unwrap();
    drop(stdin);
    let mut out = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .await
        .unwrap();
    eprintln!("[script knife run]\n{out}");
    assert!(status.success(), "exit {status}: {out}");
    assert!(out.contains("? allow bash: echo approved"), "{out}");
    assert!(out.contains("allowed once"), "{out}");
    assert!(out.contains("all done"), "{out}");
    assert!(server.project_dir().join("approved.txt").exists());
}

/// `knife threads list` shows a run waiting for an approval; `knife threads interrupt`
/// (from any terminal) stops it through the server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_approvals_threads_list_shows_waiting_and_threads_interrupt_stops_the_run() {
    let s = start_and_wait_for_the_request().await;
    let url = s.server.proc.url();
    let cwd = s.server.path().to_owned();
    let list = run_cli(&cwd, &["threads", "list", "--server", &url]).await;
    assert!(list.status.success(), "{}", list.stderr);
    let line = list
        .stdout
        .lines()
        .find(|l| l.starts_with(&s.thread))
        .unwrap_or_else(|| panic!("{}", list.stdout));
    assert!(line.contains("waiting for approval"), "{line}");
    assert!(
        list.stderr.contains(&format!("knife approve {}", s.thread)),
        "{}",
        list.stderr
    );

    // A second message sent with `mode: reject` is refused and points at the CLI
    // command (by default it would be queued behind the run, TURN-01).
    let (status, body) = s
        .server
        .api
        .post(
            &format!("/api/threads/{}/messages", s.thread),
            &json!({"text": "again", "mode": "reject"}),
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains(&format!("knife threads interrupt {}", s.thread)),
        "{body}"
    );

    let stop = run_cli(&cwd, &["threads", "interrupt", &s.thread, "--server", &url]).await;
    assert!(stop.status.success(), "{}", stop.stderr);
    assert!(
        stop.stdout.contains(&format!(
            "asked run {} of thread {} to stop",
            s.run.rsplit(':').next().unwrap(),
            s.thread
        )),
        "{}",
        stop.stdout
    );
    let (_, run) = s.server.api.follow_run(&s.thread, &s.run, 0).await;
    assert_eq!(run.status, RunStatus::Interrupted, "{run:?}");
    s.server.api.settled_thread_json(&s.thread).await;

    let again = run_cli(&cwd, &["threads", "interrupt", &s.thread, "--server", &url]).await;
    assert!(again.status.success(), "{}", again.stderr);
    assert!(
        again.stdout.contains("no run in progress"),
        "{}",
        again.stdout
    );
}
