//! The default codex lifecycle suite, turns (issue 7): knife's execution service and
//! session manager on a real SQLite store drive the `codex` driver against the scripted
//! fake app-server (`src/bin/fake_codex.rs`, a real child process): open, streamed turn,
//! approval round trips, interrupts, detach/unload, two projects on one process, text
//! persistence windows. Process supervision cases are in `codex_process.rs`.
//!
//! The suites live in knife-testkit because `CARGO_BIN_EXE_fake_codex` exists only for
//! tests of the package that owns the binary.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod codex_support;

use std::sync::Arc;
use std::time::Duration;

use codex_support::*;
use knife_protocol::*;
use knife_runtime::commands::{create_project, create_thread};
use knife_runtime::*;
use serde_json::Value;

#[tokio::test]
async fn codex_open_and_streamed_turn_record_items_usage_and_the_native_thread() {
    let h = harness(Duration::from_secs(60)).await;
    let run = h
        .run(script(
            r#"[{"reasoning":"thinking it over"},{"text":"Hello there, world."},{"usage":[100,7]}]"#,
        ))
        .await;
    assert_eq!(run.status, RunStatus::Completed, "{:?}", run.error);
    let p = h.projection().await;
    assert_eq!(
        assistant_texts(&p, &run.id),
        vec![("Hello there, world.".to_owned(), TurnItemStatus::Completed)]
    );
    assert!(p.turn_items.iter().any(|i| matches!(
        &i.kind,
        TurnItemKind::Reasoning { text, streaming: false } if text == "thinking it over"
    )));
    let usage = run.usage.expect("usage recorded");
    assert_eq!(
        (usage.input_tokens, usage.output_tokens, usage.total_tokens),
        (100, 7, 107)
    );
    // The codex thread is recorded with its native id (what a later session resumes).
    let pt = &p.provider_threads[0];
    let native = pt.native_id.clone().unwrap();
    assert_eq!(pt.driver, "codex");
    assert_eq!(pt.id, ProviderThreadId::native("codex", &native));
    // thread/start carried the project root and the thread's MCP server + bearer.
    let start = &h.sent_methods("thread/start")[0]["params"];
    assert_eq!(start["cwd"], h.root.display().to_string());
    assert_eq!(start["model"], "mock-model");
    let bearer = start["config"]["mcp_servers"]["knife"]["http_headers"]["Authorization"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(
        start["config"]["mcp_servers"]["knife"]["url"],
        "http://127.0.0.1:43123/mcp"
    );
    let token = bearer.strip_prefix("Bearer ").unwrap();
    let scope = h.registry.resolve(token).expect("a live credential");
    assert_eq!(scope.thread_id, h.thread.id);
    // The handshake omits the "jsonrpc" field, as codex does.
    let init = &h.sent_methods("initialize")[0];
    assert!(init.get("jsonrpc").is_none());
    assert_eq!(h.sent_methods("initialized").len(), 1);

    // A second run continues the same codex thread on the same process.
    let second = h.run("again".into()).await;
    assert_eq!(second.status, RunStatus::Completed);
    let p = h.projection().await;
    assert_eq!(
        assistant_texts(&p, &second.id),
        vec![(
            "Hello from fake codex.".to_owned(),
            TurnItemStatus::Completed
        )]
    );
    assert_eq!(h.sent_methods("thread/start").len(), 1);
    let turns = h.sent_methods("turn/start");
    assert_eq!(turns.len(), 2);
    assert!(
        turns
            .iter()
            .all(|t| t["params"]["threadId"] == native.as_str())
    );
    assert_eq!(
        h.sent_methods("initialize").len(),
        1,
        "one process serves the thread"
    );
}

#[tokio::test]
async fn codex_command_approval_round_trip_runs_the_command() {
    let h = harness(Duration::from_secs(60)).await;
    let run = h
        .exec
        .start_run(
            &h.thread.id,
            script(r#"[{"approve_command":"touch approved.txt"},{"text":"done"}]"#),
        )
        .await
        .unwrap();
    let request = pending_request(&h).await;
    assert_eq!(request.kind, RuntimeRequestKind::Command);
    assert_eq!(
        request.response_capability,
        ResponseCapability::Live {
            provider_session_id: session_id()
        }
    );
    assert_eq!(
        request.prompt.as_deref(),
        Some("command: touch approved.txt")
    );
    let p = h.projection().await;
    let waiting = p
        .turn_items
        .iter()
        .find(|i| matches!(i.kind, TurnItemKind::ToolCall { .. }))
        .unwrap();
    assert_eq!(waiting.status, TurnItemStatus::Waiting);
    let answered = h
        .answer(&request.id, ApprovalDecision::AllowOnce)
        .await
        .unwrap();
    assert_eq!(answered.status, RuntimeRequestStatus::Resolved);
    assert_eq!(answered.decision, Some(ApprovalDecision::AllowOnce));
    let run = h.finish(&run.id).await;
    assert_eq!(run.status, RunStatus::Completed);
    let p = h.projection().await;
    let tool = p
        .turn_items
        .iter()
        .find(|i| matches!(i.kind, TurnItemKind::ToolCall { .. }))
        .unwrap();
    assert_eq!(tool.status, TurnItemStatus::Completed);
    assert!(matches!(
        &tool.kind,
        TurnItemKind::ToolCall { tool, output: Some(out), .. }
            if tool == "command" && out == "ran: touch approved.txt (accept)"
    ));
    // A second answer is refused: the request is no longer pending.
    let again = h.answer(&request.id, ApprovalDecision::Deny).await;
    assert!(again.is_err());
}

#[tokio::test]
async fn codex_denied_command_and_always_allowed_mcp_tool_call() {
    let h = harness(Duration::from_secs(60)).await;
    let run = h
        .exec
        .start_run(
            &h.thread.id,
            script(r#"[{"approve_command":"rm -rf /"},{"mcp_tool":"whoami"},{"text":"ok"}]"#),
        )
        .await
        .unwrap();
    let deny = pending_request(&h).await;
    h.exec
        .respond_to_request(
            &h.thread.id,
            &deny.id,
            RequestAnswer {
                decision: ApprovalDecision::Deny,
                message: Some("not that".into()),
            },
        )
        .await
        .unwrap();
    let mcp = pending_request(&h).await;
    assert_ne!(mcp.id, deny.id);
    assert_eq!(
        mcp.tool_approval.as_ref().unwrap().tool,
        "mcp__knife__whoami"
    );
    h.answer(&mcp.id, ApprovalDecision::AllowAlways)
        .await
        .unwrap();
    let run = h.finish(&run.id).await;
    assert_eq!(run.status, RunStatus::Completed);
    let p = h.projection().await;
    let tools: Vec<_> = p
        .turn_items
        .iter()
        .filter_map(|i| match &i.kind {
            TurnItemKind::ToolCall {
                tool,
                output,
                error,
                ..
            } => Some((tool.clone(), i.status, output.clone(), error.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(tools.len(), 2, "{tools:?}");
    assert_eq!(tools[0].0, "command");
    assert_eq!(tools[0].1, TurnItemStatus::Failed);
    assert_eq!(
        tools[0].3.as_deref(),
        Some("the user declined this command")
    );
    assert_eq!(tools[1].0, "mcp__knife__whoami");
    assert_eq!(tools[1].2.as_deref(), Some("called whoami"));
    // What codex got: decline, then accept with the session-wide persistence hint.
    let answers: Vec<Value> = h
        .sent()
        .into_iter()
        .filter(|m| m.get("result").is_some())
        .map(|m| m["result"].clone())
        .collect();
    assert_eq!(answers[0], serde_json::json!({"decision": "decline"}));
    assert_eq!(answers[1]["action"], "accept");
    assert_eq!(answers[1]["_meta"]["persist"], "session");
}

#[tokio::test]
async fn codex_interrupt_ends_the_turn_interrupted() {
    let h = harness(Duration::from_secs(60)).await;
    let run = h
        .exec
        .start_run(
            &h.thread.id,
            script(r#"[{"text":"working on it"},{"wait_interrupt":true}]"#),
        )
        .await
        .unwrap();
    h.until("the streamed text", |p| {
        p.turn_items.iter().any(|i| {
            matches!(&i.kind, TurnItemKind::AssistantMessage { text, .. } if text == "working on it")
        })
    })
    .await;
    h.exec
        .interrupt(&h.thread.id, InterruptReason::User)
        .await
        .unwrap();
    let run = h.finish(&run.id).await;
    assert_eq!(run.status, RunStatus::Interrupted);
    let interrupts = h.sent_methods("turn/interrupt");
    assert_eq!(interrupts.len(), 1);
    let p = h.projection().await;
    let turn = p
        .provider_turns
        .iter()
        .find(|t| t.run_id == run.id)
        .unwrap();
    assert_eq!(turn.status, ProviderTurnStatus::Interrupted);
    assert!(
        interrupts[0]["params"]["turnId"]
            .as_str()
            .unwrap()
            .starts_with("turn-")
    );
    // The session survives an interrupt: the next run uses the same process.
    let next = h.run("next".into()).await;
    assert_eq!(next.status, RunStatus::Completed);
    assert_eq!(h.sent_methods("initialize").len(), 1);
}

/// A codex turn that ignores `turn/interrupt`: the run ends interrupted after the
/// grace (the shared process stays), and the thread's next run is not refused because
/// the driver still held the abandoned turn; that turn is recorded interrupted.
#[tokio::test]
async fn codex_a_turn_deaf_to_interrupt_does_not_wedge_the_thread() {
    let mut h = harness(Duration::from_secs(60)).await;
    let (exec, _) = service_with_grace(
        &h.store,
        &h.codex_home,
        Duration::from_secs(60),
        Duration::from_millis(300),
    );
    h.exec = exec;
    let run = h
        .exec
        .start_run(
            &h.thread.id,
            script(r#"[{"text":"working on it"},{"deaf":true}]"#),
        )
        .await
        .unwrap();
    h.until("the streamed text", |p| {
        p.turn_items.iter().any(|i| {
            matches!(&i.kind, TurnItemKind::AssistantMessage { text, .. } if text == "working on it")
        })
    })
    .await;
    h.exec
        .interrupt(&h.thread.id, InterruptReason::User)
        .await
        .unwrap();
    let run = h.finish(&run.id).await;
    assert_eq!(run.status, RunStatus::Interrupted);
    let next = h.run("next".into()).await;
    assert_eq!(next.status, RunStatus::Completed, "{:?}", next.error);
    assert_eq!(h.sent_methods("initialize").len(), 1, "same process");
    let p = h.projection().await;
    let old = p
        .provider_turns
        .iter()
        .find(|t| t.run_id == run.id)
        .unwrap();
    assert_eq!(old.status, ProviderTurnStatus::Interrupted);
    assert_eq!(assistant_texts(&p, &next.id)[0].0, "Hello from fake codex.");
}

/// Stop while codex waits on an approval: knife answers the approval `cancel` before it
/// sends `turn/interrupt` (as the ACP driver answers `cancelled` before
/// `session/cancel`), so codex is not left waiting on a request nobody will answer.
#[tokio::test]
async fn codex_stop_while_an_approval_waits_answers_it_cancel_before_turn_interrupt() {
    let h = harness(Duration::from_secs(60)).await;
    let run = h
        .exec
        .start_run(
            &h.thread.id,
            script(r#"[{"approve_command":"make deploy"},{"wait_interrupt":true}]"#),
        )
        .await
        .unwrap();
    let request = pending_request(&h).await;
    h.exec
        .interrupt(&h.thread.id, InterruptReason::User)
        .await
        .unwrap();
    let run = h.finish(&run.id).await;
    assert_eq!(run.status, RunStatus::Interrupted);
    let sent = h.sent();
    let answer = sent
        .iter()
        .position(|m| m.get("method").is_none() && m["result"].get("decision").is_some())
        .expect("knife never answered codex's approval request");
    assert_eq!(
        sent[answer]["result"]["decision"], "cancel",
        "{}",
        sent[answer]
    );
    let interrupt = sent
        .iter()
        .position(|m| m["method"] == "turn/interrupt")
        .expect("knife sent no turn/interrupt");
    assert!(
        answer < interrupt,
        "the approval was answered after turn/interrupt: {sent:?}"
    );
    let p = h.projection().await;
    let settled = p
        .runtime_requests
        .iter()
        .find(|r| r.id == request.id)
        .unwrap();
    assert_eq!(settled.status, RuntimeRequestStatus::Cancelled);
}

#[tokio::test]
async fn codex_mgr_12_detach_unloads_the_native_thread_and_keeps_the_runtime() {
    let h = harness(Duration::from_secs(60)).await;
    let run = h.run("hello".into()).await;
    assert_eq!(run.status, RunStatus::Completed);
    let native = h.projection().await.provider_threads[0]
        .native_id
        .clone()
        .unwrap();
    h.exec
        .manager()
        .detach(&session_id(), &h.thread.id, None, false)
        .await
        .unwrap();
    let unsubscribes = h.sent_methods("thread/unsubscribe");
    assert_eq!(unsubscribes.len(), 1);
    assert_eq!(unsubscribes[0]["params"]["threadId"], native.as_str());
    assert!(
        h.exec.manager().is_live(&session_id()),
        "the shared runtime stays up"
    );
    let p = h
        .until("the provider thread unloaded", |p| {
            p.provider_threads[0].status == ProviderThreadStatus::NotLoaded
        })
        .await;
    assert_eq!(
        p.provider_threads[0].native_id.as_deref(),
        Some(native.as_str())
    );
    // The next run reattaches and resumes the same codex thread.
    let again = h.run("back".into()).await;
    assert_eq!(again.status, RunStatus::Completed);
    let resumes = h.sent_methods("thread/resume");
    assert_eq!(resumes.len(), 1);
    assert_eq!(resumes[0]["params"]["threadId"], native.as_str());
    assert_eq!(h.sent_methods("thread/start").len(), 1);
}

#[tokio::test]
async fn codex_mgr_10_threads_of_two_projects_share_one_process_with_their_own_cwd_and_bearer() {
    let h = harness(Duration::from_secs(60)).await;
    let clock: SharedClock = Arc::new(SystemClock);
    let other_root = h.dir.path().join("other-project");
    std::fs::create_dir(&other_root).unwrap();
    let (other_project, _) = create_project(
        &h.store,
        clock.as_ref(),
        CreateProjectRequest {
            root: other_root.display().to_string(),
            name: None,
        },
    )
    .await
    .unwrap();
    let other = create_thread(
        &h.store,
        clock.as_ref(),
        CreateThreadRequest {
            project_id: other_project.id,
            title: None,
            provider_instance_id: None,
            model: None,
            parent_thread_id: None,
            worktree: None,
        },
        &instance(),
        std::slice::from_ref(&instance()),
    )
    .await
    .unwrap();
    assert_eq!(
        h.run("first project".into()).await.status,
        RunStatus::Completed
    );
    let run = h
        .exec
        .start_run(&other.id, "second project".into())
        .await
        .unwrap();
    tokio::time::timeout(WAIT, h.exec.await_idle(&other.id))
        .await
        .unwrap();
    let p = h.store.thread_projection(&other.id).await.unwrap().unwrap();
    let run = p.runs.iter().find(|r| r.id == run.id).unwrap();
    assert_eq!(run.status, RunStatus::Completed, "{:?}", run.error);
    assert_eq!(
        h.sent_methods("initialize").len(),
        1,
        "one app-server serves both"
    );
    let starts = h.sent_methods("thread/start");
    assert_eq!(starts.len(), 2);
    assert_eq!(starts[0]["params"]["cwd"], h.root.display().to_string());
    let other_root = std::fs::canonicalize(&other_root).unwrap();
    assert_eq!(starts[1]["params"]["cwd"], other_root.display().to_string());
    let bearer = |i: usize| {
        starts[i]["params"]["config"]["mcp_servers"]["knife"]["http_headers"]["Authorization"]
            .as_str()
            .unwrap()
            .strip_prefix("Bearer ")
            .unwrap()
            .to_owned()
    };
    assert_eq!(
        h.registry.resolve(&bearer(0)).unwrap().thread_id,
        h.thread.id
    );
    assert_eq!(h.registry.resolve(&bearer(1)).unwrap().thread_id, other.id);
}

#[tokio::test]
async fn codex_streamed_text_is_persisted_in_windows_not_per_delta() {
    let h = harness(Duration::from_secs(60)).await;
    // 150 words, one delta each, 2 ms apart: about 300 ms of streaming.
    let words: Vec<String> = (0..150).map(|i| format!("w{i}")).collect();
    let text = words.join(" ");
    let run = h.run(script(&format!(r#"[{{"text":"{text}"}}]"#))).await;
    assert_eq!(run.status, RunStatus::Completed);
    let p = h.projection().await;
    assert_eq!(
        assistant_texts(&p, &run.id),
        vec![(text, TurnItemStatus::Completed)]
    );
    let filter = knife_store::StreamFilter {
        thread_id: Some(h.thread.id.clone()),
        after: 0,
        event_type: Some("turn-item.updated".into()),
    };
    let updates = h.store.read_events(&filter, 10_000).await.unwrap();
    let assistant_updates = updates
        .iter()
        .filter(|e| {
            matches!(&e.event.body, knife_protocol::EventBody::TurnItemUpdated(i)
                if matches!(i.kind, TurnItemKind::AssistantMessage { .. }))
        })
        .count();
    assert!(
        (2..60).contains(&assistant_updates),
        "{assistant_updates} snapshots for 150 deltas"
    );
}

#[tokio::test]
async fn codex_file_change_approval_names_the_paths() {
    let h = harness(Duration::from_secs(60)).await;
    let run = h
        .exec
        .start_run(&h.thread.id, script(r#"[{"approve_patch":"src/lib.rs"}]"#))
        .await
        .unwrap();
    let request = pending_request(&h).await;
    assert_eq!(request.kind, RuntimeRequestKind::FileChange);
    assert_eq!(request.prompt.as_deref(), Some("file_change: src/lib.rs"));
    h.answer(&request.id, ApprovalDecision::AllowAlways)
        .await
        .unwrap();
    let run = h.finish(&run.id).await;
    assert_eq!(run.status, RunStatus::Completed);
    let p = h.projection().await;
    let tool = p
        .turn_items
        .iter()
        .find(|i| matches!(i.kind, TurnItemKind::ToolCall { .. }))
        .unwrap();
    assert_eq!(tool.status, TurnItemStatus::Completed);
    let answer = h
        .sent()
        .into_iter()
        .find(|m| m.get("result").is_some())
        .unwrap();
    assert_eq!(answer["result"]["decision"], "acceptForSession");
}

#[tokio::test]
async fn chg_05_codex_file_change_approvals_carry_codex_diff() {
    let h = harness(Duration::from_secs(60)).await;
    let run = h
        .exec
        .start_run(&h.thread.id, script(r#"[{"approve_patch":"src/lib.rs"}]"#))
        .await
        .unwrap();
    let request = pending_request(&h).await;
    let detail = request.tool_approval.clone().unwrap();
    // The fake's fileChange item carries `@@ -1 +1 @@\n-a\n+b\n` for the path.
    assert_eq!(
        detail.diff.as_deref(),
        Some("--- a/src/lib.rs\n+++ b/src/lib.rs\n@@ -1 +1 @@\n-a\n+b\n")
    );
    h.answer(&request.id, ApprovalDecision::Deny).await.unwrap();
    h.finish(&run.id).await;
}

#[tokio::test]
async fn chg_09_codex_forks_natively_with_thread_fork_after_the_run() {
    let h = harness(Duration::from_secs(60)).await;
    let first = h.run(script(r#"[{"text": "one"}]"#)).await;
    h.run(script(r#"[{"text": "two"}]"#)).await;
    let source = h.projection().await;
    let native_turn = source
        .provider_turns
        .iter()
        .find(|t| t.run_id == first.id)
        .and_then(|t| t.native_turn_id.clone())
        .expect("codex's turn id is recorded on the provider turn");
    let source_native = source.provider_threads[0].native_id.clone().unwrap();

    let fork = h
        .exec
        .fork_thread(
            &h.thread.id,
            ForkThreadRequest {
                after_run: Some(1),
                title: None,
            },
        )
        .await
        .unwrap();
    assert_eq!(fork.run_count, 1);
    let forks = h.sent_methods("thread/fork");
    assert_eq!(forks.len(), 1, "{forks:?}");
    assert_eq!(forks[0]["params"]["threadId"], source_native.as_str());
    assert_eq!(forks[0]["params"]["lastTurnId"], native_turn.as_str());
    let forked = h.store.thread_projection(&fork.id).await.unwrap().unwrap();
    let fork_native = forked.provider_threads[0].native_id.clone().unwrap();
    assert_ne!(fork_native, source_native);
    assert_eq!(forked.runs.len(), 1);
    // The source is untouched.
    let after = h.projection().await;
    assert_eq!(after.runs, source.runs);
    assert_eq!(after.turn_items, source.turn_items);

    // The fork's next run continues codex's forked thread.
    let run = h
        .exec
        .start_run(&fork.id, script(r#"[{"text": "three"}]"#))
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(10), h.exec.await_idle(&fork.id))
        .await
        .unwrap();
    assert_eq!(run.ordinal, 2);
    let resumed: Vec<Value> = h.sent_methods("thread/resume");
    assert!(
        resumed
            .iter()
            .any(|m| m["params"]["threadId"] == fork_native.as_str()),
        "{resumed:?}"
    );
    let turns = h.sent_methods("turn/start");
    assert_eq!(
        turns.last().unwrap()["params"]["threadId"],
        fork_native.as_str()
    );
    let run = h.store.get_run(&run.id).await.unwrap().unwrap();
    assert_eq!(run.status, RunStatus::Completed);
}
