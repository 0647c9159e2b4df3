//! Interactive approvals of the built-in agent (docs/2026-11-29-approvals.md): an `ask` verdict
//! persists a runtime request with its node and a waiting transcript item, the
//! turn waits, and the answer given through `respond_to_runtime_request` runs or
//! refuses the call. Paused time: nothing here sleeps for real.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::fs;
use std::sync::Arc;

use common::*;
use futures::StreamExt;
use knife_agent::ToolPolicy;
use knife_llm::ChatMessage;
use knife_protocol::*;
use knife_runtime::InterruptReason;

/// A harness whose policy asks the user (no automatic gate).
async fn asking(llm: Arc<FakeLlm>) -> Harness {
    open(
        llm,
        |c| c.tool_policy = Arc::new(ToolPolicy::default()),
        None,
    )
    .await
}

/// Reads events until a pending runtime request appears; returns it and the events.
async fn until_request(h: &mut Harness) -> (RuntimeRequest, Vec<AdapterEvent>) {
    let mut seen = Vec::new();
    loop {
        let event = h.events.next().await.expect("stream ended").unwrap();
        assert!(
            !matches!(event, AdapterEvent::TurnTerminal { .. }),
            "the turn ended without asking: {seen:#?}"
        );
        let request = match &event {
            AdapterEvent::RuntimeRequestUpdated(r) if r.status == RuntimeRequestStatus::Pending => {
                Some(r.clone())
            }
            _ => None,
        };
        seen.push(event);
        if let Some(r) = request {
            return (r, seen);
        }
    }
}

fn answer(decision: ApprovalDecision, message: Option<&str>) -> RequestAnswer {
    RequestAnswer {
        decision,
        message: message.map(str::to_owned),
    }
}

fn last_request(events: &[AdapterEvent]) -> RuntimeRequest {
    events
        .iter()
        .rev()
        .find_map(|e| match e {
            AdapterEvent::RuntimeRequestUpdated(r) => Some(r.clone()),
            _ => None,
        })
        .expect("no runtime request")
}

fn last_node(events: &[AdapterEvent], id: &NodeId) -> Node {
    events
        .iter()
        .rev()
        .find_map(|e| match e {
            AdapterEvent::NodeUpdated(n) if &n.id == id => Some(n.clone()),
            _ => None,
        })
        .expect("no node")
}

fn item_by_id(events: &[AdapterEvent], id: &TurnItemId) -> TurnItem {
    snapshots(events)
        .into_iter()
        .rev()
        .find(|i| &i.id == id)
        .expect("no such item")
}

fn tool_item(events: &[AdapterEvent]) -> TurnItem {
    snapshots(events)
        .into_iter()
        .rev()
        .find(|i| matches!(i.kind, TurnItemKind::ToolCall { .. }))
        .expect("no tool item")
}

fn item_id(request: &RuntimeRequest) -> TurnItemId {
    TurnItemId(format!("item:{}", request.id))
}

