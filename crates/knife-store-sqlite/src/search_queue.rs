// The search rows of a group commit, held until just before its COMMIT: written one by
// one, each FTS5 update made SQLite flush the index's pending rows at the next
// statement (FTS5 flushes at every statement savepoint), a sixth of the writer's work.

//! Why (LIVE-07): `search_docs` feeds the FTS5 index `search_fts` through triggers. FTS5
//! keeps the rows of a transaction in memory and writes them out as one segment at
//! COMMIT, unless a savepoint begins first — and every later write statement of the
//! transaction that needs a statement journal begins one. So a group of 256 appends
//! wrote hundreds of one-row segments, and then merged them. The writer now queues the
//! search rows of its group ([`Queue`]) and writes them before COMMIT in one statement
//! ([`flush`]), which FTS5 flushes once; rows of an append that is undone are dropped with it ([`mark`] /
//! [`undo_to`]). Only the writer thread's group commit queues (other paths, a rebuild
//! among them, write their rows at once).

use crate::error::DbError;
use rusqlite::Connection;
use std::cell::RefCell;

/// One change of the search index, in the order the fold made it.
#[derive(Debug)]
pub(crate) enum SearchRow {
    /// `RowChange::IndexText`: the document `id` of `thread_id` has `body`.
    Index {
        id: String,
        thread_id: String,
        run_id: Option<String>,
        kind: &'static str,
        body: String,
    },
    /// `RowChange::UnindexText`: the document `id` is gone.
    Unindex { id: String },
}

thread_local! {
    /// `Some` while a group commit runs on this thread: its queued rows.
    static QUEUE: RefCell<Option<Vec<SearchRow>>> = const { RefCell::new(None) };
}

/// Queues this thread's search rows until [`flush`] while alive; dropping it discards
/// what was not flushed (a group that failed).
pub(crate) struct Queue(());

impl Queue {
    /// Starts queueing on this thread.
    pub(crate) fn begin() -> Queue {
        QUEUE.with_borrow_mut(|q| *q = Some(Vec::new()));
        Queue(())
    }
}

impl Drop for Queue {
    fn drop(&mut self) {
        QUEUE.with_borrow_mut(|q| *q = None);
    }
}

/// Writes `row` now, or queues it while a [`Queue`] is alive on this thread.
pub(crate) fn write(conn: &Connection, row: SearchRow) -> Result<(), DbError> {
    let row = QUEUE.with_borrow_mut(|q| match q {
        Some(queue) => {
            queue.push(row);
            None
        }
        None => Some(row),
    });
    match row {
        Some(row) => write_rows(conn, vec![row]),
        None => Ok(()),
    }
}

/// Rows queued so far (undo point for [`undo_to`]); 0 when not queueing.
pub(crate) fn mark() -> usize {
    QUEUE.with_borrow(|q| q.as_ref().map_or(0, Vec::len))
}

/// Drops the rows queued after `mark` (their append was rolled back).
pub(crate) fn undo_to(mark: usize) {
    QUEUE.with_borrow_mut(|q| {
        if let Some(queue) = q {
            queue.truncate(mark);
        }
    });
}

/// Writes every queued row, in order (before COMMIT, or before a statement that reads
/// or deletes search rows, e.g. a thread's deletion): each run of consecutive rows of
/// one kind as ONE statement, so FTS5 flushes once, not at each row's statement.
pub(crate) fn flush(conn: &Connection) -> Result<(), DbError> {
    let rows = QUEUE.with_borrow_mut(|q| q.as_mut().map(std::mem::take).unwrap_or_default());
    write_rows(conn, rows)
}

/// Writes `rows` in order, each run of one kind as one statement.
fn write_rows(conn: &Connection, rows: Vec<SearchRow>) -> Result<(), DbError> {
    let mut rows = rows.into_iter().peekable();
    while let Some(first) = rows.next() {
        let index = matches!(first, SearchRow::Index { .. });
        let mut batch = vec![first];
        while let Some(next) = rows.next_if(|r| matches!(r, SearchRow::Index { .. }) == index) {
            batch.push(next);
        }
        if index {
            index_many(conn, batch)?;
        } else {
            unindex_many(conn, batch)?;
        }
    }
    Ok(())
}

/// Several [`SearchRow::Index`] in one statement, in order (a later row of the same id
/// updates the earlier one, as separate statements would). The FTS5 index follows
/// `search_docs` through its triggers; an unchanged body (a thread.updated with the
/// same title) updates nothing. The thread's project goes in as one token
/// (`project_key`, migration 0110), so a search of one project is an FTS5 AND, not a
/// join per match.
fn index_many(conn: &Connection, rows: Vec<SearchRow>) -> Result<(), DbError> {
    let docs: Vec<serde_json::Value> = rows
        .into_iter()
        .filter_map(|row| match row {
            SearchRow::Index {
                id,
                thread_id,
                run_id,
                kind,
                body,
            } => Some(serde_json::json!([id, thread_id, run_id, kind, body])),
            SearchRow::Unindex { .. } => None,
        })
        .collect();
    let docs = serde_json::to_string(&docs)?;
    conn.prepare_cached(
        "INSERT INTO search_docs (id, thread_id, run_id, kind, body, project_key) \
         SELECT d.value ->> 0, d.value ->> 1, d.value ->> 2, d.value ->> 3, d.value ->> 4, \
                (SELECT hex(project_id) FROM threads WHERE id = d.value ->> 1) \
         FROM json_each(?1) AS d WHERE true ORDER BY d.key \
         ON CONFLICT (id) DO UPDATE SET thread_id = excluded.thread_id, \
         run_id = excluded.run_id, kind = excluded.kind, body = excluded.body, \
         project_key = excluded.project_key \
         WHERE search_docs.body IS NOT excluded.body \
         OR search_docs.kind IS NOT excluded.kind \
         OR search_docs.project_key IS NOT excluded.project_key",
    )?
    .execute([docs])?;
    Ok(())
}

/// Several [`SearchRow::Unindex`] in one statement.
fn unindex_many(conn: &Connection, rows: Vec<SearchRow>) -> Result<(), DbError> {
    let ids: Vec<String> = rows
        .into_iter()
        .filter_map(|row| match row {
            SearchRow::Unindex { id } => Some(id),
            SearchRow::Index { .. } => None,
        })
        .collect();
    conn.prepare_cached("DELETE FROM search_docs WHERE id IN (SELECT value FROM json_each(?1))")?
        .execute([serde_json::to_string(&ids)?])?;
    Ok(())
}
