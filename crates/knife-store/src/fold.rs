// The projection fold: the ONE function that applies a stored event to the projection
// tables, used by both `write` (incrementally) and `rebuild` (from the whole log).

use crate::error::StoreError;
use knife_protocol::{DomainEvent, EventBody, ProjectId, StoredEvent};
use rusqlite::types::Value;
use rusqlite::{Connection, ErrorCode, OptionalExtension, params};
use serde::Serialize;

/// Projection tables, in the order `clear_projections` empties them (bindings first:
/// they reference `provider_sessions`).
pub(crate) const PROJECTION_TABLES: [&str; 10] = [
    "provider_session_bindings",
    "projects",
    "threads",
    "runs",
    "nodes",
    "provider_sessions",
    "provider_threads",
    "provider_turns",
    "runtime_requests",
    "turn_items",
];

/// Converts a sequence to SQLite's INTEGER (sequences come from SQLite, so they fit).
pub(crate) fn seq_i64(sequence: u64) -> i64 {
    i64::try_from(sequence).unwrap_or(i64::MAX)
}

/// Converts an INTEGER read from SQLite back to a sequence (never negative).
pub(crate) fn seq_u64(sequence: i64) -> u64 {
    u64::try_from(sequence).unwrap_or(0)
}

/// Where a fold runs: a live write (refuses new conflicts) or a rebuild of the whole
/// log (must accept what was committed before a constraint existed).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FoldMode {
    /// [`crate::Store::write`] / [`crate::Store::write_if`].
    Write,
    /// [`crate::Store::rebuild`].
    Rebuild,
}

