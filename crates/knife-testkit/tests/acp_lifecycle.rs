//! The `acp` driver's lifecycle against the scripted fake ACP agent (`fake_acp`, a
//! real child process): a real store on disk, the session manager and the
//! execution service, as the server wires them. Open, streamed turn, approval round
//! trip, interrupt (also while an approval waits), detach, idle release (process
//! gone, no orphan), crash (run fails with the exit status, session released with
//! `runtime_error`), malformed output, and resume through `session/load` after a
//! restart.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod acp_support;

use std::time::Duration;

use acp_support::*;
use knife_adapters::acp::{AcpAdapter, AcpConfig};
use knife_protocol::*;
use knife_runtime::*;
use serde_json::{Value, json};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_and_a_streamed_turn_record_the_answer_and_the_native_session() {
    let h = Harness::new().await;
    let exec = h.execution(Duration::from_secs(60), &[]);
    let thread = h.thread().await;
    let run = h.run(&exec, &thread, "hello").await;
    assert_eq!(run.status, RunStatus::Completed, "{:?}", run.error);
    let p = h.projection(&thread).await;
    assert_eq!(texts(&p, &run.id), vec!["echo #1: hello".to_owned()]);
    let usage = run.usage.clone().expect("the agent's usage is recorded");
    assert_eq!(
        (usage.input_tokens, usage.output_tokens, usage.total_tokens),
        (10, 1, 11)
    );
    let item = p
        .turn_items
        .iter()
        .find(|i| matches!(i.kind, TurnItemKind::AssistantMessage { .. }))
        .unwrap();
    assert_eq!(item.status, TurnItemStatus::Completed);
    assert!(matches!(
        item.kind,
        TurnItemKind::AssistantMessage {
            streaming: false,
            ..
        }
    ));
    let native = p.provider_threads[0].native_id.clone().unwrap();
    assert!(native.starts_with("fake-"), "{native}");
    assert_eq!(p.provider_threads[0].driver, "acp");

    // The wire: initialize v1 without fs/terminal, session/new with the project root.
    let received = h.received();
    let init = received
        .iter()
        .find(|m| m["method"] == "initialize")
        .unwrap();
    assert_eq!(init["params"]["protocolVersion"], 1);
    assert_eq!(init["jsonrpc"], "2.0");
    assert_eq!(
        init["params"]["clientCapabilities"],
        json!({"fs": {"readTextFile": false, "writeTextFile": false}, "terminal": false})
    );
    let new = received
        .iter()
        .find(|m| m["method"] == "session/new")
        .unwrap();
    assert_eq!(new["params"]["cwd"], json!(h.project.root));
    assert_eq!(new["params"]["mcpServers"], json!([]));
    let prompt = received
        .iter()
        .find(|m| m["method"] == "session/prompt")
        .unwrap();
    assert_eq!(
        prompt["params"],
        json!({"sessionId": native, "prompt": [{"type": "text", "text": "hello"}]})
    );

    // A second message reuses the live process and its session (the agent counts 2).
    let run2 = h.run(&exec, &thread, "again").await;
    assert_eq!(
        texts(&h.projection(&thread).await, &run2.id),
        vec!["echo #2: again".to_owned()]
    );
    assert_eq!(h.pids().len(), 1, "one agent process per thread");
    exec.shutdown(Duration::from_secs(10)).await;
    exec.manager().shutdown().await;
    for pid in h.pids() {
        wait_gone(pid).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proc_12_acp_text_is_durable_by_its_window_while_the_agent_pauses() {
    // LIVE-03 gave the ACP driver persistence windows (it wrote every chunk durably):
    // "a" is written at once, "b" when its window ends, which the session's actor must
    // notice by itself while the agent sends nothing (1.5 s).
    let h = Harness::new().await;
    let exec = h.execution(Duration::from_secs(60), &[]);
    let thread = h.thread().await;
    let prompt = script(json!([{"text": "a"}, {"text": "b"}, {"sleep_ms": 1500}, {"text": "c"}]));
    let run = exec.start_run(&thread, prompt).await.unwrap();
    let durable = |want: fn(&str) -> bool| {
        let h = &h;
        let thread = &thread;
        async move {
            poll(|| async {
                let p = h.projection(thread).await;
                p.turn_items
                    .iter()
                    .any(|i| {
                        matches!(&i.kind, TurnItemKind::AssistantMessage { text, streaming: true }
                            if want(text))
                    })
                    .then_some(())
            })
            .await;
        }
    };
    // The first durable text ("a", or already "ab"), then "ab" by its window's end
    // (PROC-12: 250 ms; plus a poll's 20 ms and a loaded machine), long before the
    // agent speaks again.
    durable(|text| text.starts_with('a')).await;
    let t0 = tokio::time::Instant::now();
    durable(|text| text == "ab").await;
    assert!(
        t0.elapsed() < Duration::from_millis(1000),
        "\"ab\" became durable {:?} after \"a\"",
        t0.elapsed()
    );
    tokio::time::timeout(Duration::from_secs(30), exec.await_idle(&thread))
        .await
        .expect("the run ended");
    let p = h.projection(&thread).await;
    assert_eq!(texts(&p, &run.id), vec!["abc".to_owned()]);
    exec.shutdown(Duration::from_secs(10)).await;
    exec.manager().shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_round_trip_goes_through_the_approvals_api() {
    let h = Harness::new().await;
    let exec = h.execution(Duration::from_secs(60), &[]);
    let thread = h.thread().await;
    let text = script(json!([
        {"thought": "I should list the files"},
        {"tool": {"id": "call-1", "title": "ls -la", "kind": "execute", "input": {"command": "ls -la"}},
         "permission": true, "output": "a.txt"},
        {"tool": {"id": "call-2", "title": "rm -rf /", "kind": "execute", "input": {"command": "rm -rf /"}},
         "permission": true},
        {"text": "done"}
    ]));
    let run = exec.start_run(&thread, text).await.unwrap();

    let first = h.pending_request(&thread).await;
    assert_eq!(first.kind, RuntimeRequestKind::Command);
    assert!(matches!(
        first.response_capability,
        ResponseCapability::Live { .. }
    ));
    assert_eq!(first.prompt.as_deref(), Some("execute: ls -la"));
    let resolved = exec
        .respond_to_request(
            &thread,
            &first.id,
            RequestAnswer {
                decision: ApprovalDecision::AllowOnce,
                message: None,
            },
        )
        .await
        .unwrap();
    assert_eq!(resolved.status, RuntimeRequestStatus::Resolved);
    assert_eq!(resolved.decision, Some(ApprovalDecision::AllowOnce));

    let second = poll(|| async {
        h.projection(&thread)
            .await
            .runtime_requests
            .into_iter()
            .find(|r| r.status == RuntimeRequestStatus::Pending && r.id != first.id)
    })
    .await;
    exec.respond_to_request(
        &thread,
        &second.id,
        RequestAnswer {
            decision: ApprovalDecision::Deny,
            message: Some("never".into()),
        },
    )
    .await
    .unwrap();
    // A second answer to the same request is refused.
    let again = exec
        .respond_to_request(
            &thread,
            &second.id,
            RequestAnswer {
                decision: ApprovalDecision::AllowOnce,
                message: None,
            },
        )
        .await;
    assert!(again.is_err());

    tokio::time::timeout(LIMIT, exec.await_idle(&thread))
        .await
        .unwrap();
    let run = h.run_row(&thread, &run.id).await;
    assert_eq!(run.status, RunStatus::Completed, "{:?}", run.error);
    let p = h.projection(&thread).await;
    let tool = |id: &str| {
        p.turn_items
            .iter()
            .find(|i| matches!(&i.kind, TurnItemKind::ToolCall { call_id, .. } if call_id == id))
            .unwrap()
            .clone()
    };
    let allowed = tool("call-1");
    assert_eq!(allowed.status, TurnItemStatus::Completed);
    assert!(
        matches!(&allowed.kind, TurnItemKind::ToolCall { output: Some(o), input, .. }
        if o == "a.txt" && input == &json!({"command": "ls -la"}))
    );
    let denied = tool("call-2");
    assert_eq!(denied.status, TurnItemStatus::Failed);
    assert!(p.turn_items.iter().any(|i| matches!(&i.kind,
        TurnItemKind::Approval { decision: Some(ApprovalDecision::Deny), message: Some(m), .. } if m == "never")));
    assert!(p.turn_items.iter().any(|i| matches!(&i.kind,
        TurnItemKind::Reasoning { text, .. } if text == "I should list the files")));
    assert_eq!(texts(&p, &run.id), vec!["done".to_owned()]);

    // The agent got the options of the decisions' kinds.
    let answers: Vec<Value> = h
        .received()
        .into_iter()
        .filter(|m| m.get("result").is_some_and(|r| r.get("outcome").is_some()))
        .map(|m| m["result"]["outcome"].clone())
        .collect();
    assert_eq!(
        answers,
        vec![
            json!({"outcome": "selected", "optionId": "once"}),
            json!({"outcome": "selected", "optionId": "reject"})
        ]
    );
    exec.shutdown(Duration::from_secs(10)).await;
    exec.manager().shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interrupt_cancels_the_prompt_and_a_waiting_approval() {
    let h = Harness::new().await;
    let exec = h.execution(Duration::from_secs(60), &[]);
    let thread = h.thread().await;

    // A busy turn: session/cancel ends it interrupted.
    let run = exec
        .start_run(
            &thread,
            script(json!([{"text": "working"}, {"hang": true}])),
        )
        .await
        .unwrap();
    poll(|| async {
        texts(&h.projection(&thread).await, &run.id)
            .first()
            .cloned()
    })
    .await;
    exec.interrupt(&thread, InterruptReason::User)
        .await
        .unwrap();
    tokio::time::timeout(LIMIT, exec.await_idle(&thread))
        .await
        .unwrap();
    let row = h.run_row(&thread, &run.id).await;
    assert_eq!(row.status, RunStatus::Interrupted);
    assert!(h.methods().contains(&"session/cancel".to_owned()));
    let p = h.projection(&thread).await;
    let text = p
        .turn_items
        .iter()
        .find(|i| matches!(i.kind, TurnItemKind::AssistantMessage { .. }))
        .unwrap();
    assert_eq!(text.status, TurnItemStatus::Interrupted);

    // Waiting on an approval: the request is cancelled and the agent told so.
    let run = exec
        .start_run(
            &thread,
            script(json!([{"tool": {"id": "c", "title": "touch x", "kind": "edit"}, "permission": true}])),
        )
        .await
        .unwrap();
    let request = h.pending_request(&thread).await;
    assert_eq!(request.kind, RuntimeRequestKind::FileChange);
    exec.interrupt(&thread, InterruptReason::User)
        .await
        .unwrap();
    tokio::time::timeout(LIMIT, exec.await_idle(&thread))
        .await
        .unwrap();
    assert_eq!(
        h.run_row(&thread, &run.id).await.status,
        RunStatus::Interrupted
    );
    let p = h.projection(&thread).await;
    let settled = p
        .runtime_requests
        .iter()
        .find(|r| r.id == request.id)
        .unwrap();
    assert_ne!(settled.status, RuntimeRequestStatus::Pending);
    assert!(
        h.received()
            .iter()
            .any(|m| m["result"]["outcome"]["outcome"] == "cancelled")
    );
    exec.shutdown(Duration::from_secs(10)).await;
    exec.manager().shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_release_and_detach_stop_the_agent_process() {
    let h = Harness::new().await;
    let exec = h.execution(Duration::from_millis(400), &[]);
    let thread = h.thread().await;
    let run = h.run(&exec, &thread, "hi").await;
    assert_eq!(run.status, RunStatus::Completed);
    let pid = h.pids()[0];
    // Idle release: the session goes, the process exits and is reaped, its group
    // record is forgotten.
    poll(|| async { exec.manager().live_sessions().is_empty().then_some(()) }).await;
    wait_gone(pid).await;
    poll(|| async {
        h.store
            .list_process_groups()
            .await
            .unwrap()
            .is_empty()
            .then_some(())
    })
    .await;

    // Detach of an exclusive session releases it at once.
    let exec = h.execution(Duration::from_secs(60), &[]);
    let run = h.run(&exec, &thread, "back").await;
    assert_eq!(run.status, RunStatus::Completed);
    let pid = *h.pids().last().unwrap();
    assert!(alive(pid));
    let session = ProviderSessionId::exclusive(&h.instance, &thread);
    exec.manager()
        .detach(&session, &thread, None, false)
        .await
        .unwrap();
    wait_gone(pid).await;
    // The new process reopened the thread's session with session/load.
    assert!(h.methods().contains(&"session/load".to_owned()));
    assert_eq!(
        texts(&h.projection(&thread).await, &run.id),
        vec!["echo #2: back".to_owned()]
    );
    exec.manager().shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_fails_the_run_with_the_exit_status_and_releases_the_session() {
    let h = Harness::new().await;
    let exec = h.execution(Duration::from_secs(60), &[]);
    let thread = h.thread().await;
    let run = h
        .run(
            &exec,
            &thread,
            &script(json!([{"text": "about to"}, {"crash": 3}])),
        )
        .await;
    assert_eq!(run.status, RunStatus::Failed);
    let error = run.error.unwrap();
    assert!(error.message.contains("exit status 3"), "{}", error.message);
    assert!(
        error.message.contains("crashing with 3"),
        "{}",
        error.message
    );
    let session = ProviderSessionId::exclusive(&h.instance, &thread);
    let row = poll(|| async {
        h.store
            .list_provider_sessions()
            .await
            .unwrap()
            .into_iter()
            .find(|s| s.id == session && s.status == SessionStatus::Error)
    })
    .await;
    assert!(
        row.last_error
            .as_deref()
            .unwrap_or_default()
            .contains("exit status 3"),
        "{row:?}"
    );
    wait_gone(h.pids()[0]).await;
    // The thread works again with a fresh process.
    let run = h.run(&exec, &thread, "still there?").await;
    assert_eq!(run.status, RunStatus::Completed, "{:?}", run.error);
    exec.shutdown(Duration::from_secs(10)).await;
    exec.manager().shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_output_is_skipped_and_the_turn_completes() {
    let h = Harness::new().await;
    let exec = h.execution(Duration::from_secs(60), &[]);
    let thread = h.thread().await;
    let run = h
        .run(
            &exec,
            &thread,
            &script(json!([
                {"text": "one "},
                {"garbage": "this is not json"},
                {"garbage": "[1, 2, 3]"},
                {"garbage": "{\"jsonrpc\":\"2.0\",\"method\":\"session/update\",\"params\":{\"sessionId\":7}}"},
                {"garbage": "{\"jsonrpc\":\"2.0\",\"id\":999,\"result\":{}}"},
                {"text": "two"}
            ])),
        )
        .await;
    assert_eq!(run.status, RunStatus::Completed, "{:?}", run.error);
    assert_eq!(
        texts(&h.projection(&thread).await, &run.id),
        vec!["one two".to_owned()]
    );
    exec.shutdown(Duration::from_secs(10)).await;
    exec.manager().shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claimed_thread_is_resumed_after_a_restart_through_session_load() {
    let h = Harness::new().await;
    let thread = h.thread().await;
    let first = h.execution(Duration::from_secs(60), &[]);
    assert_eq!(
        h.run(&first, &thread, "remember me").await.status,
        RunStatus::Completed
    );
    // A turn in flight when the server stops: the claim survives the shutdown.
    let busy = first
        .start_run(
            &thread,
            script(json!([{"text": "long job"}, {"hang": true}])),
        )
        .await
        .unwrap();
    poll(|| async {
        texts(&h.projection(&thread).await, &busy.id)
            .first()
            .cloned()
    })
    .await;
    first.shutdown(Duration::from_secs(10)).await;
    first.manager().shutdown().await;
    let old_pid = h.pids()[0];
    wait_gone(old_pid).await;
    assert!(
        h.store
            .get_thread(&thread)
            .await
            .unwrap()
            .unwrap()
            .is_claimed()
    );
    let native = h.projection(&thread).await.provider_threads[0]
        .native_id
        .clone()
        .unwrap();

    // The next server resumes it: a new agent process loads the same ACP session and
    // gets the continuation message; the agent still knows the first two prompts.
    let second = h.execution(Duration::from_secs(60), &[]);
    let report = h
        .restart_sweep(&second)
        .resume_suspended_threads()
        .await
        .unwrap();
    assert_eq!(report.resumed.len(), 1, "{report:?}");
    let resumed = report.resumed[0].1.clone();
    tokio::time::timeout(LIMIT, second.await_idle(&thread))
        .await
        .unwrap();
    let row = h.run_row(&thread, &resumed).await;
    assert_eq!(row.status, RunStatus::Completed, "{:?}", row.error);
    let load = h
        .received()
        .into_iter()
        .find(|m| m["method"] == "session/load")
        .expect("session/load was sent");
    assert_eq!(load["params"]["sessionId"], json!(native));
    let answer = texts(&h.projection(&thread).await, &resumed);
    assert_eq!(
        answer.len(),
        1,
        "the replayed history is not re-recorded: {answer:?}"
    );
    assert!(answer[0].starts_with("echo #3: "), "{answer:?}");
    assert!(
        !h.store
            .get_thread(&thread)
            .await
            .unwrap()
            .unwrap()
            .is_claimed()
    );
    second.shutdown(Duration::from_secs(10)).await;
    second.manager().shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_with_session_resume_is_resumed_without_a_replay() {
    let h = Harness::new().await;
    let thread = h.thread().await;
    let first = h.execution(Duration::from_secs(60), &[("FAKE_ACP_RESUME", "1")]);
    h.run(&first, &thread, "one").await;
    first.manager().shutdown().await;
    let second = h.execution(Duration::from_secs(60), &[("FAKE_ACP_RESUME", "1")]);
    let run = h.run(&second, &thread, "two").await;
    assert_eq!(run.status, RunStatus::Completed, "{:?}", run.error);
    assert_eq!(
        texts(&h.projection(&thread).await, &run.id),
        vec!["echo #2: two".to_owned()]
    );
    let methods = h.methods();
    assert!(
        methods.contains(&"session/resume".to_owned()),
        "{methods:?}"
    );
    assert!(!methods.contains(&"session/load".to_owned()), "{methods:?}");
    second.manager().shutdown().await;
}

impl Harness {
    fn restart_sweep(&self, exec: &ExecutionService) -> RestartService {
        RestartService::new(exec.clone(), RestartOptions::default())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_that_dies_in_the_handshake_fails_the_open_with_its_status() {
    let h = Harness::new().await;
    let exec = h.execution_of("false", Duration::from_secs(60), &[]);
    let thread = h.thread().await;
    let run = h.run(&exec, &thread, "hello").await;
    assert_eq!(run.status, RunStatus::Failed);
    let error = run.error.unwrap();
    assert_eq!(error.error_type, "provider.open", "{error:?}");
    assert!(error.message.contains("initialize"), "{}", error.message);
    assert!(error.message.contains("exit status 1"), "{}", error.message);
    let exec = h.execution_of("/no/such/agent", Duration::from_secs(60), &[]);
    let run = h.run(&exec, &thread, "hello").await;
    let error = run.error.unwrap();
    assert!(
        error.message.contains("/no/such/agent"),
        "{}",
        error.message
    );
    assert!(h.store.list_process_groups().await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_deaf_to_cancel_is_released_after_the_interrupt_grace() {
    let h = Harness::new().await;
    let exec = h.execution(Duration::from_secs(60), &[]);
    let thread = h.thread().await;
    let run = exec
        .start_run(&thread, script(json!([{"text": "busy"}, {"deaf": true}])))
        .await
        .unwrap();
    poll(|| async {
        texts(&h.projection(&thread).await, &run.id)
            .first()
            .cloned()
    })
    .await;
    let pid = h.pids()[0];
    exec.interrupt(&thread, InterruptReason::User)
        .await
        .unwrap();
    tokio::time::timeout(LIMIT, exec.await_idle(&thread))
        .await
        .unwrap();
    assert_eq!(
        h.run_row(&thread, &run.id).await.status,
        RunStatus::Interrupted
    );
    // The unresponsive session is released and its process stopped.
    wait_gone(pid).await;
    let run = h.run(&exec, &thread, "again").await;
    assert_eq!(run.status, RunStatus::Completed, "{:?}", run.error);
    exec.shutdown(Duration::from_secs(10)).await;
    exec.manager().shutdown().await;
}

/// MGR-41 for ACP: a permission request pending when the agent dies is left to the
/// release of the failed session, which expires it (`not_resumable`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permission_pending_when_the_agent_dies_expires() {
    let h = Harness::new().await;
    let exec = h.execution(Duration::from_secs(60), &[]);
    let thread = h.thread().await;
    let run = exec
        .start_run(
            &thread,
            script(json!([{"tool": {"id": "c", "title": "make", "kind": "execute"}, "permission": true}])),
        )
        .await
        .unwrap();
    let request = h.pending_request(&thread).await;
    let pid = h.pids()[0];
    let killed = std::process::Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    tokio::time::timeout(LIMIT, exec.await_idle(&thread))
        .await
        .unwrap();
    assert_eq!(h.run_row(&thread, &run.id).await.status, RunStatus::Failed);
    let settled = poll(|| async {
        h.projection(&thread)
            .await
            .runtime_requests
            .into_iter()
            .find(|r| r.id == request.id && r.status != RuntimeRequestStatus::Pending)
    })
    .await;
    assert_eq!(settled.status, RuntimeRequestStatus::Expired, "{settled:?}");
    assert!(
        matches!(&settled.response_capability, ResponseCapability::NotResumable { reason } if !reason.contains("previous server process")),
        "{settled:?}"
    );
    exec.shutdown(Duration::from_secs(10)).await;
    exec.manager().shutdown().await;
}

/// A turn the stuck-turn watchdog ended while the agent ignores `session/cancel`: the
/// thread's next run is not refused because the actor still held the abandoned turn;
/// that turn is recorded interrupted and the new prompt goes to the same agent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_the_watchdog_ended_does_not_wedge_the_thread() {
    let h = Harness::new().await;
    let exec = h.execution_full(
        env!("CARGO_BIN_EXE_fake_acp"),
        Duration::from_secs(60),
        Duration::from_millis(500),
        &[],
    );
    let thread = h.thread().await;
    let run = h
        .run(
            &exec,
            &thread,
            &script(json!([{"text": "busy"}, {"deaf": true}])),
        )
        .await;
    assert_eq!(run.status, RunStatus::Failed);
    assert_eq!(
        run.error.as_ref().map(|e| e.error_type.as_str()),
        Some("provider.stalled")
    );
    let next = h.run(&exec, &thread, "again").await;
    assert_eq!(next.status, RunStatus::Completed, "{:?}", next.error);
    assert_eq!(h.pids().len(), 1, "the same agent process");
    let p = h.projection(&thread).await;
    let old = p
        .provider_turns
        .iter()
        .find(|t| t.run_id == run.id)
        .unwrap();
    assert_ne!(old.status, ProviderTurnStatus::Running);
    exec.shutdown(Duration::from_secs(10)).await;
    exec.manager().shutdown().await;
}

/// A program that prints nothing fails the open after the `initialize` time box (not the
/// longer handshake bound), with advice to check the instance's `command` / `args`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_program_fails_the_open_after_the_initialize_time_box() {
    let h = Harness::new().await;
    let mut config = AcpConfig::new(h.instance.clone(), "sh");
    config.args = vec!["-c".into(), "sleep 30".into()];
    config.initialize_timeout = Duration::from_millis(300);
    config.handshake_timeout = Duration::from_secs(10);
    config.eof_grace = Duration::from_millis(200);
    config.term_grace = Duration::from_millis(200);
    let thread = h.thread().await;
    let input = OpenSessionInput {
        provider_session_id: ProviderSessionId::from("provider-session:fake-acp:t"),
        provider_instance_id: h.instance.clone(),
        thread_id: thread,
        cwd: h.dir.path().join("project"),
        project_root: None,
        model: None,
        native_thread_id: None,
    };
    let started = std::time::Instant::now();
    let err = AcpAdapter::new(config)
        .open(input, OpenSessionOptions::default())
        .await
        .err()
        .unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    let text = err.to_string();
    assert!(text.contains("initialize"), "{text}");
    assert!(text.contains("no answer"), "{text}");
    assert!(
        text.contains("check `command` and `args` of provider instance fake-acp"),
        "{text}"
    );
}

#[tokio::test]
async fn chg_09_an_acp_thread_refuses_to_fork_with_a_clear_message() {
    let h = Harness::new().await;
    let exec = h.execution(Duration::from_secs(60), &[]);
    let thread = h.thread().await;
    let run = h.run(&exec, &thread, "hello").await;
    assert_eq!(run.status, RunStatus::Completed, "{:?}", run.error);
    let before = h.projection(&thread).await;
    let err = exec
        .fork_thread(
            &thread,
            ForkThreadRequest {
                after_run: Some(1),
                title: None,
            },
        )
        .await
        .unwrap_err();
    assert!(
        matches!(&err, RuntimeError::ForkUnsupported { driver, .. } if driver == "acp"),
        "{err:?}"
    );
    let text = err.to_string();
    assert!(text.contains("Agent Client Protocol"), "{text}");
    assert!(
        text.contains("start a new thread"),
        "the message says what to do: {text}"
    );
    // Nothing was written: no new thread, the source as it was.
    assert_eq!(h.store.list_threads(None).await.unwrap().len(), 1);
    let after = h.projection(&thread).await;
    assert_eq!(
        (after.runs, after.turn_items),
        (before.runs, before.turn_items)
    );
}
