// Live deltas between nodes on PostgreSQL (issue 17 item 2): the sender packs a node's
// relayed live messages into chunked NOTIFY payloads; the receiver reassembles them.

//! Channel `knife_deltas`. A NOTIFY payload is at most 8000 bytes, so a batch of
//! messages (JSON array of [`RelayedLive`]) is cut into frames
//! `"<sender hex> <message no> <index> <count> <data>"` with at most [`FRAME_DATA`]
//! bytes of data, cut at character boundaries. One sender task per node sends them in
//! order (one statement per batch, `pg_notify` over `unnest` of the frames, which
//! PostgreSQL delivers in that order), so a receiver gets each sender's frames in order:
//! a frame that does not continue the sender's current message means a frame was lost,
//! and that message is dropped. Memory is bounded: one partial message per sender, at
//! most [`MAX_MESSAGE`] bytes, at most [`MAX_SENDERS`] senders, partials older than
//! [`STALE`] dropped; the outbox holds at most [`OUTBOX`] messages (more are dropped:
//! deltas are best effort, the durable snapshots still carry the text).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use knife_store::RelayedLive;
use tokio::sync::{broadcast, mpsc};

/// The NOTIFY channel of relayed live messages.
pub(crate) const DELTA_CHANNEL: &str = "knife_deltas";

/// Bytes of message data per NOTIFY payload (PostgreSQL's limit is 8000 with the header).
pub(crate) const FRAME_DATA: usize = 7_600;

/// A delta whose text is longer than this is sent as several consecutive deltas.
const MAX_TEXT: usize = 32 * 1024;

/// Serialized bytes per message batch (a batch is then a few frames).
const MAX_BATCH: usize = 64 * 1024;

/// Largest reassembled message a receiver keeps.
pub(crate) const MAX_MESSAGE: usize = 256 * 1024;

/// Senders with a partial message a receiver keeps at once.
pub(crate) const MAX_SENDERS: usize = 64;

/// A partial message older than this is dropped (its sender went away mid-message).
pub(crate) const STALE: Duration = Duration::from_secs(10);

/// Messages waiting to be sent; more are dropped.
pub(crate) const OUTBOX: usize = 4096;

/// The sending side of one node: queue into [`Outbox::send`], the task sends.
#[derive(Clone, Debug)]
pub(crate) struct Outbox {
    tx: mpsc::Sender<RelayedLive>,
}

impl Outbox {
    /// An outbox and the receiver its sender task ([`run_sender`]) drains.
    pub(crate) fn new() -> (Outbox, mpsc::Receiver<RelayedLive>) {
        let (tx, rx) = mpsc::channel(OUTBOX);
        (Outbox { tx }, rx)
    }

    /// Queues `message`; drops it when the outbox is full (the database is slow or gone).
    pub(crate) fn send(&self, message: RelayedLive) {
        if self.tx.try_send(message).is_err() {
            tracing::debug!("live relay outbox full: a delta for the other nodes was dropped");
        }
    }
}

/// Sends what the outbox receives, in order, until every [`Outbox`] is dropped.
pub(crate) async fn run_sender(
    pool: deadpool_postgres::Pool,
    sender: u64,
    mut rx: mpsc::Receiver<RelayedLive>,
) {
    let mut message_no = 0u64;
    while let Some(first) = rx.recv().await {
        let mut batch = vec![first];
        while batch.len() < 512 {
            match rx.try_recv() {
                Ok(m) => batch.push(m),
                Err(_) => break,
            }
        }
        let mut frames = Vec::new();
        for group in groups(split_long(batch)) {
            message_no += 1;
            frames.extend(frames_of(sender, message_no, &group));
        }
        if let Err(e) = send_frames(&pool, &frames).await {
            tracing::debug!(error = %knife_store::StoreError::from(e),
                frames = frames.len(), "could not relay live deltas to the other nodes");
        }
    }
}

async fn send_frames(pool: &deadpool_postgres::Pool, frames: &[String]) -> crate::PgResult<()> {
    let client = pool.get().await?;
    let statement = client
        .prepare_cached("SELECT pg_notify($1, frame) FROM unnest($2::TEXT[]) AS frame")
        .await?;
    client
        .execute(&statement, &[&DELTA_CHANNEL, &frames])
        .await?;
    Ok(())
}

