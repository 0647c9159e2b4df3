// Node membership and cluster singletons on SQLite (SPEC.md SCALE-05/07): the
// `cluster_nodes` and `cluster_singletons` tables, one machine's clock.

use crate::SqliteStore;
use crate::error::DbError;
use knife_store::leases::{from_micros, ttl_micros};
use knife_store::{Cluster, NodeMember, StoreError};
use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};
use std::time::Duration;

/// "Now" of the membership clock: the one machine's (a SQLite file has one node).
fn now_us() -> i64 {
    chrono::Utc::now().timestamp_micros()
}

fn read_member(conn: &Connection, node: &str) -> Result<Option<NodeMember>, DbError> {
    Ok(conn
        .prepare_cached(
            "SELECT node, location, instance, joined_at_us, expires_at_us \
             FROM cluster_nodes WHERE node = ?1",
        )?
        .query_row([node], member)
        .optional()?)
}

fn member(r: &rusqlite::Row<'_>) -> rusqlite::Result<NodeMember> {
    Ok(NodeMember {
        node: r.get(0)?,
        location: r.get(1)?,
        instance: r.get(2)?,
        joined_at: from_micros(r.get(3)?),
        expires_at: from_micros(r.get(4)?),
    })
}

fn live(row: &NodeMember) -> StoreError {
    StoreError::NodeIdLive {
        node: row.node.clone(),
        location: row.location.clone(),
        expires_at: row.expires_at,
    }
}

#[async_trait::async_trait]
impl Cluster for SqliteStore {
    async fn join_cluster(
        &self,
        node: &str,
        location: &str,
        instance: &str,
        ttl: Duration,
    ) -> Result<NodeMember, StoreError> {
        let (node, location, instance) =
            (node.to_owned(), location.to_owned(), instance.to_owned());
        let ttl = ttl_micros(ttl);
        self.inner
            .writer
            .run(move |conn| {
                let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
                let now = now_us();
                if let Some(row) = read_member(&tx, &node)?
                    && row.expires_at.timestamp_micros() > now
                    && row.location != location
                    && row.instance != instance
                {
                    return Err(live(&row).into());
                }
                tx.prepare_cached(
                    "INSERT INTO cluster_nodes (node, location, instance, joined_at_us, expires_at_us) \
                     VALUES (?1, ?2, ?3, ?4, ?5) \
                     ON CONFLICT (node) DO UPDATE SET location = excluded.location, \
                         instance = excluded.instance, joined_at_us = excluded.joined_at_us, \
                         expires_at_us = excluded.expires_at_us",
                )?
                .execute(params![node, location, instance, now, now.saturating_add(ttl)])?;
                let row = read_member(&tx, &node)?;
                tx.commit()?;
                row.ok_or_else(|| DbError::from(rusqlite::Error::QueryReturnedNoRows))
            })
            .await
    }

    async fn heartbeat_node(
        &self,
        node: &str,
        instance: &str,
        ttl: Duration,
    ) -> Result<NodeMember, StoreError> {
        let (node, instance, ttl) = (node.to_owned(), instance.to_owned(), ttl_micros(ttl));
        self.inner
            .writer
            .run(move |conn| {
                let changed = conn
                    .prepare_cached(
                        "UPDATE cluster_nodes SET expires_at_us = ?3 \
                         WHERE node = ?1 AND instance = ?2",
                    )?
                    .execute(params![node, instance, now_us().saturating_add(ttl)])?;
                let row = read_member(conn, &node)?;
                match row {
                    Some(row) if changed > 0 => Ok(row),
                    Some(row) => Err(live(&row).into()),
                    None => Err(DbError::from(rusqlite::Error::QueryReturnedNoRows)),
                }
            })
            .await
    }

    async fn leave_cluster(&self, node: &str, instance: &str) -> Result<(), StoreError> {
        let (node, instance) = (node.to_owned(), instance.to_owned());
        self.inner
            .writer
            .run(move |conn| {
                conn.prepare_cached(
                    "UPDATE cluster_nodes SET expires_at_us = MIN(expires_at_us, ?3) \
                     WHERE node = ?1 AND instance = ?2",
                )?
                .execute(params![node, instance, now_us()])?;
                Ok(())
            })
            .await
    }

    async fn live_nodes(&self) -> Result<Vec<NodeMember>, StoreError> {
        self.read(|c| {
            let mut stmt = c.prepare_cached(
                "SELECT node, location, instance, joined_at_us, expires_at_us \
                 FROM cluster_nodes WHERE expires_at_us > ?1 ORDER BY node",
            )?;
            let rows = stmt.query_map([now_us()], member)?;
            Ok(rows.collect::<Result<_, _>>()?)
        })
        .await
    }

    async fn hold_singleton(
        &self,
        name: &str,
        node: &str,
        ttl: Duration,
    ) -> Result<bool, StoreError> {
        let (name, node, ttl) = (name.to_owned(), node.to_owned(), ttl_micros(ttl));
        self.inner
            .writer
            .run(move |conn| {
                let now = now_us();
                let changed = conn
                    .prepare_cached(
                        "INSERT INTO cluster_singletons (name, node, expires_at_us) \
                         VALUES (?1, ?2, ?3) \
                         ON CONFLICT (name) DO UPDATE SET node = excluded.node, \
                             expires_at_us = excluded.expires_at_us \
                         WHERE cluster_singletons.node = excluded.node \
                            OR cluster_singletons.expires_at_us <= ?4",
                    )?
                    .execute(params![name, node, now.saturating_add(ttl), now])?;
                Ok(changed > 0)
            })
            .await
    }

    async fn release_singleton(&self, name: &str, node: &str) -> Result<(), StoreError> {
        let (name, node) = (name.to_owned(), node.to_owned());
        self.inner
            .writer
            .run(move |conn| {
                conn.prepare_cached(
                    "UPDATE cluster_singletons SET expires_at_us = MIN(expires_at_us, ?3) \
                     WHERE name = ?1 AND node = ?2",
                )?
                .execute(params![name, node, now_us()])?;
                Ok(())
            })
            .await
    }
}
