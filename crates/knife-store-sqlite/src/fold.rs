// The projection fold on SQLite: applies the backend-neutral plan of one stored event
// (knife_store::fold) in SQL, for both `write` (incrementally) and `rebuild`.

use crate::error::DbError;
use crate::search_queue::{self, SearchRow};
use knife_protocol::{DomainEvent, ProjectId, StoredEvent};
use knife_store::StoreError;
use knife_store::fold::{
    AppendStep, Cell, ItemTail, RowChange, THREAD_TABLES, plan, plan_append, plan_reassembled,
};
use rusqlite::types::Value;
use rusqlite::{Connection, ErrorCode, OptionalExtension, params};

pub(crate) use knife_store::fold::{FoldMode, PROJECTION_TABLES};

/// Converts a sequence to SQLite's INTEGER (sequences come from SQLite, so they fit).
pub(crate) fn seq_i64(sequence: u64) -> i64 {
    i64::try_from(sequence).unwrap_or(i64::MAX)
}

/// Converts an INTEGER read from SQLite back to a sequence (never negative).
pub(crate) fn seq_u64(sequence: i64) -> u64 {
    u64::try_from(sequence).unwrap_or(0)
}

/// An event's columns as text: its payload JSON and its `occurred_at` (RFC 3339, µs).
#[derive(Debug)]
pub(crate) struct Encoded {
    payload: String,
    occurred_at: String,
}

impl Encoded {
    /// Encodes `event`. Errors: [`StoreError::Serde`].
    pub(crate) fn of(event: &DomainEvent) -> Result<Encoded, StoreError> {
        Ok(Encoded {
            payload: serde_json::to_string(event)?,
            occurred_at: event
                .occurred_at
                .to_rfc3339_opts(chrono::SecondsFormat::Micros, true),
        })
    }
}

