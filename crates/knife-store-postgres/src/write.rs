// The write path on PostgreSQL: appends under a transaction-scoped advisory lock (so
// sequences are assigned in commit order), compare-and-set, the fold, and rebuild.

use crate::error::PgResult;
use crate::fold;
use knife_protocol::{DomainEvent, StoredEvent};
use knife_store::fold::{FoldMode, PROJECTION_TABLES, TOMBSTONE_TYPE, plan};
use knife_store::{RowGuard, StoreError};

/// Advisory lock key held by every append (and rebuild) until its COMMIT: appends are
/// serialised across all nodes, so the sequence `MAX + 1` taken under it is in commit
/// order and a reader that sees sequence N has every sequence below N too.
pub(crate) const APPEND_LOCK: i64 = 0x6b6e_6966_6502;

/// NOTIFY channel: the payload is the last sequence of the committed batch (a wake-up
/// only; subscribers read the rows from `events`).
pub(crate) const CHANNEL: &str = "knife_events";

/// An event ready to append: encoded and its fold planned before the append lock.
struct Ready {
    event: DomainEvent,
    payload: String,
    occurred_at: String,
    plan: Vec<knife_store::fold::RowChange>,
}

/// The body of `write` / `write_if` in one transaction: lock, check the fences and
/// `guard`, append, fold, notify, commit. `Ok(None)` (nothing written) when the guard
/// failed.
///
/// Round trips under the append lock are few and do not grow with the batch (they
/// cap the whole cluster's throughput, docs/2026-12-01-store-postgres.md): the lock
/// with the log head, the deleted-thread check, the fences and a guard (one pipeline,
/// plus one prepare for a fence or guard), then ONE pipeline holding the multi-row `INSERT … SELECT FROM
/// UNNEST` of the events, every fold statement (crate::fold), the log head update and
/// the NOTIFY, and the COMMIT. Encoding and planning happen before the lock.
pub(crate) async fn write_batch(
    client: &mut deadpool_postgres::ClientWrapper,
    fences: &[knife_store::Lease],
    guard: Option<&RowGuard>,
    events: Vec<DomainEvent>,
) -> PgResult<Option<Vec<StoredEvent>>> {
    let mut ready = Vec::with_capacity(events.len());
    for event in events {
        ready.push(Ready {
            payload: serde_json::to_string(&event)?,
            occurred_at: event
                .occurred_at
                .to_rfc3339_opts(chrono::SecondsFormat::Micros, true),
            plan: plan(&event)?,
            event,
        });
    }
    let mut threads: Vec<String> = ready
        .iter()
        .filter_map(|r| r.event.thread_id.as_ref().map(|t| t.as_str().to_owned()))
        .collect();
    threads.sort_unstable();
    threads.dedup();

    let tx = client.transaction().await?;
    let lock = tx
        .prepare_cached("SELECT pg_advisory_xact_lock($1)")
        .await?;
    let head = tx
        .prepare_cached("SELECT last_sequence FROM log_head")
        .await?;
    // Pipelined (`futures::join!` and a short `join_all` poll in order, so the requests
    // go out in order): the head, the tombstones, the fences and the guard are read by
    // statements that start once the lock is held, so they see every commit before ours.
    // Fencing (SCALE-04): the lease row is read FOR SHARE, so a takeover in flight
    // finishes first and this write then sees its epoch. The guard is re-read under the
    // append lock: no other write can land before our COMMIT.
    let fence_checks = futures::future::join_all(
        fences
            .iter()
            .map(|lease| crate::leases::check_fence(&*tx, lease)),
    );
    let guard_read = async {
        match guard {
            Some(g) => read_version(&*tx, g.kind.table(), &g.id).await.map(Some),
            None => Ok(None),
        }
    };
    let (locked, head, deleted, fenced, current) = futures::join!(
        tx.execute(&lock, &[&APPEND_LOCK]),
        tx.query_one(&head, &[]),
        fold::deleted_threads(&tx, threads),
        fence_checks,
        guard_read,
    );
    locked?;
    let first: i64 = head?.get(0);
    let deleted = deleted?;
    for fence in fenced {
        fence?;
    }
    if let (Some(guard), Some(current)) = (guard, current?)
        && current != guard.expected_version
    {
        tracing::debug!(
            kind = ?guard.kind, id = %guard.id, expected = ?guard.expected_version,
            ?current, "compare-and-set write skipped: the row moved"
        );
        return Ok(None); // `tx` drops: ROLLBACK
    }
    if ready.is_empty() {
        return Ok(Some(Vec::new()));
    }
    let count = ready.len();
    let last = first + i64::try_from(count).unwrap_or(i64::MAX);
    let mut folder = fold::Folder::new(FoldMode::Write, deleted);
    folder
        .pipeline
        .push(
            &tx,
            "INSERT INTO events (sequence, event_id, thread_id, run_id, type, occurred_at, \
             payload_json) SELECT * FROM UNNEST($1::BIGINT[], $2::TEXT[], $3::TEXT[], \
             $4::TEXT[], $5::TEXT[], $6::TEXT[], $7::TEXT[]) ON CONFLICT (event_id) DO NOTHING",
            vec![
                Box::new(((first + 1)..=last).collect::<Vec<i64>>()),
                Box::new(column(&ready, |r| Some(r.event.id.as_str().to_owned()))),
                Box::new(column(&ready, |r| {
                    r.event.thread_id.as_ref().map(|t| t.as_str().to_owned())
                })),
                Box::new(column(&ready, |r| {
                    r.event.run_id.as_ref().map(|t| t.as_str().to_owned())
                })),
                Box::new(column(&ready, |r| Some(r.event.event_type().to_owned()))),
                Box::new(column(&ready, |r| Some(r.occurred_at.clone()))),
                Box::new(column(&ready, |r| Some(r.payload.clone()))),
            ],
        )
        .await?;
    let mut stored = Vec::with_capacity(count);
    for (i, r) in ready.into_iter().enumerate() {
        let ev = StoredEvent {
            sequence: u64::try_from(first).unwrap_or(0) + i as u64 + 1,
            event: r.event,
        };
        folder.fold(&tx, &ev, r.plan).await?;
        stored.push(ev);
    }
    let p = &mut folder.pipeline;
    p.push(
        &tx,
        "UPDATE log_head SET last_sequence = $1",
        vec![Box::new(last)],
    )
    .await?;
    p.push(
        &tx,
        "SELECT pg_notify($1, $2)",
        vec![Box::new(CHANNEL), Box::new(last.to_string())],
    )
    .await?;
    p.flush(&tx).await?;
    // The first statement of the pipeline is the INSERT.
    if p.affected().first().copied().unwrap_or(0) != count as u64 {
        // Some event id is in the log already (or twice in the batch): name it.
        drop(tx);
        return Err(duplicate(client, &stored).await.into());
    }
    tx.commit().await?;
    Ok(Some(stored))
}

