//! Unit tests of the one turn recorder (paused time for the text throttle).
#![allow(clippy::unwrap_used, clippy::expect_used)]
use super::*;
use crate::SystemClock;
use serde_json::Value;
use std::sync::Arc;

fn recorder() -> (TurnRecorder, EventReceiver) {
    let (sink, rx) = EventSink::new();
    let run = RunId::from("run:t:1");
    let ids = TurnIds {
        thread_id: ThreadId::from("t"),
        run_id: run.clone(),
        run_ordinal: 1,
        provider_turn_id: ProviderTurnId::for_run(&run, 1),
        provider_session_id: ProviderSessionId::from("s"),
        attempt: 1,
        provider_thread_id: None,
    };
    (TurnRecorder::start(sink, Arc::new(SystemClock), ids), rx)
}

fn drain(rx: &mut EventReceiver) -> Vec<AdapterEvent> {
    let mut out = Vec::new();
    while let Ok(event) = rx.try_recv() {
        out.push(event.unwrap());
    }
    out
}

fn texts(events: &[AdapterEvent]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| match e {
            AdapterEvent::TurnItemUpdated(TurnItem {
                kind: TurnItemKind::AssistantMessage { text, .. },
                ..
            }) => Some(text.clone()),
            _ => None,
        })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn streaming_text_is_throttled_and_flushed() {
    let (mut rec, mut rx) = recorder();
    drain(&mut rx);
    rec.text_delta("m", TextKind::Assistant, "a");
    rec.text_delta("m", TextKind::Assistant, "b");
    rec.text_delta("m", TextKind::Assistant, "c");
    assert_eq!(
        texts(&drain(&mut rx)),
        vec!["a"],
        "the first delta goes out at once"
    );
    assert!(rec.is_dirty());
    rec.flush();
    assert_eq!(texts(&drain(&mut rx)), vec!["abc"]);
    assert!(!rec.is_dirty());
    // After the window a delta goes out at once again; a big one always does.
    tokio::time::advance(FLUSH_INTERVAL).await;
    rec.text_delta("m", TextKind::Assistant, "d");
    rec.text_delta("m", TextKind::Assistant, &"x".repeat(FLUSH_BYTES));
    assert_eq!(texts(&drain(&mut rx)).len(), 2);
    rec.text_done("m", TextKind::Assistant, Some("final"));
    assert_eq!(texts(&drain(&mut rx)), vec!["final"]);
    assert!(!rec.is_dirty());
}

#[tokio::test]
async fn finish_settles_items_and_approvals_then_ends_once() {
    let (mut rec, mut rx) = recorder();
    rec.tool_started(
        "call",
        "call",
        "command",
        serde_json::json!({"command": "ls"}),
    );
    let request = RuntimeRequestId::from("request_1");
    rec.approval_requested(
        &request,
        ApprovalAsk {
            kind: RuntimeRequestKind::Command,
            call_id: "call".into(),
            tool: "command".into(),
            subject: "ls".into(),
            input: Value::Null,
            rule: "test".into(),
            diff: None,
        },
    );
    rec.text_delta("m", TextKind::Assistant, "partial");
    drain(&mut rx);
    rec.finish(TurnOutcome::Interrupted {
        reason: "user".into(),
    });
    rec.finish(TurnOutcome::Completed);
    let events = drain(&mut rx);
    let cancelled = events.iter().any(|e| {
        matches!(e, AdapterEvent::RuntimeRequestUpdated(r)
            if r.id == request && r.status == RuntimeRequestStatus::Cancelled)
    });
    assert!(cancelled, "{events:?}");
    let tool_failed = events.iter().any(|e| {
        matches!(e, AdapterEvent::TurnItemUpdated(i)
            if matches!(&i.kind, TurnItemKind::ToolCall { error: Some(err), .. } if err == "Tool execution aborted"))
    });
    assert!(tool_failed, "{events:?}");
    let terminals: Vec<_> = events
        .iter()
        .filter(|e| matches!(e, AdapterEvent::TurnTerminal { .. }))
        .collect();
    assert_eq!(terminals.len(), 1);
    assert!(matches!(
        terminals[0],
        AdapterEvent::TurnTerminal { outcome: TurnOutcome::Interrupted { reason }, .. } if reason == "user"
    ));
    assert!(matches!(
        events.last(),
        Some(AdapterEvent::TurnTerminal { .. })
    ));
}

#[tokio::test]
async fn a_dropped_recorder_ends_its_turn_aborted() {
    let (rec, mut rx) = recorder();
    drop(rec);
    let events = drain(&mut rx);
    assert!(matches!(
        events.last(),
        Some(AdapterEvent::TurnTerminal { outcome: TurnOutcome::Interrupted { reason }, .. }) if reason == "aborted"
    ));
}
