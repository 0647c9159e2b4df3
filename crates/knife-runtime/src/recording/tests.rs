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
        provider_instance_id: ProviderInstanceId::from("codex"),
        model: Some("m".into()),
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

/// The assistant text of each durable state `events` write (snapshots, and chunks
/// folded into the states `seen` holds).
fn texts_in(seen: &mut DurableStates, events: &[AdapterEvent]) -> Vec<String> {
    seen.fold(events)
        .into_iter()
        .filter_map(|i| match i.kind {
            TurnItemKind::AssistantMessage { text, .. } => Some(text),
            _ => None,
        })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn streaming_text_is_throttled_and_flushed() {
    let (mut rec, mut rx) = recorder();
    drain(&mut rx);
    let mut seen = DurableStates::default();
    let mut texts = |events: &[AdapterEvent]| texts_in(&mut seen, events);
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
    // After the window a delta goes out at once again; a big one always does. (Two
    // windows were written, so the window is past its first 50 ms; 250 ms is its most.)
    tokio::time::advance(MAX_FLUSH_INTERVAL).await;
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

/// The durable events of text items: whole snapshots and appended chunks.
fn durable(events: &[AdapterEvent]) -> Vec<&AdapterEvent> {
    events
        .iter()
        .filter(|e| {
            matches!(
                e,
                AdapterEvent::TurnItemUpdated(_) | AdapterEvent::TurnItemAppended(_)
            )
        })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn live_03_windows_after_the_first_write_only_the_appended_text_and_settling_writes_it_whole()
{
    let (mut rec, mut rx) = recorder();
    drain(&mut rx);
    rec.text_started("m", TextKind::Assistant);
    let mut answer = String::new();
    for i in 0..40 {
        let delta = format!("wörd {i} 🦀 ");
        answer.push_str(&delta);
        rec.text_delta("m", TextKind::Assistant, &delta);
        if i % 5 == 4 {
            // The longest window: every call finds the item's window over.
            tokio::time::advance(MAX_FLUSH_INTERVAL).await;
            rec.flush_due();
        }
    }
    rec.text_done("m", TextKind::Assistant, None);
    let events = drain(&mut rx);
    let durable = durable(&events);
    // First the empty part-start snapshot, last the whole settled one, chunks between.
    assert!(
        matches!(durable.first(), Some(AdapterEvent::TurnItemUpdated(i))
        if i.kind == TurnItemKind::AssistantMessage { text: String::new(), streaming: true })
    );
    let Some(AdapterEvent::TurnItemUpdated(last)) = durable.last() else {
        panic!("no settled snapshot: {durable:?}")
    };
    assert_eq!(
        last.kind,
        TurnItemKind::AssistantMessage {
            text: answer.clone(),
            streaming: false
        }
    );
    assert_eq!(last.status, TurnItemStatus::Completed);
    let chunks: Vec<&TurnItemAppend> = durable[1..durable.len() - 1]
        .iter()
        .map(|e| match e {
            AdapterEvent::TurnItemAppended(c) => c,
            other => panic!("a whole snapshot mid-stream: {other:?}"),
        })
        .collect();
    assert!(chunks.len() >= 8, "one chunk per window: {}", chunks.len());
    // The chunks continue each other from byte 0 and add up to the answer: each
    // byte of text is written once while streaming, then once whole at settle.
    let mut end = 0;
    for c in &chunks {
        assert_eq!(c.offset, end);
        assert_eq!(c.field, DeltaField::Text);
        end = c.end();
    }
    let streamed: String = chunks.iter().map(|c| c.text.as_str()).collect();
    assert_eq!(streamed, answer);
    // Folding them is the whole text at every window (what a client sees).
    let states = durable_states(&events);
    assert_eq!(states.last().map(|i| &i.kind), Some(&last.kind));
}

#[tokio::test(start_paused = true)]
async fn live_03_a_revised_item_is_written_whole_and_chunks_continue_from_it() {
    let (mut rec, mut rx) = recorder();
    drain(&mut rx);
    rec.text_delta("m", TextKind::Assistant, "ab");
    let idx = rec.index_of("m").unwrap();
    // A driver change of the open item (here its text) is a whole snapshot.
    rec.update(idx, true, |item| {
        if let TurnItemKind::AssistantMessage { text, .. } = &mut item.kind {
            *text = "AB".into();
        }
    });
    tokio::time::advance(FLUSH_INTERVAL).await;
    rec.text_delta("m", TextKind::Assistant, "c");
    let events = drain(&mut rx);
    let durable = durable(&events);
    assert_eq!(durable.len(), 3, "{durable:?}");
    assert!(matches!(durable[1], AdapterEvent::TurnItemUpdated(_)));
    let AdapterEvent::TurnItemAppended(c) = durable[2] else {
        panic!("expected a chunk: {:?}", durable[2])
    };
    assert_eq!((c.offset, c.text.as_str()), (2, "c"));
    assert_eq!(
        durable_states(&events).last().map(|i| i.kind.clone()),
        Some(TurnItemKind::AssistantMessage {
            text: "ABc".into(),
            streaming: true
        })
    );
}

/// The text of item "m" in each durable state `events` write, folded into `seen`.
fn durable_texts(seen: &mut DurableStates, events: &[AdapterEvent]) -> Vec<usize> {
    texts_in(seen, events).iter().map(String::len).collect()
}

#[tokio::test(start_paused = true)]
async fn live_03_persistence_window_grows_to_250_ms_and_4_kib_still_forces_a_write() {
    // A paced stream (one 10-byte delta every 10 ms for 3 s) driven like every driver
    // does: deltas as they come, `flush_due` at `next_flush_deadline`.
    let (mut rec, mut rx) = recorder();
    drain(&mut rx);
    let start = Instant::now();
    let mut seen = DurableStates::default();
    let mut written_at = Vec::new();
    // (time, text length) after each delta: the crash-loss bound is checked against it.
    let mut history: Vec<(Duration, usize)> = Vec::new();
    let mut durable_len = 0;
    for i in 0..300 {
        if i > 0 {
            tokio::time::advance(Duration::from_millis(10)).await;
        }
        if rec
            .next_flush_deadline()
            .is_some_and(|deadline| deadline <= Instant::now())
        {
            rec.flush_due();
        }
        rec.text_delta("m", TextKind::Assistant, "0123456789");
        let now = start.elapsed();
        history.push((now, (i + 1) * 10));
        for len in durable_texts(&mut seen, &drain(&mut rx)) {
            written_at.push(now.as_millis());
            durable_len = len;
        }
        // PROC-12: whatever arrived 250 ms ago or earlier is durable now.
        let due = history
            .iter()
            .filter(|(at, _)| now.saturating_sub(*at) >= MAX_FLUSH_INTERVAL)
            .map(|&(_, len)| len)
            .max()
            .unwrap_or(0);
        assert!(
            durable_len >= due,
            "at {now:?} only {durable_len} bytes durable, {due} arrived by 250 ms ago"
        );
    }
    // The leading edge at once, then windows of 50, 100, 200, then 250 ms each.
    let gaps: Vec<u128> = written_at.windows(2).map(|w| w[1] - w[0]).collect();
    assert_eq!(written_at.first(), Some(&0), "{written_at:?}");
    assert_eq!(&gaps[..4], &[50, 100, 200, 250], "{written_at:?}");
    assert!(gaps[3..].iter().all(|&g| g == 250), "{written_at:?}");
    // Three seconds of stream: 14 writes, where a fixed 50 ms window wrote 60.
    assert_eq!(written_at.len(), 14, "{written_at:?}");

    // 4 KiB unsent still forces a write at once, however long the window grew.
    rec.text_delta("m", TextKind::Assistant, &"x".repeat(FLUSH_BYTES));
    let lens = durable_texts(&mut seen, &drain(&mut rx));
    assert_eq!(lens, vec![300 * 10 + FLUSH_BYTES], "a 4 KiB delta waited");

    // A short answer is still durable within the first 50 ms: each item has its own
    // window, starting again at `flush_interval`.
    rec.text_done("m", TextKind::Assistant, None);
    drain(&mut rx);
    rec.text_started("n", TextKind::Assistant);
    assert_eq!(texts_in(&mut seen, &drain(&mut rx)), vec![""]);
    rec.text_delta("n", TextKind::Assistant, "short");
    assert_eq!(
        rec.next_flush_deadline(),
        Some(Instant::now() + FLUSH_INTERVAL)
    );
    tokio::time::advance(FLUSH_INTERVAL).await;
    rec.flush_due();
    assert_eq!(
        texts_in(&mut seen, &drain(&mut rx)),
        vec!["short"],
        "the first window of a new item is 50 ms"
    );
}

#[tokio::test(start_paused = true)]
async fn live_03_the_window_never_shrinks_below_a_longer_first_window_and_zero_writes_every_delta()
{
    let (first, _events) = recorder();
    let ids = first.ids().clone();
    let (sink, mut rx) = EventSink::new();
    let style = |ms: u64| RecorderStyle {
        flush_interval: Duration::from_millis(ms),
        ..RecorderStyle::default()
    };
    // A first window above 250 ms stays (the driver clamps it if it must).
    let mut rec = TurnRecorder::start_with(sink, Arc::new(SystemClock), ids.clone(), style(400));
    drain(&mut rx);
    rec.text_delta("m", TextKind::Assistant, "a");
    for _ in 0..3 {
        rec.text_delta("m", TextKind::Assistant, "b");
        let deadline = rec.next_flush_deadline().unwrap();
        assert_eq!(deadline - Instant::now(), Duration::from_millis(400));
        tokio::time::advance(Duration::from_millis(400)).await;
        rec.flush_due();
    }
    // Zero (the ACP driver's style) writes every delta, the window stays zero.
    let (sink, mut rx) = EventSink::new();
    let mut rec = TurnRecorder::start_with(sink, Arc::new(SystemClock), ids, style(0));
    drain(&mut rx);
    for _ in 0..5 {
        rec.text_delta("m", TextKind::Assistant, "a");
    }
    let mut seen = DurableStates::default();
    assert_eq!(
        durable_texts(&mut seen, &drain(&mut rx)),
        vec![1, 2, 3, 4, 5]
    );
}

#[tokio::test(start_paused = true)]
async fn live_02_tool_output_goes_live_at_once_durable_per_window_and_settles_whole() {
    let (mut rec, mut rx) = recorder();
    drain(&mut rx);
    rec.tool_started(
        "tool",
        "call-1",
        "bash",
        serde_json::json!({"command": "x"}),
    );
    let idx = rec.index_of("tool").unwrap();
    drain(&mut rx);
    let mut streamed = String::new();
    let mut live = String::new();
    for i in 0..12 {
        let piece = format!("line {i} ✓\n");
        streamed.push_str(&piece);
        rec.tool_output_delta(idx, &piece);
        if i % 3 == 2 {
            tokio::time::advance(FLUSH_INTERVAL).await;
            rec.flush_due();
        }
    }
    let result = format!("{streamed}(exit code 0)");
    rec.settle_tool_at(idx, TurnItemStatus::Completed, Some(result.clone()), None);
    let events = drain(&mut rx);
    for e in &events {
        if let AdapterEvent::TurnItemDelta(d) = e {
            assert_eq!(d.field, DeltaField::Output);
            assert_eq!(d.offset, live.len() as u64, "{d:?}");
            live.push_str(&d.text);
        }
    }
    assert_eq!(live, result, "the live deltas add up to the settled output");
    let durable = durable(&events);
    let chunks: Vec<&TurnItemAppend> = durable
        .iter()
        .filter_map(|e| match e {
            AdapterEvent::TurnItemAppended(c) => Some(c),
            _ => None,
        })
        .collect();
    assert!(chunks.len() >= 3, "one chunk per window: {durable:?}");
    assert!(chunks.iter().all(|c| c.field == DeltaField::Output));
    let Some(AdapterEvent::TurnItemUpdated(last)) = durable.last() else {
        panic!("no settled snapshot: {durable:?}")
    };
    assert_eq!(last.status, TurnItemStatus::Completed);
    assert!(matches!(&last.kind, TurnItemKind::ToolCall { output: Some(o), .. } if *o == result));
    // Folded, every durable state of the item is a prefix of its output.
    for state in durable_states(&events) {
        if let TurnItemKind::ToolCall {
            output: Some(o), ..
        } = &state.kind
        {
            assert!(result.starts_with(o.as_str()), "{o:?}");
        }
    }
}

/// LIVE-02 for runtimes that report a call's whole state (ACP `tool_call_update`, codex's
/// completed item): a running call whose only change is more output streams that text
/// (a live delta, a durable chunk), not a whole snapshot per update; settling with an
/// output that extends the streamed one sends the rest live first; one that does not
/// (a runtime's own aggregate) replaces it through the settled snapshot alone.
#[tokio::test(start_paused = true)]
async fn live_02_tool_state_updates_that_grow_the_output_stream_it() {
    let (mut rec, mut rx) = recorder();
    let state = |output: Option<&str>, status| ToolState {
        tool: "execute".into(),
        input: serde_json::json!({"command": "make"}),
        output: output.map(str::to_owned),
        error: None,
        status,
    };
    rec.tool_opened("a", "a", state(None, TurnItemStatus::Running));
    rec.tool_opened("b", "b", state(None, TurnItemStatus::Running));
    drain(&mut rx);
    tokio::time::advance(FLUSH_INTERVAL).await;
    rec.set_tool_state("a", state(Some("one\n"), TurnItemStatus::Running));
    tokio::time::advance(FLUSH_INTERVAL).await;
    rec.set_tool_state("a", state(Some("one\ntwo\n"), TurnItemStatus::Running));
    let events = drain(&mut rx);
    let deltas: Vec<(u64, &str)> = events
        .iter()
        .filter_map(|e| match e {
            AdapterEvent::TurnItemDelta(d) => Some((d.offset, d.text.as_str())),
            _ => None,
        })
        .collect();
    assert_eq!(deltas, [(0, "one\n"), (4, "two\n")]);
    let chunks: Vec<(u64, &str)> = events
        .iter()
        .filter_map(|e| match e {
            AdapterEvent::TurnItemAppended(c) => Some((c.offset, c.text.as_str())),
            _ => None,
        })
        .collect();
    assert_eq!(chunks, [(0, "one\n"), (4, "two\n")], "{events:?}");
    assert!(
        !events
            .iter()
            .any(|e| matches!(e, AdapterEvent::TurnItemUpdated(_))),
        "no whole snapshot per update: {events:?}"
    );
    // Settled with more: the rest goes live before the settled snapshot.
    rec.set_tool_state(
        "a",
        state(Some("one\ntwo\n(done)"), TurnItemStatus::Completed),
    );
    let events = drain(&mut rx);
    assert!(
        matches!(&events[..], [AdapterEvent::TurnItemDelta(d), AdapterEvent::TurnItemUpdated(i)]
            if d.offset == 8 && d.text == "(done)" && i.status == TurnItemStatus::Completed),
        "{events:?}"
    );
    // Output that does not extend the streamed one: the settled snapshot alone.
    rec.set_tool_state("b", state(Some("abc"), TurnItemStatus::Running));
    drain(&mut rx);
    rec.set_tool_state("b", state(Some("xyz"), TurnItemStatus::Completed));
    let events = drain(&mut rx);
    assert!(
        matches!(&events[..], [AdapterEvent::TurnItemUpdated(i)]
            if matches!(&i.kind, TurnItemKind::ToolCall { output: Some(o), .. } if o == "xyz")),
        "{events:?}"
    );
}
