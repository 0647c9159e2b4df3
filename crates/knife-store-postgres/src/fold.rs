// The fold on PostgreSQL: each event's row changes (knife_store::fold::plan) as prepared
// statements sent in one pipeline per batch, in order, inside the append transaction.

//! Why a pipeline: an append holds the cluster-wide append lock (crate::write::APPEND_LOCK)
//! until COMMIT, so every round trip inside it caps the throughput of all nodes
//! together. The statements of a batch are queued on the connection in order and their
//! answers read afterwards (tokio-postgres sends a prepared statement's Bind/Execute on
//! the future's first poll), so a batch costs one round trip however many rows it
//! changes; PostgreSQL still runs them one after the other in that order, exactly as if
//! each were awaited. Reads the fold needs are done up front (deleted threads, once
//! per batch) or by flushing the pipeline first (the rare project-root check).

use std::collections::{HashMap, HashSet};
use std::pin::Pin;
use std::task::Poll;

use crate::error::{PgError, PgResult};
use knife_protocol::{ProjectId, StoredEvent};
use knife_store::StoreError;
use knife_store::fold::{
    AppendStep, Cell, FoldMode, ItemTail, RowChange, THREAD_TABLES, TOMBSTONE_TYPE, plan_append,
    plan_reassembled,
};
use postgres_types::{IsNull, ToSql, Type, to_sql_checked};
use tokio_postgres::Statement;

/// What the fold writes through: a pooled connection or one of its transactions, with
/// deadpool's statement cache, and the driver's client underneath for the shared
/// readers of crate::read.
pub(crate) trait Conn: deadpool_postgres::GenericClient {
    /// The driver's client or transaction underneath.
    type Raw: tokio_postgres::GenericClient + Sync;
    /// The driver's client or transaction underneath.
    fn raw(&self) -> &Self::Raw;
}

impl<'a> Conn for deadpool_postgres::Transaction<'a> {
    type Raw = tokio_postgres::Transaction<'a>;
    fn raw(&self) -> &Self::Raw {
        self
    }
}

impl Conn for deadpool_postgres::Client {
    type Raw = tokio_postgres::Client;
    fn raw(&self) -> &Self::Raw {
        self
    }
}

/// One statement parameter, owned (the pipeline outlives the fold's borrows).
pub(crate) type Param = Box<dyn ToSql + Sync + Send>;

/// Statements queued for one round trip, in execution order.
#[derive(Default)]
pub(crate) struct Pipeline {
    queued: Vec<(Statement, Vec<Param>)>,
    /// Who queued each statement not yet flushed (the caller's tag, e.g. an append of
    /// a group), in order.
    owners: Vec<usize>,
    /// The tag of the statements queued from now on (0 unless the caller sets it).
    pub(crate) owner: usize,
    /// The tag of the statement that failed a flush.
    failed: Option<usize>,
}

impl Pipeline {
    /// Queues `sql` (prepared once per connection) with `params`.
    pub(crate) async fn push(
        &mut self,
        tx: &impl Conn,
        sql: &str,
        params: Vec<Param>,
    ) -> PgResult<()> {
        let statement = tx.prepare_cached(sql).await?;
        self.queued.push((statement, params));
        self.owners.push(self.owner);
        Ok(())
    }

    /// Takes the queued statements out, in order, to be sent by the caller (with what
    /// must go before and after them, crate::pipelined).
    pub(crate) fn take(&mut self) -> Vec<(Statement, Vec<Param>)> {
        self.owners.clear();
        std::mem::take(&mut self.queued)
    }

    /// The tag ([`Pipeline::owner`]) of the statement whose failure ended the last
    /// failed flush; `None` when no flush failed.
    pub(crate) fn failed_owner(&self) -> Option<usize> {
        self.failed
    }

