// The write path on PostgreSQL: appends under a transaction-scoped advisory lock (so
// sequences are assigned in commit order), compare-and-set, the fold, and rebuild.

use crate::error::{PgError, PgResult};
use knife_protocol::{DomainEvent, ProjectId, StoredEvent};
use knife_store::fold::{
    Cell, FoldMode, PROJECTION_TABLES, RowChange, THREAD_TABLES, TOMBSTONE_TYPE, plan, plan_append,
};
use knife_store::{RowGuard, StoreError};
use postgres_types::{IsNull, ToSql, Type, to_sql_checked};
use tokio_postgres::Transaction;

/// Advisory lock key held by every append (and rebuild) until its COMMIT: appends are
/// serialised across all nodes, so the sequence `MAX + 1` taken under it is in commit
/// order and a reader that sees sequence N has every sequence below N too.
pub(crate) const APPEND_LOCK: i64 = 0x6b6e_6966_6502;

/// NOTIFY channel: the payload is the last sequence of the committed batch (a wake-up
/// only; subscribers read the rows from `events`).
pub(crate) const CHANNEL: &str = "knife_events";

/// The body of `write` / `write_if` in one transaction: lock, check `guard`, append,
/// fold, notify, commit. `Ok(None)` (nothing written) when the guard failed.
pub(crate) async fn write_batch(
    client: &mut tokio_postgres::Client,
    fences: &[knife_store::Lease],
    guard: Option<&RowGuard>,
    events: Vec<DomainEvent>,
) -> PgResult<Option<Vec<StoredEvent>>> {
    let tx = client.transaction().await?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&APPEND_LOCK])
        .await?;
    for lease in fences {
        // Fencing (SCALE-04): the lease row is read FOR SHARE, so a takeover in flight
        // finishes first and this write then sees its epoch.
        crate::leases::check_fence(&tx, lease).await?;
    }
    if let Some(guard) = guard {
        // Re-read under the append lock: no other write can land before our COMMIT.
        let current = read_version(&tx, guard.kind.table(), &guard.id).await?;
        if current != guard.expected_version {
            tracing::debug!(
                kind = ?guard.kind, id = %guard.id, expected = ?guard.expected_version,
                ?current, "compare-and-set write skipped: the row moved"
            );
            return Ok(None); // `tx` drops: ROLLBACK
        }
    }
    if events.is_empty() {
        return Ok(Some(Vec::new()));
    }
    let row = tx
        .query_one("SELECT last_sequence FROM log_head", &[])
        .await?;
    let mut next: i64 = row.get(0);
    let insert = tx
        .prepare(
            "INSERT INTO events (sequence, event_id, thread_id, run_id, type, occurred_at, \
             payload_json) VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (event_id) DO NOTHING",
        )
        .await?;
    let mut stored = Vec::with_capacity(events.len());
    for event in events {
        next += 1;
        let payload = serde_json::to_string(&event)?;
        let occurred_at = event
            .occurred_at
            .to_rfc3339_opts(chrono::SecondsFormat::Micros, true);
        let inserted = tx
            .execute(
                &insert,
                &[
                    &next,
                    &event.id.as_str(),
                    &event.thread_id.as_ref().map(|t| t.as_str()),
                    &event.run_id.as_ref().map(|r| r.as_str()),
                    &event.event_type(),
                    &occurred_at,
                    &payload,
                ],
            )
            .await?;
        if inserted == 0 {
            return Err(StoreError::DuplicateEvent { event_id: event.id }.into());
        }
        let ev = StoredEvent {
            sequence: u64::try_from(next).unwrap_or(0),
            event,
        };
        apply_event(&tx, &ev, FoldMode::Write).await?;
        stored.push(ev);
    }
    tx.execute("UPDATE log_head SET last_sequence = $1", &[&next])
        .await?;
    tx.execute("SELECT pg_notify($1, $2)", &[&CHANNEL, &next.to_string()])
        .await?;
    tx.commit().await?;
    Ok(Some(stored))
}

/// The body of `rebuild`: under the append lock, empties the projections and folds
/// every event in sequence order. Returns the number of events folded.
pub(crate) async fn rebuild(client: &mut tokio_postgres::Client) -> PgResult<u64> {
    let tx = client.transaction().await?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&APPEND_LOCK])
        .await?;
    let count = refold(&tx).await?;
    tx.commit().await?;
    Ok(count)
}

