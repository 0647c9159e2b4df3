//! Cancellation: PROC-08, PROC-09, PROC-13 (no tool runs after an abort).

use std::sync::atomic::Ordering;

use crate::common::*;
use crate::support::*;
use knife_llm::*;
use knife_protocol::*;
use knife_runtime::InterruptReason;
use tokio::sync::mpsc;

// ---------------------------------------------------------------- PROC-08

#[tokio::test(start_paused = true)]
async fn proc_08_cancel_marks_pending_and_running_tools_aborted_with_an_end_time() {
    // Pending: the complete call arrived, the model's stream still hangs.
    let (tx, rx) = mpsc::unbounded_channel();
    let (tools, runs) = probe_tools(false);
    let mut h = open(
        FakeLlm::with(vec![Script::Gate(rx)], None),
        |_| {},
        Some(tools),
    )
    .await;
    h.session.start_turn(turn(1, "hi", vec![])).await.unwrap();
    tx.send(Ok(LlmEvent::ToolInputStart {
        id: "c1".into(),
        name: "probe".into(),
    }))
    .unwrap();
    tx.send(Ok(LlmEvent::ToolCall {
        id: "c1".into(),
        name: "probe".into(),
        arguments: r#"{"cmd":"pwd"}"#.into(),
    }))
    .unwrap();
    let mut seen = until(&mut h.events, |e| {
        is_item(e, |i| {
            i.status == TurnItemStatus::Pending
                && matches!(&i.kind, TurnItemKind::ToolCall { input, .. } if input["cmd"] == "pwd")
        })
    })
    .await;
    h.session
        .interrupt_turn(&ThreadId::from("thread_1"), InterruptReason::User)
        .await
        .unwrap();
    seen.extend(collect_turn(&mut h.events).await);
    assert_nothing_pending(&seen);
    assert_tool_aborted(&final_items(&seen)[0]);
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    drop(tx);

    // Running: the tool executes and never returns.
    let (tools, runs) = probe_tools(true);
    let llm = FakeLlm::new(vec![tool_step("c2", "probe", "{}")]);
    let mut h = open(llm, |_| {}, Some(tools)).await;
    h.session.start_turn(turn(1, "hi", vec![])).await.unwrap();
    let mut seen = until(&mut h.events, |e| {
        is_item(e, |i| i.status == TurnItemStatus::Running)
    })
    .await;
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    h.session
        .interrupt_turn(&ThreadId::from("thread_1"), InterruptReason::User)
        .await
        .unwrap();
    seen.extend(collect_turn(&mut h.events).await);
    assert_nothing_pending(&seen);
    assert_tool_aborted(&final_items(&seen)[0]);
}

// ---------------------------------------------------------------- PROC-09

async fn assert_aborted_outcome(events: &[AdapterEvent]) {
    assert!(matches!(outcome(events).0, TurnOutcome::Interrupted { .. }));
    let turn = last_turn(events);
    assert_eq!(turn.status, ProviderTurnStatus::Interrupted);
    assert_eq!(turn.error.unwrap().name, "MessageAbortedError");
    let raised = errors(events);
    assert_eq!(raised.len(), 1);
    assert_eq!(raised[0].name, "MessageAbortedError");
    assert_eq!(statuses(events).last(), Some(&AgentStatus::Idle));
    assert_nothing_pending(events);
}

#[tokio::test(start_paused = true)]
async fn proc_09_plain_cancellation_mid_stream_records_message_aborted_error() {
    let (tx, rx) = mpsc::unbounded_channel();
    let mut h = open(FakeLlm::with(vec![Script::Gate(rx)], None), |_| {}, None).await;
    h.session.start_turn(turn(1, "hi", vec![])).await.unwrap();
    tx.send(Ok(LlmEvent::TextStart { id: "t".into() })).unwrap();
    tx.send(Ok(LlmEvent::TextDelta {
        id: "t".into(),
        text: "Working".into(),
    }))
    .unwrap();
    let mut seen = until(&mut h.events, |e| {
        is_item(
            e,
            |i| matches!(&i.kind, TurnItemKind::AssistantMessage { text, .. } if text == "Working"),
        )
    })
    .await;
    // No interrupt or close call: the session (and with it the turn task's
    // token) is simply dropped.
    let Harness {
        session,
        mut events,
        _project,
    } = h;
    drop(session);
    seen.extend(collect_turn(&mut events).await);
    assert_aborted_outcome(&seen).await;
    drop(tx);
}

#[tokio::test(start_paused = true)]
async fn proc_09_explicit_interrupt_records_message_aborted_error() {
    let (tx, rx) = mpsc::unbounded_channel();
    let mut h = open(FakeLlm::with(vec![Script::Gate(rx)], None), |_| {}, None).await;
    h.session.start_turn(turn(1, "hi", vec![])).await.unwrap();
    tx.send(Ok(LlmEvent::ReasoningStart { id: "r".into() }))
        .unwrap();
    let mut seen = until(&mut h.events, |e| is_item(e, |_| true)).await;
    h.session
        .interrupt_turn(&ThreadId::from("thread_1"), InterruptReason::User)
        .await
        .unwrap();
    seen.extend(collect_turn(&mut h.events).await);
    assert_aborted_outcome(&seen).await;
}