    /// Sends every queued statement, then reads their answers in order: the first
    /// failure is the error (the transaction is then aborted; the caller drops it).
    pub(crate) async fn flush(&mut self, tx: &impl Conn) -> PgResult<()> {
        let queued = std::mem::take(&mut self.queued);
        let owners = std::mem::take(&mut self.owners);
        let refs: Vec<Vec<&(dyn ToSql + Sync)>> = queued
            .iter()
            .map(|(_, params)| params.iter().map(|p| &**p as &(dyn ToSql + Sync)).collect())
            .collect();
        let mut futures: Vec<Pin<Box<_>>> = queued
            .iter()
            .zip(&refs)
            .map(|((statement, _), params)| Box::pin(tx.execute(statement, params)))
            .collect();
        // The first poll of each, in order, queues its request on the connection.
        let mut early = Vec::with_capacity(futures.len());
        for future in &mut futures {
            early.push(match futures::poll!(future.as_mut()) {
                Poll::Ready(result) => Some(result),
                Poll::Pending => None,
            });
        }
        for ((future, early), owner) in futures.into_iter().zip(early).zip(owners) {
            let result = match early {
                Some(result) => result,
                None => future.await,
            };
            match result {
                Ok(_) => {}
                Err(e) => {
                    self.failed = Some(owner);
                    return Err(PgError::from(e));
                }
            }
        }
        Ok(())
    }
}

/// The fold of a run of events in one transaction: which threads are deleted (their
/// later events change nothing, CHG-08) and the statements queued so far.
pub(crate) struct Folder {
    pub(crate) pipeline: Pipeline,
    deleted: HashSet<String>,
    mode: FoldMode,
    /// Entity upserts not queued yet, merged per row (see [`Upserts`]).
    upserts: Upserts,
    /// Whether a change may read inside the transaction (flushing the pipeline first):
    /// not in a group sent in one round trip (crate::pipelined), where such a change is
    /// [`PgError::NeedsRead`] instead.
    reads: bool,
}

impl Folder {
    /// A fold whose deleted threads are `deleted` (those with a tombstone before the
    /// first event folded).
    pub(crate) fn new(mode: FoldMode, deleted: HashSet<String>) -> Folder {
        Folder {
            pipeline: Pipeline::default(),
            deleted,
            mode,
            upserts: Upserts::default(),
            reads: true,
        }
    }

    /// A fold whose changes never read (nor flush): one whose statements are all sent
    /// at once after it (crate::pipelined). A change that must read first (a project's
    /// root check, a text chunk, a run's usage total) fails with [`PgError::NeedsRead`].
    pub(crate) fn without_reads(mode: FoldMode) -> Folder {
        Folder {
            reads: false,
            ..Folder::new(mode, HashSet::new())
        }
    }

    /// Queues the upserts held back so far (one statement per table), so that what
    /// follows in the pipeline runs after them. Call before queuing anything that is
    /// not a fold statement, before a read and at the end of each append.
    pub(crate) async fn emit(&mut self, tx: &impl Conn) -> PgResult<()> {
        self.upserts.emit(&mut self.pipeline, tx).await
    }

    /// [`Folder::emit`], then [`Pipeline::flush`].
    pub(crate) async fn flush(&mut self, tx: &impl Conn) -> PgResult<()> {
        self.emit(tx).await?;
        self.pipeline.flush(tx).await
    }

    /// Queues the row changes of `stored` (`plan` = knife_store::fold::plan of it).
    pub(crate) async fn fold(
        &mut self,
        tx: &impl Conn,
        stored: &StoredEvent,
        plan: Vec<RowChange>,
    ) -> PgResult<()> {
        let seq = i64::try_from(stored.sequence).unwrap_or(i64::MAX);
        let thread = stored
            .event
            .thread_id
            .as_ref()
            .map(|t| t.as_str().to_owned());
        if thread.as_ref().is_some_and(|t| self.deleted.contains(t)) {
            return Ok(());
        }
        for change in plan {
            self.apply(tx, change, seq).await?;
        }
        if let Some(thread) = thread
            && stored.event.event_type() == TOMBSTONE_TYPE
        {
            self.deleted.insert(thread);
        }
        Ok(())
    }

