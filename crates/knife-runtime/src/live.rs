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
//!
//! Several nodes (issue 17 item 2): every delta and reset the hub broadcasts for its own
//! pumps is also handed to the store's [`knife_store::LiveRelay`] ([`LiveHub::relay_to`]);
//! the other nodes' hubs mirror them ([`LiveHub::apply_relayed`], fed by
//! [`crate::live_relay`]) and serve them to their subscribers exactly like their own.
//! A mirrored item leaves the hub when its settled snapshot or its run's end reaches
//! this node's durable feed ([`LiveHub::observe_durable`]), or after
//! [`MIRROR_IDLE`] without a message.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use knife_protocol::{
    DeltaField, EventBody, ItemDelta, ItemReset, RunId, StoredEvent, ThreadId, TurnItem,
    TurnItemId, TurnItemStatus,
};
use knife_store::RelayedLive;
use tokio::sync::broadcast;

/// Messages queued per thread for a subscriber that is slower than the stream;
/// one that falls further behind gets `Lagged` and catches up from [`LiveHub::snapshot`].
const CHANNEL_CAPACITY: usize = 4096;

/// One message of a thread's live feed.
#[derive(Clone, Debug)]
pub enum LiveMessage {
    /// More text; `generation` counts the item's resets.
    Delta {
        /// The delta, shared by every subscriber.
        delta: Arc<ItemDelta>,
        /// The item's reset count when the delta was published; a subscriber's view
        /// drops deltas older than the last reset it saw.
        generation: u32,
    },
    /// The item's live text is void from `generation` on. Deliver it only after the
    /// durable events up to `after_sequence` (those read before the reset).
    Reset {
        /// The reset, shared by every subscriber.
        reset: Arc<ItemReset>,
        /// The item's new generation.
        generation: u32,
        /// Highest durable sequence read before the reset.
        after_sequence: u64,
    },
}

/// The live text of one item, as [`LiveHub::snapshot`] returns it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LiveItem {
    /// The streaming item.
    pub item_id: TurnItemId,
    /// Its run; `None` outside a run.
    pub run_id: Option<RunId>,
    /// Its transcript position ([`knife_protocol::TurnItem::ordinal`]).
    pub ordinal: u64,
    /// How many times its live text was reset.
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

/// A mirrored item (another node's) with no message for this long leaves the hub
/// (its node died and nobody ended its run yet).
pub const MIRROR_IDLE: Duration = Duration::from_secs(600);

/// Bytes of out-of-order text a mirrored item keeps per field while it waits for a
/// durable snapshot to close the gap before it.
const MIRROR_PENDING: usize = 256 * 1024;

/// What the hub knows of an item another node streams.
struct Mirror {
    /// Durable snapshots at or below this sequence belong to an earlier generation
    /// (written before the item's last reset).
    since: u64,
    last_seen: Instant,
    /// Per field, text that arrived past a gap (offset, text), kept until a durable
    /// snapshot reaches its offset.
    pending: BTreeMap<DeltaField, (u64, String)>,
}

struct ItemState {
    run_id: Option<RunId>,
    ordinal: u64,
    generation: u32,
    fields: BTreeMap<DeltaField, String>,
    /// `Some` between `begin_reset` and `finish_reset`: the new attempt's deltas, held.
    held: Option<Vec<Arc<ItemDelta>>>,
    /// Committed snapshots of this generation (see [`LiveItem::durable`]).
    durable: Vec<(u64, BTreeMap<DeltaField, u64>)>,
    /// `Some` for an item another node streams (mirrored from its relay).
    mirror: Option<Mirror>,
}

impl ItemState {
    fn new(run_id: Option<RunId>, ordinal: u64, generation: u32, mirror: Option<Mirror>) -> Self {
        ItemState {
            run_id,
            ordinal,
            generation,
            fields: BTreeMap::new(),
            held: None,
            durable: Vec::new(),
            mirror,
        }
    }

    /// A new generation: the live text so far is void.
    fn restart(&mut self, generation: u32) {
        self.generation = generation;
        self.fields.clear();
        self.durable.clear();
        if let Some(m) = &mut self.mirror {
            m.pending.clear();
        }
    }
}

struct ThreadLive {
    tx: broadcast::Sender<LiveMessage>,
    items: HashMap<TurnItemId, ItemState>,
}

