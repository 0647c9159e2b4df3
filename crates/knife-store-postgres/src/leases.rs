// Leases and fenced writes on PostgreSQL (SPEC.md SCALE-04/05): the `thread_leases` table
// shared by every node, times from the database's clock, takeovers with SKIP LOCKED.

use crate::PgStore;
use crate::error::{PgError, PgResult};
use knife_protocol::{DomainEvent, StoredEvent, ThreadId};
use knife_store::leases::{epoch_i64, epoch_u64, from_micros, ttl_micros};
use knife_store::{Lease, Leases, RowGuard, StoreError, TakeScope};
use std::time::Duration;
use tokio_postgres::GenericClient;

/// The database's clock in microseconds since the epoch (the lease clock of every
/// node: a node with a skewed clock cannot steal a live lease).
pub(crate) const NOW_US: &str = "(EXTRACT(EPOCH FROM clock_timestamp()) * 1000000)::BIGINT";

pub(crate) async fn read_lease(
    client: &impl GenericClient,
    thread: &str,
    lock: &str,
) -> PgResult<Option<Lease>> {
    let sql =
        format!("SELECT node, epoch, expires_at_us FROM thread_leases WHERE thread_id = $1 {lock}");
    let row = client.query_opt(&sql, &[&thread]).await?;
    Ok(row.map(|r| Lease {
        thread_id: ThreadId::from(thread),
        node: r.get(0),
        epoch: epoch_u64(r.get(1)),
        expires_at: from_micros(r.get(2)),
    }))
}

/// The fence of a write, inside the append transaction: the thread's lease must still
/// be `lease`'s node and epoch. `FOR SHARE` waits for a takeover in flight on that row
/// and then sees its result (READ COMMITTED re-reads the newest version).
pub(crate) async fn check_fence(client: &impl GenericClient, lease: &Lease) -> PgResult<()> {
    match read_lease(client, lease.thread_id.as_str(), "FOR SHARE").await? {
        Some(c) if c.node == lease.node && c.epoch == lease.epoch => Ok(()),
        other => Err(fenced(lease, other).into()),
    }
}