/// Appends `event` to the `events` table and returns its sequence; `encoded` is its
/// text when the caller encoded it already (off the writer thread).
///
/// Errors: [`StoreError::DuplicateEvent`] when its id is already in the log.
pub(crate) fn append_event(
    conn: &Connection,
    event: &DomainEvent,
    encoded: Option<Encoded>,
) -> Result<u64, DbError> {
    let Encoded {
        payload,
        occurred_at,
    } = match encoded {
        Some(encoded) => encoded,
        None => Encoded::of(event)?,
    };
    let inserted = conn
        .prepare_cached(
            "INSERT INTO events (event_id, thread_id, run_id, type, occurred_at, payload_json) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        )?
        .execute(params![
            event.id.as_str(),
            event
                .thread_id
                .as_ref()
                .map(knife_protocol::ThreadId::as_str),
            event.run_id.as_ref().map(knife_protocol::RunId::as_str),
            event.event_type(),
            occurred_at,
            payload,
        ]);
    match inserted {
        Ok(_) => {}
        Err(rusqlite::Error::SqliteFailure(e, _)) if e.code == ErrorCode::ConstraintViolation => {
            return Err(StoreError::DuplicateEvent {
                event_id: event.id.clone(),
            }
            .into());
        }
        Err(e) => return Err(e.into()),
    }
    Ok(seq_u64(conn.last_insert_rowid()))
}

/// Applies one stored event to the projection tables: the backend-neutral
/// [`knife_store::fold::plan`] says which rows change, this applies them in SQL.
///
/// A deleted thread stays deleted (CHG-08): whatever arrives for it after its
/// tombstone (a late event of a stopped runtime) is kept in the log but changes no
/// projection, in a write and in a rebuild alike.
///
/// Projects: a project whose root another project already has is refused with
/// [`StoreError::ProjectRootTaken`] in [`FoldMode::Write`]; in [`FoldMode::Rebuild`]
/// it is kept with a NULL `root` column (logs written before migration 0002).
pub(crate) fn apply_event(
    conn: &Connection,
    stored: &StoredEvent,
    mode: FoldMode,
) -> Result<(), DbError> {
    apply_planned(conn, stored, None, mode)
}

/// [`apply_event`] with the event's [`plan`] when the caller made it already.
pub(crate) fn apply_planned(
    conn: &Connection,
    stored: &StoredEvent,
    planned: Option<Vec<RowChange>>,
    mode: FoldMode,
) -> Result<(), DbError> {
    let seq = seq_i64(stored.sequence);
    if let Some(thread) = &stored.event.thread_id
        && deleted_before(conn, thread.as_str(), seq)?
    {
        return Ok(());
    }
    let changes = match planned {
        Some(changes) => changes,
        None => plan(&stored.event)?,
    };
    for change in changes {
        apply(conn, change, seq, mode)?;
    }
    Ok(())
}

fn apply(conn: &Connection, change: RowChange, seq: i64, mode: FoldMode) -> Result<(), DbError> {
    match change {
        RowChange::Upsert {
            table,
            id,
            columns,
            payload,
        } => upsert(conn, table, &id, columns, payload, seq),
        RowChange::UpsertProject {
            id,
            root,
            updated_at_us,
            payload,
        } => {
            // One project per root folder (migration 0002). Checked here to name the
            // holder in the error; the UNIQUE index `projects_root` is the backstop.
            let holder: Option<String> = conn
                .prepare_cached("SELECT id FROM projects WHERE root = ?1 AND id <> ?2")?
                .query_row(params![root, id], |row| row.get(0))
                .optional()?;
            let root = match (holder, mode) {
                (None, _) => Cell::Text(root),
                (Some(holder), FoldMode::Write) => {
                    return Err(StoreError::ProjectRootTaken {
                        root,
                        project_id: ProjectId::from(holder.as_str()),
                    }
                    .into());
                }
                // A log written before migration 0002 may hold several projects on one
                // root: as the migration did, the first keeps it and later ones get NULL,
                // so rebuild == the migrated incremental state.
                (Some(_), FoldMode::Rebuild) => Cell::Null,
            };
            upsert(
                conn,
                "projects",
                &id,
                vec![
                    ("updated_at_us", Cell::Integer(updated_at_us)),
                    ("root", root),
                ],
                payload,
                seq,
            )
        }
        RowChange::RaiseLastSeen { session_id, at_us } => {
            conn.prepare_cached(
                "UPDATE provider_sessions \
                 SET last_seen_at_us = MAX(COALESCE(last_seen_at_us, ?2), ?2) \
                 WHERE id = ?1",
            )?
            .execute(params![session_id, at_us])?;
            Ok(())
        }
        RowChange::Bind {
            session_id,
            thread_id,
        } => {
            conn.prepare_cached(
                "INSERT INTO provider_session_bindings \
                 (provider_session_id, thread_id, bound_sequence, last_sequence) \
                 VALUES (?1, ?2, ?3, ?3) \
                 ON CONFLICT (provider_session_id, thread_id) \
                 DO UPDATE SET last_sequence = excluded.last_sequence",
            )?
            .execute(params![session_id, thread_id, seq])?;
            Ok(())
        }
        RowChange::Unbind {
            session_id,
            thread_id,
        } => {
            conn.prepare_cached(
                "DELETE FROM provider_session_bindings \
                 WHERE provider_session_id = ?1 AND thread_id = ?2",
            )?
            .execute(params![session_id, thread_id])?;
            Ok(())
        }
        RowChange::DropThread { thread_id } => drop_thread(conn, &thread_id),
        RowChange::IndexText {
            id,
            thread_id,
            run_id,
            kind,
            body,
        } => search_queue::write(
            conn,
            SearchRow::Index {
                id,
                thread_id,
                run_id,
                kind,
                body,
            },
        ),
        RowChange::UnindexText { id } => search_queue::write(conn, SearchRow::Unindex { id }),
        RowChange::AppendItemText { chunk } => {
            let tail = item_tail(conn, chunk.thread_id.as_str(), chunk.item_id.as_str())?;
            let changes = match plan_append(tail, &chunk)? {
                AppendStep::Changes(changes) => changes,
                AppendStep::Assemble => {
                    match crate::queries::get_turn_item(conn, chunk.item_id.as_str())? {
                        Some(item) => plan_reassembled(item, &chunk)?,
                        None => Vec::new(),
                    }
                }
            };
            for change in changes {
                apply(conn, change, seq, mode)?;
            }
            Ok(())
        }
        RowChange::InsertChunk {
            thread_id,
            item_id,
            field,
            start,
            end,
            text,
            updated_at,
        } => {
            conn.prepare_cached(
                "INSERT INTO turn_item_chunks \
                 (thread_id, item_id, sequence, field, start_byte, end_byte, text, updated_at) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            )?
            .execute(params![
                thread_id, item_id, seq, field, start, end, text, updated_at
            ])?;
            Ok(())
        }
        RowChange::DropChunks { thread_id, item_id } => {
            conn.prepare_cached(
                "DELETE FROM turn_item_chunks WHERE thread_id = ?1 AND item_id = ?2",
            )?
            .execute(params![thread_id, item_id])?;
            Ok(())
        }
        RowChange::InsertRunTotal { run_id, row } => {
            let recorded = conn
                .prepare_cached("SELECT 1 FROM model_calls WHERE run_id = ?1 LIMIT 1")?
                .query_row([&run_id], |_| Ok(()))
                .optional()?
                .is_some();
            if recorded {
                return Ok(());
            }
            apply(conn, *row, seq, mode)
        }
        RowChange::SetAgentStatus { thread_id, status } => {
            conn.prepare_cached(
                "UPDATE threads SET payload_json = json_set(payload_json, '$.agent_status', json(?1)), \
                 last_sequence = ?2, version = version + 1 WHERE id = ?3",
            )?
            .execute(params![status, seq, thread_id])?;
            Ok(())
        }
    }
}

/// What folding a chunk of `item` needs to know (LIVE-03): its last chunk's field and
/// end (one probe of the chunk table's key), else its row's payload.
fn item_tail(conn: &Connection, thread: &str, item: &str) -> Result<ItemTail, DbError> {
    let last: Option<(String, i64)> = conn
        .prepare_cached(
            "SELECT field, end_byte FROM turn_item_chunks WHERE thread_id = ?1 AND item_id = ?2 \
             ORDER BY sequence DESC LIMIT 1",
        )?
        .query_row(params![thread, item], |row| Ok((row.get(0)?, row.get(1)?)))
        .optional()?;
    if let Some((field, end)) = last {
        return Ok(ItemTail::Chunked {
            field,
            end: seq_u64(end),
        });
    }
    let payload: Option<String> = conn
        .prepare_cached("SELECT payload_json FROM turn_items WHERE id = ?1")?
        .query_row(params![item], |row| row.get(0))
        .optional()?;
    Ok(payload.map_or(ItemTail::Missing, ItemTail::Whole))
}

/// The fold of `thread.deleted`: removes the thread and every projection row of it.
/// Provider sessions stay (other threads may share them); only the bindings go.
fn drop_thread(conn: &Connection, thread: &str) -> Result<(), DbError> {
    // Search rows queued before the deletion are written first, so it deletes them too.
    search_queue::flush(conn)?;
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
fn deleted_before(conn: &Connection, thread: &str, seq: i64) -> Result<bool, DbError> {
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
pub(crate) fn clear_projections(conn: &Connection) -> Result<(), DbError> {
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
) -> Result<Option<i64>, DbError> {
    Ok(conn
        .prepare_cached(&format!("SELECT version FROM {table} WHERE id = ?1"))?
        .query_row([id], |row| row.get(0))
        .optional()?)
}

/// Upserts one entity row: indexed `columns`, the entity as `payload_json`,
/// `version` 1 on insert / +1 on update, `created_sequence` kept, `last_sequence` = `seq`.
fn upsert(
    conn: &Connection,
    table: &'static str,
    id: &str,
    columns: Vec<(&'static str, Cell)>,
    payload: String,
    seq: i64,
) -> Result<(), DbError> {
    let mut values: Vec<Value> = Vec::with_capacity(3 + columns.len());
    values.extend([
        Value::Text(id.to_owned()),
        Value::Text(payload),
        Value::Integer(seq),
    ]);
    let names: Vec<&'static str> = columns.iter().map(|c| c.0).collect();
    values.extend(columns.into_iter().map(|(_, cell)| match cell {
        Cell::Null => Value::Null,
        Cell::Integer(i) => Value::Integer(i),
        Cell::Text(s) => Value::Text(s),
    }));
    UPSERT_SQL.with_borrow_mut(|cache| {
        let sql = match cache
            .iter()
            .find(|(t, n, _)| *t == table && n.as_slice() == names.as_slice())
        {
            Some((_, _, sql)) => sql,
            None => {
                let sql = upsert_sql(table, &names);
                cache.push((table, names, sql));
                &cache[cache.len() - 1].2
            }
        };
        conn.prepare_cached(sql)?
            .execute(rusqlite::params_from_iter(values))?;
        Ok(())
    })
}

thread_local! {
    /// The SQL of each upsert shape (table and indexed columns) met on this thread: a
    /// dozen shapes, so a list; building it per row was a tenth of the writer's work
    /// (LIVE-07).
    static UPSERT_SQL: std::cell::RefCell<Vec<(&'static str, Vec<&'static str>, String)>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// `INSERT … ON CONFLICT (id) DO UPDATE` of `table` with the indexed columns `names`
/// (parameters: id, payload, sequence, then the columns).
fn upsert_sql(table: &str, names: &[&str]) -> String {
    let placeholders: String = (0..names.len()).map(|i| format!(", ?{}", i + 4)).collect();
    let updates: String = names
        .iter()
        .map(|n| format!("{n} = excluded.{n}, "))
        .collect();
    format!(
        "INSERT INTO {table} (id, payload_json, created_sequence, last_sequence, version, {cols}) \
         VALUES (?1, ?2, ?3, ?3, 1{placeholders}) \
         ON CONFLICT (id) DO UPDATE SET {updates}payload_json = excluded.payload_json, \
         last_sequence = excluded.last_sequence, version = {table}.version + 1",
        cols = names.join(", "),
    )
}
