// The write path on PostgreSQL: appends under a transaction-scoped advisory lock (so
// sequences are assigned in commit order), compare-and-set, the fold, and rebuild.

use crate::error::{PgError, PgResult};
use crate::fold::{self, Param};
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

/// An event ready to append: encoded and its fold planned before the append lock (in
/// the caller's task, so the encoding of several callers runs in parallel).
pub(crate) struct Ready {
    pub(crate) event: DomainEvent,
    payload: String,
    occurred_at: String,
    pub(crate) plan: Vec<knife_store::fold::RowChange>,
}

impl Ready {
    /// Encodes `event` and plans its fold. Errors: [`StoreError::Serde`].
    pub(crate) fn new(event: DomainEvent) -> Result<Ready, StoreError> {
        Ok(Ready {
            payload: serde_json::to_string(&event)?,
            occurred_at: event
                .occurred_at
                .to_rfc3339_opts(chrono::SecondsFormat::Micros, true),
            plan: plan(&event)?,
            event,
        })
    }
}

/// One caller's append (`write` / `write_if` / `write_fenced`): atomic on its own, its
/// fences and guard its own, whatever group it is written with.
pub(crate) struct Append {
    pub(crate) fences: Vec<knife_store::Lease>,
    pub(crate) guard: Option<RowGuard>,
    pub(crate) events: Vec<Ready>,
}

/// What an append's caller gets: its stored events, `None` when its guard failed.
pub(crate) type Outcome = Result<Option<Vec<StoredEvent>>, StoreError>;

/// How one attempt at a group's transaction ended.
enum Attempt {
    /// Committed (or nothing to write): the outcome of every append it held.
    Done(Vec<(usize, Outcome)>),
    /// Append `.0` failed on its own (a duplicate event id, a project root taken, a
    /// constraint its rows break): the transaction was rolled back; the group is
    /// tried again without it.
    Rejected(usize, StoreError),
}

/// Writes a group of appends (group commit, crate::group) in ONE transaction under the
/// append lock and returns each append's outcome, in order.
///
/// Each append stays atomic and independent, as if written alone in queue order: its
/// fences and its guard are checked for it (a guard after the appends before it in
/// the group), a fenced append or a failed guard writes nothing of it and the others
/// go on, and an append that fails on its own rows (see [`Attempt::Rejected`]) gets
/// its error while the group is written again without it (a new transaction: a
/// rolled-back attempt leaves nothing). A failure of the database itself (connection
/// lost, disk full, COMMIT failed) is every caller's error.
///
/// Round trips under the lock do not grow with the group (they cap the whole cluster's
/// throughput, docs/2026-12-01-store-postgres.md): one pipeline with the lock, the log
/// head, the deleted threads, every fence and the first append's guard; ONE pipeline
/// with each append's multi-row `INSERT … SELECT FROM UNNEST`, every fold statement
/// (crate::fold), the log head update and the NOTIFY; the COMMIT. A guard of a later
/// append flushes the pipeline and reads its row first (one round trip more).
pub(crate) async fn write_group(
    client: &mut deadpool_postgres::Client,
    appends: &[Append],
) -> Vec<Outcome> {
    let mut outcomes: Vec<Option<Outcome>> = appends.iter().map(|_| None).collect();
    let mut live: Vec<usize> = (0..appends.len()).collect();
    // The common case in one round trip (crate::pipelined); what it cannot decide up
    // front, or what the server refused there, is written below as before.
    if crate::pipelined::decidable(appends, &live) {
        match crate::pipelined::write(client, appends, &live).await {
            Ok(Some(done)) => {
                for (i, outcome) in done {
                    outcomes[i] = Some(outcome);
                }
                return outcomes
                    .into_iter()
                    .map(|o| o.unwrap_or(Err(StoreError::WriterGone)))
                    .collect();
            }
            Ok(None) => {}
            Err(error) => {
                let error = StoreError::from(error);
                let mut all: Vec<Outcome> = (1..appends.len())
                    .map(|_| Err(copy_error(&error)))
                    .collect();
                all.insert(0, Err(error));
                return all;
            }
        }
    }
    while !live.is_empty() {
        match attempt(client, appends, &live).await {
            Ok(Attempt::Done(done)) => {
                for (i, outcome) in done {
                    outcomes[i] = Some(outcome);
                }
                break;
            }
            Ok(Attempt::Rejected(i, error)) => {
                tracing::debug!(%error, "an append of a group failed on its own; the rest is retried");
                outcomes[i] = Some(Err(error));
                live.retain(|&j| j != i);
            }
            Err(error) => {
                let error = StoreError::from(error);
                for &i in &live {
                    outcomes[i] = Some(Err(copy_error(&error)));
                }
                if let Some(&first) = live.first() {
                    outcomes[first] = Some(Err(error));
                }
                break;
            }
        }
    }
    outcomes
        .into_iter()
        .map(|o| o.unwrap_or(Err(StoreError::WriterGone)))
        .collect()
}