fn tool_contents(llm: &FakeLlm, call: usize) -> Vec<String> {
    llm.requests()[call]
        .messages
        .iter()
        .filter_map(|m| match m {
            ChatMessage::Tool { content, .. } => Some(content.clone()),
            _ => None,
        })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn approvals_ask_persists_a_pending_request_and_the_turn_waits() {
    let llm = FakeLlm::new(vec![
        tool_step("call_1", "write", r#"{"path":"a.txt","content":"hi"}"#),
        text_step(&["written"]),
    ]);
    let mut h = asking(Arc::clone(&llm)).await;
    h.session.start_turn(turn(1, "go", vec![])).await.unwrap();
    let (request, seen) = until_request(&mut h).await;

    assert_eq!(request.kind, RuntimeRequestKind::FileChange);
    assert_eq!(request.thread_id, ThreadId::from("thread_1"));
    assert_eq!(
        request.response_capability,
        ResponseCapability::Live {
            provider_session_id: ProviderSessionId::from("psession_1")
        }
    );
    let detail = request.tool_approval.clone().unwrap();
    assert_eq!(
        (
            detail.tool.as_str(),
            detail.subject.as_str(),
            detail.rule.as_str()
        ),
        ("write", "a.txt", "the default rule")
    );
    assert_eq!(detail.input["content"], "hi");
    let node = last_node(&seen, &request.node_id);
    assert_eq!(
        (node.kind, node.status),
        (NodeKind::ApprovalRequest, NodeStatus::Waiting)
    );
    assert_eq!(node.runtime_request_id.as_ref(), Some(&request.id));
    let item = item_by_id(&seen, &item_id(&request));
    assert_eq!(item.status, TurnItemStatus::Waiting);
    assert!(
        matches!(&item.kind, TurnItemKind::Approval { request_id, tool, decision: None, .. }
        if request_id == &request.id && tool == "write")
    );
    assert_eq!(tool_item(&seen).status, TurnItemStatus::Waiting);

    // The turn waits: time passes, nothing runs, the model is not called again.
    tokio::time::advance(std::time::Duration::from_secs(3600)).await;
    assert!(!h._project.path().join("a.txt").exists());
    assert_eq!(llm.requests().len(), 1);
    h.session
        .interrupt_turn(&ThreadId::from("thread_1"), InterruptReason::User)
        .await
        .unwrap();
    collect_turn(&mut h.events).await;
}

#[tokio::test(start_paused = true)]
async fn approvals_allow_once_runs_the_tool_and_resolves_the_request() {
    let llm = FakeLlm::new(vec![
        tool_step("call_1", "write", r#"{"path":"a.txt","content":"hi"}"#),
        tool_step("call_2", "write", r#"{"path":"a.txt","content":"again"}"#),
        text_step(&["written"]),
    ]);
    let mut h = asking(Arc::clone(&llm)).await;
    h.session.start_turn(turn(1, "go", vec![])).await.unwrap();
    let (first, _) = until_request(&mut h).await;
    h.session
        .respond_to_runtime_request(&first.id, answer(ApprovalDecision::AllowOnce, None))
        .await
        .unwrap();
    // allow_once: the same call asks again.
    let (second, seen) = until_request(&mut h).await;
    assert_ne!(first.id, second.id);
    assert_eq!(
        fs::read_to_string(h._project.path().join("a.txt")).unwrap(),
        "hi"
    );
    let resolved = seen
        .iter()
        .find_map(|e| match e {
            AdapterEvent::RuntimeRequestUpdated(r) if r.id == first.id => Some(r.clone()),
            _ => None,
        })
        .unwrap();
    assert_eq!(resolved.status, RuntimeRequestStatus::Resolved);
    assert_eq!(resolved.decision, Some(ApprovalDecision::AllowOnce));
    assert!(resolved.resolved_at.is_some());
    assert_eq!(
        last_node(&seen, &first.node_id).status,
        NodeStatus::Completed
    );
    let item = item_by_id(&seen, &item_id(&first));
    assert_eq!(item.status, TurnItemStatus::Completed);
    assert!(matches!(
        item.kind,
        TurnItemKind::Approval {
            decision: Some(ApprovalDecision::AllowOnce),
            ..
        }
    ));

    // Answering the same request again: not pending any more.
    let err = h
        .session
        .respond_to_runtime_request(&first.id, answer(ApprovalDecision::AllowOnce, None))
        .await
        .unwrap_err();
    assert!(matches!(
        err,
        knife_runtime::AdapterError::RequestNotPending(_)
    ));
    h.session
        .respond_to_runtime_request(&second.id, answer(ApprovalDecision::AllowOnce, None))
        .await
        .unwrap();
    let events = collect_turn(&mut h.events).await;
    assert_eq!(outcome(&events).0, TurnOutcome::Completed);
    assert_nothing_pending(&events);
    assert_eq!(
        fs::read_to_string(h._project.path().join("a.txt")).unwrap(),
        "again"
    );
}

#[tokio::test(start_paused = true)]
async fn approvals_allow_always_runs_and_the_next_matching_call_does_not_ask() {
    let llm = FakeLlm::new(vec![
        tool_step("call_1", "write", r#"{"path":"log.txt","content":"one"}"#),
        tool_step("call_2", "write", r#"{"path":"./log.txt","content":"two"}"#),
        tool_step("call_3", "write", r#"{"path":"other.txt","content":"x"}"#),
        text_step(&["done"]),
    ]);
    let mut h = asking(Arc::clone(&llm)).await;
    h.session.start_turn(turn(1, "go", vec![])).await.unwrap();
    let (first, _) = until_request(&mut h).await;
    assert_eq!(first.prompt.as_deref(), Some("write: log.txt"));
    h.session
        .respond_to_runtime_request(&first.id, answer(ApprovalDecision::AllowAlways, None))
        .await
        .unwrap();
    // call_2 (same file) runs without asking; call_3 (another file) asks.
    let (third, seen) = until_request(&mut h).await;
    let asked: Vec<_> = seen
        .iter()
        .filter_map(|e| match e {
            AdapterEvent::RuntimeRequestUpdated(r) if r.status == RuntimeRequestStatus::Pending => {
                Some(r.tool_approval.clone().unwrap().call_id)
            }
            _ => None,
        })
        .collect();
    assert_eq!(asked, ["call_3"]);
    assert_eq!(
        fs::read_to_string(h._project.path().join("log.txt")).unwrap(),
        "two"
    );
    h.session
        .respond_to_runtime_request(&third.id, answer(ApprovalDecision::Deny, None))
        .await
        .unwrap();
    let events = collect_turn(&mut h.events).await;
    assert_eq!(outcome(&events).0, TurnOutcome::Completed);
    assert_eq!(last_request(&events).decision, Some(ApprovalDecision::Deny));
    assert!(!h._project.path().join("other.txt").exists());
}

#[tokio::test(start_paused = true)]
async fn approvals_deny_returns_the_denial_with_the_message_and_does_not_run() {
    let llm = FakeLlm::new(vec![
        tool_step("call_1", "bash", r#"{"command":"touch nope.txt"}"#),
        text_step(&["ok, I will not"]),
    ]);
    let mut h = asking(Arc::clone(&llm)).await;
    h.session.start_turn(turn(1, "go", vec![])).await.unwrap();
    let (request, _) = until_request(&mut h).await;
    assert_eq!(request.kind, RuntimeRequestKind::Command);
    assert_eq!(request.prompt.as_deref(), Some("bash: touch nope.txt"));
    h.session
        .respond_to_runtime_request(
            &request.id,
            answer(ApprovalDecision::Deny, Some("use the Makefile instead")),
        )
        .await
        .unwrap();
    let events = collect_turn(&mut h.events).await;
    assert_eq!(outcome(&events).0, TurnOutcome::Completed);
    assert_nothing_pending(&events);
    assert!(!h._project.path().join("nope.txt").exists());
    let resolved = last_request(&events);
    assert_eq!(resolved.status, RuntimeRequestStatus::Resolved);
    assert_eq!(resolved.decision, Some(ApprovalDecision::Deny));
    assert_eq!(
        resolved.tool_approval.unwrap().message.as_deref(),
        Some("use the Makefile instead")
    );
    let tool = tool_item(&events);
    assert_eq!(tool.status, TurnItemStatus::Failed);
    let expected = "the user denied this bash call: use the Makefile instead; do not retry it \
                    unchanged — ask the user how to proceed";
    assert!(
        matches!(&tool.kind, TurnItemKind::ToolCall { error: Some(e), .. } if e == expected),
        "{tool:?}"
    );
    assert_eq!(tool_contents(&llm, 1), [format!("Error: {expected}")]);
}

#[tokio::test(start_paused = true)]
async fn approvals_interrupt_while_waiting_cancels_the_request_and_aborts_the_tool() {
    let llm = FakeLlm::new(vec![
        tool_step(
            "call_1",
            "edit",
            r#"{"path":"src/main.rs","old_string":"hello","new_string":"bye"}"#,
        ),
        text_step(&["never"]),
    ]);
    let mut h = asking(Arc::clone(&llm)).await;
    h.session.start_turn(turn(1, "go", vec![])).await.unwrap();
    let (request, _) = until_request(&mut h).await;
    h.session
        .interrupt_turn(&ThreadId::from("thread_1"), InterruptReason::User)
        .await
        .unwrap();
    let events = collect_turn(&mut h.events).await;
    assert!(matches!(
        outcome(&events).0,
        TurnOutcome::Interrupted { .. }
    ));
    assert_nothing_pending(&events);
    let settled = last_request(&events);
    assert_eq!(settled.id, request.id);
    assert_eq!(settled.status, RuntimeRequestStatus::Cancelled);
    assert!(settled.resolved_at.is_some());
    assert_eq!(
        last_node(&events, &request.node_id).status,
        NodeStatus::Cancelled
    );
    assert_eq!(
        item_by_id(&events, &item_id(&request)).status,
        TurnItemStatus::Cancelled
    );
    let tool = tool_item(&events);
    assert_eq!(tool.status, TurnItemStatus::Failed);
    assert!(
        matches!(&tool.kind, TurnItemKind::ToolCall { error: Some(e), .. }
        if e == "Tool execution aborted")
    );
    assert!(
        fs::read_to_string(h._project.path().join("src/main.rs"))
            .unwrap()
            .contains("hello")
    );
    // A late answer finds nothing waiting.
    assert!(
        h.session
            .respond_to_runtime_request(&request.id, answer(ApprovalDecision::AllowOnce, None))
            .await
            .is_err()
    );
    assert_eq!(llm.requests().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn approvals_per_project_rules_win_over_the_global_ones() {
    use knife_agent::permissions::{PermissionAction, PermissionRule, PermissionRules};
    let project = tempfile::tempdir().unwrap();
    let root = fs::canonicalize(project.path()).unwrap();
    let global = PermissionRules::new(vec![PermissionRule::new(
        "write",
        "*",
        PermissionAction::Deny,
    )])
    .unwrap();
    let here = global
        .then(vec![PermissionRule::new(
            "write",
            "*.txt",
            PermissionAction::Allow,
        )])
        .unwrap();
    let policy = ToolPolicy {
        permissions: global,
        project_permissions: vec![(root.clone(), here)],
        ..ToolPolicy::default()
    };
    let other = tempfile::tempdir().unwrap();
    // In the project: allowed without asking. Elsewhere: the global deny.
    for (dir, ran) in [(&root, true), (&other.path().to_path_buf(), false)] {
        let llm = FakeLlm::new(vec![
            tool_step("call_1", "write", r#"{"path":"out.txt","content":"hi"}"#),
            text_step(&["done"]),
        ]);
        let mut config = knife_agent::BuiltinAgentConfig::new(
            ProviderInstanceId::from("local"),
            "m",
            llm as Arc<dyn knife_llm::LlmClient>,
        );
        config.tool_policy = Arc::new(policy.clone());
        let adapter = knife_agent::BuiltinAgentAdapter::new(config);
        let session =
            knife_runtime::ProviderAdapter::open(&adapter, open_input(dir), Default::default())
                .await
                .unwrap();
        let mut events = session.take_events().unwrap();
        session.start_turn(turn(1, "go", vec![])).await.unwrap();
        let events = collect_turn(&mut events).await;
        assert_eq!(outcome(&events).0, TurnOutcome::Completed);
        assert_eq!(dir.join("out.txt").exists(), ran, "{}", dir.display());
    }
}

#[tokio::test(start_paused = true)]
async fn chg_05_write_and_edit_approvals_carry_the_proposed_change_as_a_unified_diff() {
    let llm = FakeLlm::new(vec![
        tool_step(
            "call_1",
            "edit",
            r#"{"path":"src/lib.rs","old_string":"two","new_string":"2"}"#,
        ),
        tool_step(
            "call_2",
            "write",
            r#"{"path":"notes.md","content":"new file\n"}"#,
        ),
        text_step(&["done"]),
    ]);
    let mut h = asking(Arc::clone(&llm)).await;
    fs::create_dir_all(h._project.path().join("src")).unwrap();
    fs::write(h._project.path().join("src/lib.rs"), "one\ntwo\nthree\n").unwrap();
    h.session.start_turn(turn(1, "go", vec![])).await.unwrap();

    let (edit, _) = until_request(&mut h).await;
    let diff = edit.tool_approval.clone().unwrap().diff.unwrap();
    assert_eq!(
        diff,
        "--- a/src/lib.rs\n+++ b/src/lib.rs\n@@ -1,3 +1,3 @@\n one\n-two\n+2\n three\n"
    );
    // The file is untouched until the answer.
    assert_eq!(
        fs::read_to_string(h._project.path().join("src/lib.rs")).unwrap(),
        "one\ntwo\nthree\n"
    );
    h.session
        .respond_to_runtime_request(&edit.id, answer(ApprovalDecision::AllowOnce, None))
        .await
        .unwrap();

    let (write, _) = until_request(&mut h).await;
    let diff = write.tool_approval.clone().unwrap().diff.unwrap();
    assert!(
        diff.starts_with("--- /dev/null\n+++ b/notes.md\n") && diff.ends_with("+new file\n"),
        "{diff}"
    );
    h.session
        .respond_to_runtime_request(&write.id, answer(ApprovalDecision::Deny, None))
        .await
        .unwrap();
    collect_turn(&mut h.events).await;
    assert_eq!(
        fs::read_to_string(h._project.path().join("src/lib.rs")).unwrap(),
        "one\n2\nthree\n"
    );
}
