// Leases and fenced writes on SQLite (SPEC.md SCALE-04): the `thread_leases` table, one
// local node, the machine's clock; the same epochs and fencing as on PostgreSQL.

use crate::SqliteStore;
use crate::error::DbError;
use knife_protocol::{DomainEvent, StoredEvent, ThreadId};
use knife_store::leases::{epoch_i64, epoch_u64, from_micros, ttl_micros};
use knife_store::{Lease, Leases, RowGuard, StoreError, TakeScope};
use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};
use std::time::Duration;

/// "Now" of the lease clock in microseconds: the one machine's clock (a SQLite file
/// has one node).
fn now_us() -> i64 {
    chrono::Utc::now().timestamp_micros()
}

fn read_lease(conn: &Connection, thread: &str) -> Result<Option<Lease>, DbError> {
    Ok(conn
        .prepare_cached(
            "SELECT node, epoch, expires_at_us FROM thread_leases WHERE thread_id = ?1",
        )?
        .query_row([thread], |r| {
            Ok(Lease {
                thread_id: ThreadId::from(thread),
                node: r.get(0)?,
                epoch: epoch_u64(r.get(1)?),
                expires_at: from_micros(r.get(2)?),
            })
        })
        .optional()?)
}

/// Sets the thread's lease to `node` with epoch + 1 (1 for a new row), expiring
/// `ttl` from `now`. Run inside the caller's transaction.
fn grant(
    conn: &Connection,
    thread: &str,
    node: &str,
    now: i64,
    ttl: i64,
) -> Result<Lease, DbError> {
    let (epoch, expires): (i64, i64) = conn
        .prepare_cached(
            "INSERT INTO thread_leases (thread_id, node, epoch, expires_at_us) \
             VALUES (?1, ?2, 1, ?3) \
             ON CONFLICT (thread_id) DO UPDATE SET node = excluded.node, \
                 epoch = thread_leases.epoch + 1, expires_at_us = excluded.expires_at_us \
             RETURNING epoch, expires_at_us",
        )?
        .query_row(params![thread, node, now.saturating_add(ttl)], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })?;
    Ok(Lease {
        thread_id: ThreadId::from(thread),
        node: node.to_owned(),
        epoch: epoch_u64(epoch),
        expires_at: from_micros(expires),
    })
}

/// The fence of a write: the thread's lease must still be `lease`'s node and epoch.
/// Called inside the append transaction (under SQLite's write lock).
pub(crate) fn check_fence(conn: &Connection, lease: &Lease) -> Result<(), DbError> {
    let current = read_lease(conn, lease.thread_id.as_str())?;
    match current {
        Some(c) if c.node == lease.node && c.epoch == lease.epoch => Ok(()),
        other => Err(fenced(lease, other).into()),
    }
}

/// The [`StoreError::Fenced`] of `lease`, given the thread's current lease row.
pub(crate) fn fenced(lease: &Lease, current: Option<Lease>) -> StoreError {
    StoreError::Fenced {
        thread_id: lease.thread_id.clone(),
        node: lease.node.clone(),
        epoch: lease.epoch,
        current: current.map_or_else(
            || "no lease".to_owned(),
            |c| format!("node {} at epoch {}", c.node, c.epoch),
        ),
    }
}

#[async_trait::async_trait]
impl Leases for SqliteStore {
    async fn acquire_lease(
        &self,
        thread: &ThreadId,
        node: &str,
        ttl: Duration,
    ) -> Result<Lease, StoreError> {
        let (thread, node, ttl) = (thread.as_str().to_owned(), node.to_owned(), ttl_micros(ttl));
        // In the transaction of the appends queued with it (LIVE-07: one lease per
        // resumed thread), under the same write lock: the read and the grant are atomic.
        self.inner
            .writer
            .run_grouped(move |conn| {
                let now = now_us();
                if let Some(held) = read_lease(conn, &thread)?
                    && held.node != node
                    && held.expires_at.timestamp_micros() > now
                {
                    return Err(StoreError::LeaseHeld {
                        thread_id: held.thread_id,
                        node: held.node,
                        expires_at: held.expires_at,
                    }
                    .into());
                }
                grant(conn, &thread, &node, now, ttl)
            })
            .await
    }

