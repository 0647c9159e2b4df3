//! The live hub (LIVE-01, LIVE-02): per thread, the not-yet-settled text of every
//! streaming item and a broadcast of its deltas and resets, fed by the session pump.
//!
//! The pump calls [`LiveHub::publish`] the moment it reads a delta (before any
//! store write), [`LiveHub::begin_reset`] when it reads a reset and
//! [`LiveHub::finish_reset`] once every event read before the reset is committed
//! (the reset then names the sequence a subscriber must have seen first, so a stale
//! durable snapshot of the discarded attempt never lands after it). Subscribers
//! (knife-server's event streams) take [`LiveHub::snapshot`] for their catch-up
//! delta and [`LiveHub::subscribe`] for what follows. An item leaves the hub once
//! its settled snapshot is committed ([`LiveHub::settled`]), so the hub holds only
//! the text of items still streaming.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};

use knife_protocol::{DeltaField, ItemDelta, ItemReset, RunId, ThreadId, TurnItemId};
use tokio::sync::broadcast;

/// Messages queued per thread for a subscriber that is slower than the stream;
/// one that falls further behind gets `Lagged` and catches up from [`LiveHub::snapshot`].
const CHANNEL_CAPACITY: usize = 4096;

/// One message of a thread's live feed.
#[derive(Clone, Debug)]
pub enum LiveMessage {
    /// More text; `generation` counts the item's resets.
    Delta {
        delta: Arc<ItemDelta>,
        generation: u32,
    },
    /// The item's live text is void from `generation` on. Deliver it only after the
    /// durable events up to `after_sequence` (those read before the reset).
    Reset {
        reset: Arc<ItemReset>,
        generation: u32,
        after_sequence: u64,
    },
}

/// The live text of one item, as [`LiveHub::snapshot`] returns it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LiveItem {
    pub item_id: TurnItemId,
    pub run_id: Option<RunId>,
    pub ordinal: u64,
    pub generation: u32,
    /// Each growing field's whole live text (from byte 0).
    pub fields: BTreeMap<DeltaField, String>,
    /// The item's latest committed snapshots of this generation: (sequence, length
    /// of each field), oldest first, at most [`DURABLE_HISTORY`].
    pub durable: Vec<(u64, BTreeMap<DeltaField, u64>)>,
}

impl LiveItem {
    /// The field lengths of the newest snapshot with sequence `<= pos`: what a
    /// subscriber that has seen the log up to `pos` holds durably (empty = none).
    pub fn durable_at(&self, pos: u64) -> BTreeMap<DeltaField, u64> {
        self.durable
            .iter()
            .rev()
            .find(|(seq, _)| *seq <= pos)
            .map(|(_, lens)| lens.clone())
            .unwrap_or_default()
    }
}

/// Committed snapshots remembered per live item (for catch-up offsets).
pub const DURABLE_HISTORY: usize = 64;

struct ItemState {
    run_id: Option<RunId>,
    ordinal: u64,
    generation: u32,
    fields: BTreeMap<DeltaField, String>,
    /// `Some` between `begin_reset` and `finish_reset`: the new attempt's deltas, held.
    held: Option<Vec<Arc<ItemDelta>>>,
    /// Committed snapshots of this generation (see [`LiveItem::durable`]).
    durable: Vec<(u64, BTreeMap<DeltaField, u64>)>,
}

struct ThreadLive {
    tx: broadcast::Sender<LiveMessage>,
    items: HashMap<TurnItemId, ItemState>,
}

/// Shared, cheap to clone; see the module docs.
#[derive(Clone, Default)]
pub struct LiveHub {
    threads: Arc<Mutex<HashMap<ThreadId, ThreadLive>>>,
}

impl std::fmt::Debug for LiveHub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LiveHub").finish_non_exhaustive()
    }
}

