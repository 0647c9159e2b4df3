// The projection fold, backend-neutral: which projection rows one stored event changes,
// as `RowChange`s that each backend applies inside the event's write transaction.

//! Used by every backend for both incremental writes and `rebuild`, so the two fold
//! identically on every backend (the contract's rebuild == incremental property).

use crate::error::StoreError;
use knife_protocol::{DeltaField, DomainEvent, EventBody, ModelCall, TurnItem, TurnItemAppend};
use serde::Serialize;

/// Projection tables, in the order a rebuild empties them (bindings first: they
/// reference `provider_sessions`).
pub const PROJECTION_TABLES: [&str; 13] = [
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
    "turn_item_chunks",
    "search_docs",
    "model_calls",
];

/// Tables holding rows of one thread in a `thread_id` column, which a tombstone
/// empties of that thread (CHG-08).
pub const THREAD_TABLES: [&str; 10] = [
    "provider_session_bindings",
    "runs",
    "nodes",
    "provider_threads",
    "provider_turns",
    "runtime_requests",
    "turn_items",
    "turn_item_chunks",
    "search_docs",
    "model_calls",
];

/// The primary key order of a projection table's rows (how a dump sorts them).
pub fn key_order(table: &str) -> &'static str {
    match table {
        "provider_session_bindings" => "provider_session_id, thread_id",
        "turn_item_chunks" => "thread_id, item_id, sequence",
        _ => "id",
    }
}

/// Where a fold runs: a live write (refuses new conflicts) or a rebuild of the whole
/// log (must accept what was committed before a constraint existed).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FoldMode {
    /// [`crate::EventLog::write`] / [`crate::EventLog::write_if`].
    Write,
    /// [`crate::Maintenance::rebuild`].
    Rebuild,
}

/// The event type of a thread's tombstone.
pub const TOMBSTONE_TYPE: &str = "thread.deleted";

/// One value of an indexed projection column.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Cell {
    /// SQL NULL.
    Null,
    /// A 64-bit integer (timestamps in µs since the epoch, ordinals).
    Integer(i64),
    /// Text (ids, status names).
    Text(String),
}

impl Cell {
    fn text(s: &str) -> Cell {
        Cell::Text(s.to_owned())
    }

    fn opt_text(s: Option<&str>) -> Cell {
        s.map_or(Cell::Null, Cell::text)
    }

    /// The serde name of a unit enum variant (`"running"`), for status columns.
    fn status<T: Serialize>(v: &T) -> Result<Cell, StoreError> {
        Ok(match serde_json::to_value(v)? {
            serde_json::Value::String(s) => Cell::Text(s),
            other => Cell::Text(other.to_string()),
        })
    }
}

