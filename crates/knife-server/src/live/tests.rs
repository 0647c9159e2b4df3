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

/// One input of a merge, in the order a test gives them.
enum Feed {
    /// A delta published to the hub (what a gap fill reads), not delivered.
    Publish(ItemDelta),
    /// The next durable event (sequences from 1).
    Durable(Box<EventBody>),
    /// A live message of the hub's broadcast.
    Live(LiveMessage),
}

/// `body` as the next durable event.
fn durable(body: EventBody) -> Feed {
    Feed::Durable(Box::new(body))
}

/// `delta` as the hub's broadcast delivers it.
fn live(delta: ItemDelta) -> Feed {
    Feed::Live(LiveMessage::Delta {
        delta: Arc::new(delta),
        generation: 0,
    })
}

/// A live text delta of the answer.
fn delta(offset: u64, text: &str) -> Feed {
    live(item_delta(DeltaField::Text, offset, text))
}

/// What a fresh merge sends its subscriber (as [`sent`]) when given `feeds` in order.
async fn fed(feeds: impl IntoIterator<Item = Feed>) -> Vec<String> {
    let (mut merge, rx) = merge();
    let mut sequence = 0;
    for feed in feeds {
        match feed {
            Feed::Publish(delta) => {
                merge.hub.publish(delta);
            }
            Feed::Durable(body) => {
                sequence += 1;
                merge.durable(stored(sequence, *body)).await.unwrap();
            }
            Feed::Live(message) => merge.live(message).await.unwrap(),
        }
    }
    sent(merge, rx).await
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
    let sent = fed([
        durable(answer("", TurnItemStatus::Running)),
        durable(answer("ran it", TurnItemStatus::Completed)),
        durable(run_ended()),
        delta(0, "ran"),
        delta(3, " it"),
    ])
    .await;
    assert_eq!(sent, ["event 1", "event 2", "event 3"]);
}

/// The same delta before the run's end: trimmed by the view as before (the settled
/// snapshot delivered makes it stale), and one of a live item continues it.
#[tokio::test]
async fn live_02_deltas_continue_what_the_subscriber_holds_from_durable_events() {
    let sent = fed([
        durable(answer("ran", TurnItemStatus::Running)),
        delta(0, "ran"),
        delta(3, " it"),
        durable(answer("ran it", TurnItemStatus::Completed)),
        delta(6, "!"),
    ])
    .await;
    assert_eq!(sent, ["event 1", "delta 3  it", "event 2"]);
}

/// LIVE-02: a tool call's streamed input is final once a durable snapshot carries
/// it parsed (no input text): an input delta the durable stream overtook must not
/// come back as a gap fill of the hub's whole input from offset 0.
#[tokio::test]
async fn live_02_input_deltas_after_the_complete_input_are_not_sent() {
    let input = |offset, text| item_delta(DeltaField::Input, offset, text);
    let sent = fed([
        Feed::Publish(input(0, "{\"a\"")),
        Feed::Publish(input(4, ":1}")),
        durable(tool(serde_json::Value::String(String::new()))),
        live(input(0, "{\"a\"")),
        durable(tool(serde_json::json!({"a": 1}))),
        live(input(4, ":1}")),
    ])
    .await;
    assert_eq!(sent, ["event 1", "delta 0 {\"a\"", "event 2"]);
}

/// LIVE-02: an item whose snapshots were coalesced into its settled one reaches the
/// subscriber settled first; a delta of it the durable stream overtook is stale.
#[tokio::test]
async fn live_02_a_delta_overtaken_by_its_items_settled_snapshot_is_not_sent() {
    let sent = fed([
        durable(answer("ran it", TurnItemStatus::Completed)),
        delta(0, "ran"),
        delta(3, " it"),
    ])
    .await;
    assert_eq!(sent, ["event 1"]);
}