    async fn renew_lease(&self, lease: &Lease, ttl: Duration) -> Result<Lease, StoreError> {
        let (lease, ttl) = (lease.clone(), ttl_micros(ttl));
        self.inner
            .writer
            .run_grouped(move |conn| {
                let expires = now_us().saturating_add(ttl);
                let changed = conn
                    .prepare_cached(
                        "UPDATE thread_leases SET expires_at_us = ?4 \
                         WHERE thread_id = ?1 AND node = ?2 AND epoch = ?3",
                    )?
                    .execute(params![
                        lease.thread_id.as_str(),
                        lease.node,
                        epoch_i64(lease.epoch),
                        expires
                    ])?;
                if changed == 0 {
                    let current = read_lease(conn, lease.thread_id.as_str())?;
                    return Err(fenced(&lease, current).into());
                }
                Ok(Lease {
                    expires_at: from_micros(expires),
                    ..lease
                })
            })
            .await
    }

    async fn release_lease(&self, lease: &Lease) -> Result<(), StoreError> {
        let lease = lease.clone();
        self.inner
            .writer
            .run_grouped(move |conn| {
                conn.prepare_cached(
                    "UPDATE thread_leases SET expires_at_us = MIN(expires_at_us, ?4) \
                     WHERE thread_id = ?1 AND node = ?2 AND epoch = ?3",
                )?
                .execute(params![
                    lease.thread_id.as_str(),
                    lease.node,
                    epoch_i64(lease.epoch),
                    now_us()
                ])?;
                Ok(())
            })
            .await
    }

    async fn get_lease(&self, thread: &ThreadId) -> Result<Option<Lease>, StoreError> {
        let thread = thread.as_str().to_owned();
        self.read(move |c| read_lease(c, &thread)).await
    }

    async fn live_leases(&self) -> Result<Vec<Lease>, StoreError> {
        self.read(|c| {
            let mut stmt = c.prepare_cached(
                "SELECT thread_id, node, epoch, expires_at_us FROM thread_leases \
                 WHERE expires_at_us > ?1 ORDER BY thread_id",
            )?;
            let rows = stmt.query_map([now_us()], |r| {
                Ok(Lease {
                    thread_id: ThreadId::from(r.get::<_, String>(0)?.as_str()),
                    node: r.get(1)?,
                    epoch: epoch_u64(r.get(2)?),
                    expires_at: from_micros(r.get(3)?),
                })
            })?;
            Ok(rows.collect::<Result<_, _>>()?)
        })
        .await
    }

    async fn take_expired_leases(
        &self,
        node: &str,
        ttl: Duration,
        scope: TakeScope,
        limit: usize,
        exclude: &[ThreadId],
    ) -> Result<Vec<Lease>, StoreError> {
        let (node, ttl) = (node.to_owned(), ttl_micros(ttl));
        let exclude =
            serde_json::to_string(&exclude.iter().map(ThreadId::as_str).collect::<Vec<_>>())?;
        let own = scope == TakeScope::ExpiredOrOwn;
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.inner
            .writer
            .run(move |conn| {
                // One writer: the whole sweep is one transaction, nobody interleaves.
                let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
                let now = now_us();
                let ids: Vec<String> = {
                    let mut stmt = tx.prepare_cached(
                        "SELECT t.id FROM threads t \
                         LEFT JOIN thread_leases l ON l.thread_id = t.id \
                         WHERE t.claimed_at_us IS NOT NULL AND t.parent_thread_id IS NULL \
                           AND (l.thread_id IS NULL OR l.expires_at_us <= ?1 \
                                OR (?2 AND l.node = ?3)) \
                           AND t.id NOT IN (SELECT value FROM json_each(?5)) \
                         ORDER BY t.claimed_at_us, t.id LIMIT ?4",
                    )?;
                    let rows =
                        stmt.query_map(params![now, own, node, limit, exclude], |r| r.get(0))?;
                    rows.collect::<Result<_, _>>()?
                };
                let mut taken = Vec::with_capacity(ids.len());
                for id in ids {
                    taken.push(grant(&tx, &id, &node, now, ttl)?);
                }
                tx.commit()?;
                Ok(taken)
            })
            .await
    }

    async fn write_fenced(
        &self,
        leases: &[Lease],
        guard: Option<RowGuard>,
        events: Vec<DomainEvent>,
    ) -> Result<Option<Vec<StoredEvent>>, StoreError> {
        self.inner
            .writer
            .write(leases.to_vec(), guard, events)
            .await
    }
}
