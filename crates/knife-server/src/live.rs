//! One subscriber's feed of a thread (LIVE-01, LIVE-02): its durable events (replay,
//! then live) merged with the live hub's deltas and resets, so that per item every
//! delta continues exactly what the subscriber holds: no text twice, none missing.
//!
//! Order: durable events after the client's sequence up to the thread's high-water
//! mark, then one catch-up delta per live item (its not-yet-durable tail), then live
//! deltas. A delta's text that the subscriber already has (from a durable snapshot
//! or an earlier delta) is trimmed; one that would leave a gap is filled from the
//! hub. Live text the durable stream made stale is dropped: of an item whose settled
//! snapshot or whose run's end was delivered, of a field a snapshot closed (a tool
//! call's input once parsed). A reset waits until the durable events read before it
//! were delivered.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use futures::StreamExt;
use futures::stream::BoxStream;
use knife_protocol::*;
use knife_runtime::live::{LiveHub, LiveItem, LiveMessage};
use knife_store::{StoreError, StreamFilter};
use tokio::sync::broadcast;
use tokio::task::JoinHandle;

use crate::AppState;
use crate::subscribers::{FrameTx, OVERFLOW_CODE, Subscribers, Wire};

/// What a subscriber is sent, in order.
pub(crate) enum Outgoing {
    Event(Box<StoredEvent>),
    Delta(DeltaMessage),
    Reset(Arc<ItemReset>),
    Error(StoreError),
}

/// Where one subscriber's feed goes: its bounded queue, in its wire format (LIVE-06).
pub(crate) struct Out {
    pub(crate) tx: FrameTx,
    pub(crate) wire: Wire,
    pub(crate) subs: Subscribers,
    /// The connection's item references (LIVE-03, [`DeltaMessage`]`::item_ref`):
    /// shared by a WebSocket connection's subscriptions, so a `ref` names one item
    /// on the connection. One per SSE stream.
    pub(crate) refs: ItemRefs,
}

/// Allocates a connection's short item references, from 0 up (never reused).
#[derive(Clone, Default)]
pub(crate) struct ItemRefs(Arc<std::sync::atomic::AtomicU64>);

impl ItemRefs {
    fn next(&self) -> u64 {
        self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    }
}

impl Out {
    /// Encodes `out` (a durable event once for every subscriber) and queues it;
    /// `Err` when the subscriber is gone or was closed for falling behind.
    async fn send(&self, out: Outgoing) -> Result<(), ()> {
        let bytes = match (out, self.wire) {
            (Outgoing::Event(ev), Wire::Ws) => self.subs.encoded(&ev).ws(),
            (Outgoing::Event(ev), Wire::Sse) => self.subs.encoded(&ev).sse(),
            (Outgoing::Delta(d), wire) => wire.delta(d),
            (Outgoing::Reset(r), wire) => wire.reset(&r),
            (Outgoing::Error(e), wire) => wire.error("store", &e.to_string()),
        };
        let wire = self.wire;
        self.tx
            .push(bytes, |reason| wire.error(OVERFLOW_CODE, reason))
            .await
            .map_err(drop)
    }
}

/// The merged feed of `filter`'s thread, queued into `out` by a spawned task (ended
/// when the subscriber goes away or falls behind). With a type filter (or no thread)
/// the feed is durable events only. `durable` is the store stream to merge (replay
/// included); while it replays, the task holds one of the server's replay slots.
pub(crate) fn feed(
    state: &AppState,
    filter: StreamFilter,
    mut durable: BoxStream<'static, Result<StoredEvent, StoreError>>,
    out: Out,
) -> JoinHandle<()> {
    let store = state.store.clone();
    let thread = match (&filter.thread_id, &filter.event_type) {
        (Some(thread), None) => thread.clone(),
        _ => {
            return tokio::spawn(async move {
                let high = store
                    .latest_sequence(filter.thread_id.as_ref())
                    .await
                    .unwrap_or(0);
                let mut slot = if filter.after < high {
                    out.subs.replay_slot().await
                } else {
                    None
                };
                loop {
                    let item = tokio::select! {
                        item = durable.next() => item,
                        () = out.tx.closed() => None,
                    };
                    let Some(item) = item else { break };
                    let next = match item {
                        Ok(ev) => {
                            if ev.sequence >= high {
                                drop(slot.take());
                            }
                            Outgoing::Event(Box::new(ev))
                        }
                        Err(e) => Outgoing::Error(e),
                    };
                    if out.send(next).await.is_err() {
                        break;
                    }
                }
                drop(slot);
            });
        }
    };
    let hub = state.execution.manager().live().clone();
    // Subscribed before the high-water mark is read: nothing falls between the two.
    let live = hub.subscribe(&thread);
    let after = filter.after;
    tokio::spawn(async move {
        let high = store.latest_sequence(Some(&thread)).await.unwrap_or(0);
        let merge = Merge {
            hub: hub.clone(),
            thread: thread.clone(),
            pos: after,
            items: HashMap::new(),
            ended: HashSet::new(),
            settled: HashMap::new(),
            out,
        };
        merge.run(durable, live, high).await;
        hub.release(&thread);
    })
}

