//! Bounded subscribers (LIVE-06): what a WebSocket connection or SSE stream may hold in
//! memory. Frames are encoded once per durable event and shared ([`Frames`]); queued
//! bytes are bounded per subscriber and in total; replays run a few at a time.
//!
//! A subscriber's queue holds encoded frames ([`Frame`], shared `Bytes`). A frame takes
//! `min(len, queue_bytes)` of the subscriber's bound and `min(len, total_bytes)` of the
//! server-wide budget until it is written (WebSocket: sent and flushed; SSE: handed to
//! the connection and the next frame asked for), so a frame larger than the bound is
//! alone in its queue, and what all subscribers hold together (the WebSocket writer
//! copies a frame into its buffer) stays under `total_bytes`. A producer that finds no
//! room waits (backpressure) at most [`SubscriberLimits::stall`]; then the subscriber
//! is closed with [`Overflow`]'s reason, and it resumes with `after` = the last sequence
//! it received (LIVE-02 replay). Nothing grows with a subscriber that never reads.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use knife_protocol::{ApiError, DeltaMessage, ItemReset, StoredEvent, WsServerMessage};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};

/// Bounds of subscriber memory (LIVE-06). The defaults keep 1,000 subscribers within
/// `total_bytes` + the shared frame cache.
#[derive(Clone, Debug)]
pub struct SubscriberLimits {
    /// Bytes of frames one subscriber (a WebSocket connection, an SSE stream) may have
    /// queued or in flight (a larger frame takes the whole bound).
    pub queue_bytes: usize,
    /// Bytes of frames all subscribers together may have queued or in flight.
    pub total_bytes: usize,
    /// Longest a subscriber may go without room in its queue before it is closed.
    pub stall: Duration,
    /// Subscribers replaying history from the store at once (each holds one page).
    pub replays: usize,
    /// Bytes of encoded durable events kept for reuse by other subscribers.
    pub frame_cache_bytes: usize,
}

impl Default for SubscriberLimits {
    fn default() -> Self {
        Self {
            queue_bytes: 128 * 1024,
            total_bytes: 64 * 1024 * 1024,
            stall: Duration::from_secs(10),
            replays: 2,
            frame_cache_bytes: 32 * 1024 * 1024,
        }
    }
}

/// The server's subscriber budget, frame cache and replay slots. Cheap to clone.
#[derive(Clone)]
pub struct Subscribers {
    inner: Arc<Inner>,
}

struct Inner {
    limits: SubscriberLimits,
    total: Arc<Semaphore>,
    replays: Arc<Semaphore>,
    frames: Mutex<FrameCache>,
    /// Bytes taken from the total budget now, and the most ever (for benches/tests).
    held: AtomicUsize,
    peak: AtomicUsize,
    /// Subscribers closed for falling behind (overflow), since start.
    overflowed: AtomicU64,
    /// Subscribers replaying or waiting for a replay slot.
    replaying: AtomicUsize,
    /// A trim of freed memory is scheduled ([`Subscribers::trim_when_idle`]).
    trim_scheduled: AtomicBool,
    /// Trims run since start.
    trims: AtomicU64,
}

impl Default for Subscribers {
    fn default() -> Self {
        Self::new(SubscriberLimits::default())
    }
}

impl std::fmt::Debug for Subscribers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subscribers")
            .field("limits", &self.inner.limits)
            .field("held", &self.held_bytes())
            .finish()
    }
}

impl Subscribers {
    /// A budget with `limits` (each bound at least 1 byte, 1 replay).
    pub fn new(limits: SubscriberLimits) -> Self {
        let limits = SubscriberLimits {
            queue_bytes: limits.queue_bytes.max(1),
            total_bytes: limits.total_bytes.clamp(1, Semaphore::MAX_PERMITS),
            replays: limits.replays.max(1),
            ..limits
        };
        Self {
            inner: Arc::new(Inner {
                total: Arc::new(Semaphore::new(limits.total_bytes)),
                replays: Arc::new(Semaphore::new(limits.replays)),
                frames: Mutex::new(FrameCache::default()),
                held: AtomicUsize::new(0),
                peak: AtomicUsize::new(0),
                overflowed: AtomicU64::new(0),
                replaying: AtomicUsize::new(0),
                trim_scheduled: AtomicBool::new(false),
                trims: AtomicU64::new(0),
                limits,
            }),
        }
    }

    /// The bounds in force.
    pub fn limits(&self) -> &SubscriberLimits {
        &self.inner.limits
    }

    /// Bytes of the total budget frames hold now.
    pub fn held_bytes(&self) -> usize {
        self.inner.held.load(Ordering::Relaxed)
    }

