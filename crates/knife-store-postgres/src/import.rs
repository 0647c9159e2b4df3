// Importing events that already have sequences (SPEC.md SCALE-09, `knife db copy`): the
// rows go into `events` as they are, under the append lock; `rebuild` folds them afterwards.

use crate::error::{PgError, PgResult};
use crate::write::APPEND_LOCK;
use knife_protocol::StoredEvent;
use knife_store::StoreError;

fn seq(sequence: u64) -> i64 {
    i64::try_from(sequence).unwrap_or(i64::MAX)
}

/// [`knife_store::Maintenance::import_events`] in one transaction.
pub(crate) async fn import_events(
    client: &mut tokio_postgres::Client,
    events: Vec<StoredEvent>,
) -> PgResult<()> {
    let tx = client.transaction().await?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&APPEND_LOCK])
        .await?;
    // `log_head` covers purged sequences too: never reuse them.
    let mut head: i64 = tx
        .query_one(
            "SELECT GREATEST(last_sequence, COALESCE((SELECT MAX(sequence) FROM events), 0)) \
             FROM log_head",
            &[],
        )
        .await?
        .get(0);
    let insert = tx
        .prepare(
            "INSERT INTO events (sequence, event_id, thread_id, run_id, type, occurred_at, \
             payload_json) VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT DO NOTHING",
        )
        .await?;
    for stored in events {
        let sequence = seq(stored.sequence);
        if sequence <= head {
            return Err(StoreError::ImportOrder {
                sequence: stored.sequence,
                head: u64::try_from(head).unwrap_or(0),
            }
            .into());
        }
        let event = stored.event;
        let inserted = tx
            .execute(
                &insert,
                &[
                    &sequence,
                    &event.id.as_str(),
                    &event
                        .thread_id
                        .as_ref()
                        .map(knife_protocol::ThreadId::as_str),
                    &event.run_id.as_ref().map(knife_protocol::RunId::as_str),
                    &event.event_type(),
                    &event
                        .occurred_at
                        .to_rfc3339_opts(chrono::SecondsFormat::Micros, true),
                    &serde_json::to_string(&event).map_err(PgError::from)?,
                ],
            )
            .await?;
        if inserted == 0 {
            return Err(StoreError::DuplicateEvent { event_id: event.id }.into());
        }
        head = sequence;
    }
    tx.execute(
        "UPDATE log_head SET last_sequence = GREATEST(last_sequence, $1)",
        &[&head],
    )
    .await?;
    tx.commit().await?;
    Ok(())
}