/// One change to the projection tables. `seq` below is the sequence of the event
/// being folded; the backend applies the changes of one event in order.
#[derive(Clone, Debug, PartialEq)]
pub enum RowChange {
    /// Upsert row `id` of `table`: `payload_json` = `payload` (the whole entity as
    /// JSON) and the indexed `columns`; `version` 1 on insert and +1 on update,
    /// `created_sequence` = `seq` on insert only, `last_sequence` = `seq`.
    Upsert {
        /// The projection table ([`PROJECTION_TABLES`]).
        table: &'static str,
        /// The entity id.
        id: String,
        /// Indexed columns and their values.
        columns: Vec<(&'static str, Cell)>,
        /// The entity as JSON text.
        payload: String,
    },
    /// [`RowChange::Upsert`] of a project, with its `root` column and
    /// `updated_at_us`. One project per root folder: when another project already has
    /// `root`, [`FoldMode::Write`] fails with [`StoreError::ProjectRootTaken`] naming it
    /// and [`FoldMode::Rebuild`] keeps this row with a NULL root (logs written before
    /// the constraint).
    UpsertProject {
        /// The project id.
        id: String,
        /// Its canonical root folder.
        root: String,
        /// `updated_at` in µs since the epoch.
        updated_at_us: i64,
        /// The project as JSON text.
        payload: String,
    },
    /// Raises the provider session's `last_seen_at_us` to at least `at_us` (never
    /// lowers it; a NULL mark becomes `at_us`). No-op for an absent row.
    RaiseLastSeen {
        /// The provider session id.
        session_id: String,
        /// µs since the epoch.
        at_us: i64,
    },
    /// Binds the session to the thread: inserts the binding with `bound_sequence` =
    /// `last_sequence` = `seq`, or sets `last_sequence` = `seq` when it exists.
    Bind {
        /// The provider session id.
        session_id: String,
        /// The thread id.
        thread_id: String,
    },
    /// Deletes that binding (no-op when absent).
    Unbind {
        /// The provider session id.
        session_id: String,
        /// The thread id.
        thread_id: String,
    },
    /// A deleted thread (CHG-08): deletes the thread row and every row with this
    /// `thread_id` in [`THREAD_TABLES`]. Provider sessions stay (other threads may
    /// share them); only the bindings go.
    DropThread {
        /// The thread id.
        thread_id: String,
    },
    /// Puts document `id` in the full-text index (TURN-08; table `search_docs`:
    /// `id`, `thread_id`, `run_id`, `kind`, `body`): inserted, or its columns replaced
    /// when `body` changed (an unchanged title costs no index write).
    IndexText {
        /// `title:<thread id>` for a title, else the turn item id.
        id: String,
        /// The thread id.
        thread_id: String,
        /// The item's run, `None` for a title.
        run_id: Option<String>,
        /// [`knife_protocol::SearchKind::as_str`].
        kind: &'static str,
        /// The text to index.
        body: String,
    },
    /// Removes document `id` from the full-text index (no-op when absent).
    UnindexText {
        /// The document id.
        id: String,
    },
    /// Folds a chunk into item `chunk.item_id` (LIVE-03): the backend reads the item's
    /// [`ItemTail`] and applies what [`plan_append`] returns for it (for
    /// [`AppendStep::Assemble`]: reads the whole item, row and chunks, and applies
    /// [`plan_reassembled`]). Reading is the only backend-specific part.
    AppendItemText {
        /// The chunk (`turn-item.appended`).
        chunk: Box<TurnItemAppend>,
    },
    /// Inserts one row into `turn_item_chunks` (LIVE-03): `text` continues the item's
    /// durable `field` at byte `start` (the previous chunk's `end_byte`, or the field's
    /// length in the `turn_items` row), `sequence` = `seq`. The item's row and its
    /// search document are not touched: a chunk costs O(chunk) in the database.
    InsertChunk {
        /// The item's thread.
        thread_id: String,
        /// The item.
        item_id: String,
        /// [`field_name`] of the chunk's field.
        field: &'static str,
        /// Where `text` starts, in UTF-8 bytes.
        start: i64,
        /// Where it ends (`start` + its length in bytes).
        end: i64,
        /// The appended text.
        text: String,
        /// The item's new `updated_at` as its JSON string (RFC 3339, exact).
        updated_at: String,
    },
    /// Deletes the `turn_item_chunks` rows of the item (a whole snapshot of it was
    /// written: the row holds everything). No-op when there are none.
    DropChunks {
        /// The item's thread.
        thread_id: String,
        /// The item.
        item_id: String,
    },
    /// Inserts `call` (a run's whole usage, [`knife_protocol::ModelCall::run_total_id`])
    /// into `model_calls` as [`RowChange::Upsert`] would, unless the table already has
    /// a row of its run: a run whose model calls were recorded one by one is never
    /// counted twice; one from a log written before those records counts once (TURN-06).
    InsertRunTotal {
        /// The run id.
        run_id: String,
        /// The record's upsert ([`RowChange::Upsert`] into `model_calls`).
        row: Box<RowChange>,
    },
    /// Sets `agent_status` inside the thread row's payload to `status` (JSON text),
    /// `last_sequence` = `seq`, `version` + 1. No-op when the thread row is absent.
    SetAgentStatus {
        /// The thread id.
        thread_id: String,
        /// The status as JSON text.
        status: String,
    },
}

/// The projection changes of `event`, in the order to apply them.
///
/// A deleted thread stays deleted (CHG-08): a backend first checks whether the event's
/// `thread_id` has a tombstone (`thread.deleted`) with a lower sequence, and then
/// applies nothing (in a write and in a rebuild alike); see [`TOMBSTONE_TYPE`].
///
/// Errors: [`StoreError::Serde`] if an entity cannot be encoded.
pub fn plan(event: &DomainEvent) -> Result<Vec<RowChange>, StoreError> {
    let thread = event
        .thread_id
        .as_ref()
        .map(knife_protocol::ThreadId::as_str);
    Ok(match &event.body {
        EventBody::ProjectCreated(p) | EventBody::ProjectUpdated(p) => {
            vec![RowChange::UpsertProject {
                id: p.id.as_str().to_owned(),
                root: p.root.clone(),
                updated_at_us: p.updated_at.timestamp_micros(),
                payload: serde_json::to_string(p)?,
            }]
        }
        EventBody::ThreadCreated(t) | EventBody::ThreadUpdated(t) => vec![
            upsert(
                "threads",
                t.id.as_str(),
                vec![
                    ("project_id", Cell::text(t.project_id.as_str())),
                    ("status", Cell::status(&t.status)?),
                    (
                        "updated_at_us",
                        Cell::Integer(t.updated_at.timestamp_micros()),
                    ),
                    (
                        "claimed_at_us",
                        t.claimed_at
                            .map_or(Cell::Null, |c| Cell::Integer(c.timestamp_micros())),
                    ),
                    (
                        "parent_thread_id",
                        Cell::opt_text(t.parent_thread_id.as_ref().map(knife_protocol::ThreadId::as_str)),
                    ),
                ],
                t,
            )?,
            crate::search::title_doc(t),
        ],
        EventBody::ThreadDeleted { thread_id, .. } => vec![RowChange::DropThread {
            thread_id: thread_id.as_str().to_owned(),
        }],
        EventBody::RunCreated(r) | EventBody::RunUpdated(r) => {
            let mut changes = vec![upsert(
                "runs",
                r.id.as_str(),
                vec![
                    ("thread_id", Cell::text(r.thread_id.as_str())),
                    ("ordinal", Cell::Integer(i64::from(r.ordinal))),
                    ("status", Cell::status(&r.status)?),
                ],
                r,
            )?];
            if let (true, Some(usage)) = (r.status.is_terminal(), &r.usage) {
                let call = ModelCall {
                    id: ModelCall::run_total_id(&r.id),
                    thread_id: r.thread_id.clone(),
                    run_id: r.id.clone(),
                    provider_turn_id: None,
                    provider_instance_id: r.provider_instance_id.clone(),
                    model: r.model.clone(),
                    ordinal: 0,
                    usage: usage.clone(),
                    at: r.completed_at.unwrap_or(r.requested_at),
                };
                changes.push(RowChange::InsertRunTotal {
                    run_id: r.id.as_str().to_owned(),
                    row: Box::new(model_call_row(&call)?),
                });
            }
            changes
        }
        EventBody::ModelCallRecorded(c) => vec![model_call_row(c)?],
        EventBody::NodeUpdated(n) => vec![upsert(
            "nodes",
            n.id.as_str(),
            vec![
                ("thread_id", Cell::text(n.thread_id.as_str())),
                (
                    "run_id",
                    Cell::opt_text(n.run_id.as_ref().map(knife_protocol::RunId::as_str)),
                ),
                ("status", Cell::status(&n.status)?),
            ],
            n,
        )?],
        EventBody::ProviderSessionAttached(s) | EventBody::ProviderSessionUpdated(s) => {
            let mut changes = vec![
                upsert(
                    "provider_sessions",
                    s.id.as_str(),
                    vec![
                        (
                            "provider_instance_id",
                            Cell::text(s.provider_instance_id.as_str()),
                        ),
                        ("status", Cell::status(&s.status)?),
                    ],
                    s,
                )?,
                // Last-seen only moves forward: a record written with an older
                // `updated_at` (a thread joining a shared session) must not make a
                // live session look stale to the reaper.
                RowChange::RaiseLastSeen {
                    session_id: s.id.as_str().to_owned(),
                    at_us: s.updated_at.timestamp_micros(),
                },
            ];
            if let (EventBody::ProviderSessionAttached(_), Some(thread)) = (&event.body, thread) {
                changes.push(RowChange::Bind {
                    session_id: s.id.as_str().to_owned(),
                    thread_id: thread.to_owned(),
                });
            }
            changes
        }
        EventBody::ProviderSessionDetached {
            provider_session_id,
            ..
        } => thread
            .map(|thread| RowChange::Unbind {
                session_id: provider_session_id.as_str().to_owned(),
                thread_id: thread.to_owned(),
            })
            .into_iter()
            .collect(),
        EventBody::ProviderThreadUpdated(p) => vec![upsert(
            "provider_threads",
            p.id.as_str(),
            vec![
                (
                    "thread_id",
                    Cell::opt_text(p.app_thread_id.as_ref().map(knife_protocol::ThreadId::as_str)),
                ),
                (
                    "provider_session_id",
                    Cell::opt_text(p.provider_session_id.as_ref().map(knife_protocol::ProviderSessionId::as_str)),
                ),
                ("status", Cell::status(&p.status)?),
                (
                    "last_run_ordinal",
                    p.last_run_ordinal
                        .map_or(Cell::Null, |o| Cell::Integer(i64::from(o))),
                ),
            ],
            p,
        )?],
        EventBody::ProviderTurnUpdated(t) => vec![upsert(
            "provider_turns",
            t.id.as_str(),
            vec![
                ("thread_id", Cell::text(t.thread_id.as_str())),
                ("run_id", Cell::text(t.run_id.as_str())),
                (
                    "provider_thread_id",
                    Cell::opt_text(t.provider_thread_id.as_ref().map(knife_protocol::ProviderThreadId::as_str)),
                ),
                ("ordinal", Cell::Integer(i64::from(t.ordinal))),
                ("status", Cell::status(&t.status)?),
            ],
            t,
        )?],
        EventBody::RuntimeRequestUpdated(r) => vec![upsert(
            "runtime_requests",
            r.id.as_str(),
            vec![
                ("thread_id", Cell::text(r.thread_id.as_str())),
                (
                    "run_id",
                    Cell::opt_text(r.run_id.as_ref().map(knife_protocol::RunId::as_str)),
                ),
                ("status", Cell::status(&r.status)?),
            ],
            r,
        )?],
        EventBody::TurnItemUpdated(i) => plan_item(i)?,
        EventBody::TurnItemAppended(chunk) => vec![RowChange::AppendItemText {
            chunk: Box::new(chunk.clone()),
        }],
        // Patches the thread row in place (the event carries no whole thread): the
        // status is live state, last write wins.
        EventBody::ThreadStatusChanged {
            thread_id, status, ..
        } => vec![RowChange::SetAgentStatus {
            thread_id: thread_id.as_str().to_owned(),
            status: serde_json::to_string(status)?,
        }],
        // A checkpoint and a revert's progress are read from the log (the run's
        // checkpoints and changes are assembled at read time): no projection row.
        EventBody::ThreadErrorRaised { .. }
        | EventBody::McpToolCalled(_)
        | EventBody::CheckpointRecorded(_)
        | EventBody::RevertUpdated(_)
        // Commands between nodes (SCALE-06) are read from the log by their listeners.
        | EventBody::ThreadCommanded(_)
        | EventBody::ThreadCommandApplied(_)
        | EventBody::SessionCommanded(_)
        | EventBody::SessionCommandApplied(_) => Vec::new(),
    })
}

/// The `model_calls` row of `c` (TURN-06): its ids, model, instant (µs) and token
/// counts as columns, summed by [`crate::UsageSums`].
fn model_call_row(c: &ModelCall) -> Result<RowChange, StoreError> {
    let count = |n: u64| Cell::Integer(i64::try_from(n).unwrap_or(i64::MAX));
    let u = &c.usage;
    upsert(
        "model_calls",
        &c.id,
        vec![
            ("thread_id", Cell::text(c.thread_id.as_str())),
            ("run_id", Cell::text(c.run_id.as_str())),
            (
                "provider_instance_id",
                Cell::text(c.provider_instance_id.as_str()),
            ),
            ("model", Cell::opt_text(c.model.as_deref())),
            ("at_us", Cell::Integer(c.at.timestamp_micros())),
            ("input_tokens", count(u.input_tokens)),
            ("cached_input_tokens", count(u.cached_input_tokens)),
            ("output_tokens", count(u.output_tokens)),
            ("reasoning_tokens", count(u.reasoning_tokens)),
            ("total_tokens", count(u.total_tokens)),
        ],
        c,
    )
}

/// The rows of turn item `i` as a whole snapshot: its `turn_items` row and its
/// full-text document.
fn plan_item(i: &TurnItem) -> Result<Vec<RowChange>, StoreError> {
    let mut changes = vec![upsert(
        "turn_items",
        i.id.as_str(),
        vec![
            ("thread_id", Cell::text(i.thread_id.as_str())),
            (
                "run_id",
                Cell::opt_text(i.run_id.as_ref().map(knife_protocol::RunId::as_str)),
            ),
            (
                "ordinal",
                Cell::Integer(i64::try_from(i.ordinal).unwrap_or(i64::MAX)),
            ),
            ("status", Cell::status(&i.status)?),
        ],
        i,
    )?];
    changes.push(RowChange::DropChunks {
        thread_id: i.thread_id.as_str().to_owned(),
        item_id: i.id.as_str().to_owned(),
    });
    changes.extend(crate::search::item_doc(i));
    Ok(changes)
}

/// What a backend reads of an item before folding a chunk into it
/// ([`RowChange::AppendItemText`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ItemTail {
    /// The item has no `turn_items` row.
    Missing,
    /// The item has `turn_item_chunks` rows: the last one's field ([`field_name`]) and
    /// `end_byte` (the durable length of that field).
    Chunked {
        /// The last chunk's field name.
        field: String,
        /// The last chunk's end, in UTF-8 bytes.
        end: u64,
    },
    /// The item has no chunks: its row's `payload_json`.
    Whole(String),
}