impl LiveHub {
    /// A hub with no threads.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<ThreadId, ThreadLive>> {
        self.threads.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn thread<'a>(
        map: &'a mut HashMap<ThreadId, ThreadLive>,
        thread: &ThreadId,
    ) -> &'a mut ThreadLive {
        map.entry(thread.clone()).or_insert_with(|| ThreadLive {
            tx: broadcast::channel(CHANNEL_CAPACITY).0,
            items: HashMap::new(),
        })
    }

    /// The thread's live feed from now on (subscribe before taking the snapshot).
    pub fn subscribe(&self, thread: &ThreadId) -> broadcast::Receiver<LiveMessage> {
        Self::thread(&mut self.lock(), thread).tx.subscribe()
    }

    /// Every streaming item of `thread` with its live text, except items between a
    /// reset and its release (their text arrives after the reset).
    pub fn snapshot(&self, thread: &ThreadId) -> Vec<LiveItem> {
        let map = self.lock();
        let Some(t) = map.get(thread) else {
            return Vec::new();
        };
        let mut items: Vec<LiveItem> = t
            .items
            .iter()
            .filter(|(_, s)| s.held.is_none())
            .map(|(id, s)| LiveItem {
                item_id: id.clone(),
                run_id: s.run_id.clone(),
                ordinal: s.ordinal,
                generation: s.generation,
                fields: s.fields.clone(),
                durable: s.durable.clone(),
            })
            .collect();
        items.sort_by_key(|i| i.ordinal);
        items
    }

    /// Records `delta` and hands it to every subscriber of its thread at once
    /// (LIVE-01). A delta that overlaps text already recorded is trimmed to its new
    /// part; one that would leave a gap is dropped (the durable path still has it).
    pub fn publish(&self, delta: ItemDelta) {
        let mut map = self.lock();
        let t = Self::thread(&mut map, &delta.thread_id);
        let state = t
            .items
            .entry(delta.item_id.clone())
            .or_insert_with(|| ItemState {
                run_id: delta.run_id.clone(),
                ordinal: delta.ordinal,
                generation: 0,
                fields: BTreeMap::new(),
                held: None,
                durable: Vec::new(),
            });
        let text = state.fields.entry(delta.field).or_default();
        let Some(delta) = continue_text(text, delta) else {
            return;
        };
        let delta = Arc::new(delta);
        match &mut state.held {
            Some(held) => held.push(delta),
            None => {
                // No receiver is fine: nobody watches the thread right now.
                let _ = t.tx.send(LiveMessage::Delta {
                    delta,
                    generation: state.generation,
                });
            }
        }
    }

    /// The item's live text is void (read time): later deltas are held until
    /// [`Self::finish_reset`].
    pub fn begin_reset(&self, reset: &ItemReset) {
        let mut map = self.lock();
        let t = Self::thread(&mut map, &reset.thread_id);
        let state = t
            .items
            .entry(reset.item_id.clone())
            .or_insert_with(|| ItemState {
                run_id: None,
                ordinal: 0,
                generation: 0,
                fields: BTreeMap::new(),
                held: None,
                durable: Vec::new(),
            });
        state.generation += 1;
        state.fields.clear();
        state.durable.clear();
        state.held.get_or_insert_with(Vec::new);
    }

    /// Everything read before the reset is committed, up to `after_sequence`:
    /// broadcasts the reset, then the deltas held since [`Self::begin_reset`].
    pub fn finish_reset(&self, reset: ItemReset, after_sequence: u64) {
        let mut map = self.lock();
        let t = Self::thread(&mut map, &reset.thread_id);
        let Some(state) = t.items.get_mut(&reset.item_id) else {
            return;
        };
        let held = state.held.take().unwrap_or_default();
        let generation = state.generation;
        let _ = t.tx.send(LiveMessage::Reset {
            reset: Arc::new(reset),
            generation,
            after_sequence,
        });
        for delta in held {
            let _ = t.tx.send(LiveMessage::Delta { delta, generation });
        }
    }

    /// The generation of `item` when the hub follows it (the pump reads it when it
    /// reads the item's snapshot, and passes it to [`Self::committed`] / [`Self::settled`]).
    pub fn generation(&self, thread: &ThreadId, item: &TurnItemId) -> Option<u32> {
        Some(self.lock().get(thread)?.items.get(item)?.generation)
    }

    /// A snapshot of `item` (of `generation`) is committed at `sequence` with these
    /// field lengths.
    pub fn committed(
        &self,
        thread: &ThreadId,
        item: &TurnItemId,
        generation: u32,
        sequence: u64,
        lens: BTreeMap<DeltaField, u64>,
    ) {
        let mut map = self.lock();
        let Some(state) = map.get_mut(thread).and_then(|t| t.items.get_mut(item)) else {
            return;
        };
        if state.generation != generation {
            return;
        }
        if state.durable.len() >= DURABLE_HISTORY {
            state.durable.remove(0);
        }
        state.durable.push((sequence, lens));
    }

    /// A chunk of `item` (of `generation`) is committed at `sequence`: `field`'s
    /// durable text now ends at byte `end`, the other fields as in the item's previous
    /// committed state (LIVE-03).
    pub fn committed_chunk(
        &self,
        thread: &ThreadId,
        item: &TurnItemId,
        generation: u32,
        sequence: u64,
        field: DeltaField,
        end: u64,
    ) {
        let lens = {
            let map = self.lock();
            let Some(state) = map.get(thread).and_then(|t| t.items.get(item)) else {
                return;
            };
            let mut lens = state
                .durable
                .last()
                .map(|(_, lens)| lens.clone())
                .unwrap_or_default();
            lens.insert(field, end);
            lens
        };
        self.committed(thread, item, generation, sequence, lens);
    }

    /// The item's settled snapshot of `generation` is committed: the item leaves the
    /// hub, unless a reset started a new generation meanwhile.
    pub fn settled(&self, thread: &ThreadId, item: &TurnItemId, generation: u32) {
        let mut map = self.lock();
        let Some(t) = map.get_mut(thread) else {
            return;
        };
        if t.items
            .get(item)
            .is_some_and(|s| s.generation == generation && s.held.is_none())
        {
            t.items.remove(item);
        }
        if t.items.is_empty() && t.tx.receiver_count() == 0 {
            map.remove(thread);
        }
    }

    /// The run's turn is over: its items leave the hub (whatever was not settled
    /// is in the durable log by now).
    pub fn end_run(&self, thread: &ThreadId, run: &RunId) {
        let mut map = self.lock();
        let Some(t) = map.get_mut(thread) else {
            return;
        };
        t.items.retain(|_, s| s.run_id.as_ref() != Some(run));
        if t.items.is_empty() && t.tx.receiver_count() == 0 {
            map.remove(thread);
        }
    }

    /// Drops the thread's entry when nothing streams and nobody listens (called by a
    /// subscriber that leaves).
    pub fn release(&self, thread: &ThreadId) {
        let mut map = self.lock();
        if map
            .get(thread)
            .is_some_and(|t| t.items.is_empty() && t.tx.receiver_count() == 0)
        {
            map.remove(thread);
        }
    }

    /// Number of items currently streaming on `thread` (tests, metrics).
    pub fn live_items(&self, thread: &ThreadId) -> usize {
        self.lock().get(thread).map_or(0, |t| t.items.len())
    }
}

/// Appends `delta` to `text` when it continues it (trimming an overlap); `None`
/// when it adds nothing or would leave a gap.
fn continue_text(text: &mut String, mut delta: ItemDelta) -> Option<ItemDelta> {
    let len = text.len() as u64;
    if delta.offset > len || delta.end() <= len {
        return None;
    }
    let skip = usize::try_from(len - delta.offset).ok()?;
    if !delta.text.is_char_boundary(skip) {
        return None;
    }
    if skip > 0 {
        delta.text = delta.text[skip..].to_owned();
        delta.offset = len;
    }
    text.push_str(&delta.text);
    Some(delta)
}
