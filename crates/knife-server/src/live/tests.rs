//! Unit tests of one subscriber's merge (LIVE-01, LIVE-02): what it sends when the
//! durable stream overtakes live deltas.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;
use crate::subscribers::SubscriberLimits;

const THREAD: &str = "thread_t";
const RUN: &str = "run:thread_t:1";
const ITEM: &str = "item:t:1";

fn merge() -> (Merge, crate::subscribers::FrameRx) {
    let subs = Subscribers::new(SubscriberLimits::default());
    let (tx, rx) = subs.queue();
    let merge = Merge {
        hub: LiveHub::new(),
        thread: ThreadId::from(THREAD),
        pos: 0,
        items: HashMap::new(),
        ended: HashSet::new(),
        settled: HashMap::new(),
        out: Out {
            tx,
            wire: Wire::Ws,
            subs,
            refs: Default::default(),
        },
    };
    (merge, rx)
}

fn stored(sequence: u64, body: EventBody) -> StoredEvent {
    StoredEvent {
        sequence,
        event: DomainEvent::new(chrono::Utc::now(), body),
    }
}

fn answer(text: &str, status: TurnItemStatus) -> EventBody {
    let now = chrono::Utc::now();
    EventBody::TurnItemUpdated(TurnItem {
        id: TurnItemId::from(ITEM),
        thread_id: ThreadId::from(THREAD),
        run_id: Some(RunId::from(RUN)),
        provider_turn_id: None,
        ordinal: 1_000_001,
        status,
        started_at: Some(now),
        completed_at: None,
        updated_at: now,
        kind: TurnItemKind::AssistantMessage {
            text: text.to_owned(),
            streaming: status == TurnItemStatus::Running,
        },
    })
}

fn tool(input: serde_json::Value) -> EventBody {
    let now = chrono::Utc::now();
    EventBody::TurnItemUpdated(TurnItem {
        id: TurnItemId::from(ITEM),
        thread_id: ThreadId::from(THREAD),
        run_id: Some(RunId::from(RUN)),
        provider_turn_id: None,
        ordinal: 1_000_001,
        status: TurnItemStatus::Pending,
        started_at: Some(now),
        completed_at: None,
        updated_at: now,
        kind: TurnItemKind::ToolCall {
            call_id: "c".into(),
            tool: "bash".into(),
            input,
            output: None,
            error: None,
        },
    })
}

fn run_ended() -> EventBody {
    EventBody::RunUpdated(Run {
        id: RunId::from(RUN),
        thread_id: ThreadId::from(THREAD),
        ordinal: 1,
        provider_instance_id: ProviderInstanceId::from("mock"),
        model: None,
        status: RunStatus::Completed,
        user_message_id: TurnItemId::from("item:user"),
        requested_at: chrono::Utc::now(),
        started_at: None,
        completed_at: None,
        error: None,
        usage: None,
        checkpoints: RunCheckpoints::default(),
        changes: None,
    })
}

fn item_delta(field: DeltaField, offset: u64, text: &str) -> ItemDelta {
    ItemDelta {
        thread_id: ThreadId::from(THREAD),
        run_id: Some(RunId::from(RUN)),
        item_id: TurnItemId::from(ITEM),
        ordinal: 1_000_001,
        field,
        offset,
        text: text.to_owned(),
    }
}

fn delta(offset: u64, text: &str) -> LiveMessage {
    LiveMessage::Delta {
        delta: Arc::new(item_delta(DeltaField::Text, offset, text)),
        generation: 0,
    }
}

/// What the subscriber was sent: `event <seq>` / `delta <offset> <text>`.
async fn sent(merge: Merge, mut rx: crate::subscribers::FrameRx) -> Vec<String> {
    drop(merge);
    let mut out = Vec::new();
    while let Some(frame) = rx.next().await {
        match serde_json::from_slice::<WsServerMessage>(&frame.bytes).unwrap() {
            WsServerMessage::Event { event } => out.push(format!("event {}", event.sequence)),
            WsServerMessage::Delta(d) => out.push(format!("delta {} {}", d.offset, d.text)),
            other => out.push(format!("{other:?}")),
        }
    }
    out
}