    /// The most bytes of the total budget frames ever held at once.
    pub fn peak_bytes(&self) -> usize {
        self.inner.peak.load(Ordering::Relaxed)
    }

    /// How many subscribers were closed for falling behind their bound since start
    /// (LIVE-06). Each is told why and resumes from its last sequence.
    pub fn overflowed(&self) -> u64 {
        self.inner.overflowed.load(Ordering::Relaxed)
    }

    /// How many times freed memory was trimmed after a burst of replays (LIVE-06).
    pub fn trims(&self) -> u64 {
        self.inner.trims.load(Ordering::Relaxed)
    }

    /// A new subscriber's queue.
    pub(crate) fn queue(&self) -> (FrameTx, FrameRx) {
        let (tx, rx) = mpsc::unbounded_channel();
        let own = Arc::new(Semaphore::new(self.inner.limits.queue_bytes));
        (
            FrameTx {
                subs: self.clone(),
                own,
                tx,
            },
            FrameRx { rx },
        )
    }

    /// Waits for a replay slot (held while the subscriber reads history from the store).
    pub(crate) async fn replay_slot(&self) -> Option<ReplaySlot> {
        self.inner.replaying.fetch_add(1, Ordering::AcqRel);
        // Counted from here, so a subscriber waiting for a slot keeps the replays busy.
        let mut slot = ReplaySlot {
            subs: self.clone(),
            _permit: None,
        };
        slot._permit = Some(Arc::clone(&self.inner.replays).acquire_owned().await.ok()?);
        Some(slot)
    }

    /// Once no subscriber has replayed for [`TRIM_AFTER`], returns the memory the
    /// replays freed to the kernel (LIVE-06): a replay decodes each big event for its
    /// subscriber, and glibc keeps freed large blocks in its arenas
    /// (`knife_process::allocator`). Runs on a blocking thread; one at a time.
    fn trim_when_idle(&self) {
        if self.inner.trim_scheduled.swap(true, Ordering::AcqRel) {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            self.inner.trim_scheduled.store(false, Ordering::Release);
            return;
        };
        let inner = Arc::clone(&self.inner);
        runtime.spawn(async move {
            tokio::time::sleep(TRIM_AFTER).await;
            inner.trim_scheduled.store(false, Ordering::Release);
            // Replays running again: the slot given back last schedules the next trim.
            if inner.replaying.load(Ordering::Acquire) == 0 {
                let _ = tokio::task::spawn_blocking(knife_process::allocator::trim).await;
                inner.trims.fetch_add(1, Ordering::Relaxed);
            }
        });
    }

    /// The shared encoding of durable event `ev` (from the cache when another
    /// subscriber encoded it already).
    pub(crate) fn encoded(&self, ev: &StoredEvent) -> Arc<Encoded> {
        let mut cache = self
            .inner
            .frames
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(hit) = cache.map.get(&ev.sequence) {
            return Arc::clone(hit);
        }
        let json = serde_json::to_vec(ev).unwrap_or_default();
        let encoded = Arc::new(Encoded {
            sequence: ev.sequence,
            event_type: ev.event.event_type(),
            json: Bytes::from(json),
            ws: OnceLock::new(),
            sse: OnceLock::new(),
        });
        cache.insert(Arc::clone(&encoded), self.inner.limits.frame_cache_bytes);
        encoded
    }
}

/// One durable event encoded once: its `StoredEvent` JSON, and the WebSocket and SSE
/// frames built from it on first use (shared by every subscriber).
pub(crate) struct Encoded {
    sequence: u64,
    event_type: &'static str,
    json: Bytes,
    ws: OnceLock<Bytes>,
    sse: OnceLock<Bytes>,
}

