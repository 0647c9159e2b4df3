//! Unit tests of the built-in agent's recorder side (drop settlement, finish once).
#![allow(clippy::unwrap_used, clippy::expect_used)]
use super::*;
use knife_runtime::SystemClock;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

fn recorder() -> (
    TurnRecorder,
    tokio::sync::mpsc::UnboundedReceiver<Result<AdapterEvent, AdapterError>>,
    Arc<AtomicBool>,
) {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let freed = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&freed);
    let run_id = RunId::from("run:t:1");
    let rec = TurnRecorder::new(
        tx,
        Arc::new(SystemClock),
        TurnIdentity {
            thread_id: ThreadId::from("t"),
            provider_turn_id: ProviderTurnId::for_run(&run_id, 1),
            run_id,
            run_ordinal: 1,
            provider_session_id: ProviderSessionId::from("s"),
            attempt: 1,
            provider_instance_id: ProviderInstanceId::from("mock"),
            model: Some("m".into()),
        },
        Duration::from_millis(50),
        4096,
        Box::new(move || flag.store(true, Ordering::SeqCst)),
    );
    (rec, rx, freed)
}

fn drain(
    rx: &mut tokio::sync::mpsc::UnboundedReceiver<Result<AdapterEvent, AdapterError>>,
) -> Vec<AdapterEvent> {
    let mut out = Vec::new();
    while let Ok(e) = rx.try_recv() {
        out.push(e.unwrap());
    }
    out
}

#[tokio::test(start_paused = true)]
async fn dropping_an_unfinished_recorder_settles_items_and_ends_the_turn() {
    let (mut rec, mut rx, freed) = recorder();
    rec.part_delta(PartKind::Text, "t", "half a sent");
    rec.tool_input_start("c1", "read");
    drop(rec);
    let events = drain(&mut rx);
    assert!(freed.load(Ordering::SeqCst));
    let last_items: Vec<_> = events
        .iter()
        .filter_map(|e| match e {
            AdapterEvent::TurnItemUpdated(i) if i.completed_at.is_some() => Some(i.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(last_items.len(), 2);
    assert_eq!(last_items[0].status, TurnItemStatus::Interrupted);
    assert_eq!(last_items[1].status, TurnItemStatus::Failed);
    assert!(matches!(
        events.last(),
        Some(AdapterEvent::TurnTerminal {
            outcome: TurnOutcome::Interrupted { reason },
            ..
        }) if reason == "aborted"
    ));
}

#[tokio::test(start_paused = true)]
async fn finish_is_idempotent() {
    let (mut rec, mut rx, _) = recorder();
    rec.finish(Ok(()));
    rec.finish(Ok(()));
    drop(rec);
    let terminals = drain(&mut rx)
        .into_iter()
        .filter(|e| matches!(e, AdapterEvent::TurnTerminal { .. }))
        .count();
    assert_eq!(terminals, 1);
}

/// LIVE-02: a `bash` call stopped mid-run settles `failed` with the output it streamed
/// (the user saw it live), and the history replays the error the model was given.
#[tokio::test(start_paused = true)]
async fn live_02_a_tool_call_that_fails_after_streaming_keeps_its_streamed_output() {
    let (mut rec, mut rx, _) = recorder();
    let idx = rec.tool_call("c1", "bash", serde_json::json!({"command": "make"}));
    rec.tool_running(idx);
    rec.tool_output(idx, "compiling a\n");
    rec.tool_output(idx, "compiling b\n");
    rec.tool_finished(idx, &Err(ToolError::Aborted));
    let settled = drain(&mut rx)
        .into_iter()
        .filter_map(|e| match e {
            AdapterEvent::TurnItemUpdated(i) if i.completed_at.is_some() => Some(i),
            _ => None,
        })
        .next_back()
        .expect("the tool item settles");
    assert_eq!(settled.status, TurnItemStatus::Failed);
    let TurnItemKind::ToolCall { output, error, .. } = &settled.kind else {
        panic!("a tool item: {settled:?}");
    };
    assert_eq!(output.as_deref(), Some("compiling a\ncompiling b\n"));
    assert_eq!(error.as_deref(), Some("Tool execution aborted"));
    let messages = crate::messages::build_messages("system", &[settled], "next");
    let replayed = messages.iter().find_map(|m| match m {
        knife_llm::ChatMessage::Tool { content, .. } => Some(content.clone()),
        _ => None,
    });
    assert_eq!(replayed.as_deref(), Some("Error: Tool execution aborted"));
}