/// One transaction over the appends `live` (indices into `appends`, in queue order).
async fn attempt(
    client: &mut deadpool_postgres::ClientWrapper,
    appends: &[Append],
    live: &[usize],
) -> PgResult<Attempt> {
    let mut threads: Vec<String> = live
        .iter()
        .flat_map(|&i| appends[i].events.iter())
        .filter_map(|r| r.event.thread_id.as_ref().map(|t| t.as_str().to_owned()))
        .collect();
    threads.sort_unstable();
    threads.dedup();
    let opening = live[0];

    let tx = client.transaction().await?;
    let lock = tx
        .prepare_cached("SELECT pg_advisory_xact_lock($1)")
        .await?;
    let head = tx
        .prepare_cached("SELECT last_sequence FROM log_head")
        .await?;
    // Pipelined (`futures::join!` and a short `join_all` poll in order, so the requests
    // go out in order): the head, the tombstones, the fences and the first guard are
    // read by statements that start once the lock is held, so they see every commit
    // before ours. Fencing (SCALE-04): the lease row is read FOR SHARE, so a takeover in
    // flight finishes first and this write then sees its epoch. Appends write no lease
    // rows, so the fences of the whole group are read here.
    let reader = &*tx;
    let fence_checks = futures::future::join_all(live.iter().flat_map(|&i| {
        appends[i]
            .fences
            .iter()
            .map(move |lease| async move { (i, crate::leases::check_fence(reader, lease).await) })
    }));
    let guard_read = async {
        match &appends[opening].guard {
            Some(g) => read_version(&*tx, g.kind.table(), &g.id).await.map(Some),
            None => Ok(None),
        }
    };
    let (locked, head, deleted, fenced, opening_version) = futures::join!(
        tx.execute(&lock, &[&APPEND_LOCK]),
        tx.query_one(&head, &[]),
        fold::deleted_threads(&tx, threads),
        fence_checks,
        guard_read,
    );
    locked?;
    let mut last: i64 = head?.get(0);
    let deleted = deleted?;
    let opening_version = opening_version?;
    let mut done: Vec<(usize, Outcome)> = Vec::with_capacity(live.len());
    let mut refused = std::collections::HashSet::new();
    for (i, fence) in fenced {
        match fence {
            Ok(()) => {}
            Err(PgError::Store(e)) if refused.insert(i) => done.push((i, Err(e))),
            Err(PgError::Store(_)) => {}
            Err(e) => return Err(e),
        }
    }

    let mut folder = fold::Folder::new(FoldMode::Write, deleted);
    let mut written: Vec<(usize, Vec<StoredEvent>)> = Vec::new();
    for &i in live.iter().filter(|i| !refused.contains(*i)) {
        let append = &appends[i];
        folder.pipeline.owner = i;
        if let Some(guard) = &append.guard {
            let current = if i == opening {
                opening_version.flatten()
            } else {
                // The appends before it in this transaction may have moved the row.
                if let Err(e) = folder.flush(&tx).await {
                    drop(tx);
                    return blame(client, &folder, i, e, appends).await;
                }
                read_version(&*tx, guard.kind.table(), &guard.id).await?
            };
            if current != guard.expected_version {
                tracing::debug!(
                    kind = ?guard.kind, id = %guard.id, expected = ?guard.expected_version,
                    ?current, "compare-and-set write skipped: the row moved"
                );
                done.push((i, Ok(None)));
                continue;
            }
        }
        if append.events.is_empty() {
            done.push((i, Ok(Some(Vec::new()))));
            continue;
        }
        let first = last;
        last = first + i64::try_from(append.events.len()).unwrap_or(i64::MAX);
        let events = &append.events;
        let queued = folder
            .pipeline
            .push(&tx, INSERT_EVENTS, insert_params(first, events.iter()))
            .await;
        if let Err(e) = queued {
            drop(tx);
            return blame(client, &folder, i, e, appends).await;
        }
        let mut stored = Vec::with_capacity(events.len());
        for (k, r) in events.iter().enumerate() {
            let ev = StoredEvent {
                sequence: u64::try_from(first).unwrap_or(0) + k as u64 + 1,
                event: r.event.clone(),
            };
            if let Err(e) = folder.fold(&tx, &ev, r.plan.clone()).await {
                drop(tx);
                return blame(client, &folder, i, e, appends).await;
            }
            stored.push(ev);
        }
        // An append's merged upserts are its own statements (errors are blamed on it).
        if let Err(e) = folder.emit(&tx).await {
            drop(tx);
            return blame(client, &folder, i, e, appends).await;
        }
        written.push((i, stored));
    }
    if written.is_empty() {
        // Nothing to write (all fenced, guards failed or empty): `tx` drops, ROLLBACK.
        return Ok(Attempt::Done(done));
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
    if let Err(e) = p.flush(&tx).await {
        drop(tx);
        return blame(client, &folder, opening, e, appends).await;
    }
    tx.commit().await?;
    done.extend(written.into_iter().map(|(i, s)| (i, Ok(Some(s)))));
    done.sort_by_key(|(i, _)| *i);
    Ok(Attempt::Done(done))
}

/// The attempt failed with `error` (its transaction already rolled back) while
/// queuing or folding append `current`, or flushing the statements queued so far:
/// whose fault is it? The append that queued the failing statement
/// ([`fold::Pipeline::failed_owner`], else `current`) when the error is about its own
/// rows (a contract error, a unique, other constraint or data error): it is then
/// [`Attempt::Rejected`]. Anything else (the database failing) is the group's.
async fn blame(
    client: &deadpool_postgres::ClientWrapper,
    folder: &fold::Folder,
    current: usize,
    error: PgError,
    appends: &[Append],
) -> PgResult<Attempt> {
    let owner = folder.pipeline.failed_owner().unwrap_or(current);
    match error {
        PgError::Store(e) => Ok(Attempt::Rejected(owner, e)),
        PgError::Driver(e) => match e.code().map(tokio_postgres::error::SqlState::code) {
            Some("23505") => {
                let error = duplicate(client, &e, &appends[owner].events).await;
                Ok(Attempt::Rejected(owner, error))
            }
            Some(code) if code.starts_with("23") || code.starts_with("22") => {
                Ok(Attempt::Rejected(owner, PgError::Driver(e).into()))
            }
            _ => Err(PgError::Driver(e)),
        },
        other => Err(other),
    }
}

/// A copy of a group-wide `error` for each further caller ([`StoreError`] is not
/// `Clone`): the same variant for the errors callers act on (a full disk), the
/// message otherwise.
pub(crate) fn copy_error(error: &StoreError) -> StoreError {
    let source: knife_store::BackendError = error.to_string().into();
    match error {
        StoreError::Full { backend, .. } => StoreError::Full { backend, source },
        StoreError::Database { backend, hint, .. } => StoreError::Database {
            backend,
            hint,
            source,
        },
        StoreError::WriterGone => StoreError::WriterGone,
        _ => StoreError::Database {
            backend: "PostgreSQL",
            hint: crate::error::PG_HINT,
            source,
        },
    }
}

/// The multi-row insert of a batch's events: one row per element of the arrays
/// ([`insert_params`]). The sequence goes through `knife_seq` (migration 0075): the
/// number itself unless the transaction set a base (crate::pipelined).
pub(crate) const INSERT_EVENTS: &str = "INSERT INTO events (sequence, event_id, thread_id, run_id, type, occurred_at, \
     payload_json) SELECT knife_seq(u.s), u.e, u.t, u.r, u.y, u.o, u.p FROM UNNEST(\
     $1::BIGINT[], $2::TEXT[], $3::TEXT[], $4::TEXT[], $5::TEXT[], $6::TEXT[], $7::TEXT[]) \
     AS u(s, e, t, r, y, o, p)";

/// The parameters of [`INSERT_EVENTS`] for `events`, numbered from `after` + 1.
pub(crate) fn insert_params<'a>(after: i64, events: impl Iterator<Item = &'a Ready>) -> Vec<Param> {
    let mut sequence = Vec::new();
    let mut id = Vec::new();
    let mut thread = Vec::new();
    let mut run = Vec::new();
    let mut kind = Vec::new();
    let mut occurred = Vec::new();
    let mut payload = Vec::new();
    for (k, r) in events.enumerate() {
        sequence.push(after + 1 + i64::try_from(k).unwrap_or(i64::MAX));
        id.push(r.event.id.as_str().to_owned());
        thread.push(r.event.thread_id.as_ref().map(|t| t.as_str().to_owned()));
        run.push(r.event.run_id.as_ref().map(|t| t.as_str().to_owned()));
        kind.push(r.event.event_type().to_owned());
        occurred.push(r.occurred_at.clone());
        payload.push(r.payload.clone());
    }
    vec![
        Box::new(sequence),
        Box::new(id),
        Box::new(thread),
        Box::new(run),
        Box::new(kind),
        Box::new(occurred),
        Box::new(payload),
    ]
}