/// What folding a chunk takes, given the item's [`ItemTail`].
#[derive(Clone, Debug, PartialEq)]
pub enum AppendStep {
    /// Apply these changes (none: a replay or a chunk that does not continue the item).
    Changes(Vec<RowChange>),
    /// The chunk neither continues nor replays the last chunk (an overlap, another
    /// field, a gap): the backend reads the whole item ([`assemble`]) and applies
    /// [`plan_reassembled`].
    Assemble,
}

/// The changes of [`RowChange::AppendItemText`] once the backend has read the item's
/// `tail`. A chunk continuing the item's durable text (the recorder writes nothing
/// else) is one [`RowChange::InsertChunk`]: the item row is never rewritten per
/// chunk, so a streamed item costs O(text) in the database, WAL included (LIVE-03).
/// The whole item is the row followed by its chunks ([`assemble`]); the next whole
/// snapshot of it deletes the chunks. The result equals folding the chunk into the
/// item as [`TurnItemAppend::apply_to`] does.
///
/// A chunk that does not continue the item (no row, a gap, another kind: see
/// [`knife_protocol::AppendError`]) changes nothing and is logged: the log stays as
/// written and the item's settled snapshot, written whole, repairs the row. A chunk
/// already folded (a replay) changes nothing either.
///
/// Errors: [`StoreError::Serde`] when the row's payload cannot be decoded.
pub fn plan_append(tail: ItemTail, chunk: &TurnItemAppend) -> Result<AppendStep, StoreError> {
    let insert = || -> Result<AppendStep, StoreError> {
        Ok(AppendStep::Changes(vec![RowChange::InsertChunk {
            thread_id: chunk.thread_id.as_str().to_owned(),
            item_id: chunk.item_id.as_str().to_owned(),
            field: field_name(chunk.field),
            start: i64::try_from(chunk.offset).unwrap_or(i64::MAX),
            end: i64::try_from(chunk.end()).unwrap_or(i64::MAX),
            text: chunk.text.clone(),
            updated_at: timestamp_text(&chunk.updated_at)?,
        }]))
    };
    match tail {
        ItemTail::Missing => {
            tracing::warn!(item = %chunk.item_id, "appended text of an item with no row; skipped");
            Ok(AppendStep::Changes(Vec::new()))
        }
        ItemTail::Chunked { field, end } if field == field_name(chunk.field) => {
            if chunk.end() <= end {
                Ok(AppendStep::Changes(Vec::new()))
            } else if chunk.offset == end {
                insert()
            } else {
                Ok(AppendStep::Assemble)
            }
        }
        ItemTail::Chunked { .. } => Ok(AppendStep::Assemble),
        ItemTail::Whole(payload) => {
            let item: TurnItem = serde_json::from_str(&payload)?;
            if item.thread_id != chunk.thread_id {
                tracing::warn!(item = %chunk.item_id, "appended text names another thread than its item; skipped");
                return Ok(AppendStep::Changes(Vec::new()));
            }
            let before = chunk.field.durable_text(&item).map(str::len);
            let mut next = item;
            match chunk.apply_to(&mut next) {
                Ok(true) if before.map(|b| b as u64) == Some(chunk.offset) => insert(),
                // An overlap: rewrites the field from its offset, whole.
                Ok(true) => Ok(AppendStep::Changes(plan_item(&next)?)),
                Ok(false) => Ok(AppendStep::Changes(Vec::new())),
                Err(e) => {
                    tracing::warn!(error = %e, "appended text does not continue its item");
                    Ok(AppendStep::Changes(Vec::new()))
                }
            }
        }
    }
}