/// The body of `purge_deleted_threads` (CHG-08): under the append lock, deletes every
/// event filed under a thread that has a tombstone, then refolds the projections from
/// what is left, in one transaction. Returns (threads, events removed, events kept).
pub(crate) async fn purge_deleted_threads(
    client: &mut tokio_postgres::Client,
) -> PgResult<(Vec<String>, u64, u64)> {
    let tx = client.transaction().await?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&APPEND_LOCK])
        .await?;
    let threads: Vec<String> = tx
        .query(
            "SELECT DISTINCT thread_id FROM events WHERE type = $1 AND thread_id IS NOT NULL \
             ORDER BY thread_id COLLATE \"C\"",
            &[&TOMBSTONE_TYPE],
        )
        .await?
        .iter()
        .map(|r| r.get(0))
        .collect();
    let removed = tx
        .execute("DELETE FROM events WHERE thread_id = ANY($1)", &[&threads])
        .await?;
    let kept = refold(&tx).await?;
    tx.commit().await?;
    Ok((threads, removed, kept))
}

/// Empties the projections and folds every event in sequence order in `tx`.
async fn refold(tx: &Transaction<'_>) -> PgResult<u64> {
    const PAGE: i64 = 1024;
    for table in PROJECTION_TABLES {
        tx.execute(&format!("DELETE FROM {table}"), &[]).await?;
    }
    let page_stmt = tx
        .prepare(
            "SELECT sequence, payload_json FROM events WHERE sequence > $1 \
             ORDER BY sequence LIMIT $2",
        )
        .await?;
    let mut after = 0_i64;
    let mut count = 0_u64;
    loop {
        let rows = tx.query(&page_stmt, &[&after, &PAGE]).await?;
        let Some(last) = rows.last().map(|r| r.get::<_, i64>(0)) else {
            break;
        };
        for row in rows {
            let sequence: i64 = row.get(0);
            let payload: String = row.get(1);
            let event: DomainEvent = serde_json::from_str(&payload)?;
            let ev = StoredEvent {
                sequence: u64::try_from(sequence).unwrap_or(0),
                event,
            };
            apply_event(tx, &ev, FoldMode::Rebuild).await?;
            count += 1;
        }
        after = last;
    }
    Ok(count)
}

/// Version of row `id` of `table` (None when absent).
pub(crate) async fn read_version(
    client: &impl tokio_postgres::GenericClient,
    table: &str,
    id: &str,
) -> PgResult<Option<i64>> {
    let row = client
        .query_opt(
            &format!("SELECT version FROM {table} WHERE id = $1"),
            &[&id],
        )
        .await?;
    Ok(row.map(|r| r.get(0)))
}

/// Applies the fold of one stored event (knife_store::fold::plan) in `tx`.
async fn apply_event(tx: &Transaction<'_>, stored: &StoredEvent, mode: FoldMode) -> PgResult<()> {
    let seq = i64::try_from(stored.sequence).unwrap_or(i64::MAX);
    // A deleted thread stays deleted (CHG-08): later events of it change nothing.
    if let Some(thread) = &stored.event.thread_id {
        let tombstone = tx
            .query_opt(
                "SELECT 1 FROM events WHERE thread_id = $1 AND type = $2 AND sequence < $3 \
                 LIMIT 1",
                &[&thread.as_str(), &TOMBSTONE_TYPE, &seq],
            )
            .await?;
        if tombstone.is_some() {
            return Ok(());
        }
    }
    for change in plan(&stored.event)? {
        apply(tx, change, seq, mode).await?;
    }
    Ok(())
}