#[derive(Default)]
struct ItemView {
    run_id: Option<RunId>,
    /// Resets seen (the hub's generation this view follows).
    generation: u32,
    /// Bytes of each field the subscriber holds.
    sent: BTreeMap<DeltaField, u64>,
    /// Fields a durable snapshot delivered without text: final (a tool call's input
    /// once complete is its parsed JSON), so later live text of theirs is stale.
    closed: BTreeSet<DeltaField>,
    /// Its settled snapshot was delivered: later deltas of this generation are stale.
    settled: bool,
    /// A delta introducing it (thread, run, ordinal) was sent since subscribing or
    /// since its last reset: later deltas go slim ([`DeltaMessage`]).
    introduced: bool,
    /// Its reference on the connection, allocated by its first introduction and kept
    /// when a reset makes it be introduced again.
    item_ref: Option<u64>,
    /// A reset waiting for durable events up to `.0`, and the live messages after it.
    pending: Option<(u64, Vec<LiveMessage>)>,
}

struct Merge {
    hub: LiveHub,
    thread: ThreadId,
    /// The last durable sequence delivered (or the client's `after`).
    pos: u64,
    items: HashMap<TurnItemId, ItemView>,
    /// Runs whose terminal `run.updated` was delivered: every item of theirs is final
    /// in the durable log, so a delta of theirs still queued in the hub's broadcast
    /// (the durable stream won the race: it is polled first) is stale, though the
    /// item's view, which would have trimmed it, is gone.
    ended: HashSet<RunId>,
    /// Items (and their runs) whose first durable state delivered was their settled
    /// snapshot (the pump may coalesce an item's snapshots into it), so no view follows
    /// them: their live text still queued in the hub is stale. Dropped at the run's end.
    settled: HashMap<TurnItemId, Option<RunId>>,
    out: Out,
}

impl Merge {
    async fn run(
        mut self,
        mut durable: BoxStream<'static, Result<StoredEvent, StoreError>>,
        mut live: broadcast::Receiver<LiveMessage>,
        high: u64,
    ) {
        let mut caught_up = false;
        // Replays run a few at a time: each holds a page of history (LIVE-06).
        let mut slot = if self.pos < high {
            self.out.subs.replay_slot().await
        } else {
            None
        };
        if self.pos >= high {
            caught_up = true;
            if self.catch_up().await.is_err() {
                return;
            }
        }
        loop {
            let step = tokio::select! {
                biased;
                () = self.out.tx.closed() => return,
                item = durable.next() => {
                    let Some(item) = item else { return };
                    match item {
                        Ok(ev) => {
                            let seq = ev.sequence;
                            let sent = self.durable(ev).await;
                            if sent.is_ok() && !caught_up && seq >= high {
                                caught_up = true;
                                drop(slot.take());
                                self.catch_up().await
                            } else {
                                sent
                            }
                        }
                        Err(e) => self.send(Outgoing::Error(e)).await,
                    }
                }
                msg = live.recv(), if caught_up => match msg {
                    Ok(msg) => self.live(msg).await,
                    // Fell behind the hub: its current text fills what was lost.
                    Err(broadcast::error::RecvError::Lagged(_)) => self.catch_up().await,
                    Err(broadcast::error::RecvError::Closed) => return,
                },
            };
            if step.is_err() {
                return;
            }
        }
    }

    async fn send(&self, out: Outgoing) -> Result<(), ()> {
        self.out.send(out).await
    }