impl Encoded {
    /// `{"type":"event","event":<StoredEvent>}` (= `WsServerMessage::Event`).
    pub(crate) fn ws(&self) -> Bytes {
        self.ws
            .get_or_init(|| {
                let mut out = Vec::with_capacity(self.json.len() + 32);
                out.extend_from_slice(br#"{"type":"event","event":"#);
                out.extend_from_slice(&self.json);
                out.push(b'}');
                Bytes::from(out)
            })
            .clone()
    }

    /// `id: <sequence>\nevent: <type>\ndata: <StoredEvent>\n\n`.
    pub(crate) fn sse(&self) -> Bytes {
        self.sse
            .get_or_init(|| {
                let head = format!("id: {}\nevent: {}\ndata: ", self.sequence, self.event_type);
                let mut out = Vec::with_capacity(self.json.len() + head.len() + 2);
                out.extend_from_slice(head.as_bytes());
                out.extend_from_slice(&self.json);
                out.extend_from_slice(b"\n\n");
                Bytes::from(out)
            })
            .clone()
    }
}

/// Recently encoded events by sequence, oldest evicted first past the byte bound.
#[derive(Default)]
struct FrameCache {
    map: HashMap<u64, Arc<Encoded>>,
    order: VecDeque<u64>,
    bytes: usize,
}

impl FrameCache {
    fn insert(&mut self, encoded: Arc<Encoded>, bound: usize) {
        // Each entry may hold its JSON and both frames.
        let cost = encoded.json.len() * 3;
        if cost > bound {
            return;
        }
        self.bytes += cost;
        self.order.push_back(encoded.sequence);
        self.map.insert(encoded.sequence, encoded);
        while self.bytes > bound {
            let Some(old) = self.order.pop_front() else {
                break;
            };
            if let Some(gone) = self.map.remove(&old) {
                self.bytes = self.bytes.saturating_sub(gone.json.len() * 3);
            }
        }
    }
}

/// An encoded frame in a subscriber's queue; dropping it (once written) gives its
/// bytes back to the subscriber's bound and the total budget.
pub(crate) struct Frame {
    pub(crate) bytes: Bytes,
    /// After this frame the subscriber is closed with this reason (overflow).
    pub(crate) close: Option<String>,
    _own: Option<OwnedSemaphorePermit>,
    _total: Option<Held>,
}

/// How long the replays must have been idle before freed memory is trimmed.
const TRIM_AFTER: Duration = Duration::from_millis(500);

/// A replay slot ([`Subscribers::replay_slot`]), held while the subscriber reads
/// history from the store. The last one given back schedules a trim of freed memory.
pub(crate) struct ReplaySlot {
    subs: Subscribers,
    _permit: Option<OwnedSemaphorePermit>,
}

impl Drop for ReplaySlot {
    fn drop(&mut self) {
        if self.subs.inner.replaying.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.subs.trim_when_idle();
        }
    }
}

/// Bytes of the total budget held by one frame.
struct Held {
    subs: Subscribers,
    bytes: usize,
    _permit: OwnedSemaphorePermit,
}

impl Drop for Held {
    fn drop(&mut self) {
        self.subs
            .inner
            .held
            .fetch_sub(self.bytes, Ordering::Relaxed);
    }
}

/// The subscriber fell behind: no room in its queue for [`SubscriberLimits::stall`].
#[derive(Debug, thiserror::Error)]
#[error(
    "this subscriber fell behind: its queue stayed full ({queue_bytes} bytes per subscriber, \
     {total_bytes} bytes for all) for {stall_ms} ms, so it is closed; resubscribe with \
     after = the last sequence you received to resume"
)]
pub(crate) struct Overflow {
    queue_bytes: usize,
    total_bytes: usize,
    stall_ms: u128,
}

/// The code of an [`Overflow`] error message.
pub(crate) const OVERFLOW_CODE: &str = "subscriber_overflow";

/// Producer side of a subscriber's queue (cloned per WebSocket subscription).
#[derive(Clone)]
pub(crate) struct FrameTx {
    subs: Subscribers,
    own: Arc<Semaphore>,
    tx: mpsc::UnboundedSender<Frame>,
}

/// Why a push did not queue its frame.
#[derive(Debug)]
pub(crate) enum PushError {
    /// The subscriber is gone.
    Closed,
    /// No room for too long; the subscriber was told and is being closed.
    Overflow,
}

