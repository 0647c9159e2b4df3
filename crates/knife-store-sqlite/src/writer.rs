// The single writer thread: owns the only read-write connection, runs write jobs one
// at a time (each its own `BEGIN IMMEDIATE` transaction) and publishes after COMMIT.

use crate::error::DbError;
use crate::fold::{FoldMode, append_event, apply_event, clear_projections, read_version, seq_u64};
use knife_protocol::{DomainEvent, StoredEvent};
use knife_store::RowGuard;
use knife_store::StoreError;
use rusqlite::{Connection, TransactionBehavior};
use std::panic::AssertUnwindSafe;
use std::sync::mpsc;
use std::time::Duration;
use tokio::sync::{broadcast, oneshot};

/// A unit of work for the writer thread. It gets exclusive use of the connection.
pub(crate) type Job = Box<dyn FnOnce(&mut Connection) + Send + 'static>;

/// Handle to the writer thread: a channel of jobs. The thread exits (closing the
/// connection) when every handle is dropped.
#[derive(Debug)]
pub(crate) struct Writer {
    jobs: mpsc::Sender<Job>,
}

impl Writer {
    /// Starts the writer thread owning `conn`. Once the writer has had no job for
    /// `idle_checkpoint` after a write, it checkpoints the WAL into the database file
    /// and truncates it to zero bytes, so the space the WAL held is free again
    /// (SPEC.md SEC-07; SQLite's own `wal_autocheckpoint` only checkpoints, it never
    /// shrinks the file).
    pub(crate) fn spawn(
        mut conn: Connection,
        idle_checkpoint: Duration,
    ) -> std::io::Result<Writer> {
        // Unbounded std channel: sending never blocks the async caller; back-pressure
        // comes from callers awaiting their reply.
        let (jobs, rx) = mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name("knife-store-writer".into())
            .spawn(move || {
                let mut wrote_since_checkpoint = false;
                loop {
                    let job = if wrote_since_checkpoint {
                        match rx.recv_timeout(idle_checkpoint) {
                            Ok(job) => job,
                            Err(mpsc::RecvTimeoutError::Timeout) => {
                                wrote_since_checkpoint = !checkpoint_truncate(&conn);
                                continue;
                            }
                            Err(mpsc::RecvTimeoutError::Disconnected) => break,
                        }
                    } else {
                        match rx.recv() {
                            Ok(job) => job,
                            Err(_) => break,
                        }
                    };
                    wrote_since_checkpoint = true;
                    // A panicking job must not take the writer down for everyone: its
                    // open transaction rolls back while unwinding and its caller sees
                    // `WriterGone` (its reply sender was dropped).
                    if std::panic::catch_unwind(AssertUnwindSafe(|| job(&mut conn))).is_err() {
                        tracing::error!("a knife-store write job panicked; it was rolled back");
                    }
                }
                checkpoint_truncate(&conn);
            })?;
        Ok(Writer { jobs })
    }

    /// Runs `f` on the writer thread and awaits its result.
    ///
    /// Cancellation: once this future has been polled the job is queued; dropping
    /// the future does not unqueue it, so the write may still commit (and publish).
    pub(crate) async fn run<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection) -> Result<T, DbError> + Send + 'static,
    {
        let (tx, rx) = oneshot::channel();
        let job: Job = Box::new(move |conn| {
            // The caller may be gone (future dropped); the result is then discarded.
            let _ = tx.send(f(conn).map_err(StoreError::from));
        });
        self.jobs.send(job).map_err(|_| StoreError::WriterGone)?;
        rx.await.map_err(|_| StoreError::WriterGone)?
    }
}

/// The body of `write` / `write_if`, run on the writer thread: in ONE `BEGIN IMMEDIATE`
/// transaction, checks `guard` (if any), appends `events`, folds each into the
/// projections, commits, then publishes the stored events on `live` in order.
///
/// Returns `Ok(None)` (nothing written, nothing published) when the guard failed.
/// Any error rolls the whole transaction back (the `Transaction` drop does it).
pub(crate) fn write_batch(
    conn: &mut Connection,
    guard: Option<&RowGuard>,
    events: Vec<DomainEvent>,
    live: &broadcast::Sender<StoredEvent>,
) -> Result<Option<Vec<StoredEvent>>, DbError> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    if let Some(guard) = guard {
        // Compare-and-set (MGR-47): the version is re-read under the write lock, so no
        // other write can land between this check and the commit.
        let current = read_version(&tx, guard.kind.table(), &guard.id)?;
        if current != guard.expected_version {
            tracing::debug!(
                kind = ?guard.kind, id = %guard.id, expected = ?guard.expected_version,
                ?current, "compare-and-set write skipped: the row moved"
            );
            return Ok(None);
        }
    }
    let mut stored = Vec::with_capacity(events.len());
    for event in events {
        let ev = append_event(&tx, event)?;
        apply_event(&tx, &ev, FoldMode::Write)?;
        stored.push(ev);
    }
    tx.commit()?;
    // Published only after COMMIT, from the single writer thread, so the live feed
    // is in sequence order and never shows an event a reader could not find.
    for ev in &stored {
        // An error only means nobody is subscribed right now.
        let _ = live.send(ev.clone());
    }
    Ok(Some(stored))
}

/// The body of `rebuild`: in one transaction, empties the projections and folds every
/// event in sequence order through [`apply_event`]. Returns the number of events.
pub(crate) fn rebuild_projections(conn: &mut Connection) -> Result<u64, DbError> {
    const PAGE: i64 = 1024;
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    clear_projections(&tx)?;
    let mut after = 0_i64;
    let mut count = 0_u64;
    loop {
        let page: Vec<(i64, String)> = tx
            .prepare_cached(
                "SELECT sequence, payload_json FROM events WHERE sequence > ?1 \
                 ORDER BY sequence LIMIT ?2",
            )?
            .query_map([after, PAGE], |row| Ok((row.get(0)?, row.get(1)?)))?
            .collect::<Result<_, _>>()?;
        let Some(last) = page.last().map(|p| p.0) else {
            break;
        };
        for (sequence, payload) in &page {
            let event: DomainEvent = serde_json::from_str(payload)?;
            apply_event(
                &tx,
                &StoredEvent {
                    sequence: seq_u64(*sequence),
                    event,
                },
                FoldMode::Rebuild,
            )?;
            count += 1;
        }
        after = last;
    }
    tx.commit()?;
    Ok(count)
}

/// `PRAGMA wal_checkpoint(TRUNCATE)`: copies every committed WAL frame into the
/// database file and truncates the WAL to zero bytes. Returns whether it completed; a
/// checkpoint blocked by a reader (busy) or refused by a full disk is retried at the
/// next idle moment and only logged (SPEC.md SEC-07).
pub(crate) fn checkpoint_truncate(conn: &Connection) -> bool {
    // Row: (busy, frames in the WAL, frames checkpointed); busy = 1 when a reader or
    // writer kept it from finishing.
    match conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |row| {
        row.get::<_, i64>(0)
    }) {
        Ok(0) => true,
        Ok(_) => {
            tracing::debug!("WAL checkpoint blocked by a reader; retrying when idle");
            false
        }
        Err(e) => {
            tracing::warn!(error = %e, "cannot checkpoint the WAL (is the disk full?); retrying when idle");
            false
        }
    }
}