    /// Delivers a durable event and accounts for the item text it carries.
    async fn durable(&mut self, ev: StoredEvent) -> Result<(), ()> {
        let seq = ev.sequence;
        match &ev.event.body {
            EventBody::TurnItemUpdated(item) => {
                if let Some(view) = self.items.get_mut(&item.id) {
                    absorb(view, item);
                } else if is_settled(item) {
                    self.settled.insert(item.id.clone(), item.run_id.clone());
                } else if has_growing_text(item) {
                    let mut view = ItemView {
                        run_id: item.run_id.clone(),
                        ..ItemView::default()
                    };
                    absorb(&mut view, item);
                    self.items.insert(item.id.clone(), view);
                }
            }
            // Appended text (LIVE-03): the subscriber now holds the field up to its end.
            EventBody::TurnItemAppended(chunk) => {
                let view = self
                    .items
                    .entry(chunk.item_id.clone())
                    .or_insert_with(|| ItemView {
                        run_id: chunk.run_id.clone(),
                        ..ItemView::default()
                    });
                let sent = view.sent.entry(chunk.field).or_insert(0);
                *sent = (*sent).max(chunk.end());
            }
            EventBody::RunUpdated(run) if run.status.is_terminal() => {
                self.items
                    .retain(|_, v| v.run_id.as_ref() != Some(&run.id) || v.pending.is_some());
                self.settled.retain(|_, r| r.as_ref() != Some(&run.id));
                self.ended.insert(run.id.clone());
            }
            _ => {}
        }
        self.send(Outgoing::Event(Box::new(ev))).await?;
        self.pos = self.pos.max(seq);
        // Resets whose preceding durable events are now delivered.
        let due: Vec<TurnItemId> = self
            .items
            .iter()
            .filter(|(_, v)| v.pending.as_ref().is_some_and(|(at, _)| *at <= self.pos))
            .map(|(id, _)| id.clone())
            .collect();
        for id in due {
            let Some((_, held)) = self.items.get_mut(&id).and_then(|v| v.pending.take()) else {
                continue;
            };
            for msg in held {
                self.live(msg).await?;
            }
        }
        Ok(())
    }

    /// One catch-up delta per live item: the hub's text past what the subscriber holds.
    async fn catch_up(&mut self) -> Result<(), ()> {
        for item in self.hub.snapshot(&self.thread) {
            if self.is_stale(&item.item_id, item.run_id.as_ref()) {
                continue;
            }
            let view = self.items.entry(item.item_id.clone()).or_default();
            if view.run_id.is_none() {
                view.run_id = item.run_id.clone();
            }
            // A newer generation arrives with its reset; a held reset comes first.
            if item.generation != view.generation || view.pending.is_some() || view.settled {
                continue;
            }
            // What the subscriber holds durably of it (snapshots up to its position).
            for (field, len) in item.durable_at(self.pos) {
                let sent = view.sent.entry(field).or_insert(0);
                *sent = (*sent).max(len);
            }
            let outs: Vec<ItemDelta> = item
                .fields
                .iter()
                .filter_map(|(field, text)| tail(&self.thread, view, &item, *field, text))
                .collect();
            for out in outs {
                self.send_delta(&out).await?;
            }
        }
        Ok(())
    }

    async fn live(&mut self, msg: LiveMessage) -> Result<(), ()> {
        match msg {
            LiveMessage::Reset {
                reset,
                generation,
                after_sequence,
            } => {
                let view = self.items.entry(reset.item_id.clone()).or_default();
                if let Some((_, held)) = &mut view.pending {
                    held.push(LiveMessage::Reset {
                        reset,
                        generation,
                        after_sequence,
                    });
                    return Ok(());
                }
                if generation <= view.generation {
                    return Ok(());
                }
                if after_sequence > self.pos {
                    view.pending = Some((
                        after_sequence,
                        vec![LiveMessage::Reset {
                            reset,
                            generation,
                            after_sequence: 0,
                        }],
                    ));
                    return Ok(());
                }
                view.generation = generation;
                view.sent.clear();
                view.closed.clear();
                view.settled = false;
                view.introduced = false;
                self.send(Outgoing::Reset(reset)).await
            }
            LiveMessage::Delta { delta, generation } => {
                if self.is_stale(&delta.item_id, delta.run_id.as_ref()) {
                    return Ok(());
                }
                let view = self.items.entry(delta.item_id.clone()).or_default();
                if view.run_id.is_none() {
                    view.run_id = delta.run_id.clone();
                }
                if let Some((_, held)) = &mut view.pending {
                    held.push(LiveMessage::Delta { delta, generation });
                    return Ok(());
                }
                if generation < view.generation || (generation == view.generation && view.settled) {
                    return Ok(());
                }
                if generation > view.generation {
                    // Its reset was lost (the subscriber lagged): reset now.
                    view.generation = generation;
                    view.sent.clear();
                    view.closed.clear();
                    view.settled = false;
                    view.introduced = false;
                    let reset = Arc::new(ItemReset {
                        thread_id: delta.thread_id.clone(),
                        item_id: delta.item_id.clone(),
                    });
                    self.send(Outgoing::Reset(reset)).await?;
                }
                let Some(view) = self.items.get_mut(&delta.item_id) else {
                    return Ok(());
                };
                let sent = view.sent.get(&delta.field).copied().unwrap_or(0);
                if delta.end() <= sent || view.closed.contains(&delta.field) {
                    return Ok(());
                }
                let out = if delta.offset == sent {
                    view.sent.insert(delta.field, delta.end());
                    delta
                } else if delta.offset < sent {
                    let skip = usize::try_from(sent - delta.offset).unwrap_or(usize::MAX);
                    let Some(rest) = delta.text.get(skip..) else {
                        return Ok(());
                    };
                    view.sent.insert(delta.field, delta.end());
                    Arc::new(ItemDelta {
                        offset: sent,
                        text: rest.to_owned(),
                        ..(*delta).clone()
                    })
                } else {
                    // A gap (the subscriber lagged): the hub has the whole live text.
                    let Some(item) = self
                        .hub
                        .snapshot(&self.thread)
                        .into_iter()
                        .find(|i| i.item_id == delta.item_id && i.generation == generation)
                    else {
                        return Ok(());
                    };
                    let Some(text) = item.fields.get(&delta.field) else {
                        return Ok(());
                    };
                    let Some(out) = tail(&self.thread, view, &item, delta.field, text) else {
                        return Ok(());
                    };
                    Arc::new(out)
                };
                self.send_delta(&out).await
            }
        }
    }

