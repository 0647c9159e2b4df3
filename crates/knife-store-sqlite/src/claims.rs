// Execution claims and process groups: the store queries the restart sweep and boot
// reconciliation need (SPEC.md EXEC-03..10), and the `process_groups` table that lets
// a restarted server kill the process groups a crashed one left behind.

use crate::SqliteStore;
use crate::queries;
use knife_protocol::{ProviderSession, RuntimeRequest, Thread, ThreadId, Timestamp};
use knife_store::{
    Activity, Claims, ProcessGroupRecord, ProcessGroups, SessionActivity, StoreError,
};
use rusqlite::params;

#[async_trait::async_trait]
impl Activity for SqliteStore {
    /// Every (provider session, bound thread) pair with its last-seen time, by
    /// session then thread: the rows the stale-session reaper sweeps (SPEC.md REAP).
    async fn list_session_activity(&self) -> Result<Vec<SessionActivity>, StoreError> {
        self.read(|c| {
            let mut stmt = c.prepare_cached(
                "SELECT s.payload_json, b.thread_id, s.last_seen_at_us,                         json_extract(t.payload_json, '$.active_run_id') IS NOT NULL                  FROM provider_session_bindings b                  JOIN provider_sessions s ON s.id = b.provider_session_id                  LEFT JOIN threads t ON t.id = b.thread_id                  ORDER BY s.created_sequence, b.bound_sequence",
            )?;
            let rows = stmt.query_map([], |row| {
                Ok((
                    row.get::<_, String>(0)?,
                    row.get::<_, String>(1)?,
                    row.get::<_, Option<i64>>(2)?,
                    row.get::<_, Option<bool>>(3)?,
                ))
            })?;
            let mut out = Vec::new();
            for row in rows {
                let (payload, thread, seen_us, active) = row?;
                let session: ProviderSession = serde_json::from_str(&payload)?;
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
        })
        .await
    }

    /// Marks provider session `id` as seen at `at` (activity on its event stream;
    /// callers throttle). Never moves the mark back. Operational, not an event: a
    /// rebuild resets the mark to the session's last `updated_at`. No-op for an
    /// unknown session.
    async fn touch_provider_session(
        &self,
        id: &knife_protocol::ProviderSessionId,
        at: Timestamp,
    ) -> Result<(), StoreError> {
        let id = id.as_str().to_owned();
        self.inner
            .writer
            .run_grouped(move |conn| {
                conn.prepare_cached(
                    "UPDATE provider_sessions SET last_seen_at_us = ?2                      WHERE id = ?1 AND (last_seen_at_us IS NULL OR last_seen_at_us < ?2)",
                )?
                .execute(params![id, at.timestamp_micros()])?;
                Ok(())
            })
            .await
    }
}

#[async_trait::async_trait]
impl Claims for SqliteStore {
    /// Claimed top-level threads (`claimed_at` set, no parent), oldest claim
    /// first: the work the restart sweep resumes (EXEC-03).
    async fn list_suspended_threads(&self) -> Result<Vec<Thread>, StoreError> {
        self.read(|c| {
            queries::list_entities(
                c,
                "SELECT payload_json FROM threads \
                 WHERE claimed_at_us IS NOT NULL AND parent_thread_id IS NULL \
                 ORDER BY claimed_at_us, id",
                &[],
            )
        })
        .await
    }

    /// Claimed child threads (`claimed_at` set, with a parent): claims the
    /// restart sweep releases without resuming (EXEC-03).
    async fn list_claimed_child_threads(&self) -> Result<Vec<Thread>, StoreError> {
        self.read(|c| {
            queries::list_entities(
                c,
                "SELECT payload_json FROM threads \
                 WHERE claimed_at_us IS NOT NULL AND parent_thread_id IS NOT NULL \
                 ORDER BY claimed_at_us, id",
                &[],
            )
        })
        .await
    }

    /// Runtime requests still `pending`, oldest first.
    async fn list_pending_runtime_requests(&self) -> Result<Vec<RuntimeRequest>, StoreError> {
        self.read(|c| {
            queries::list_entities(
                c,
                "SELECT payload_json FROM runtime_requests WHERE status = 'pending' \
                 ORDER BY created_sequence",
                &[],
            )
        })
        .await
    }
}

#[async_trait::async_trait]
impl ProcessGroups for SqliteStore {
    /// Records a process group spawned by this server (replaces a row with the same
    /// pgid: the old group is gone once the kernel reuses its id).
    async fn register_process_group(&self, record: ProcessGroupRecord) -> Result<(), StoreError> {
        self.inner
            .writer
            .run(move |conn| {
                conn.prepare_cached(
                    "INSERT OR REPLACE INTO process_groups \
                     (pgid, owner_pid, leader_start, thread_id, label, registered_at, node) \
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                )?
                .execute(params![
                    record.pgid,
                    record.owner_pid,
                    record
                        .leader_start
                        .map(|s| i64::try_from(s).unwrap_or(i64::MAX)),
                    record
                        .thread_id
                        .as_ref()
                        .map(knife_protocol::ThreadId::as_str),
                    record.label,
                    record
                        .registered_at
                        .to_rfc3339_opts(chrono::SecondsFormat::Micros, true),
                    record.node,
                ])?;
                Ok(())
            })
            .await
    }

    /// Forgets process group `pgid` of `node` (it ended, or was killed). No-op when absent.
    async fn unregister_process_group(&self, node: &str, pgid: i32) -> Result<(), StoreError> {
        let node = node.to_owned();
        self.inner
            .writer
            .run(move |conn| {
                conn.prepare_cached("DELETE FROM process_groups WHERE node = ?1 AND pgid = ?2")?
                    .execute(params![node, pgid])?;
                Ok(())
            })
            .await
    }

    /// Every recorded process group, by node then pgid.
    async fn list_process_groups(&self) -> Result<Vec<ProcessGroupRecord>, StoreError> {
        self.read(|c| {
            let mut stmt = c.prepare_cached(
                "SELECT pgid, owner_pid, leader_start, thread_id, label, registered_at, node \
                 FROM process_groups ORDER BY node, pgid",
            )?;
            let rows = stmt.query_map([], |row| {
                let leader_start: Option<i64> = row.get(2)?;
                let thread: Option<String> = row.get(3)?;
                let at: String = row.get(5)?;
                Ok(ProcessGroupRecord {
                    node: row.get(6)?,
                    pgid: row.get(0)?,
                    owner_pid: row.get(1)?,
                    leader_start: leader_start.and_then(|s| u64::try_from(s).ok()),
                    thread_id: thread.map(|t| ThreadId::from(t.as_str())),
                    label: row.get(4)?,
                    registered_at: chrono::DateTime::parse_from_rfc3339(&at)
                        .map(|t| t.with_timezone(&chrono::Utc))
                        .unwrap_or_default(),
                })
            })?;
            Ok(rows.collect::<Result<Vec<_>, _>>()?)
        })
        .await
    }
}