async fn apply(tx: &Transaction<'_>, change: RowChange, seq: i64, mode: FoldMode) -> PgResult<()> {
    match change {
        RowChange::Upsert {
            table,
            id,
            columns,
            payload,
        } => upsert(tx, table, &id, &columns, &payload, seq).await,
        RowChange::UpsertProject {
            id,
            root,
            updated_at_us,
            payload,
        } => {
            let holder = tx
                .query_opt(
                    "SELECT id FROM projects WHERE root = $1 AND id <> $2",
                    &[&root, &id],
                )
                .await?
                .map(|r| r.get::<_, String>(0));
            let root = match (holder, mode) {
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
            upsert(
                tx,
                "projects",
                &id,
                &[
                    ("updated_at_us", Cell::Integer(updated_at_us)),
                    ("root", root),
                ],
                &payload,
                seq,
            )
            .await
        }
        RowChange::RaiseLastSeen { session_id, at_us } => {
            tx.execute(
                "UPDATE provider_sessions \
                 SET last_seen_at_us = GREATEST(COALESCE(last_seen_at_us, $2), $2) \
                 WHERE id = $1",
                &[&session_id, &at_us],
            )
            .await?;
            Ok(())
        }
        RowChange::Bind {
            session_id,
            thread_id,
        } => {
            tx.execute(
                "INSERT INTO provider_session_bindings \
                 (provider_session_id, thread_id, bound_sequence, last_sequence) \
                 VALUES ($1, $2, $3, $3) \
                 ON CONFLICT (provider_session_id, thread_id) \
                 DO UPDATE SET last_sequence = excluded.last_sequence",
                &[&session_id, &thread_id, &seq],
            )
            .await?;
            Ok(())
        }
        RowChange::Unbind {
            session_id,
            thread_id,
        } => {
            tx.execute(
                "DELETE FROM provider_session_bindings \
                 WHERE provider_session_id = $1 AND thread_id = $2",
                &[&session_id, &thread_id],
            )
            .await?;
            Ok(())
        }
        RowChange::DropThread { thread_id } => {
            for table in THREAD_TABLES {
                tx.execute(
                    &format!("DELETE FROM {table} WHERE thread_id = $1"),
                    &[&thread_id],
                )
                .await?;
            }
            tx.execute("DELETE FROM threads WHERE id = $1", &[&thread_id])
                .await?;
            Ok(())
        }
        RowChange::IndexText {
            id,
            thread_id,
            run_id,
            kind,
            body,
        } => {
            // An unchanged body (a thread.updated with the same title) writes nothing.
            tx.execute(
                "INSERT INTO search_docs (id, thread_id, run_id, kind, body) \
                 VALUES ($1, $2, $3, $4, $5) \
                 ON CONFLICT (id) DO UPDATE SET thread_id = EXCLUDED.thread_id, \
                 run_id = EXCLUDED.run_id, kind = EXCLUDED.kind, body = EXCLUDED.body \
                 WHERE search_docs.body IS DISTINCT FROM EXCLUDED.body \
                 OR search_docs.kind IS DISTINCT FROM EXCLUDED.kind",
                &[&id, &thread_id, &run_id, &kind, &body],
            )
            .await?;
            Ok(())
        }
        RowChange::UnindexText { id } => {
            tx.execute("DELETE FROM search_docs WHERE id = $1", &[&id])
                .await?;
            Ok(())
        }
        RowChange::AppendItemText { chunk } => {
            let current = tx
                .query_opt(
                    "SELECT payload_json FROM turn_items WHERE id = $1",
                    &[&chunk.item_id.as_str()],
                )
                .await?
                .map(|r| r.get::<_, String>(0));
            for change in plan_append(current.as_deref(), &chunk)? {
                Box::pin(apply(tx, change, seq, mode)).await?;
            }
            Ok(())
        }
        RowChange::SetAgentStatus { thread_id, status } => {
            tx.execute(
                "UPDATE threads SET payload_json = \
                 jsonb_set(payload_json::jsonb, '{agent_status}', $1::text::jsonb)::text, \
                 last_sequence = $2, version = version + 1 WHERE id = $3",
                &[&status, &seq, &thread_id],
            )
            .await?;
            Ok(())
        }
    }
}

/// Upserts one entity row: `version` 1 on insert / +1 on update, `created_sequence`
/// kept, `last_sequence` = `seq`.
async fn upsert(
    tx: &Transaction<'_>,
    table: &str,
    id: &str,
    columns: &[(&'static str, Cell)],
    payload: &str,
    seq: i64,
) -> PgResult<()> {
    let names: Vec<&str> = columns.iter().map(|c| c.0).collect();
    let placeholders: String = (0..columns.len())
        .map(|i| format!(", ${}", i + 4))
        .collect();
    let updates: String = names
        .iter()
        .map(|n| format!("{n} = excluded.{n}, "))
        .collect();
    let sql = format!(
        "INSERT INTO {table} (id, payload_json, created_sequence, last_sequence, version, {cols}) \
         VALUES ($1, $2, $3, $3, 1{placeholders}) \
         ON CONFLICT (id) DO UPDATE SET {updates}payload_json = excluded.payload_json, \
         last_sequence = excluded.last_sequence, version = {table}.version + 1",
        cols = names.join(", "),
    );
    let cells: Vec<PgCell<'_>> = columns.iter().map(|c| PgCell(&c.1)).collect();
    let mut params: Vec<&(dyn ToSql + Sync)> = vec![&id, &payload, &seq];
    params.extend(cells.iter().map(|c| c as &(dyn ToSql + Sync)));
    tx.execute(&sql, &params).await.map_err(PgError::from)?;
    Ok(())
}

/// A fold [`Cell`] as a statement parameter of whatever type the column has.
#[derive(Debug)]
struct PgCell<'a>(&'a Cell);

impl ToSql for PgCell<'_> {
    fn to_sql(
        &self,
        ty: &Type,
        out: &mut bytes::BytesMut,
    ) -> Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
        match self.0 {
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
