// Replay-then-live event streams with no gap and no duplicate, over any backend's
// table reads and in-process live feed, including recovery when a subscriber lags.

use crate::error::StoreError;
use crate::types::StreamFilter;
use futures::stream::BoxStream;
use knife_protocol::StoredEvent;
use std::collections::VecDeque;
use std::sync::Arc;
use tokio::sync::broadcast;
use tokio::sync::broadcast::error::RecvError;

/// What a backend gives [`replay_then_live`]: its live feed and two table reads.
///
/// The live feed must carry every committed event in sequence order, each after its
/// COMMIT (the SQLite writer publishes after commit; a multi-node backend publishes the
/// rows it read from the table after a wake-up). It may drop events only by
/// reporting `Lagged`.
#[async_trait::async_trait]
pub trait StreamSource: Send + Sync + 'static {
    /// A new subscription to the live feed of committed events.
    fn subscribe_live(&self) -> broadcast::Receiver<StoredEvent>;
    /// The highest committed sequence of the whole log (0 when empty).
    async fn high_water_mark(&self) -> Result<u64, StoreError>;
    /// Events matching `filter` (thread, type) in `(filter.after, through]`, in
    /// sequence order, at most `limit`.
    async fn read_range(
        &self,
        filter: StreamFilter,
        through: u64,
        limit: usize,
    ) -> Result<Vec<StoredEvent>, StoreError>;
}

/// Events read from the table per replay query.
pub const REPLAY_PAGE: usize = 256;

/// Where a stream is in its replay-then-live protocol.
#[derive(Debug)]
enum Phase {
    /// Subscribed to the live feed; the high-water mark is not read yet.
    Start,
    /// Replaying `(cursor, through]` from the table, page by page.
    Replay { through: u64 },
    /// Following the live feed.
    Live,
    /// Yielded an error; ends.
    Done,
}

/// State of one stream. Invariant: every event with `sequence <= cursor` has been
/// yielded (if it matched the filter) or deliberately skipped (if it did not), and
/// no event with `sequence > cursor` has been yielded.
struct StreamState {
    store: Arc<dyn StreamSource>,
    filter: StreamFilter,
    live: broadcast::Receiver<StoredEvent>,
    cursor: u64,
    phase: Phase,
    page: VecDeque<StoredEvent>,
}

/// The stream behind every backend's [`crate::EventFeed::stream`].
///
/// The live subscription is taken here, synchronously, before any read of the table —
/// so every event committed after this call is either in the table when the
/// high-water mark `H` is read or arrives on the subscription. On first poll it reads
/// `H`, replays `(after, H]` in pages of 256, then yields live events with
/// `sequence > max(H, after)`. On `Lagged` it resubscribes and replays the hole from
/// the table. Ends only when the feed closes; a failed read yields one `Err` and ends.
pub fn replay_then_live(
    store: Arc<dyn StreamSource>,
    filter: StreamFilter,
) -> BoxStream<'static, Result<StoredEvent, StoreError>> {
    let state = StreamState {
        live: store.subscribe_live(),
        store,
        cursor: filter.after,
        filter,
        phase: Phase::Start,
        page: VecDeque::new(),
    };
    Box::pin(futures::stream::unfold(state, |mut state| async move {
        let item = state.next().await?;
        Some((item, state))
    }))
}

impl StreamState {
    async fn next(&mut self) -> Option<Result<StoredEvent, StoreError>> {
        loop {
            if let Some(ev) = self.page.pop_front() {
                return Some(Ok(ev));
            }
            match self.phase {
                Phase::Done => return None,
                Phase::Start => {
                    // High-water mark H, read after subscribing: events <= H come from
                    // the table, events > H from the subscription.
                    match self.store.high_water_mark().await {
                        Ok(h) => self.phase = Phase::Replay { through: h },
                        Err(e) => return Some(self.fail(e)),
                    }
                }
                Phase::Replay { through } => {
                    if self.cursor >= through {
                        self.phase = Phase::Live;
                        continue;
                    }
                    let filter = StreamFilter {
                        after: self.cursor,
                        ..self.filter.clone()
                    };
                    match self.store.read_range(filter, through, REPLAY_PAGE).await {
                        Ok(events) => {
                            // A short page means nothing else matches up to `through`.
                            self.cursor = match events.last() {
                                Some(last) if events.len() == REPLAY_PAGE => last.sequence,
                                _ => through,
                            };
                            self.page.extend(events);
                        }
                        Err(e) => return Some(self.fail(e)),
                    }
                }
                Phase::Live => match self.live.recv().await {
                    Ok(ev) => {
                        // Already covered by the replay (committed before H was read
                        // but published after we subscribed): skip, never duplicate.
                        if ev.sequence <= self.cursor {
                            continue;
                        }
                        self.cursor = ev.sequence;
                        if self.filter.matches(&ev) {
                            return Some(Ok(ev));
                        }
                    }
                    Err(RecvError::Lagged(missed)) => {
                        // The feed dropped `missed` events we had not received.
                        // Recover exactly like a new stream starting at `cursor`:
                        // subscribe afresh (dropping the stale backlog), then read a
                        // new high-water mark and replay `(cursor, H']` from the table.
                        // Every event published after the resubscribe is on the new
                        // receiver; every event before it was committed before H' was
                        // read, so it is in the replay. Live events <= H' are skipped.
                        self.live = self.live.resubscribe();
                        tracing::debug!(
                            missed,
                            cursor = self.cursor,
                            "stream lagged; replaying from the table"
                        );
                        self.phase = Phase::Start;
                    }
                    // Only when the store itself is gone.
                    Err(RecvError::Closed) => return None,
                },
            }
        }
    }

    fn fail(&mut self, e: StoreError) -> Result<StoredEvent, StoreError> {
        self.phase = Phase::Done;
        Err(e)
    }
}