/// Shared, cheap to clone; see the module docs.
#[derive(Clone, Default)]
pub struct LiveHub {
    threads: Arc<Mutex<HashMap<ThreadId, ThreadLive>>>,
    /// Where this node's own live messages also go (the other nodes), once set.
    relay: Arc<OnceLock<knife_store::Store>>,
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
        self.threads
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
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
            .or_insert_with(|| ItemState::new(delta.run_id.clone(), delta.ordinal, 0, None));
        let text = state.fields.entry(delta.field).or_default();
        let Some(delta) = continue_text(text, delta) else {
            return;
        };
        let delta = Arc::new(delta);
        match &mut state.held {
            Some(held) => held.push(delta),
            None => {
                self.relay(|| RelayedLive::Delta {
                    delta: (*delta).clone(),
                    generation: state.generation,
                });
                // No receiver is fine: nobody watches the thread right now.
                let _ = t.tx.send(LiveMessage::Delta {
                    delta,
                    generation: state.generation,
                });
            }
        }
    }

    /// From now on this node's own deltas and resets are also relayed through
    /// `store` to the other nodes (issue 17 item 2; a no-op on a one-node store).
    /// Set once by the composition root; later calls are ignored.
    pub fn relay_to(&self, store: knife_store::Store) {
        let _ = self.relay.set(store);
    }

    fn relay(&self, message: impl FnOnce() -> RelayedLive) {
        if let Some(store) = self.relay.get() {
            store.relay_live(message());
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
            .or_insert_with(|| ItemState::new(None, 0, 0, None));
        state.restart(state.generation + 1);
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
        self.relay(|| RelayedLive::Reset {
            reset: reset.clone(),
            generation,
            after_sequence,
        });
        let _ = t.tx.send(LiveMessage::Reset {
            reset: Arc::new(reset),
            generation,
            after_sequence,
        });
        for delta in held {
            self.relay(|| RelayedLive::Delta {
                delta: (*delta).clone(),
                generation,
            });
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

/// Mirroring the other nodes' items (issue 17 item 2; see the module docs).
impl LiveHub {
    /// Serves a live message another node relayed to this node's subscribers, as if
    /// its own pump had published it: deltas continue the mirrored text (one past a gap
    /// waits for a durable snapshot to close it), a reset of a newer generation voids
    /// it. Never relayed again; never touches an item this node streams itself.
    pub fn apply_relayed(&self, message: &RelayedLive) {
        let mut map = self.lock();
        match message {
            RelayedLive::Delta { delta, generation } => {
                let t = Self::thread(&mut map, &delta.thread_id);
                let state = t.items.entry(delta.item_id.clone()).or_insert_with(|| {
                    ItemState::new(
                        delta.run_id.clone(),
                        delta.ordinal,
                        *generation,
                        Some(Mirror::new(0)),
                    )
                });
                if state.mirror.is_none() || *generation < state.generation {
                    return;
                }
                if state.run_id.is_none() {
                    state.run_id = delta.run_id.clone();
                    state.ordinal = delta.ordinal;
                }
                if *generation > state.generation {
                    state.restart(*generation); // its reset was lost on the way
                }
                let generation = state.generation;
                let mut out = Vec::new();
                let text = state.fields.entry(delta.field).or_default();
                let gap = delta.offset > text.len() as u64;
                if let Some(d) = continue_text(text, delta.clone()) {
                    out.push(d);
                }
                if let Some(m) = &mut state.mirror {
                    m.last_seen = Instant::now();
                    if gap {
                        m.hold(delta);
                    } else {
                        out.extend(m.release(delta.field, text, delta));
                    }
                }
                for d in out {
                    let _ = t.tx.send(LiveMessage::Delta {
                        delta: Arc::new(d),
                        generation,
                    });
                }
            }
            RelayedLive::Reset {
                reset,
                generation,
                after_sequence,
            } => {
                let t = Self::thread(&mut map, &reset.thread_id);
                let fresh = !t.items.contains_key(&reset.item_id);
                let state = t.items.entry(reset.item_id.clone()).or_insert_with(|| {
                    ItemState::new(None, 0, *generation, Some(Mirror::new(*after_sequence)))
                });
                let Some(m) = &mut state.mirror else { return };
                m.last_seen = Instant::now();
                if !fresh && *generation <= state.generation {
                    return;
                }
                m.since = *after_sequence;
                state.restart(*generation);
                let _ = t.tx.send(LiveMessage::Reset {
                    reset: Arc::new(reset.clone()),
                    generation: *generation,
                    after_sequence: *after_sequence,
                });
            }
        }
    }

    /// A durable event reached this node's feed: a mirrored item's committed snapshot
    /// (its catch-up offsets; text that closes a gap), its settled snapshot or its
    /// run's end (it leaves the hub). Items this node streams itself are the pump's.
    pub fn observe_durable(&self, event: &StoredEvent) {
        let mut map = self.lock();
        match &event.event.body {
            EventBody::TurnItemUpdated(item) => {
                let Some(t) = map.get_mut(&item.thread_id) else {
                    return;
                };
                let Some(state) = t.items.get_mut(&item.id) else {
                    return;
                };
                let Some(m) = &mut state.mirror else { return };
                if event.sequence <= m.since {
                    return; // a snapshot of the attempt before the last reset
                }
                if is_settled(item) {
                    t.items.remove(&item.id);
                    return;
                }
                let mut lens = BTreeMap::new();
                let mut out = Vec::new();
                for field in FIELDS {
                    let Some(durable) = field.durable_text(item) else {
                        continue;
                    };
                    lens.insert(field, durable.len() as u64);
                    let text = state.fields.entry(field).or_default();
                    if durable.len() > text.len() && durable.starts_with(text.as_str()) {
                        *text = durable.to_owned();
                        let next = ItemDelta {
                            thread_id: item.thread_id.clone(),
                            run_id: item.run_id.clone(),
                            item_id: item.id.clone(),
                            ordinal: item.ordinal,
                            field,
                            offset: text.len() as u64,
                            text: String::new(),
                        };
                        out.extend(m.release(field, text, &next));
                    }
                }
                if state.durable.len() >= DURABLE_HISTORY {
                    state.durable.remove(0);
                }
                state.durable.push((event.sequence, lens));
                let generation = state.generation;
                for d in out {
                    let _ = t.tx.send(LiveMessage::Delta {
                        delta: Arc::new(d),
                        generation,
                    });
                }
            }
            EventBody::RunUpdated(run) if run.status.is_terminal() => {
                let Some(t) = map.get_mut(&run.thread_id) else {
                    return;
                };
                t.items
                    .retain(|_, s| s.mirror.is_none() || s.run_id.as_ref() != Some(&run.id));
                if t.items.is_empty() && t.tx.receiver_count() == 0 {
                    map.remove(&run.thread_id);
                }
            }
            _ => {}
        }
    }

    /// Drops mirrored items with no message for `idle` (their node died and nobody
    /// ended their run), and threads left empty with no subscriber.
    pub fn sweep_mirrors(&self, idle: Duration) {
        let now = Instant::now();
        let mut map = self.lock();
        for t in map.values_mut() {
            t.items.retain(|_, s| {
                s.mirror
                    .as_ref()
                    .is_none_or(|m| now.duration_since(m.last_seen) < idle)
            });
        }
        map.retain(|_, t| !t.items.is_empty() || t.tx.receiver_count() > 0);
    }
}

impl Mirror {
    fn new(since: u64) -> Mirror {
        Mirror {
            since,
            last_seen: Instant::now(),
            pending: BTreeMap::new(),
        }
    }

    /// Keeps `delta`, which starts past the mirrored text, for when a durable snapshot
    /// closes the gap (contiguous text only, bounded).
    fn hold(&mut self, delta: &ItemDelta) {
        let entry = self.pending.entry(delta.field);
        match entry {
            std::collections::btree_map::Entry::Occupied(mut o)
                if o.get().0 + o.get().1.len() as u64 == delta.offset
                    && o.get().1.len() + delta.text.len() <= MIRROR_PENDING =>
            {
                o.get_mut().1.push_str(&delta.text);
            }
            std::collections::btree_map::Entry::Occupied(mut o) => {
                *o.get_mut() = (delta.offset, delta.text.clone());
            }
            std::collections::btree_map::Entry::Vacant(v) => {
                if delta.text.len() <= MIRROR_PENDING {
                    v.insert((delta.offset, delta.text.clone()));
                }
            }
        }
    }

    /// The held text of `field` that now continues `text` (appended to it), as a
    /// delta shaped like `like`.
    fn release(
        &mut self,
        field: DeltaField,
        text: &mut String,
        like: &ItemDelta,
    ) -> Option<ItemDelta> {
        let (offset, held) = self.pending.get(&field)?;
        let end = offset + held.len() as u64;
        let len = text.len() as u64;
        if *offset > len {
            return None; // still a gap
        }
        let pending = self.pending.remove(&field)?;
        if end <= len {
            return None; // already covered
        }
        let delta = ItemDelta {
            field,
            offset: pending.0,
            text: pending.1,
            ..like.clone()
        };
        continue_text(text, delta)
    }
}

const FIELDS: [DeltaField; 4] = [
    DeltaField::Text,
    DeltaField::Reasoning,
    DeltaField::Input,
    DeltaField::Output,
];

/// A transcript item that will not change any more.
fn is_settled(item: &TurnItem) -> bool {
    !matches!(
        item.status,
        TurnItemStatus::Pending | TurnItemStatus::Running | TurnItemStatus::Waiting
    )
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
