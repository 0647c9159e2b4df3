// Execution claims, process groups and session activity on PostgreSQL: the queries the
// restart sweep, boot reconciliation and the stale-session reaper need.

use crate::PgStore;
use crate::read::list_entities;
use knife_protocol::{
    ProviderSession, ProviderSessionId, RuntimeRequest, Thread, ThreadId, Timestamp,
};
use knife_store::{
    Activity, Claims, ProcessGroupRecord, ProcessGroups, SessionActivity, StoreError,
};

#[async_trait::async_trait]
impl Activity for PgStore {
    async fn list_session_activity(&self) -> Result<Vec<SessionActivity>, StoreError> {
        let client = self.client().await?;
        let rows = client
            .query(
                "SELECT s.payload_json, b.thread_id, s.last_seen_at_us, \
                 (t.payload_json::jsonb ->> 'active_run_id') IS NOT NULL \
                 FROM provider_session_bindings b \
                 JOIN provider_sessions s ON s.id = b.provider_session_id \
                 LEFT JOIN threads t ON t.id = b.thread_id \
                 ORDER BY s.created_sequence, b.bound_sequence",
                &[],
            )
            .await
            .map_err(crate::error::PgError::from)?;
        let mut out = Vec::with_capacity(rows.len());
        for row in rows {
            let session: ProviderSession = serde_json::from_str(row.get::<_, &str>(0))?;
            let thread: String = row.get(1);
            let seen_us: Option<i64> = row.get(2);
            let active: Option<bool> = row.get(3);
            let touched = seen_us.and_then(chrono::DateTime::from_timestamp_micros);
            let last_seen_at = touched.map_or(session.updated_at, |t| t.max(session.updated_at));
            out.push(SessionActivity {
                session,
                thread_id: ThreadId::from(thread.as_str()),
                last_seen_at,
                thread_has_active_run: active.unwrap_or(false),
            });
        }
        Ok(out)
    }

    async fn touch_provider_session(
        &self,
        id: &ProviderSessionId,
        at: Timestamp,
    ) -> Result<(), StoreError> {
        let client = self.client().await?;
        client
            .execute(
                "UPDATE provider_sessions SET last_seen_at_us = $2 \
                 WHERE id = $1 AND (last_seen_at_us IS NULL OR last_seen_at_us < $2)",
                &[&id.as_str(), &at.timestamp_micros()],
            )
            .await
            .map_err(crate::error::PgError::from)?;
        Ok(())
    }
}

#[async_trait::async_trait]
impl Claims for PgStore {
    async fn list_suspended_threads(&self) -> Result<Vec<Thread>, StoreError> {
        let client = self.client().await?;
        Ok(list_entities(
            &**client,
            "SELECT payload_json FROM threads \
             WHERE claimed_at_us IS NOT NULL AND parent_thread_id IS NULL \
             ORDER BY claimed_at_us, id COLLATE \"C\"",
            &[],
        )
        .await?)
    }

    async fn list_claimed_child_threads(&self) -> Result<Vec<Thread>, StoreError> {
        let client = self.client().await?;
        Ok(list_entities(
            &**client,
            "SELECT payload_json FROM threads \
             WHERE claimed_at_us IS NOT NULL AND parent_thread_id IS NOT NULL \
             ORDER BY claimed_at_us, id COLLATE \"C\"",
            &[],
        )
        .await?)
    }

    async fn list_pending_runtime_requests(&self) -> Result<Vec<RuntimeRequest>, StoreError> {
        let client = self.client().await?;
        Ok(list_entities(
            &**client,
            "SELECT payload_json FROM runtime_requests WHERE status = 'pending' \
             ORDER BY created_sequence",
            &[],
        )
        .await?)
    }
}

#[async_trait::async_trait]
impl ProcessGroups for PgStore {
    async fn register_process_group(&self, record: ProcessGroupRecord) -> Result<(), StoreError> {
        let client = self.client().await?;
        client
            .execute(
                "INSERT INTO process_groups \
                 (pgid, owner_pid, leader_start, thread_id, label, registered_at, node) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7) \
                 ON CONFLICT (node, pgid) DO UPDATE SET owner_pid = excluded.owner_pid, \
                 leader_start = excluded.leader_start, thread_id = excluded.thread_id, \
                 label = excluded.label, registered_at = excluded.registered_at",
                &[
                    &record.pgid,
                    &i64::from(record.owner_pid),
                    &record
                        .leader_start
                        .map(|s| i64::try_from(s).unwrap_or(i64::MAX)),
                    &record
                        .thread_id
                        .as_ref()
                        .map(knife_protocol::ThreadId::as_str),
                    &record.label,
                    &record
                        .registered_at
                        .to_rfc3339_opts(chrono::SecondsFormat::Micros, true),
                    &record.node,
                ],
            )
            .await
            .map_err(crate::error::PgError::from)?;
        Ok(())
    }

    async fn unregister_process_group(&self, node: &str, pgid: i32) -> Result<(), StoreError> {
        let client = self.client().await?;
        client
            .execute(
                "DELETE FROM process_groups WHERE node = $1 AND pgid = $2",
                &[&node, &pgid],
            )
            .await
            .map_err(crate::error::PgError::from)?;
        Ok(())
    }

    async fn list_process_groups(&self) -> Result<Vec<ProcessGroupRecord>, StoreError> {
        let client = self.client().await?;
        let rows = client
            .query(
                "SELECT pgid, owner_pid, leader_start, thread_id, label, registered_at, node \
                 FROM process_groups ORDER BY node COLLATE \"C\", pgid",
                &[],
            )
            .await
            .map_err(crate::error::PgError::from)?;
        Ok(rows
            .iter()
            .map(|row| {
                let leader_start: Option<i64> = row.get(2);
                let thread: Option<String> = row.get(3);
                let at: String = row.get(5);
                ProcessGroupRecord {
                    node: row.get(6),
                    pgid: row.get(0),
                    owner_pid: u32::try_from(row.get::<_, i64>(1)).unwrap_or(0),
                    leader_start: leader_start.and_then(|s| u64::try_from(s).ok()),
                    thread_id: thread.map(|t| ThreadId::from(t.as_str())),
                    label: row.get(4),
                    registered_at: chrono::DateTime::parse_from_rfc3339(&at)
                        .map(|t| t.with_timezone(&chrono::Utc))
                        .unwrap_or_default(),
                }
            })
            .collect())
    }
}