/// `batch` with every delta longer than [`MAX_TEXT`] cut into consecutive deltas.
fn split_long(batch: Vec<RelayedLive>) -> Vec<RelayedLive> {
    let mut out = Vec::with_capacity(batch.len());
    for message in batch {
        match message {
            RelayedLive::Delta { delta, generation } if delta.text.len() > MAX_TEXT => {
                let mut offset = delta.offset;
                for piece in cut(&delta.text, MAX_TEXT) {
                    let mut part = delta.clone();
                    part.offset = offset;
                    part.text = piece.to_owned();
                    offset += piece.len() as u64;
                    out.push(RelayedLive::Delta {
                        delta: part,
                        generation,
                    });
                }
            }
            other => out.push(other),
        }
    }
    out
}

/// The messages as JSON arrays of at most about [`MAX_BATCH`] bytes each.
fn groups(messages: Vec<RelayedLive>) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::from("[");
    for message in messages {
        let Ok(json) = serde_json::to_string(&message) else {
            continue;
        };
        if current.len() > 1 && current.len() + json.len() > MAX_BATCH {
            current.push(']');
            out.push(std::mem::replace(&mut current, String::from("[")));
        }
        if current.len() > 1 {
            current.push(',');
        }
        current.push_str(&json);
    }
    if current.len() > 1 {
        current.push(']');
        out.push(current);
    }
    out
}

/// The NOTIFY payloads of message `message_no` of `sender`.
pub(crate) fn frames_of(sender: u64, message_no: u64, json: &str) -> Vec<String> {
    let pieces = cut(json, FRAME_DATA);
    let count = pieces.len();
    pieces
        .into_iter()
        .enumerate()
        .map(|(i, data)| format!("{sender:x} {message_no} {i} {count} {data}"))
        .collect()
}

/// `text` in pieces of at most `max` bytes, cut at character boundaries.
fn cut(text: &str, max: usize) -> Vec<&str> {
    let mut pieces = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        let mut end = rest.len().min(max.max(4));
        while !rest.is_char_boundary(end) {
            end -= 1;
        }
        let (piece, tail) = rest.split_at(end);
        pieces.push(piece);
        rest = tail;
    }
    pieces
}

/// One sender's message being reassembled.
struct Partial {
    message_no: u64,
    count: usize,
    next: usize,
    data: String,
    started: Instant,
}

/// The receiving side on one LISTEN connection: frames in, whole messages out.
pub(crate) struct Reassembler {
    /// This node's own sender id: its frames are skipped.
    own: u64,
    partial: HashMap<u64, Partial>,
    out: broadcast::Sender<Arc<RelayedLive>>,
}

impl Reassembler {
    pub(crate) fn new(own: u64, out: broadcast::Sender<Arc<RelayedLive>>) -> Reassembler {
        Reassembler {
            own,
            partial: HashMap::new(),
            out,
        }
    }

    /// Bytes held in partial messages (tests).
    #[cfg(test)]
    fn held(&self) -> usize {
        self.partial.values().map(|p| p.data.len()).sum()
    }

    /// Takes one NOTIFY payload; publishes the messages it completes.
    pub(crate) fn frame(&mut self, payload: &str) {
        let mut fields = payload.splitn(5, ' ');
        let (Some(sender), Some(no), Some(index), Some(count), Some(data)) = (
            fields.next().and_then(|f| u64::from_str_radix(f, 16).ok()),
            fields.next().and_then(|f| f.parse::<u64>().ok()),
            fields.next().and_then(|f| f.parse::<usize>().ok()),
            fields.next().and_then(|f| f.parse::<usize>().ok()),
            fields.next(),
        ) else {
            tracing::debug!("ignored a malformed knife_deltas payload");
            return;
        };
        if sender == self.own || count == 0 || index >= count {
            return;
        }
        let now = Instant::now();
        self.partial
            .retain(|_, p| now.duration_since(p.started) < STALE);
        if index == 0 {
            if count == 1 {
                self.partial.remove(&sender);
                self.publish(data);
                return;
            }
            if self.partial.len() >= MAX_SENDERS && !self.partial.contains_key(&sender) {
                let oldest = self
                    .partial
                    .iter()
                    .min_by_key(|(_, p)| p.started)
                    .map(|(s, _)| *s);
                if let Some(oldest) = oldest {
                    self.partial.remove(&oldest);
                }
            }
            self.partial.insert(
                sender,
                Partial {
                    message_no: no,
                    count,
                    next: 1,
                    data: data.to_owned(),
                    started: now,
                },
            );
            return;
        }
        let Some(p) = self.partial.get_mut(&sender) else {
            return; // its first frame was lost
        };
        if p.message_no != no || p.next != index || p.count != count {
            // A frame of the current message was lost: it can never complete.
            self.partial.remove(&sender);
            return;
        }
        if p.data.len() + data.len() > MAX_MESSAGE {
            self.partial.remove(&sender);
            return;
        }
        p.data.push_str(data);
        p.next += 1;
        if p.next == p.count
            && let Some(done) = self.partial.remove(&sender)
        {
            self.publish(&done.data);
        }
    }

