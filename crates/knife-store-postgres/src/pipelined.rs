// The one-round-trip append on PostgreSQL: a group of appends whose statements need no
// answer from the server before COMMIT goes out as ONE pipeline, BEGIN to COMMIT.

//! Why (SCALE-10): the cluster-wide append lock (crate::write::APPEND_LOCK) caps every
//! node's appends together, and the usual path (crate::write::attempt) holds it across
//! two round trips to the node: the server answers the lock's pipeline (log head,
//! fences, guards, tombstones), the node then sends the inserts and the fold, and then
//! COMMIT. On a loaded machine each of those waits for the node's process to be
//! scheduled while every other node waits for the lock. Here the node sends
//! everything at once, so the lock is held only while the server runs the statements
//! and flushes the COMMIT:
//!
//! 1. `BEGIN`, the lock, then `set_config('knife.base', last_sequence)` from `log_head`:
//!    the sequences are numbered from 1 in the statements and `knife_seq(n)` (migration
//!    0075) adds that base on the server, so the node never needs the head first;
//! 2. what the usual path reads and decides on is asserted instead (`knife_expect`:
//!    SQLSTATE `KN001` when it does not hold): every fence's lease row (node and epoch,
//!    `FOR SHARE`, SCALE-04), every guard's row version, no tombstone for the group's
//!    threads;
//! 3. ONE multi-row insert of every event of the group, the fold of all of them (one
//!    [`fold::Folder`]: a row's upserts merged over the whole group), the log head and
//!    the NOTIFY; `COMMIT`.
//!
//! Outcomes are exactly the usual path's: when anything fails on the server (an
//! assertion, a duplicate id, a constraint) the transaction is rolled back (the
//! statements after the failure and the COMMIT only answer that it is aborted) and
//! the group is written the usual way, which finds out whose fault it is and gives
//! each append its own outcome. A group it cannot decide up front goes the usual way
//! at once: a change that reads inside the transaction (a project's root, a text
//! chunk, a run's total), or a guard on a row an earlier append of the group changes.

use std::collections::HashSet;
use std::future::Future;
use std::pin::Pin;
use std::task::Poll;

use crate::error::{PgError, PgResult};
use crate::fold;
use crate::write::{APPEND_LOCK, Append, CHANNEL, INSERT_EVENTS, Outcome};
use deadpool_postgres::GenericClient;
use knife_protocol::StoredEvent;
use knife_store::fold::{FoldMode, RowChange, TOMBSTONE_TYPE};
use tokio_postgres::types::ToSql;

/// Whether the appends `live` (indices into `appends`, queue order) can be decided up
/// front: no guard of a later append is on a row an earlier append of the group
/// changes (the assertions run before any write of the group). The reads are
/// refused by the fold itself ([`fold::Folder::without_reads`]).
pub(crate) fn decidable(appends: &[Append], live: &[usize]) -> bool {
    let mut changed: HashSet<(&str, &str)> = HashSet::new();
    let mut dropped = false;
    for (n, &i) in live.iter().enumerate() {
        let append = &appends[i];
        if n > 0
            && let Some(guard) = &append.guard
            && (dropped || changed.contains(&(guard.kind.table(), guard.id.as_str())))
        {
            return false;
        }
        for change in append.events.iter().flat_map(|r| r.plan.iter()) {
            match change {
                RowChange::Upsert { table, id, .. } => {
                    changed.insert((table, id));
                }
                RowChange::UpsertProject { id, .. } => {
                    changed.insert(("projects", id));
                }
                RowChange::SetAgentStatus { thread_id, .. } => {
                    changed.insert(("threads", thread_id));
                }
                RowChange::DropThread { .. } => dropped = true,
                _ => {}
            }
        }
    }
    true
}

/// A boxed statement future whose first poll sends its request.
type Sent<'a> =
    Pin<Box<dyn Future<Output = Result<Option<i64>, tokio_postgres::Error>> + Send + 'a>>;