/// LIVE-02: when the durable stream wins the race (it is polled first) up to the
/// run's end, the item's view goes with the run; a delta of that run still queued
/// in the hub's broadcast must not reach the subscriber as new text (it holds the
/// settled answer already), whatever its offset.
#[tokio::test]
async fn live_02_a_delta_overtaken_by_its_runs_end_is_not_sent() {
    let (mut merge, rx) = merge();
    merge
        .durable(stored(1, answer("", TurnItemStatus::Running)))
        .await
        .unwrap();
    merge
        .durable(stored(2, answer("ran it", TurnItemStatus::Completed)))
        .await
        .unwrap();
    merge.durable(stored(3, run_ended())).await.unwrap();
    merge.live(delta(0, "ran")).await.unwrap();
    merge.live(delta(3, " it")).await.unwrap();
    assert_eq!(sent(merge, rx).await, ["event 1", "event 2", "event 3"]);
}

/// The same delta before the run's end: trimmed by the view as before (the settled
/// snapshot delivered makes it stale), and one of a live item continues it.
#[tokio::test]
async fn live_02_deltas_continue_what_the_subscriber_holds_from_durable_events() {
    let (mut merge, rx) = merge();
    merge
        .durable(stored(1, answer("ran", TurnItemStatus::Running)))
        .await
        .unwrap();
    merge.live(delta(0, "ran")).await.unwrap();
    merge.live(delta(3, " it")).await.unwrap();
    merge
        .durable(stored(2, answer("ran it", TurnItemStatus::Completed)))
        .await
        .unwrap();
    merge.live(delta(6, "!")).await.unwrap();
    assert_eq!(sent(merge, rx).await, ["event 1", "delta 3  it", "event 2"]);
}

/// LIVE-02: a tool call's streamed input is final once a durable snapshot carries
/// it parsed (no input text): an input delta the durable stream overtook must not
/// come back as a gap fill of the hub's whole input from offset 0.
#[tokio::test]
async fn live_02_input_deltas_after_the_complete_input_are_not_sent() {
    let (mut merge, rx) = merge();
    let input = |offset, text| item_delta(DeltaField::Input, offset, text);
    merge.hub.publish(input(0, "{\"a\""));
    merge.hub.publish(input(4, ":1}"));
    merge
        .durable(stored(1, tool(serde_json::Value::String(String::new()))))
        .await
        .unwrap();
    merge
        .live(LiveMessage::Delta {
            delta: Arc::new(input(0, "{\"a\"")),
            generation: 0,
        })
        .await
        .unwrap();
    merge
        .durable(stored(2, tool(serde_json::json!({"a": 1}))))
        .await
        .unwrap();
    merge
        .live(LiveMessage::Delta {
            delta: Arc::new(input(4, ":1}")),
            generation: 0,
        })
        .await
        .unwrap();
    assert_eq!(
        sent(merge, rx).await,
        ["event 1", "delta 0 {\"a\"", "event 2"]
    );
}

/// LIVE-02: an item whose snapshots were coalesced into its settled one reaches the
/// subscriber settled first; a delta of it the durable stream overtook is stale.
#[tokio::test]
async fn live_02_a_delta_overtaken_by_its_items_settled_snapshot_is_not_sent() {
    let (mut merge, rx) = merge();
    merge
        .durable(stored(1, answer("ran it", TurnItemStatus::Completed)))
        .await
        .unwrap();
    merge.live(delta(0, "ran")).await.unwrap();
    merge.live(delta(3, " it")).await.unwrap();
    assert_eq!(sent(merge, rx).await, ["event 1"]);
}
