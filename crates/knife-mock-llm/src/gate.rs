// The gate of a gated mock LLM: holds every HTTP body chunk until a test releases it.
// Owns the permit accounting and the count of chunks sent.

use std::sync::Arc;

use tokio::sync::{Semaphore, watch};

/// Releases the mock LLM's HTTP body chunks one by one (shared by all streams
/// of one server; clones share the same gate).
///
/// When the server was started with `gated: true`, each body chunk (after
/// splitting) waits for one permit before it is written, so a test can stop a
/// stream exactly where it wants: `release(3)` lets exactly three more chunks
/// out, across all streams, in the order they ask. Response *headers* are not
/// gated. When `gated` is false the gate starts open and only counts chunks.
#[derive(Debug, Clone)]
pub struct Gate {
    permits: Arc<Semaphore>,
    sent: Arc<watch::Sender<u64>>,
}

impl Gate {
    pub(crate) fn new(gated: bool) -> Self {
        let gate = Self {
            permits: Arc::new(Semaphore::new(0)),
            sent: Arc::new(watch::Sender::new(0)),
        };
        if !gated {
            gate.open();
        }
        gate
    }

    /// Lets `n` more body chunks out.
    pub fn release(&self, n: usize) {
        self.permits.add_permits(n);
    }

    /// Opens the gate for good: every chunk, now and later, goes out at once.
    pub fn open(&self) {
        // A closed semaphore fails every acquire; `pass` treats that as "go".
        self.permits.close();
    }

    /// Whether the gate was opened for good.
    pub fn is_open(&self) -> bool {
        self.permits.is_closed()
    }

    /// Body chunks handed to the HTTP connection so far (all streams).
    pub fn chunks_sent(&self) -> u64 {
        *self.sent.borrow()
    }

    /// Waits until at least `n` body chunks were handed to the HTTP connection.
    pub async fn wait_sent(&self, n: u64) {
        let mut rx = self.sent.subscribe();
        // The sender lives in `self`, so `wait_for` cannot see a closed channel.
        let _ = rx.wait_for(|sent| *sent >= n).await;
    }

    /// Waits for one permit (or an open gate).
    pub(crate) async fn pass(&self) {
        if let Ok(permit) = self.permits.acquire().await {
            // The permit is consumed: one release = one chunk.
            permit.forget();
        }
    }

    /// Counts one chunk handed to the connection.
    pub(crate) fn mark_sent(&self) {
        self.sent.send_modify(|sent| *sent += 1);
    }
}