/// Writes the appends `live` in one transaction sent as one pipeline.
///
/// `Ok(Some(outcomes))` when it committed (each append's stored events, or an empty
/// list for an append of no events); `Ok(None)` when the server refused something and
/// rolled the transaction back, or a fold change needed a read: the caller writes the
/// group the usual way. `Err` when the connection failed (the group's error; whether
/// a COMMIT sent before the failure took effect is not known, as on the usual path).
pub(crate) async fn write(
    client: &deadpool_postgres::Client,
    appends: &[Append],
    live: &[usize],
) -> PgResult<Option<Vec<(usize, Outcome)>>> {
    let mut threads: Vec<String> = live
        .iter()
        .flat_map(|&i| appends[i].events.iter())
        .filter_map(|r| r.event.thread_id.as_ref().map(|t| t.as_str().to_owned()))
        .collect();
    threads.sort_unstable();
    threads.dedup();

    // Prepared (cached per connection) before anything is sent: no round trip below.
    let lock = client
        .prepare_cached("SELECT pg_advisory_xact_lock($1)")
        .await?;
    let base = client
        .prepare_cached(
            "SELECT last_sequence, set_config('knife.base', last_sequence::text, true) \
             FROM log_head",
        )
        .await?;
    let mut folder = fold::Folder::without_reads(FoldMode::Write);
    let p = &mut folder.pipeline;
    if !threads.is_empty() {
        p.push(
            client,
            "SELECT knife_expect(NOT EXISTS (SELECT 1 FROM events WHERE thread_id = ANY($1) \
             AND type = $2), 'no thread of the group is deleted')",
            vec![Box::new(threads), Box::new(TOMBSTONE_TYPE)],
        )
        .await?;
    }
    for &i in live {
        for lease in &appends[i].fences {
            p.push(
                client,
                "SELECT knife_expect(EXISTS (SELECT 1 FROM thread_leases WHERE thread_id = $1 \
                 AND node = $2 AND epoch = $3 FOR SHARE), 'the fence of an append')",
                vec![
                    Box::new(lease.thread_id.as_str().to_owned()),
                    Box::new(lease.node.clone()),
                    Box::new(knife_store::leases::epoch_i64(lease.epoch)),
                ],
            )
            .await?;
        }
        if let Some(guard) = &appends[i].guard {
            p.push(
                client,
                &format!(
                    "SELECT knife_expect((SELECT version FROM {} WHERE id = $1) \
                     IS NOT DISTINCT FROM $2::BIGINT, 'the guard of an append')",
                    guard.kind.table()
                ),
                vec![Box::new(guard.id.clone()), Box::new(guard.expected_version)],
            )
            .await?;
        }
    }
    let all = live.iter().flat_map(|&i| appends[i].events.iter());
    let count = i64::try_from(all.clone().count()).unwrap_or(i64::MAX);
    if count > 0 {
        p.push(client, INSERT_EVENTS, crate::write::insert_params(0, all))
            .await?;
    }
    // The group's events numbered from 1; the server adds the base (knife_seq).
    let mut relative: Vec<(usize, Vec<StoredEvent>)> = Vec::with_capacity(live.len());
    let mut offset = 0_u64;
    for &i in live {
        let mut stored = Vec::with_capacity(appends[i].events.len());
        for r in &appends[i].events {
            offset += 1;
            let ev = StoredEvent {
                sequence: offset,
                event: r.event.clone(),
            };
            match folder.fold(client, &ev, r.plan.clone()).await {
                Ok(()) => {}
                Err(PgError::NeedsRead) => return Ok(None),
                Err(e) => return Err(e),
            }
            stored.push(ev);
        }
        relative.push((i, stored));
    }
    folder.emit(client).await?;
    let p = &mut folder.pipeline;
    if count > 0 {
        p.push(
            client,
            "UPDATE log_head SET last_sequence = knife_seq($1)",
            vec![Box::new(count)],
        )
        .await?;
        p.push(
            client,
            "SELECT pg_notify($1, knife_seq($2)::text)",
            vec![Box::new(CHANNEL), Box::new(count)],
        )
        .await?;
    }
    let statements = p.take();

    // One pipeline: each request goes out on its future's first poll, in order.
    let refs: Vec<Vec<&(dyn ToSql + Sync)>> = statements
        .iter()
        .map(|(_, params)| params.iter().map(|p| &**p as &(dyn ToSql + Sync)).collect())
        .collect();
    let mut sent: Vec<Sent<'_>> = Vec::with_capacity(statements.len() + 4);
    sent.push(Box::pin(async {
        client.batch_execute("BEGIN").await.map(|()| None)
    }));
    let lock_key: &(dyn ToSql + Sync) = &APPEND_LOCK;
    sent.push(Box::pin(async {
        client.execute(&lock, &[lock_key]).await.map(|_| None)
    }));
    sent.push(Box::pin(async {
        let row = client.query_one(&base, &[]).await?;
        Ok(Some(row.get::<_, i64>(0)))
    }));
    for ((statement, _), params) in statements.iter().zip(&refs) {
        sent.push(Box::pin(async move {
            client.execute(statement, params).await.map(|_| None)
        }));
    }
    sent.push(Box::pin(async {
        client.batch_execute("COMMIT").await.map(|()| None)
    }));
    let mut early = Vec::with_capacity(sent.len());
    for future in &mut sent {
        early.push(match futures::poll!(future.as_mut()) {
            Poll::Ready(result) => Some(result),
            Poll::Pending => None,
        });
    }
    // Every answer is read (the connection is idle afterwards, its transaction over).
    let mut head = None;
    let mut refused: Option<tokio_postgres::Error> = None;
    for (future, early) in sent.into_iter().zip(early) {
        let result = match early {
            Some(result) => result,
            None => future.await,
        };
        match result {
            Ok(Some(at)) => head = Some(at),
            Ok(None) => {}
            Err(e) if e.as_db_error().is_none() => return Err(e.into()),
            Err(e) => {
                refused.get_or_insert(e);
            }
        }
    }
    if let Some(e) = refused {
        tracing::debug!(error = %e, "a one-round-trip append was refused; written the usual way");
        return Ok(None);
    }
    let base = u64::try_from(head.unwrap_or(0)).unwrap_or(0);
    Ok(Some(
        relative
            .into_iter()
            .map(|(i, mut stored)| {
                for ev in &mut stored {
                    ev.sequence += base;
                }
                (i, Ok(Some(stored)))
            })
            .collect(),
    ))
}