/// The changes of a chunk that [`plan_append`] could not fold as one row
/// ([`AppendStep::Assemble`]): `item` is the whole item ([`assemble`]d from its row
/// and chunks); the chunk folded into it is written as a whole snapshot (its row, its
/// search document, its chunks deleted), or nothing when it does not apply.
///
/// Errors: [`StoreError::Serde`] if the item cannot be encoded.
pub fn plan_reassembled(
    mut item: TurnItem,
    chunk: &TurnItemAppend,
) -> Result<Vec<RowChange>, StoreError> {
    match chunk.apply_to(&mut item) {
        Ok(true) => plan_item(&item),
        Ok(false) => Ok(Vec::new()),
        Err(e) => {
            tracing::warn!(error = %e, "appended text does not continue its item");
            Ok(Vec::new())
        }
    }
}

/// One `turn_item_chunks` row as a backend reads it back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredChunk {
    /// `field` ([`field_name`]).
    pub field: String,
    /// `start_byte`.
    pub start: u64,
    /// `text`.
    pub text: String,
    /// `updated_at` (the JSON string of the timestamp).
    pub updated_at: String,
}

/// The whole item: `item` (its `turn_items` row) with its chunk rows folded in, in
/// sequence order (LIVE-03). Every read of an item goes through this, so an item read
/// mid-stream has all its durable text. A chunk row that does not apply (never written
/// by [`plan_append`]) is logged and skipped.
pub fn assemble(item: &mut TurnItem, chunks: impl IntoIterator<Item = StoredChunk>) {
    for row in chunks {
        let (Some(field), Ok(updated_at)) = (
            parse_field(&row.field),
            serde_json::from_value(serde_json::Value::String(row.updated_at)),
        ) else {
            tracing::warn!(item = %item.id, "unreadable chunk row; skipped");
            continue;
        };
        let chunk = TurnItemAppend {
            thread_id: item.thread_id.clone(),
            run_id: item.run_id.clone(),
            item_id: item.id.clone(),
            ordinal: item.ordinal,
            field,
            offset: row.start,
            text: row.text,
            updated_at,
        };
        if let Err(e) = chunk.apply_to(item) {
            tracing::warn!(error = %e, "a chunk row does not continue its item; skipped");
        }
    }
}

/// The column value of a chunk's field (its serde name: `text`, `reasoning`, `input`,
/// `output`).
pub fn field_name(field: DeltaField) -> &'static str {
    match field {
        DeltaField::Text => "text",
        DeltaField::Reasoning => "reasoning",
        DeltaField::Input => "input",
        DeltaField::Output => "output",
    }
}

fn parse_field(name: &str) -> Option<DeltaField> {
    [
        DeltaField::Text,
        DeltaField::Reasoning,
        DeltaField::Input,
        DeltaField::Output,
    ]
    .into_iter()
    .find(|f| field_name(*f) == name)
}

fn timestamp_text(at: &knife_protocol::Timestamp) -> Result<String, StoreError> {
    Ok(match serde_json::to_value(at)? {
        serde_json::Value::String(s) => s,
        other => other.to_string(),
    })
}

fn upsert<T: Serialize>(
    table: &'static str,
    id: &str,
    columns: Vec<(&'static str, Cell)>,
    entity: &T,
) -> Result<RowChange, StoreError> {
    Ok(RowChange::Upsert {
        table,
        id: id.to_owned(),
        columns,
        payload: serde_json::to_string(entity)?,
    })
}