impl FrameTx {
    /// Queues `bytes`, waiting for room at most the stall limit. On overflow the
    /// subscriber gets `overflow_frame(reason)` (outside the bound) and is closed.
    pub(crate) async fn push(
        &self,
        bytes: Bytes,
        overflow_frame: impl FnOnce(&str) -> Bytes,
    ) -> Result<(), PushError> {
        if self.tx.is_closed() {
            return Err(PushError::Closed);
        }
        let limits = &self.subs.inner.limits;
        let own_n = bytes.len().clamp(1, limits.queue_bytes);
        let total_n = bytes.len().clamp(1, limits.total_bytes);
        // The stall limit is on the subscriber's own bound: only a subscriber that does
        // not read is closed. The total budget is waited for (others free it as they
        // write, or are closed at their own bound).
        let own = Arc::clone(&self.own).acquire_many_owned(as_u32(own_n));
        let own = tokio::select! {
            own = tokio::time::timeout(limits.stall, own) => own,
            () = self.tx.closed() => return Err(PushError::Closed),
        };
        let got = match own {
            Ok(Ok(own)) => {
                let total = Arc::clone(&self.subs.inner.total).acquire_many_owned(as_u32(total_n));
                tokio::select! {
                    total = total => Ok(total.ok().map(|total| (own, total))),
                    () = self.tx.closed() => return Err(PushError::Closed),
                }
            }
            Ok(Err(_)) => Ok(None),
            Err(elapsed) => Err(elapsed),
        };
        match got {
            Ok(Some((own, total))) => {
                let held = self.subs.inner.held.fetch_add(total_n, Ordering::Relaxed) + total_n;
                self.subs.inner.peak.fetch_max(held, Ordering::Relaxed);
                let frame = Frame {
                    bytes,
                    close: None,
                    _own: Some(own),
                    _total: Some(Held {
                        subs: self.subs.clone(),
                        bytes: total_n,
                        _permit: total,
                    }),
                };
                self.tx.send(frame).map_err(|_| PushError::Closed)
            }
            Ok(None) => Err(PushError::Closed),
            Err(_) => {
                let reason = Overflow {
                    queue_bytes: limits.queue_bytes,
                    total_bytes: limits.total_bytes,
                    stall_ms: limits.stall.as_millis(),
                }
                .to_string();
                tracing::info!(%reason, "closing a slow subscriber");
                self.subs.inner.overflowed.fetch_add(1, Ordering::Relaxed);
                let _ = self.tx.send(Frame {
                    bytes: overflow_frame(&reason),
                    close: Some(reason),
                    _own: None,
                    _total: None,
                });
                Err(PushError::Overflow)
            }
        }
    }

    /// Resolves once the subscriber is gone (its queue's consumer dropped).
    pub(crate) async fn closed(&self) {
        self.tx.closed().await;
    }

    /// Queues a small control frame (subscribed, errors) outside the bound.
    pub(crate) fn push_control(&self, bytes: Bytes) {
        let _ = self.tx.send(Frame {
            bytes,
            close: None,
            _own: None,
            _total: None,
        });
    }
}

fn as_u32(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// Consumer side of a subscriber's queue.
pub(crate) struct FrameRx {
    rx: mpsc::UnboundedReceiver<Frame>,
}

impl FrameRx {
    /// The next frame; `None` once every producer is gone.
    pub(crate) async fn next(&mut self) -> Option<Frame> {
        self.rx.recv().await
    }
}

/// A WebSocket message encoded as its text frame.
pub(crate) fn ws_message(msg: &WsServerMessage) -> Bytes {
    Bytes::from(serde_json::to_vec(msg).unwrap_or_default())
}

/// One SSE frame: `event: <event>\ndata: <data>\n\n` (no `id:`; `data` is one line:
/// compact JSON or a message without newlines).
pub(crate) fn sse_frame(event: &str, data: &[u8]) -> Bytes {
    let mut out = Vec::with_capacity(data.len() + event.len() + 16);
    out.extend_from_slice(b"event: ");
    out.extend_from_slice(event.as_bytes());
    out.extend_from_slice(b"\ndata: ");
    for &b in data {
        // A message's own line breaks must not end the frame.
        out.push(if b == b'\n' || b == b'\r' { b' ' } else { b });
    }
    out.extend_from_slice(b"\n\n");
    Bytes::from(out)
}

/// The wire format of a subscriber.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Wire {
    /// `/api/ws` text frames (`WsServerMessage`).
    Ws,
    /// `GET /api/threads/{id}/events` frames.
    Sse,
}

impl Wire {
    /// A live delta (not durable: SSE without `id:`).
    pub(crate) fn delta(self, d: DeltaMessage) -> Bytes {
        match self {
            Wire::Sse => sse_frame("delta", &serde_json::to_vec(&d).unwrap_or_default()),
            Wire::Ws => ws_message(&WsServerMessage::Delta(d)),
        }
    }

    /// A live reset.
    pub(crate) fn reset(self, r: &ItemReset) -> Bytes {
        match self {
            Wire::Ws => ws_message(&WsServerMessage::Reset(r.clone())),
            Wire::Sse => sse_frame("reset", &serde_json::to_vec(r).unwrap_or_default()),
        }
    }

    /// An error: WebSocket `{"type":"error","error":{"code","message"}}`; SSE
    /// `event: error` with the message as data.
    pub(crate) fn error(self, code: &str, message: &str) -> Bytes {
        match self {
            Wire::Ws => ws_message(&WsServerMessage::Error {
                error: ApiError {
                    code: code.into(),
                    message: message.to_owned(),
                    files: Vec::new(),
                },
            }),
            Wire::Sse => sse_frame("error", message.as_bytes()),
        }
    }
}

#[cfg(test)]
#[path = "subscribers_tests.rs"]
mod tests;