    async fn apply(&mut self, tx: &impl Conn, change: RowChange, seq: i64) -> PgResult<()> {
        if !self.reads
            && matches!(
                change,
                RowChange::UpsertProject { .. }
                    | RowChange::AppendItemText { .. }
                    | RowChange::InsertRunTotal { .. }
            )
        {
            return Err(PgError::NeedsRead);
        }
        let change = match change {
            RowChange::Upsert {
                table,
                id,
                columns,
                payload,
            } => {
                self.upserts.add(table, id, columns, payload, seq);
                return Ok(());
            }
            // Anything else may touch or read a held-back row: those run first.
            other => {
                self.emit(tx).await?;
                other
            }
        };
        let p = &mut self.pipeline;
        match change {
            RowChange::Upsert {
                table,
                id,
                columns,
                payload,
            } => upsert(p, tx, table, id, columns, payload, seq).await,
            RowChange::UpsertProject {
                id,
                root,
                updated_at_us,
                payload,
            } => {
                // A read: what is queued must have run first.
                p.flush(tx).await?;
                let holder = tx
                    .query_opt(
                        "SELECT id FROM projects WHERE root = $1 AND id <> $2",
                        &[&root, &id],
                    )
                    .await?
                    .map(|r| r.get::<_, String>(0));
                let root = match (holder, self.mode) {
                    (None, _) => Cell::Text(root),
                    (Some(holder), FoldMode::Write) => {
                        return Err(StoreError::ProjectRootTaken {
                            root,
                            project_id: ProjectId::from(holder.as_str()),
                        }
                        .into());
                    }
                    (Some(_), FoldMode::Rebuild) => Cell::Null,
                };
                let columns = vec![
                    ("updated_at_us", Cell::Integer(updated_at_us)),
                    ("root", root),
                ];
                upsert(p, tx, "projects", id, columns, payload, seq).await
            }
            RowChange::RaiseLastSeen { session_id, at_us } => {
                p.push(
                    tx,
                    "UPDATE provider_sessions \
                     SET last_seen_at_us = GREATEST(COALESCE(last_seen_at_us, $2), $2) \
                     WHERE id = $1",
                    vec![Box::new(session_id), Box::new(at_us)],
                )
                .await
            }
            RowChange::Bind {
                session_id,
                thread_id,
            } => {
                p.push(
                    tx,
                    "INSERT INTO provider_session_bindings \
                     (provider_session_id, thread_id, bound_sequence, last_sequence) \
                     VALUES ($1, $2, knife_seq($3), knife_seq($3)) \
                     ON CONFLICT (provider_session_id, thread_id) \
                     DO UPDATE SET last_sequence = excluded.last_sequence",
                    vec![Box::new(session_id), Box::new(thread_id), Box::new(seq)],
                )
                .await
            }
            RowChange::Unbind {
                session_id,
                thread_id,
            } => {
                p.push(
                    tx,
                    "DELETE FROM provider_session_bindings \
                     WHERE provider_session_id = $1 AND thread_id = $2",
                    vec![Box::new(session_id), Box::new(thread_id)],
                )
                .await
            }
            RowChange::DropThread { thread_id } => {
                for table in THREAD_TABLES {
                    p.push(
                        tx,
                        &format!("DELETE FROM {table} WHERE thread_id = $1"),
                        vec![Box::new(thread_id.clone())],
                    )
                    .await?;
                }
                p.push(
                    tx,
                    "DELETE FROM threads WHERE id = $1",
                    vec![Box::new(thread_id)],
                )
                .await
            }
            RowChange::IndexText {
                id,
                thread_id,
                run_id,
                kind,
                body,
            } => {
                // An unchanged body (a thread.updated with the same title) writes nothing.
                p.push(
                    tx,
                    "INSERT INTO search_docs (id, thread_id, run_id, kind, body) \
                     VALUES ($1, $2, $3, $4, $5) \
                     ON CONFLICT (id) DO UPDATE SET thread_id = EXCLUDED.thread_id, \
                     run_id = EXCLUDED.run_id, kind = EXCLUDED.kind, body = EXCLUDED.body \
                     WHERE search_docs.body IS DISTINCT FROM EXCLUDED.body \
                     OR search_docs.kind IS DISTINCT FROM EXCLUDED.kind",
                    vec![
                        Box::new(id),
                        Box::new(thread_id),
                        Box::new(run_id),
                        Box::new(kind),
                        Box::new(body),
                    ],
                )
                .await
            }
            RowChange::UnindexText { id } => {
                p.push(
                    tx,
                    "DELETE FROM search_docs WHERE id = $1",
                    vec![Box::new(id)],
                )
                .await
            }
            RowChange::AppendItemText { chunk } => {
                // A read: what is queued must have run first (LIVE-03: the chunk extends
                // the item's folded text). One round trip: the last chunk's field and
                // end, else the row's payload.
                p.flush(tx).await?;
                let thread = chunk.thread_id.as_str();
                let item = chunk.item_id.as_str();
                let tail = tx
                    .query_opt(
                        "SELECT c.field, c.end_byte, \
                         CASE WHEN c.field IS NULL THEN t.payload_json END \
                         FROM turn_items t LEFT JOIN LATERAL ( \
                           SELECT field, end_byte FROM turn_item_chunks \
                           WHERE thread_id = $1 AND item_id = $2 \
                           ORDER BY sequence DESC LIMIT 1) c ON true \
                         WHERE t.id = $2",
                        &[&thread, &item],
                    )
                    .await?;
                let tail = match tail {
                    None => ItemTail::Missing,
                    Some(row) => match (
                        row.get::<_, Option<String>>(0),
                        row.get::<_, Option<i64>>(1),
                    ) {
                        (Some(field), Some(end)) => ItemTail::Chunked {
                            field,
                            end: u64::try_from(end).unwrap_or(0),
                        },
                        _ => ItemTail::Whole(row.get::<_, Option<String>>(2).unwrap_or_default()),
                    },
                };
                let changes = match plan_append(tail, &chunk)? {
                    AppendStep::Changes(changes) => changes,
                    AppendStep::Assemble => match crate::read::get_turn_item(tx.raw(), item).await?
                    {
                        Some(whole) => plan_reassembled(whole, &chunk)?,
                        None => Vec::new(),
                    },
                };
                for change in changes {
                    Box::pin(self.apply(tx, change, seq)).await?;
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
                p.push(
                    tx,
                    "INSERT INTO turn_item_chunks \
                     (thread_id, item_id, sequence, field, start_byte, end_byte, text, updated_at) \
                     VALUES ($1, $2, knife_seq($3), $4, $5, $6, $7, $8)",
                    vec![
                        Box::new(thread_id),
                        Box::new(item_id),
                        Box::new(seq),
                        Box::new(field),
                        Box::new(start),
                        Box::new(end),
                        Box::new(text),
                        Box::new(updated_at),
                    ],
                )
                .await
            }
            RowChange::DropChunks { thread_id, item_id } => {
                p.push(
                    tx,
                    "DELETE FROM turn_item_chunks WHERE thread_id = $1 AND item_id = $2",
                    vec![Box::new(thread_id), Box::new(item_id)],
                )
                .await
            }
            RowChange::InsertRunTotal { run_id, row } => {
                // A read: what is queued (the run's own call records) must have run
                // first. Once per ended run with usage.
                p.flush(tx).await?;
                let recorded = tx
                    .query_opt(
                        "SELECT 1 FROM model_calls WHERE run_id = $1 LIMIT 1",
                        &[&run_id],
                    )
                    .await?
                    .is_some();
                if recorded {
                    return Ok(());
                }
                Box::pin(self.apply(tx, *row, seq)).await
            }
            RowChange::SetAgentStatus { thread_id, status } => {
                p.push(
                    tx,
                    "UPDATE threads SET payload_json = \
                     jsonb_set(payload_json::jsonb, '{agent_status}', $1::text::jsonb)::text, \
                     last_sequence = knife_seq($2), version = version + 1 WHERE id = $3",
                    vec![Box::new(status), Box::new(seq), Box::new(thread_id)],
                )
                .await
            }
        }
    }
}

/// Entity upserts held back within one append (or one rebuild page) and merged per row:
/// the snapshots of one row in a batch (a streaming item's many `turn-item.updated`)
/// become one row change, and the rows of one table one multi-row statement, instead
/// of a statement per event under the append lock.
///
/// Exact: a row upserted `k` times from sequence `first` to `last` ends as the last
/// upsert wrote it, with `created_sequence = first` when new, `last_sequence = last`
/// and `version` + `k` (`k` when new), as `k` statements in order would leave it.
/// Upserts of different rows commute (no projection has a unique key beside `id`
/// except a project's root, which is its own change kind), and every other change
/// kind first queues what is held back ([`Folder::emit`]), so nothing reads or
/// changes a row before its upserts ran.
#[derive(Default)]
struct Upserts {
    /// Rows by table and id, in first-upsert order.
    rows: Vec<HeldRow>,
    at: HashMap<(&'static str, String), usize>,
}

/// A table and the indexed columns of its upserts.
type Shape = (&'static str, Vec<&'static str>);

/// One row's merged upserts.
struct HeldRow {
    table: &'static str,
    id: String,
    columns: Vec<(&'static str, Cell)>,
    payload: String,
    first: i64,
    last: i64,
    count: i64,
}

impl Upserts {
    fn add(
        &mut self,
        table: &'static str,
        id: String,
        columns: Vec<(&'static str, Cell)>,
        payload: String,
        seq: i64,
    ) {
        if let Some(&i) = self.at.get(&(table, id.clone())) {
            let row = &mut self.rows[i];
            let same_shape = row.columns.len() == columns.len()
                && row.columns.iter().zip(&columns).all(|(a, b)| a.0 == b.0);
            if same_shape {
                row.columns = columns;
                row.payload = payload;
                row.last = seq;
                row.count += 1;
                return;
            }
        }
        self.at.insert((table, id.clone()), self.rows.len());
        self.rows.push(HeldRow {
            table,
            id,
            columns,
            payload,
            first: seq,
            last: seq,
            count: 1,
        });
    }

    /// Queues the held rows: a row alone in its table (and shape) as the plain upsert,
    /// several as one `INSERT … SELECT FROM json_populate_recordset` (the table's own
    /// row type gives every column its type). Rows of one id with two shapes (never
    /// made by the fold) stay two changes, in order.
    async fn emit(&mut self, p: &mut Pipeline, tx: &impl Conn) -> PgResult<()> {
        self.at.clear();
        let rows = std::mem::take(&mut self.rows);
        if rows.is_empty() {
            return Ok(());
        }
        // Grouped by (table, column names), in first-upsert order of the groups.
        let mut groups: Vec<(Shape, Vec<HeldRow>)> = Vec::new();
        for row in rows {
            let key = (
                row.table,
                row.columns.iter().map(|c| c.0).collect::<Vec<_>>(),
            );
            match groups.iter_mut().find(|g| g.0 == key) {
                Some(group) => group.1.push(row),
                None => groups.push((key, vec![row])),
            }
        }
        for ((table, names), mut rows) in groups {
            if rows.len() == 1 && rows[0].count == 1 {
                if let Some(row) = rows.pop() {
                    upsert(p, tx, table, row.id, row.columns, row.payload, row.last).await?;
                }
                continue;
            }
            let json: Vec<serde_json::Value> = rows
                .into_iter()
                .map(|row| {
                    let mut object = serde_json::Map::new();
                    object.insert("id".into(), row.id.into());
                    object.insert("payload_json".into(), row.payload.into());
                    object.insert("created_sequence".into(), row.first.into());
                    object.insert("last_sequence".into(), row.last.into());
                    object.insert("version".into(), row.count.into());
                    for (name, cell) in row.columns {
                        let value = match cell {
                            Cell::Null => serde_json::Value::Null,
                            Cell::Integer(i) => i.into(),
                            Cell::Text(t) => t.into(),
                        };
                        object.insert(name.into(), value);
                    }
                    serde_json::Value::Object(object)
                })
                .collect();
            p.push(
                tx,
                &merged_upsert_sql(table, &names),
                vec![Box::new(serde_json::to_string(&json)?)],
            )
            .await?;
        }
        Ok(())
    }
}

/// The multi-row upsert of [`Upserts::emit`] for `table` with these indexed columns.
fn merged_upsert_sql(table: &str, names: &[&'static str]) -> String {
    let cols = [
        "id",
        "payload_json",
        "created_sequence",
        "last_sequence",
        "version",
    ]
    .iter()
    .chain(names)
    .copied()
    .collect::<Vec<_>>()
    .join(", ");
    let picked = [
        "id",
        "payload_json",
        "knife_seq(created_sequence)",
        "knife_seq(last_sequence)",
        "version",
    ]
    .iter()
    .chain(names)
    .copied()
    .collect::<Vec<_>>()
    .join(", ");
    let updates: String = names
        .iter()
        .map(|n| format!("{n} = excluded.{n}, "))
        .collect();
    format!(
        "INSERT INTO {table} ({cols}) SELECT {picked} FROM \
         json_populate_recordset(NULL::{table}, $1::text::json) \
         ON CONFLICT (id) DO UPDATE SET {updates}payload_json = excluded.payload_json, \
         last_sequence = excluded.last_sequence, version = {table}.version + excluded.version"
    )
}

/// Of `threads`, those with a `thread.deleted` tombstone in the log already.
pub(crate) async fn deleted_threads(
    tx: &impl Conn,
    threads: Vec<String>,
) -> PgResult<HashSet<String>> {
    if threads.is_empty() {
        return Ok(HashSet::new());
    }
    let statement = tx
        .prepare_cached(
            "SELECT DISTINCT thread_id FROM events WHERE thread_id = ANY($1) AND type = $2",
        )
        .await?;
    let rows = tx.query(&statement, &[&threads, &TOMBSTONE_TYPE]).await?;
    Ok(rows.iter().map(|r| r.get(0)).collect())
}

/// Queues the upsert of one entity row: `version` 1 on insert / +1 on update,
/// `created_sequence` kept, `last_sequence` = `seq`.
async fn upsert(
    p: &mut Pipeline,
    tx: &impl Conn,
    table: &str,
    id: String,
    columns: Vec<(&'static str, Cell)>,
    payload: String,
    seq: i64,
) -> PgResult<()> {
    let sql = upsert_sql(table, &columns);
    let mut params: Vec<Param> = vec![Box::new(id), Box::new(payload), Box::new(seq)];
    params.extend(columns.into_iter().map(|c| Box::new(PgCell(c.1)) as Param));
    p.push(tx, &sql, params).await
}

/// The upsert statement of `table` with these indexed columns (cached per shape).
fn upsert_sql(table: &str, columns: &[(&'static str, Cell)]) -> String {
    thread_local! {
        static CACHE: std::cell::RefCell<HashMap<(String, Vec<&'static str>), String>> =
            std::cell::RefCell::default();
    }
    let names: Vec<&'static str> = columns.iter().map(|c| c.0).collect();
    let key = (table.to_owned(), names);
    CACHE.with(|cache| {
        if let Some(sql) = cache.borrow().get(&key) {
            return sql.clone();
        }
        let names = &key.1;
        let placeholders: String = (0..names.len()).map(|i| format!(", ${}", i + 4)).collect();
        let updates: String = names
            .iter()
            .map(|n| format!("{n} = excluded.{n}, "))
            .collect();
        let sql = format!(
            "INSERT INTO {table} (id, payload_json, created_sequence, last_sequence, version, \
             {cols}) VALUES ($1, $2, knife_seq($3), knife_seq($3), 1{placeholders}) \
             ON CONFLICT (id) DO UPDATE SET {updates}payload_json = excluded.payload_json, \
             last_sequence = excluded.last_sequence, version = {table}.version + 1",
            cols = names.join(", "),
        );
        cache.borrow_mut().insert(key.clone(), sql.clone());
        sql
    })
}

/// A fold [`Cell`] as a statement parameter of whatever type the column has.
#[derive(Debug)]
struct PgCell(Cell);

impl ToSql for PgCell {
    fn to_sql(
        &self,
        ty: &Type,
        out: &mut bytes::BytesMut,
    ) -> Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
        match &self.0 {
            Cell::Null => Ok(IsNull::Yes),
            Cell::Integer(i) if *ty == Type::INT4 => i32::try_from(*i)?.to_sql(ty, out),
            Cell::Integer(i) => i.to_sql(ty, out),
            Cell::Text(s) => s.as_str().to_sql(ty, out),
        }
    }

    fn accepts(_ty: &Type) -> bool {
        true
    }

    to_sql_checked!();
}