    /// Whether live text of `item` (of `run`) is stale although no view follows it:
    /// its settled snapshot ([`Merge::settled`]) or its run's terminal state
    /// ([`Merge::ended`]) was delivered. An item with a view (one streaming, or one
    /// reset for a retry) follows the view's rules.
    fn is_stale(&self, item: &TurnItemId, run: Option<&RunId>) -> bool {
        !self.items.contains_key(item)
            && (self.settled.contains_key(item) || run.is_some_and(|run| self.ended.contains(run)))
    }

    /// Sends `delta` whole when it introduces its item to this subscriber, else slim
    /// (named by its `ref` only).
    async fn send_delta(&mut self, delta: &ItemDelta) -> Result<(), ()> {
        let view = self.items.entry(delta.item_id.clone()).or_default();
        let item_ref = *view.item_ref.get_or_insert_with(|| self.out.refs.next());
        let message = if view.introduced {
            DeltaMessage::continuing(delta, item_ref)
        } else {
            view.introduced = true;
            DeltaMessage::introducing(delta, item_ref)
        };
        self.send(Outgoing::Delta(message)).await
    }
}

/// The part of `text` (the hub's whole live text of `field`) past what `view` holds,
/// as one delta; `view` then holds it all.
fn tail(
    thread: &ThreadId,
    view: &mut ItemView,
    item: &LiveItem,
    field: DeltaField,
    text: &str,
) -> Option<ItemDelta> {
    if view.closed.contains(&field) {
        return None;
    }
    let sent = view.sent.get(&field).copied().unwrap_or(0);
    let from = usize::try_from(sent).ok()?;
    let rest = text.get(from..).filter(|r| !r.is_empty())?;
    view.sent.insert(field, text.len() as u64);
    Some(ItemDelta {
        thread_id: thread.clone(),
        run_id: item.run_id.clone(),
        item_id: item.item_id.clone(),
        ordinal: item.ordinal,
        field,
        offset: sent,
        text: rest.to_owned(),
    })
}

const FIELDS: [DeltaField; 4] = [
    DeltaField::Text,
    DeltaField::Reasoning,
    DeltaField::Input,
    DeltaField::Output,
];

/// A durable snapshot: the subscriber holds at least its text of each field.
fn absorb(view: &mut ItemView, item: &TurnItem) {
    for field in FIELDS {
        match field.durable_text(item) {
            Some(text) => {
                let len = text.len() as u64;
                let sent = view.sent.entry(field).or_insert(0);
                *sent = (*sent).max(len);
                view.closed.remove(&field);
            }
            None => {
                view.sent.remove(&field);
                view.closed.insert(field);
            }
        }
    }
    if is_settled(item) {
        view.settled = true;
    }
}

fn has_growing_text(item: &TurnItem) -> bool {
    FIELDS.iter().any(|f| f.durable_text(item).is_some())
}

/// A transcript item that will not change any more.
fn is_settled(item: &TurnItem) -> bool {
    !matches!(
        item.status,
        TurnItemStatus::Pending | TurnItemStatus::Running | TurnItemStatus::Waiting
    )
}

#[cfg(test)]
mod tests;
