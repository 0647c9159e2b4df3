// Execution claims and process groups: the store queries the restart sweep and boot
// reconciliation need (SPEC.md EXEC-03..10), and the `process_groups` table that lets
// a restarted server kill the process groups a crashed one left behind.

use crate::Store;
use crate::error::StoreError;
use crate::queries;
use knife_protocol::{RuntimeRequest, Thread, ThreadId, Timestamp};
use rusqlite::params;

/// A process group a knife server spawned (a tool command, an adapter process).
///
/// Recorded when spawned ([`Store::register_process_group`]), removed when it ended
/// ([`Store::unregister_process_group`]). Rows whose owner is dead are leftovers of a
/// crash: the next server kills those groups at boot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProcessGroupRecord {
    /// Process group id (= pid of its leader).
    pub pgid: i32,
    /// pid of the knife server that spawned it.
    pub owner_pid: u32,
    /// Start time of the leader in clock ticks since boot (`/proc/<pid>/stat` field
    /// 22), to tell the original leader from a process that reused its pid; `None`
    /// when unknown.
    pub leader_start: Option<u64>,
    /// Thread the group works for, if any.
    pub thread_id: Option<ThreadId>,
    /// What it is, for logs (`bash: cargo test`, `codex app-server`).
    pub label: String,
    pub registered_at: Timestamp,
}

impl Store {
    /// Claimed top-level threads (`time_suspended` set, no parent), oldest claim
    /// first: the work the restart sweep resumes (EXEC-03).
    pub async fn list_suspended_threads(&self) -> Result<Vec<Thread>, StoreError> {
        self.read(|c| {
            queries::list_entities(
                c,
                "SELECT payload_json FROM threads \
                 WHERE time_suspended_us IS NOT NULL AND parent_thread_id IS NULL \
                 ORDER BY time_suspended_us, id",
                &[],
            )
        })
        .await
    }

    /// Claimed child threads (`time_suspended` set, with a parent): claims the
    /// restart sweep releases without resuming (EXEC-03).
    pub async fn list_claimed_child_threads(&self) -> Result<Vec<Thread>, StoreError> {
        self.read(|c| {
            queries::list_entities(
                c,
                "SELECT payload_json FROM threads \
                 WHERE time_suspended_us IS NOT NULL AND parent_thread_id IS NOT NULL \
                 ORDER BY time_suspended_us, id",
                &[],
            )
        })
        .await
    }

    /// Runtime requests still `pending`, oldest first.
    pub async fn list_pending_runtime_requests(&self) -> Result<Vec<RuntimeRequest>, StoreError> {
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

    /// Records a process group spawned by this server (replaces a row with the same
    /// pgid: the old group is gone once the kernel reuses its id).
    pub async fn register_process_group(
        &self,
        record: ProcessGroupRecord,
    ) -> Result<(), StoreError> {
        self.inner
            .writer
            .run(move |conn| {
                conn.prepare_cached(
                    "INSERT OR REPLACE INTO process_groups \
                     (pgid, owner_pid, leader_start, thread_id, label, registered_at) \
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                )?
                .execute(params![
                    record.pgid,
                    record.owner_pid,
                    record
                        .leader_start
                        .map(|s| i64::try_from(s).unwrap_or(i64::MAX)),
                    record.thread_id.as_ref().map(|t| t.as_str()),
                    record.label,
                    record
                        .registered_at
                        .to_rfc3339_opts(chrono::SecondsFormat::Micros, true),
                ])?;
                Ok(())
            })
            .await
    }

    /// Forgets process group `pgid` (it ended, or was killed). No-op when absent.
    pub async fn unregister_process_group(&self, pgid: i32) -> Result<(), StoreError> {
        self.inner
            .writer
            .run(move |conn| {
                conn.prepare_cached("DELETE FROM process_groups WHERE pgid = ?1")?
                    .execute([pgid])?;
                Ok(())
            })
            .await
    }

    /// Every recorded process group, by pgid.
    pub async fn list_process_groups(&self) -> Result<Vec<ProcessGroupRecord>, StoreError> {
        self.read(|c| {
            let mut stmt = c.prepare_cached(
                "SELECT pgid, owner_pid, leader_start, thread_id, label, registered_at \
                 FROM process_groups ORDER BY pgid",
            )?;
            let rows = stmt.query_map([], |row| {
                let leader_start: Option<i64> = row.get(2)?;
                let thread: Option<String> = row.get(3)?;
                let at: String = row.get(5)?;
                Ok(ProcessGroupRecord {
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
