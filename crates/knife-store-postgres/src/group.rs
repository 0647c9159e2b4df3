// Group commit on PostgreSQL: one committer task per node takes the appends queued on
// the node and writes them together in one transaction under the cluster-wide lock.

//! Why: every append holds the cluster-wide append lock (crate::write::APPEND_LOCK)
//! for a few round trips and its COMMIT (a WAL flush with `synchronous_commit=on`), so
//! the number of transactions, not the number of events, caps the cluster. The appends
//! a node's callers make while its previous transaction runs wait in a queue and share
//! the next one (crate::write::write_group: each stays atomic, fenced and guarded on
//! its own, and one caller's bad append fails only itself), as SQLite's writer thread
//! groups them (knife-store-sqlite `writer.rs`).

use crate::write::{self, Append, Outcome};
use std::sync::Arc;
use tokio::sync::{Notify, mpsc, oneshot};

/// Events one group holds at most: the appends behind wait for the next transaction.
const GROUP_EVENTS: usize = 4096;

/// One queued append and who waits for its outcome.
struct Queued {
    append: Append,
    reply: oneshot::Sender<Outcome>,
}

/// The node's queue of appends (cheap to clone). The committer task ends once every
/// handle is gone and the queue is drained.
#[derive(Clone, Debug)]
pub(crate) struct Committer {
    queue: mpsc::UnboundedSender<Queued>,
}

impl Committer {
    /// Starts the committer task on `pool`; `group_appends` (at least 1) caps the
    /// appends of one transaction; `wake` is notified after each commit that wrote
    /// events (the node's live pump reads them at once).
    pub(crate) fn start(
        pool: deadpool_postgres::Pool,
        wake: Arc<Notify>,
        group_appends: usize,
    ) -> Committer {
        let (queue, rx) = mpsc::unbounded_channel();
        tokio::spawn(run(pool, wake, rx, group_appends.max(1)));
        Committer { queue }
    }

    /// Queues `append` and waits for its outcome. Once this future has been polled the
    /// append is queued: dropping the future does not take it back, so it may still
    /// commit (the store contract's rule for every write).
    pub(crate) async fn append(&self, append: Append) -> Outcome {
        let (reply, answer) = oneshot::channel();
        self.queue
            .send(Queued { append, reply })
            .map_err(|_| knife_store::StoreError::WriterGone)?;
        answer
            .await
            .map_err(|_| knife_store::StoreError::WriterGone)?
    }
}

/// The committer: takes the first queued append, every append queued behind it (up to
/// `group_appends` appends and [`GROUP_EVENTS`] events), writes them in one
/// transaction and answers each caller.
async fn run(
    pool: deadpool_postgres::Pool,
    wake: Arc<Notify>,
    mut rx: mpsc::UnboundedReceiver<Queued>,
    group_appends: usize,
) {
    while let Some(first) = rx.recv().await {
        let mut events = first.append.events.len();
        let mut group = vec![first];
        while group.len() < group_appends && events < GROUP_EVENTS {
            match rx.try_recv() {
                Ok(next) => {
                    events += next.append.events.len();
                    group.push(next);
                }
                Err(_) => break,
            }
        }
        let (appends, replies): (Vec<Append>, Vec<oneshot::Sender<Outcome>>) =
            group.into_iter().map(|q| (q.append, q.reply)).unzip();
        let outcomes = match pool.get().await {
            Ok(mut client) => write::write_group(&mut client, &appends).await,
            Err(e) => {
                let error = knife_store::StoreError::from(crate::error::PgError::from(e));
                let mut outcomes: Vec<Outcome> = (1..appends.len())
                    .map(|_| Err(write::copy_error(&error)))
                    .collect();
                outcomes.insert(0, Err(error));
                outcomes
            }
        };
        if outcomes
            .iter()
            .any(|o| matches!(o, Ok(Some(stored)) if !stored.is_empty()))
        {
            // Our own commit: wake the pump now instead of waiting for the NOTIFY.
            wake.notify_one();
        }
        for (reply, outcome) in replies.into_iter().zip(outcomes) {
            // The caller may be gone (its future dropped); the outcome is then unread.
            let _ = reply.send(outcome);
        }
    }
}