fn fenced(lease: &Lease, current: Option<Lease>) -> StoreError {
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

/// Grants the thread's lease to `node` (epoch + 1, or 1 for a new row) for `ttl_us`
/// from the database's now.
async fn grant(
    client: &impl GenericClient,
    thread: &str,
    node: &str,
    ttl_us: i64,
) -> PgResult<Lease> {
    let sql = format!(
        "INSERT INTO thread_leases (thread_id, node, epoch, expires_at_us) \
         VALUES ($1, $2, 1, {NOW_US} + $3) \
         ON CONFLICT (thread_id) DO UPDATE SET node = EXCLUDED.node, \
             epoch = thread_leases.epoch + 1, expires_at_us = EXCLUDED.expires_at_us \
         RETURNING epoch, expires_at_us"
    );
    let row = client.query_one(&sql, &[&thread, &node, &ttl_us]).await?;
    Ok(Lease {
        thread_id: ThreadId::from(thread),
        node: node.to_owned(),
        epoch: epoch_u64(row.get(0)),
        expires_at: from_micros(row.get(1)),
    })
}

#[async_trait::async_trait]
impl Leases for PgStore {
    async fn acquire_lease(
        &self,
        thread: &ThreadId,
        node: &str,
        ttl: Duration,
    ) -> Result<Lease, StoreError> {
        let mut pooled = self.client().await?;
        let client: &mut tokio_postgres::Client = &mut pooled;
        let tx = client.transaction().await.map_err(PgError::from)?;
        // Make sure the row exists so that it can be locked, then decide under the lock.
        tx.execute(
            "INSERT INTO thread_leases (thread_id, node, epoch, expires_at_us) \
             VALUES ($1, '', 0, 0) ON CONFLICT (thread_id) DO NOTHING",
            &[&thread.as_str()],
        )
        .await
        .map_err(PgError::from)?;
        let sql = format!(
            "SELECT node, expires_at_us, expires_at_us > {NOW_US} FROM thread_leases \
             WHERE thread_id = $1 FOR UPDATE"
        );
        let row = tx
            .query_one(&sql, &[&thread.as_str()])
            .await
            .map_err(PgError::from)?;
        let (held_by, expires_us, live): (String, i64, bool) = (row.get(0), row.get(1), row.get(2));
        if live && held_by != node {
            return Err(StoreError::LeaseHeld {
                thread_id: thread.clone(),
                node: held_by,
                expires_at: from_micros(expires_us),
            });
        }
        let lease = grant(&tx, thread.as_str(), node, ttl_micros(ttl)).await?;
        tx.commit().await.map_err(PgError::from)?;
        Ok(lease)
    }

    async fn renew_lease(&self, lease: &Lease, ttl: Duration) -> Result<Lease, StoreError> {
        let client = self.client().await?;
        let sql = format!(
            "UPDATE thread_leases SET expires_at_us = {NOW_US} + $4 \
             WHERE thread_id = $1 AND node = $2 AND epoch = $3 RETURNING expires_at_us"
        );
        let row = client
            .query_opt(
                &sql,
                &[
                    &lease.thread_id.as_str(),
                    &lease.node,
                    &epoch_i64(lease.epoch),
                    &ttl_micros(ttl),
                ],
            )
            .await
            .map_err(PgError::from)?;
        match row {
            Some(r) => Ok(Lease {
                expires_at: from_micros(r.get(0)),
                ..lease.clone()
            }),
            None => {
                let current = read_lease(&**client, lease.thread_id.as_str(), "").await?;
                Err(fenced(lease, current))
            }
        }
    }

    async fn release_lease(&self, lease: &Lease) -> Result<(), StoreError> {
        let client = self.client().await?;
        let sql = format!(
            "UPDATE thread_leases SET expires_at_us = LEAST(expires_at_us, {NOW_US}) \
             WHERE thread_id = $1 AND node = $2 AND epoch = $3"
        );
        client
            .execute(
                &sql,
                &[
                    &lease.thread_id.as_str(),
                    &lease.node,
                    &epoch_i64(lease.epoch),
                ],
            )
            .await
            .map_err(PgError::from)?;
        Ok(())
    }

    async fn get_lease(&self, thread: &ThreadId) -> Result<Option<Lease>, StoreError> {
        let client = self.client().await?;
        Ok(read_lease(&**client, thread.as_str(), "")
            .await?
            .filter(|l| l.epoch > 0))
    }

    async fn live_leases(&self) -> Result<Vec<Lease>, StoreError> {
        let client = self.client().await?;
        let sql = format!(
            "SELECT thread_id, node, epoch, expires_at_us FROM thread_leases \
             WHERE epoch > 0 AND expires_at_us > {NOW_US} ORDER BY thread_id COLLATE \"C\""
        );
        let rows = client.query(&sql, &[]).await.map_err(PgError::from)?;
        Ok(rows
            .iter()
            .map(|r| Lease {
                thread_id: ThreadId::from(r.get::<_, &str>(0)),
                node: r.get(1),
                epoch: epoch_u64(r.get(2)),
                expires_at: from_micros(r.get(3)),
            })
            .collect())
    }

    async fn take_expired_leases(
        &self,
        node: &str,
        ttl: Duration,
        scope: TakeScope,
        limit: usize,
        exclude: &[ThreadId],
    ) -> Result<Vec<Lease>, StoreError> {
        let exclude: Vec<&str> = exclude.iter().map(ThreadId::as_str).collect();
        let mut pooled = self.client().await?;
        let client: &mut tokio_postgres::Client = &mut pooled;
        let tx = client.transaction().await.map_err(PgError::from)?;
        // Claimed threads that never had a lease get a placeholder row (epoch 0,
        // expired) so that they can be locked like the others.
        tx.execute(
            "INSERT INTO thread_leases (thread_id, node, epoch, expires_at_us) \
             SELECT id, '', 0, 0 FROM threads \
             WHERE claimed_at_us IS NOT NULL AND parent_thread_id IS NULL \
             ON CONFLICT (thread_id) DO NOTHING",
            &[],
        )
        .await
        .map_err(PgError::from)?;
        // SKIP LOCKED: a row another node is taking (or a fenced write is checking) is
        // left to it; concurrent sweepers get disjoint sets.
        let sql = format!(
            "SELECT l.thread_id FROM thread_leases l JOIN threads t ON t.id = l.thread_id \
             WHERE t.claimed_at_us IS NOT NULL AND t.parent_thread_id IS NULL \
               AND (l.expires_at_us <= {NOW_US} OR ($2 AND l.node = $1)) \
               AND l.thread_id <> ALL($4::text[]) \
             ORDER BY t.claimed_at_us, l.thread_id COLLATE \"C\" \
             LIMIT $3 FOR UPDATE OF l SKIP LOCKED"
        );
        let own = scope == TakeScope::ExpiredOrOwn;
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = tx
            .query(&sql, &[&node, &own, &limit, &exclude])
            .await
            .map_err(PgError::from)?;
        let ttl = ttl_micros(ttl);
        let mut taken = Vec::with_capacity(rows.len());
        for row in rows {
            let thread: String = row.get(0);
            taken.push(grant(&tx, &thread, node, ttl).await?);
        }
        tx.commit().await.map_err(PgError::from)?;
        Ok(taken)
    }

    async fn write_fenced(
        &self,
        leases: &[Lease],
        guard: Option<RowGuard>,
        events: Vec<DomainEvent>,
    ) -> Result<Option<Vec<StoredEvent>>, StoreError> {
        self.write_batch(leases.to_vec(), guard, events).await
    }
}
