// `knife db purge` (CHG-08): removes the events of deleted threads (those with a
// `thread.deleted` tombstone) for good, then rebuilds the projections and vacuums.

use crate::error::DbError;
use crate::writer::rebuild_projections;
use rusqlite::{Connection, TransactionBehavior};

/// The body of the purge, on the writer thread: in one transaction deletes every
/// event filed under a thread that has a tombstone; then rebuilds the projections
/// from what is left (so rebuild == incremental holds afterwards), then `VACUUM`s and
/// truncates the WAL so the removed text is gone from the file too.
pub(crate) fn purge_deleted_threads(
    conn: &mut Connection,
) -> Result<(Vec<String>, u64, u64), DbError> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let threads: Vec<String> = tx
        .prepare(
            "SELECT DISTINCT thread_id FROM events \
             WHERE type = 'thread.deleted' AND thread_id IS NOT NULL ORDER BY thread_id",
        )?
        .query_map([], |row| row.get(0))?
        .collect::<Result<_, _>>()?;
    let mut removed = 0_u64;
    for thread in &threads {
        let n = tx
            .prepare_cached("DELETE FROM events WHERE thread_id = ?1")?
            .execute([thread])?;
        removed += u64::try_from(n).unwrap_or(u64::MAX);
    }
    tx.commit()?;
    let kept = rebuild_projections(conn)?;
    conn.execute_batch("VACUUM")?;
    // The WAL may still hold pages with the removed rows until it is checkpointed.
    conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))?;
    Ok((threads, removed, kept))
}
