// Read side: the pool of read-only connections (used on tokio's blocking pool) and
// the SQL of every query — events by filter, entities by id, the thread projection.

use crate::error::DbError;
use crate::fold::{PROJECTION_TABLES, seq_i64, seq_u64};
use crate::schema::open_reader;
use knife_protocol::{DomainEvent, StoredEvent, ThreadProjection, TurnItem};
use knife_store::StoreError;
use knife_store::StreamFilter;
use knife_store::fold::{StoredChunk, assemble};
use rusqlite::types::Value;
use rusqlite::{Connection, OptionalExtension, params};
use serde::de::DeserializeOwned;
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use tokio::sync::Semaphore;

/// A small pool of read-only connections. Each read takes a permit (async), then
/// borrows a connection inside `spawn_blocking`; the std mutex guarding the idle list
/// is only held for a push or pop, never across an `.await`.
#[derive(Debug)]
pub(crate) struct ReadPool {
    path: PathBuf,
    idle: Mutex<Vec<Connection>>,
    permits: Arc<Semaphore>,
}

impl ReadPool {
    /// Opens `size` (at least 1) read-only connections to `path`.
    pub(crate) fn open(path: PathBuf, size: usize) -> Result<ReadPool, DbError> {
        let size = size.max(1);
        let idle = (0..size)
            .map(|_| open_reader(&path))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(ReadPool {
            path,
            idle: Mutex::new(idle),
            permits: Arc::new(Semaphore::new(size)),
        })
    }