    fn publish(&self, json: &str) {
        match serde_json::from_str::<Vec<RelayedLive>>(json) {
            Ok(messages) => {
                for message in messages {
                    // No receiver: nobody on this node follows live messages.
                    let _ = self.out.send(Arc::new(message));
                }
            }
            Err(e) => tracing::debug!(error = %e, "ignored an undecodable knife_deltas message"),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use knife_protocol::{DeltaField, ItemDelta, ThreadId, TurnItemId};

    fn delta(text: &str) -> RelayedLive {
        RelayedLive::Delta {
            delta: ItemDelta {
                thread_id: ThreadId::from("thread:t"),
                run_id: None,
                item_id: TurnItemId::from("item:i"),
                ordinal: 1,
                field: DeltaField::Text,
                offset: 0,
                text: text.to_owned(),
            },
            generation: 0,
        }
    }

    fn receiver() -> (Reassembler, broadcast::Receiver<Arc<RelayedLive>>) {
        let (tx, rx) = broadcast::channel(64);
        (Reassembler::new(1, tx), rx)
    }

    /// A long delta (multi-byte text) crosses as several frames under the NOTIFY
    /// limit and comes out whole, split into consecutive deltas.
    #[test]
    fn a_long_delta_is_chunked_under_the_payload_limit_and_reassembled() {
        let text = "żółw ".repeat(20_000); // 140 kB, 2-byte characters
        let mut frames = Vec::new();
        for (n, group) in groups(split_long(vec![delta(&text)])).iter().enumerate() {
            frames.extend(frames_of(7, n as u64 + 1, group));
        }
        assert!(frames.len() > 10);
        assert!(frames.iter().all(|f| f.len() < 8000), "under 8000 bytes");
        let (mut r, mut rx) = receiver();
        for f in &frames {
            r.frame(f);
        }
        let mut got = String::new();
        while let Ok(m) = rx.try_recv() {
            let RelayedLive::Delta { delta, .. } = &*m else {
                panic!("{m:?}")
            };
            assert_eq!(delta.offset, got.len() as u64);
            got.push_str(&delta.text);
        }
        assert_eq!(got, text);
        assert_eq!(r.held(), 0);
    }

    /// A lost frame drops its message, frees its buffer at the sender's next message,
    /// and the next message still arrives; own frames are skipped.
    #[test]
    fn a_lost_frame_drops_its_message_and_leaks_nothing() {
        let big = serde_json::to_string(&vec![delta(&"x".repeat(20_000))]).unwrap();
        let small = serde_json::to_string(&vec![delta("next")]).unwrap();
        let first = frames_of(9, 1, &big);
        assert!(first.len() >= 3);
        let (mut r, mut rx) = receiver();
        r.frame(&first[0]);
        r.frame(&first[2]); // first[1] lost
        assert_eq!(r.held(), 0, "an incomplete message is dropped at the gap");
        r.frame(&first[0]);
        assert!(r.held() > 0);
        for f in frames_of(9, 2, &small) {
            r.frame(&f); // the sender moved on: the partial is replaced
        }
        assert_eq!(r.held(), 0);
        let got = rx.try_recv().unwrap();
        assert_eq!(*got, delta("next"));
        assert!(rx.try_recv().is_err());
        for f in frames_of(1, 3, &small) {
            r.frame(&f); // this node's own
        }
        assert!(rx.try_recv().is_err());
        // Many senders that never finish: bounded.
        for sender in 100..(100 + 3 * MAX_SENDERS as u64) {
            r.frame(&frames_of(sender, 1, &big)[0]);
        }
        assert!(r.partial.len() <= MAX_SENDERS);
    }
}