/// The [`StoreError::DuplicateEvent`] of an append whose insert broke the event id's
/// unique index (`unique`, its transaction rolled back): the id the server names, else
/// the first repeated in the append, else the first already in the log.
async fn duplicate(
    client: &deadpool_postgres::ClientWrapper,
    unique: &tokio_postgres::Error,
    batch: &[Ready],
) -> StoreError {
    // "Key (event_id)=(…) already exists."
    let named = unique
        .as_db_error()
        .and_then(|d| d.detail())
        .and_then(|d| d.strip_prefix("Key (event_id)=("))
        .and_then(|d| d.strip_suffix(") already exists."));
    if let Some(id) = named {
        return StoreError::DuplicateEvent {
            event_id: knife_protocol::EventId::from(id),
        };
    }
    let mut seen = std::collections::HashSet::new();
    for r in batch {
        if !seen.insert(r.event.id.as_str()) {
            return StoreError::DuplicateEvent {
                event_id: r.event.id.clone(),
            };
        }
    }
    let ids: Vec<&str> = batch.iter().map(|r| r.event.id.as_str()).collect();
    let found = client
        .query_opt(
            "SELECT event_id FROM events WHERE event_id = ANY($1) LIMIT 1",
            &[&ids],
        )
        .await;
    let event_id = match found {
        Ok(Some(row)) => knife_protocol::EventId::from(row.get::<_, String>(0).as_str()),
        _ => match batch.first() {
            Some(r) => r.event.id.clone(),
            None => knife_protocol::EventId::from("unknown"),
        },
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
        folder.flush(tx).await?;
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
