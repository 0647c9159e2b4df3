// Importing events that already have sequences (SPEC.md SCALE-09, `knife db copy`): the
// rows go into `events` as they are; `rebuild` folds them afterwards.

use crate::error::DbError;
use crate::fold::{seq_i64, seq_u64};
use knife_protocol::StoredEvent;
use knife_store::StoreError;
use rusqlite::{Connection, ErrorCode, TransactionBehavior, params};

/// [`knife_store::Maintenance::import_events`] in one transaction on the writer.
pub(crate) fn import_events(
    conn: &mut Connection,
    events: Vec<StoredEvent>,
) -> Result<(), DbError> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    // AUTOINCREMENT's high-water mark covers purged sequences too: never reuse them.
    let mut head: i64 = tx.query_row(
        "SELECT MAX(COALESCE((SELECT MAX(sequence) FROM events), 0), \
                COALESCE((SELECT seq FROM sqlite_sequence WHERE name = 'events'), 0))",
        [],
        |r| r.get(0),
    )?;
    for stored in events {
        let sequence = seq_i64(stored.sequence);
        if sequence <= head {
            return Err(StoreError::ImportOrder {
                sequence: stored.sequence,
                head: seq_u64(head),
            }
            .into());
        }
        let event = stored.event;
        let inserted = tx
            .prepare_cached(
                "INSERT INTO events (sequence, event_id, thread_id, run_id, type, occurred_at, \
                 payload_json) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            )?
            .execute(params![
                sequence,
                event.id.as_str(),
                event
                    .thread_id
                    .as_ref()
                    .map(knife_protocol::ThreadId::as_str),
                event.run_id.as_ref().map(knife_protocol::RunId::as_str),
                event.event_type(),
                event
                    .occurred_at
                    .to_rfc3339_opts(chrono::SecondsFormat::Micros, true),
                serde_json::to_string(&event)?,
            ]);
        match inserted {
            Ok(_) => {}
            Err(rusqlite::Error::SqliteFailure(e, _))
                if e.code == ErrorCode::ConstraintViolation =>
            {
                return Err(StoreError::DuplicateEvent { event_id: event.id }.into());
            }
            Err(e) => return Err(e.into()),
        }
        head = sequence;
    }
    tx.commit()?;
    Ok(())
}
