// Node membership and cluster singletons on PostgreSQL (SPEC.md SCALE-05/07): the
// `cluster_nodes` and `cluster_singletons` tables shared by every node, the database's clock.

use crate::PgStore;
use crate::error::{PgError, PgResult};
use crate::leases::NOW_US;
use knife_store::leases::{from_micros, ttl_micros};
use knife_store::{Cluster, NodeMember, StoreError};
use std::time::Duration;
use tokio_postgres::GenericClient;

const MEMBER_COLUMNS: &str = "node, location, instance, joined_at_us, expires_at_us";

fn member(r: &tokio_postgres::Row) -> NodeMember {
    NodeMember {
        node: r.get(0),
        location: r.get(1),
        instance: r.get(2),
        joined_at: from_micros(r.get(3)),
        expires_at: from_micros(r.get(4)),
    }
}

fn live(row: &NodeMember) -> StoreError {
    StoreError::NodeIdLive {
        node: row.node.clone(),
        location: row.location.clone(),
        expires_at: row.expires_at,
    }
}

async fn read_member(
    client: &impl GenericClient,
    node: &str,
    lock: &str,
) -> PgResult<Option<(NodeMember, bool)>> {
    let sql = format!(
        "SELECT {MEMBER_COLUMNS}, expires_at_us > {NOW_US} FROM cluster_nodes WHERE node = $1 {lock}"
    );
    Ok(client
        .query_opt(&sql, &[&node])
        .await?
        .map(|r| (member(&r), r.get(5))))
}

#[async_trait::async_trait]
impl Cluster for PgStore {
    async fn join_cluster(
        &self,
        node: &str,
        location: &str,
        instance: &str,
        ttl: Duration,
    ) -> Result<NodeMember, StoreError> {
        let mut pooled = self.client().await?;
        let client: &mut tokio_postgres::Client = &mut pooled;
        let tx = client.transaction().await.map_err(PgError::from)?;
        // The row exists (so it can be locked), then the decision is made under the lock:
        // two processes joining as one id at once are serialised.
        tx.execute(
            "INSERT INTO cluster_nodes (node, location, instance, joined_at_us, expires_at_us) \
             VALUES ($1, '', '', 0, 0) ON CONFLICT (node) DO NOTHING",
            &[&node],
        )
        .await
        .map_err(PgError::from)?;
        if let Some((row, is_live)) = read_member(&tx, node, "FOR UPDATE").await?
            && is_live
            && row.location != location
            && row.instance != instance
        {
            return Err(live(&row));
        }
        let sql = format!(
            "UPDATE cluster_nodes SET location = $2, instance = $3, joined_at_us = {NOW_US}, \
                 expires_at_us = {NOW_US} + $4 \
             WHERE node = $1 RETURNING {MEMBER_COLUMNS}"
        );
        let row = tx
            .query_one(&sql, &[&node, &location, &instance, &ttl_micros(ttl)])
            .await
            .map_err(PgError::from)?;
        tx.commit().await.map_err(PgError::from)?;
        Ok(member(&row))
    }

    async fn heartbeat_node(
        &self,
        node: &str,
        instance: &str,
        ttl: Duration,
    ) -> Result<NodeMember, StoreError> {
        let client = self.client().await?;
        let sql = format!(
            "UPDATE cluster_nodes SET expires_at_us = {NOW_US} + $3 \
             WHERE node = $1 AND instance = $2 RETURNING {MEMBER_COLUMNS}"
        );
        let row = client
            .query_opt(&sql, &[&node, &instance, &ttl_micros(ttl)])
            .await
            .map_err(PgError::from)?;
        match row {
            Some(row) => Ok(member(&row)),
            None => match read_member(&**client, node, "").await? {
                Some((row, _)) => Err(live(&row)),
                None => Err(StoreError::NodeIdLive {
                    node: node.to_owned(),
                    location: "(no row: the database was reset)".to_owned(),
                    expires_at: from_micros(0),
                }),
            },
        }
    }

    async fn leave_cluster(&self, node: &str, instance: &str) -> Result<(), StoreError> {
        let client = self.client().await?;
        let sql = format!(
            "UPDATE cluster_nodes SET expires_at_us = LEAST(expires_at_us, {NOW_US}) \
             WHERE node = $1 AND instance = $2"
        );
        client
            .execute(&sql, &[&node, &instance])
            .await
            .map_err(PgError::from)?;
        Ok(())
    }

    async fn live_nodes(&self) -> Result<Vec<NodeMember>, StoreError> {
        let client = self.client().await?;
        let sql = format!(
            "SELECT {MEMBER_COLUMNS} FROM cluster_nodes WHERE expires_at_us > {NOW_US} \
             ORDER BY node COLLATE \"C\""
        );
        let rows = client.query(&sql, &[]).await.map_err(PgError::from)?;
        Ok(rows.iter().map(member).collect())
    }

    async fn hold_singleton(
        &self,
        name: &str,
        node: &str,
        ttl: Duration,
    ) -> Result<bool, StoreError> {
        let client = self.client().await?;
        // One statement: concurrent holders are serialised on the row's lock, and the
        // loser's WHERE sees the winner's fresh expiry.
        let sql = format!(
            "INSERT INTO cluster_singletons (name, node, expires_at_us) \
             VALUES ($1, $2, {NOW_US} + $3) \
             ON CONFLICT (name) DO UPDATE SET node = EXCLUDED.node, \
                 expires_at_us = EXCLUDED.expires_at_us \
             WHERE cluster_singletons.node = EXCLUDED.node \
                OR cluster_singletons.expires_at_us <= {NOW_US}"
        );
        let changed = client
            .execute(&sql, &[&name, &node, &ttl_micros(ttl)])
            .await
            .map_err(PgError::from)?;
        Ok(changed > 0)
    }

    async fn release_singleton(&self, name: &str, node: &str) -> Result<(), StoreError> {
        let client = self.client().await?;
        let sql = format!(
            "UPDATE cluster_singletons SET expires_at_us = LEAST(expires_at_us, {NOW_US}) \
             WHERE name = $1 AND node = $2"
        );
        client
            .execute(&sql, &[&name, &node])
            .await
            .map_err(PgError::from)?;
        Ok(())
    }
}