/// Appends `event` to the `events` table and returns it with its sequence.
///
/// Errors: [`StoreError::DuplicateEvent`] when its id is already in the log.
pub(crate) fn append_event(
    conn: &Connection,
    event: DomainEvent,
) -> Result<StoredEvent, StoreError> {
    let payload = serde_json::to_string(&event)?;
    let occurred_at = event
        .occurred_at
        .to_rfc3339_opts(chrono::SecondsFormat::Micros, true);
    let inserted = conn
        .prepare_cached(
            "INSERT INTO events (event_id, thread_id, run_id, type, occurred_at, payload_json) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        )?
        .execute(params![
            event.id.as_str(),
            event.thread_id.as_ref().map(|t| t.as_str()),
            event.run_id.as_ref().map(|r| r.as_str()),
            event.event_type(),
            occurred_at,
            payload,
        ]);
    match inserted {
        Ok(_) => {}
        Err(rusqlite::Error::SqliteFailure(e, _)) if e.code == ErrorCode::ConstraintViolation => {
            return Err(StoreError::DuplicateEvent { event_id: event.id });
        }
        Err(e) => return Err(e.into()),
    }
    let sequence = seq_u64(conn.last_insert_rowid());
    Ok(StoredEvent { sequence, event })
}

/// Applies one stored event to the projection tables (upsert by id, last write wins;
/// each upsert bumps the row's `version` by 1 and sets `last_sequence`).
///
/// Session bindings follow the event envelope's `thread_id`:
/// `provider-session.attached` upserts the session and binds it to that thread,
/// `.updated` upserts only, `.detached` deletes only that binding. An attach or detach
/// without a `thread_id` touches no binding.
///
/// Projects: a project whose root another project already has is refused with
/// [`StoreError::ProjectRootTaken`] in [`FoldMode::Write`]; in [`FoldMode::Rebuild`]
/// it is kept with a NULL `root` column (logs written before migration 0002).
pub(crate) fn apply_event(
    conn: &Connection,
    stored: &StoredEvent,
    mode: FoldMode,
) -> Result<(), StoreError> {
    let seq = seq_i64(stored.sequence);
    let thread = stored.event.thread_id.as_ref().map(|t| t.as_str());
    // A deleted thread stays deleted (CHG-08): whatever arrives for it after its
    // tombstone (a late event of a stopped runtime) is kept in the log but changes
    // no projection, in a write and in a rebuild alike.
    if let Some(thread) = thread
        && deleted_before(conn, thread, seq)?
    {
        return Ok(());
    }
    match &stored.event.body {
        EventBody::ProjectCreated(p) | EventBody::ProjectUpdated(p) => {
            // One project per root folder (migration 0002). Checked here to name the
            // holder in the error; the UNIQUE index `projects_root` is the backstop.
            let holder: Option<String> = conn
                .prepare_cached("SELECT id FROM projects WHERE root = ?1 AND id <> ?2")?
                .query_row(params![p.root, p.id.as_str()], |row| row.get(0))
                .optional()?;
            let root = match (holder, mode) {
                (None, _) => text(&p.root),
                (Some(holder), FoldMode::Write) => {
                    return Err(StoreError::ProjectRootTaken {
                        root: p.root.clone(),
                        project_id: ProjectId::from(holder.as_str()),
                    });
                }
                // A log written before migration 0002 may hold several projects on one
                // root: as the migration did, the first keeps it and later ones get NULL,
                // so rebuild == the migrated incremental state.
                (Some(_), FoldMode::Rebuild) => Value::Null,
            };
            upsert(
                conn,
                "projects",
                p.id.as_str(),
                &[
                    (
                        "updated_at_us",
                        Value::Integer(p.updated_at.timestamp_micros()),
                    ),
                    ("root", root),
                ],
                p,
                seq,
            )
        }
        EventBody::ThreadCreated(t) | EventBody::ThreadUpdated(t) => upsert(
            conn,
            "threads",
            t.id.as_str(),
            &[
                ("project_id", text(t.project_id.as_str())),
                ("status", enum_text(&t.status)?),
                (
                    "updated_at_us",
                    Value::Integer(t.updated_at.timestamp_micros()),
                ),
                (
                    "time_suspended_us",
                    t.time_suspended
                        .map_or(Value::Null, |c| Value::Integer(c.timestamp_micros())),
                ),
                (
                    "parent_thread_id",
                    opt_text(t.parent_thread_id.as_ref().map(|p| p.as_str())),
                ),
            ],
            t,
            seq,
        ),
        EventBody::ThreadDeleted { thread_id, .. } => drop_thread(conn, thread_id.as_str()),
        EventBody::RunCreated(r) | EventBody::RunUpdated(r) => upsert(
            conn,
            "runs",
            r.id.as_str(),
            &[
                ("thread_id", text(r.thread_id.as_str())),
                ("ordinal", Value::Integer(i64::from(r.ordinal))),
                ("status", enum_text(&r.status)?),
            ],
            r,
            seq,
        ),
        EventBody::NodeUpdated(n) => upsert(
            conn,
            "nodes",
            n.id.as_str(),
            &[
                ("thread_id", text(n.thread_id.as_str())),
                ("run_id", opt_text(n.run_id.as_ref().map(|r| r.as_str()))),
                ("status", enum_text(&n.status)?),
            ],
            n,
            seq,
        ),
        EventBody::ProviderSessionAttached(s) | EventBody::ProviderSessionUpdated(s) => {
            upsert(
                conn,
                "provider_sessions",
                s.id.as_str(),
                &[
                    (
                        "provider_instance_id",
                        text(s.provider_instance_id.as_str()),
                    ),
                    ("status", enum_text(&s.status)?),
                ],
                s,
                seq,
            )?;
            // Last-seen only moves forward: a record written with an older
            // `updated_at` (a thread joining a shared session) must not make a live
            // session look stale to the reaper.
            conn.prepare_cached(
                "UPDATE provider_sessions \
                 SET last_seen_at_us = MAX(COALESCE(last_seen_at_us, ?2), ?2) \
                 WHERE id = ?1",
            )?
            .execute(params![s.id.as_str(), s.updated_at.timestamp_micros()])?;
            if let (EventBody::ProviderSessionAttached(_), Some(thread)) =
                (&stored.event.body, thread)
            {
                conn.prepare_cached(
                    "INSERT INTO provider_session_bindings \
                     (provider_session_id, thread_id, bound_sequence, last_sequence) \
                     VALUES (?1, ?2, ?3, ?3) \
                     ON CONFLICT (provider_session_id, thread_id) \
                     DO UPDATE SET last_sequence = excluded.last_sequence",
                )?
                .execute(params![s.id.as_str(), thread, seq])?;
            }
            Ok(())
        }
        EventBody::ProviderSessionDetached {
            provider_session_id,
            ..
        } => {
            if let Some(thread) = thread {
                conn.prepare_cached(
                    "DELETE FROM provider_session_bindings \
                     WHERE provider_session_id = ?1 AND thread_id = ?2",
                )?
                .execute(params![provider_session_id.as_str(), thread])?;
            }
            Ok(())
        }
        EventBody::ProviderThreadUpdated(p) => upsert(
            conn,
            "provider_threads",
            p.id.as_str(),
            &[
                (
                    "thread_id",
                    opt_text(p.app_thread_id.as_ref().map(|t| t.as_str())),
                ),
                (
                    "provider_session_id",
                    opt_text(p.provider_session_id.as_ref().map(|s| s.as_str())),
                ),
                ("status", enum_text(&p.status)?),
                (
                    "last_run_ordinal",
                    p.last_run_ordinal
                        .map_or(Value::Null, |o| Value::Integer(i64::from(o))),
                ),
            ],
            p,
            seq,
        ),
        EventBody::ProviderTurnUpdated(t) => upsert(
            conn,
            "provider_turns",
            t.id.as_str(),
            &[
                ("thread_id", text(t.thread_id.as_str())),
                ("run_id", text(t.run_id.as_str())),
                (
                    "provider_thread_id",
                    opt_text(t.provider_thread_id.as_ref().map(|p| p.as_str())),
                ),
                ("ordinal", Value::Integer(i64::from(t.ordinal))),
                ("status", enum_text(&t.status)?),
            ],
            t,
            seq,
        ),
        EventBody::RuntimeRequestUpdated(r) => upsert(
            conn,
            "runtime_requests",
            r.id.as_str(),
            &[
                ("thread_id", text(r.thread_id.as_str())),
                ("run_id", opt_text(r.run_id.as_ref().map(|x| x.as_str()))),
                ("status", enum_text(&r.status)?),
            ],
            r,
            seq,
        ),
        EventBody::TurnItemUpdated(i) => upsert(
            conn,
            "turn_items",
            i.id.as_str(),
            &[
                ("thread_id", text(i.thread_id.as_str())),
                ("run_id", opt_text(i.run_id.as_ref().map(|x| x.as_str()))),
                (
                    "ordinal",
                    Value::Integer(i64::try_from(i.ordinal).unwrap_or(i64::MAX)),
                ),
                ("status", enum_text(&i.status)?),
            ],
            i,
            seq,
        ),
        // Patches the thread row in place (the event carries no whole thread): the
        // status is live state, last write wins. A thread not (yet) in the table is
        // left alone.
        EventBody::ThreadStatusChanged {
            thread_id, status, ..
        } => {
            conn.prepare_cached(
                "UPDATE threads SET payload_json = json_set(payload_json, '$.agent_status', json(?1)), \
                 last_sequence = ?2, version = version + 1 WHERE id = ?3",
            )?
            .execute(params![
                serde_json::to_string(status)?,
                seq,
                thread_id.as_str()
            ])?;
            Ok(())
        }
        EventBody::ThreadErrorRaised { .. }
        | EventBody::McpToolCalled(_)
        | EventBody::CheckpointRecorded(_)
        | EventBody::RevertUpdated(_) => Ok(()),
    }
}

/// Tables holding rows of one thread in a `thread_id` column, which a tombstone
/// empties of that thread (CHG-08).
const THREAD_TABLES: [&str; 7] = [
    "provider_session_bindings",
    "runs",
    "nodes",
    "provider_threads",
    "provider_turns",
    "runtime_requests",
    "turn_items",
];

/// The fold of `thread.deleted`: removes the thread and every projection row of it.
/// Provider sessions stay (other threads may share them); only the bindings go.
fn drop_thread(conn: &Connection, thread: &str) -> Result<(), StoreError> {
    for table in THREAD_TABLES {
        conn.prepare_cached(&format!("DELETE FROM {table} WHERE thread_id = ?1"))?
            .execute([thread])?;
    }
    conn.prepare_cached("DELETE FROM threads WHERE id = ?1")?
        .execute([thread])?;
    Ok(())
}

/// Whether `thread` has a tombstone (`thread.deleted`) with a sequence below `seq`
/// (one lookup in the `events_thread_type_sequence` index).
fn deleted_before(conn: &Connection, thread: &str, seq: i64) -> Result<bool, StoreError> {
    Ok(conn
        .prepare_cached(
            "SELECT 1 FROM events WHERE thread_id = ?1 AND type = 'thread.deleted' \
             AND sequence < ?2 LIMIT 1",
        )?
        .query_row(params![thread, seq], |_| Ok(()))
        .optional()?
        .is_some())
}

/// Empties every projection table (the first step of a rebuild).
pub(crate) fn clear_projections(conn: &Connection) -> Result<(), StoreError> {
    for table in PROJECTION_TABLES {
        conn.execute(&format!("DELETE FROM {table}"), [])?;
    }
    Ok(())
}

/// Reads the version of row `id` of `table` (None when absent).
pub(crate) fn read_version(
    conn: &Connection,
    table: &str,
    id: &str,
) -> Result<Option<i64>, StoreError> {
    Ok(conn
        .prepare_cached(&format!("SELECT version FROM {table} WHERE id = ?1"))?
        .query_row([id], |row| row.get(0))
        .optional()?)
}

/// Upserts one entity row: indexed `columns`, the entity as `payload_json`,
/// `version` 1 on insert / +1 on update, `created_sequence` kept, `last_sequence` = `seq`.
fn upsert<T: Serialize>(
    conn: &Connection,
    table: &str,
    id: &str,
    columns: &[(&str, Value)],
    entity: &T,
    seq: i64,
) -> Result<(), StoreError> {
    let names: Vec<&str> = columns.iter().map(|c| c.0).collect();
    let placeholders: String = (0..columns.len())
        .map(|i| format!(", ?{}", i + 4))
        .collect();
    let updates: String = names
        .iter()
        .map(|n| format!("{n} = excluded.{n}, "))
        .collect();
    let sql = format!(
        "INSERT INTO {table} (id, payload_json, created_sequence, last_sequence, version, {cols}) \
         VALUES (?1, ?2, ?3, ?3, 1{placeholders}) \
         ON CONFLICT (id) DO UPDATE SET {updates}payload_json = excluded.payload_json, \
         last_sequence = excluded.last_sequence, version = {table}.version + 1",
        cols = names.join(", "),
    );
    let payload = serde_json::to_string(entity)?;
    let mut values: Vec<Value> = vec![text(id), Value::Text(payload), Value::Integer(seq)];
    values.extend(columns.iter().map(|c| c.1.clone()));
    conn.prepare_cached(&sql)?
        .execute(rusqlite::params_from_iter(values))?;
    Ok(())
}

fn text(s: &str) -> Value {
    Value::Text(s.to_owned())
}

fn opt_text(s: Option<&str>) -> Value {
    s.map_or(Value::Null, text)
}

/// The serde name of a unit enum variant (`"running"`), for status columns.
fn enum_text<T: Serialize>(v: &T) -> Result<Value, StoreError> {
    Ok(match serde_json::to_value(v)? {
        serde_json::Value::String(s) => Value::Text(s),
        other => Value::Text(other.to_string()),
    })
}