/// One column of the batch for `UNNEST`.
fn column(ready: &[Ready], f: impl Fn(&Ready) -> Option<String>) -> Vec<Option<String>> {
    ready.iter().map(f).collect()
}

/// The [`StoreError::DuplicateEvent`] of a batch whose insert skipped a row: the first
/// event whose id is already in the log, or repeated in the batch.
async fn duplicate(client: &deadpool_postgres::ClientWrapper, batch: &[StoredEvent]) -> StoreError {
    let mut seen = std::collections::HashSet::new();
    for ev in batch {
        if !seen.insert(ev.event.id.as_str()) {
            return StoreError::DuplicateEvent {
                event_id: ev.event.id.clone(),
            };
        }
    }
    let ids: Vec<&str> = batch.iter().map(|e| e.event.id.as_str()).collect();
    let found = client
        .query_opt(
            "SELECT event_id FROM events WHERE event_id = ANY($1) LIMIT 1",
            &[&ids],
        )
        .await;
    let event_id = match found {
        Ok(Some(row)) => knife_protocol::EventId::from(row.get::<_, String>(0).as_str()),
        _ => batch[0].event.id.clone(),
    };
    StoreError::DuplicateEvent { event_id }
}

/// The body of `rebuild`: under the append lock, empties the projections and folds
/// every event in sequence order. Returns the number of events folded.
pub(crate) async fn rebuild(client: &mut deadpool_postgres::ClientWrapper) -> PgResult<u64> {
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
    client: &mut deadpool_postgres::ClientWrapper,
) -> PgResult<(Vec<String>, u64, u64)> {
    let tx = client.transaction().await?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&APPEND_LOCK])
        .await?;
    let threads: Vec<String> = tx
        .query(
            "SELECT DISTINCT thread_id COLLATE \"C\" FROM events \
             WHERE type = $1 AND thread_id IS NOT NULL ORDER BY 1",
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

/// Empties the projections and folds every event in sequence order in `tx`, a page
/// (one pipeline) at a time.
async fn refold(tx: &deadpool_postgres::Transaction<'_>) -> PgResult<u64> {
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
    // Folded in sequence order from the first event: a thread is deleted for the
    // events after its tombstone.
    let mut folder = fold::Folder::new(FoldMode::Rebuild, Default::default());
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
            let changes = plan(&ev.event)?;
            folder.fold(tx, &ev, changes).await?;
            count += 1;
        }
        folder.pipeline.flush(tx).await?;
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