    /// Runs `f` with a read-only connection on the blocking pool.
    pub(crate) async fn read<T, F>(self: &Arc<Self>, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T, DbError> + Send + 'static,
    {
        // The permit bounds concurrent readers to the pool size; it moves into the
        // blocking task so it is held exactly as long as the connection is in use.
        let permit = self
            .permits
            .clone()
            .acquire_owned()
            .await
            .map_err(|e| StoreError::ReadTask(e.to_string()))?;
        let pool = Arc::clone(self);
        tokio::task::spawn_blocking(move || {
            let _permit = permit;
            let conn = match pool.lock_idle().pop() {
                Some(conn) => conn,
                // Only after a reader panicked and its connection was lost.
                None => open_reader(&pool.path)?,
            };
            let result = f(&conn);
            pool.lock_idle().push(conn);
            result.map_err(StoreError::from)
        })
        .await
        .map_err(|e| StoreError::ReadTask(e.to_string()))?
    }

    fn lock_idle(&self) -> std::sync::MutexGuard<'_, Vec<Connection>> {
        // A poisoned list is still a valid list of connections.
        self.idle
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Events matching `filter` with `filter.after < sequence <= through` (no upper bound
/// when `through` is None), in sequence order, at most `limit`.
pub(crate) fn read_events(
    conn: &Connection,
    filter: &StreamFilter,
    through: Option<u64>,
    limit: usize,
) -> Result<Vec<StoredEvent>, DbError> {
    let mut sql = String::from("SELECT sequence, payload_json FROM events WHERE sequence > ?1");
    let mut args: Vec<Value> = vec![Value::Integer(seq_i64(filter.after))];
    if let Some(through) = through {
        args.push(Value::Integer(seq_i64(through)));
        sql.push_str(&format!(" AND sequence <= ?{}", args.len()));
    }
    if let Some(thread) = &filter.thread_id {
        args.push(Value::Text(thread.as_str().to_owned()));
        sql.push_str(&format!(" AND thread_id = ?{}", args.len()));
    }
    if let Some(ty) = &filter.event_type {
        args.push(Value::Text(ty.clone()));
        sql.push_str(&format!(" AND type = ?{}", args.len()));
    }
    args.push(Value::Integer(i64::try_from(limit).unwrap_or(i64::MAX)));
    sql.push_str(&format!(" ORDER BY sequence LIMIT ?{}", args.len()));
    let rows: Vec<(i64, String)> = conn
        .prepare_cached(&sql)?
        .query_map(rusqlite::params_from_iter(args), |row| {
            Ok((row.get(0)?, row.get(1)?))
        })?
        .collect::<Result<_, _>>()?;
    rows.into_iter()
        .map(|(sequence, payload)| {
            let event: DomainEvent = serde_json::from_str(&payload)?;
            Ok(StoredEvent {
                sequence: seq_u64(sequence),
                event,
            })
        })
        .collect()
}

/// Highest sequence in the log (or of one thread's events); 0 when there is none.
pub(crate) fn latest_sequence(conn: &Connection, thread: Option<&str>) -> Result<u64, DbError> {
    let max: Option<i64> = match thread {
        None => conn
            .prepare_cached("SELECT MAX(sequence) FROM events")?
            .query_row([], |row| row.get(0))?,
        Some(t) => conn
            .prepare_cached("SELECT MAX(sequence) FROM events WHERE thread_id = ?1")?
            .query_row([t], |row| row.get(0))?,
    };
    Ok(max.map_or(0, seq_u64))
}

/// The entity stored in row `id` of `table`, if any.
pub(crate) fn get_entity<T: DeserializeOwned>(
    conn: &Connection,
    table: &str,
    id: &str,
) -> Result<Option<T>, DbError> {
    let payload: Option<String> = conn
        .prepare_cached(&format!("SELECT payload_json FROM {table} WHERE id = ?1"))?
        .query_row([id], |row| row.get(0))
        .optional()?;
    payload
        .map(|p| serde_json::from_str(&p).map_err(DbError::from))
        .transpose()
}

/// Row `id` of `table` with its version, if it exists.
pub(crate) fn get_versioned<T: DeserializeOwned>(
    conn: &Connection,
    table: &str,
    id: &str,
) -> Result<Option<(T, i64)>, DbError> {
    let row: Option<(String, i64)> = conn
        .prepare_cached(&format!(
            "SELECT payload_json, version FROM {table} WHERE id = ?1"
        ))?
        .query_row([id], |row| Ok((row.get(0)?, row.get(1)?)))
        .optional()?;
    row.map(|(p, version)| Ok((serde_json::from_str(&p)?, version)))
        .transpose()
}

/// The entities selected by `sql` (whose only column is `payload_json`).
pub(crate) fn list_entities<T: DeserializeOwned>(
    conn: &Connection,
    sql: &str,
    args: &[&str],
) -> Result<Vec<T>, DbError> {
    let payloads: Vec<String> = conn
        .prepare_cached(sql)?
        .query_map(rusqlite::params_from_iter(args), |row| row.get(0))?
        .collect::<Result<_, _>>()?;
    payloads
        .iter()
        .map(|p| serde_json::from_str(p).map_err(DbError::from))
        .collect()
}

/// The chunk rows of one thread's items (LIVE-03), by item, in sequence order.
fn chunks_of_thread(
    conn: &Connection,
    thread_id: &str,
) -> Result<HashMap<String, Vec<StoredChunk>>, DbError> {
    let mut out: HashMap<String, Vec<StoredChunk>> = HashMap::new();
    let mut stmt = conn.prepare_cached(
        "SELECT item_id, field, start_byte, text, updated_at FROM turn_item_chunks \
         WHERE thread_id = ?1 ORDER BY item_id, sequence",
    )?;
    let rows = stmt.query_map([thread_id], |row| {
        Ok((
            row.get::<_, String>(0)?,
            StoredChunk {
                field: row.get(1)?,
                start: seq_u64(row.get(2)?),
                text: row.get(3)?,
                updated_at: row.get(4)?,
            },
        ))
    })?;
    for row in rows {
        let (item, chunk) = row?;
        out.entry(item).or_default().push(chunk);
    }
    Ok(out)
}

/// Turn item `id` as a whole: its row with its appended chunks folded in (LIVE-03).
pub(crate) fn get_turn_item(conn: &Connection, id: &str) -> Result<Option<TurnItem>, DbError> {
    let Some(mut item) = get_entity::<TurnItem>(conn, "turn_items", id)? else {
        return Ok(None);
    };
    let mut stmt = conn.prepare_cached(
        "SELECT field, start_byte, text, updated_at FROM turn_item_chunks \
         WHERE thread_id = ?1 AND item_id = ?2 ORDER BY sequence",
    )?;
    let chunks = stmt
        .query_map(params![item.thread_id.as_str(), id], |row| {
            Ok(StoredChunk {
                field: row.get(0)?,
                start: seq_u64(row.get(1)?),
                text: row.get(2)?,
                updated_at: row.get(3)?,
            })
        })?
        .collect::<Result<Vec<_>, _>>()?;
    assemble(&mut item, chunks);
    Ok(Some(item))
}

/// The whole projection of one thread, read in one read transaction (a consistent
/// snapshot). `None` when the thread row does not exist.
pub(crate) fn thread_projection(
    conn: &Connection,
    thread_id: &str,
) -> Result<Option<ThreadProjection>, DbError> {
    let tx = conn.unchecked_transaction()?;
    let Some(thread) = get_entity(&tx, "threads", thread_id)? else {
        return Ok(None);
    };
    let by_thread = |table: &str, order: &str| {
        format!("SELECT payload_json FROM {table} WHERE thread_id = ?1 ORDER BY {order}")
    };
    let projection = ThreadProjection {
        thread,
        runs: list_entities(&tx, &by_thread("runs", "ordinal, id"), &[thread_id])?,
        turn_items: {
            let mut items: Vec<TurnItem> =
                list_entities(&tx, &by_thread("turn_items", "ordinal, id"), &[thread_id])?;
            let mut chunks = chunks_of_thread(&tx, thread_id)?;
            if !chunks.is_empty() {
                for item in &mut items {
                    if let Some(rows) = chunks.remove(item.id.as_str()) {
                        assemble(item, rows);
                    }
                }
            }
            items
        },
        nodes: list_entities(&tx, &by_thread("nodes", "created_sequence"), &[thread_id])?,
        provider_sessions: list_entities(
            &tx,
            "SELECT s.payload_json FROM provider_session_bindings b \
             JOIN provider_sessions s ON s.id = b.provider_session_id \
             WHERE b.thread_id = ?1 ORDER BY b.bound_sequence",
            &[thread_id],
        )?,
        provider_threads: list_entities(
            &tx,
            &by_thread("provider_threads", "created_sequence"),
            &[thread_id],
        )?,
        provider_turns: list_entities(
            &tx,
            &by_thread("provider_turns", "created_sequence"),
            &[thread_id],
        )?,
        runtime_requests: list_entities(
            &tx,
            &by_thread("runtime_requests", "created_sequence"),
            &[thread_id],
        )?,
        latest_sequence: latest_sequence(&tx, Some(thread_id))?,
        mcp: None,
        lease: None,
    };
    tx.finish()?;
    Ok(Some(projection))
}

/// Every row of every projection table as JSON objects (column name → value,
/// `payload_json` parsed), each table ordered by its primary key. The backend-neutral
/// shape: `search_docs.project_key` (SQLite's FTS5 project token, migration 0110; it is
/// the thread's project id, derived) is left out, so a PostgreSQL copy compares equal
/// (`knife db copy`, SCALE-09).
pub(crate) fn dump_projections(
    conn: &Connection,
) -> Result<BTreeMap<String, Vec<serde_json::Value>>, DbError> {
    let tx = conn.unchecked_transaction()?;
    let mut out = BTreeMap::new();
    for table in PROJECTION_TABLES {
        let order = knife_store::fold::key_order(table);
        let mut stmt = tx.prepare(&format!("SELECT * FROM {table} ORDER BY {order}"))?;
        let names: Vec<String> = stmt.column_names().map(str::to_owned).collect();
        let rows = stmt
            .query_map([], |row| {
                let mut obj = serde_json::Map::new();
                for (i, name) in names.iter().enumerate() {
                    if table == "search_docs" && name == "project_key" {
                        continue;
                    }
                    obj.insert(name.clone(), sql_to_json(name, row.get(i)?));
                }
                Ok(serde_json::Value::Object(obj))
            })?
            .collect::<Result<Vec<_>, _>>()?;
        out.insert(table.to_owned(), rows);
    }
    tx.finish()?;
    Ok(out)
}

fn sql_to_json(column: &str, v: Value) -> serde_json::Value {
    match v {
        Value::Null => serde_json::Value::Null,
        Value::Integer(i) => i.into(),
        Value::Real(f) => f.into(),
        Value::Text(s) if column == "payload_json" => {
            serde_json::from_str(&s).unwrap_or(serde_json::Value::String(s))
        }
        Value::Text(s) => s.into(),
        Value::Blob(b) => b.into(),
    }
}

/// Matches ranked per search (TURN-08): bm25 is computed for the most recently indexed
/// this many matches only, so a word found in every document costs the same as a rare
/// one (a whole-index bm25 sort of 100,000 matches takes hundreds of ms).
const RANK_WINDOW: i64 = 2000;

/// The FTS5 token of project `id` in `search_docs.project_key`: the hex of its UTF-8
/// bytes, as SQLite's `hex()` writes it (migration 0110 and the `IndexText` apply), so
/// any id is one alphanumeric token.
fn project_key(id: &str) -> String {
    id.bytes().map(|b| format!("{b:02X}")).collect()
}

/// Full-text search (TURN-08): every word of `q.text` must match the body (each quoted,
/// so FTS5 syntax never reaches the engine); ranked by bm25 among the [`RANK_WINDOW`]
/// most recently indexed matches, snippets from FTS5 `snippet`. A project filter is a
/// term of the FTS5 query (the `project_key` column), so neither the rank window nor a
/// small project among many scans every match of a common word; the exact project is
/// checked again on the joined thread row.
pub(crate) fn search(
    conn: &Connection,
    q: &knife_store::SearchQuery,
) -> Result<Vec<knife_protocol::SearchHit>, DbError> {
    let terms = knife_protocol::search_terms(&q.text);
    if terms.is_empty() || q.limit == 0 {
        return Ok(Vec::new());
    }
    let words: Vec<String> = terms.iter().map(|t| format!("\"{t}\"")).collect();
    let mut fts = format!("{{body}} : ({})", words.join(" "));
    if let Some(p) = &q.project {
        fts.push_str(&format!(
            " AND {{project_key}} : \"{}\"",
            project_key(p.as_str())
        ));
    }
    let project = q.project.as_ref().map(|p| p.as_str().to_owned());
    let limit = i64::try_from(q.limit).unwrap_or(i64::MAX);
    // The window's bound comes from the index alone (rowid order, no join); joins and
    // snippets are only for the window's matches.
    let mut stmt = conn.prepare_cached(
        "SELECT d.thread_id, t.project_id, json_extract(t.payload_json, '$.title'), d.run_id, \
                d.id, d.kind, snippet(search_fts, 0, '[', ']', '…', 16), \
                bm25(search_fts, 1.0, 0.0) \
         FROM search_fts \
         JOIN search_docs d ON d.rowid = search_fts.rowid \
         JOIN threads t ON t.id = d.thread_id \
         WHERE search_fts MATCH ?1 AND (?2 IS NULL OR t.project_id = ?2) \
           AND search_fts.rowid >= coalesce((SELECT min(r) FROM ( \
               SELECT f.rowid AS r FROM search_fts f \
               WHERE f.search_fts MATCH ?1 \
               ORDER BY f.rowid DESC LIMIT ?4)), 0) \
         ORDER BY bm25(search_fts, 1.0, 0.0) LIMIT ?3",
    )?;
    let rows = stmt.query_map(rusqlite::params![fts, project, limit, RANK_WINDOW], |row| {
        Ok((
            row.get::<_, String>(0)?,
            row.get::<_, String>(1)?,
            row.get::<_, Option<String>>(2)?,
            row.get::<_, Option<String>>(3)?,
            row.get::<_, String>(4)?,
            row.get::<_, String>(5)?,
            row.get::<_, String>(6)?,
            row.get::<_, f64>(7)?,
        ))
    })?;
    let mut hits = Vec::new();
    for row in rows {
        let (thread, project, title, run, id, kind, snippet, bm25) = row?;
        let Some(kind) = knife_protocol::SearchKind::parse(&kind) else {
            continue;
        };
        let title_doc = kind == knife_protocol::SearchKind::Title;
        hits.push(knife_protocol::SearchHit {
            thread_id: thread.into(),
            project_id: project.into(),
            thread_title: title.unwrap_or_default(),
            run_id: run.map(Into::into),
            item_id: (!title_doc).then(|| id.into()),
            kind,
            snippet,
            // bm25 is lower-is-better and negative: flip it so higher is better.
            score: -bm25,
        });
    }
    Ok(hits)
}

/// Usage sums (TURN-06/07): [`knife_store::usage::sum_sql`] over `model_calls`.
pub(crate) fn usage_sums(
    conn: &Connection,
    filter: &knife_store::UsageFilter,
) -> Result<Vec<knife_store::UsageSum>, DbError> {
    use knife_store::usage::{SqlParam, sort_sums, sum_of_row, sum_sql};
    let (sql, params) = sum_sql(filter, |n| format!("?{n}"));
    let values: Vec<Value> = params
        .into_iter()
        .map(|p| match p {
            SqlParam::Text(s) => Value::Text(s),
            SqlParam::Integer(i) => Value::Integer(i),
        })
        .collect();
    let mut stmt = conn.prepare_cached(&sql)?;
    let rows = stmt.query_map(rusqlite::params_from_iter(values), |row| {
        let mut counts = [0i64; 8];
        for (i, c) in counts.iter_mut().enumerate() {
            *c = row.get(3 + i)?;
        }
        Ok(sum_of_row(row.get(0)?, row.get(1)?, row.get(2)?, counts))
    })?;
    let mut sums = rows.collect::<Result<Vec<_>, _>>()?;
    sort_sums(&mut sums);
    Ok(sums)
}
