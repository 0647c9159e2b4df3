// The single writer thread: owns the only read-write connection, runs write jobs in
// order (queued appends and small writes grouped into one transaction, one savepoint
// each) and publishes after COMMIT.

use crate::error::DbError;
use crate::fold::{
    Encoded, FoldMode, append_event, apply_event, apply_planned, clear_projections, read_version,
    seq_u64,
};
use crate::search_queue;
use knife_protocol::{DomainEvent, StoredEvent};
use knife_store::StoreError;
use knife_store::{Lease, RowGuard};
use rusqlite::{Connection, TransactionBehavior};
use std::panic::AssertUnwindSafe;
use std::sync::mpsc;
use std::time::Duration;
use tokio::sync::{broadcast, oneshot};

/// A closure for the writer thread. It gets exclusive use of the connection.
type Closure = Box<dyn FnOnce(&mut Connection) + Send + 'static>;

/// What an append's caller is answered: the stored events, `None` when its guard failed.
type WriteReply = oneshot::Sender<Result<Option<Vec<StoredEvent>>, StoreError>>;

/// A unit of work for the writer thread.
enum Job {
    /// An append (`write` / `write_if`): grouped with the appends queued behind it.
    Write {
        /// Leases the append is fenced by (SCALE-04): checked under the write lock.
        fences: Vec<Lease>,
        guard: Option<RowGuard>,
        events: Vec<Ready>,
        reply: WriteReply,
    },
    /// A small write that is not an append (a lease granted or let go, a session's
    /// last-seen mark): grouped with the appends like one of them (LIVE-07).
    Small(SmallWrite),
    /// Anything else (rebuild, purge, a lease sweep): run alone.
    Other(Closure),
}

/// The body of a [`Job::Small`]: given the group's transaction (inside its own
/// savepoint), runs its statements and says whether to keep them; given `None` (the
/// group failed before its turn) runs nothing. The returned answer is called after the
/// group's COMMIT with `None`, or with the error that voided the group.
type SmallWrite = Box<dyn FnOnce(Option<&Connection>) -> (bool, SmallAnswer) + Send + 'static>;

/// Answers a [`Job::Small`]'s caller once the group's outcome is known.
type SmallAnswer = Box<dyn FnOnce(Option<StoreError>) + Send + 'static>;

/// Appends grouped into one transaction at most (group commit).
const GROUP: usize = 256;

/// Handle to the writer thread: a channel of jobs. The thread exits (closing the
/// connection) when every handle is dropped.
#[derive(Debug)]
pub(crate) struct Writer {
    jobs: mpsc::Sender<Job>,
}

impl std::fmt::Debug for Job {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Job::Write { .. } => "Job::Write",
            Job::Small(_) => "Job::Small",
            Job::Other(_) => "Job::Other",
        })
    }
}

impl Writer {
    /// Starts the writer thread owning `conn`; committed appends are published on
    /// `live`. Once the writer has had no job for `idle_checkpoint` after a write, it
    /// checkpoints the WAL into the database file and truncates it to zero bytes, so
    /// the space the WAL held is free again (SPEC.md SEC-07; SQLite's own
    /// `wal_autocheckpoint` only checkpoints, it never shrinks the file).
    pub(crate) fn spawn(
        mut conn: Connection,
        live: broadcast::Sender<StoredEvent>,
        idle_checkpoint: Duration,
    ) -> std::io::Result<Writer> {
        // Unbounded std channel: sending never blocks the async caller; back-pressure
        // comes from callers awaiting their reply.
        let (jobs, rx) = mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name("knife-store-writer".into())
            .spawn(move || {
                let mut wrote_since_checkpoint = false;
                // A non-append job met while grouping appends: it runs next.
                let mut next = None;
                loop {
                    let job = if let Some(job) = next.take() {
                        job
                    } else if wrote_since_checkpoint {
                        match rx.recv_timeout(idle_checkpoint) {
                            Ok(job) => job,
                            Err(mpsc::RecvTimeoutError::Timeout) => {
                                wrote_since_checkpoint = !checkpoint_truncate(&conn);
                                continue;
                            }
                            Err(mpsc::RecvTimeoutError::Disconnected) => break,
                        }
                    } else {
                        match rx.recv() {
                            Ok(job) => job,
                            Err(_) => break,
                        }
                    };
                    wrote_since_checkpoint = true;
                    // A panicking job must not take the writer down for everyone: its
                    // open transaction rolls back while unwinding and its callers see
                    // `WriterGone` (their reply senders were dropped).
                    let ran = match job {
                        Job::Other(f) => {
                            std::panic::catch_unwind(AssertUnwindSafe(|| f(&mut conn)))
                        }
                        Job::Write {
                            fences,
                            guard,
                            events,
                            reply,
                        } => grouped(
                            &mut conn,
                            &rx,
                            &mut next,
                            Member::Append(Append {
                                fences,
                                guard,
                                events,
                                reply,
                            }),
                            &live,
                        ),
                        Job::Small(f) => {
                            grouped(&mut conn, &rx, &mut next, Member::Small(f), &live)
                        }
                    };
                    if ran.is_err() {
                        tracing::error!("a knife-store write job panicked; it was rolled back");
                    }
                }
                checkpoint_truncate(&conn);
            })?;
        Ok(Writer { jobs })
    }

    /// Appends `events` (after checking `guard`, if any) in one transaction, possibly
    /// shared with other queued appends (each atomic on its own: a savepoint), and
    /// publishes them after COMMIT. `Ok(None)`: the guard failed, nothing written.
    ///
    /// Cancellation: as [`Writer::run`].
    pub(crate) async fn write(
        &self,
        fences: Vec<Lease>,
        guard: Option<RowGuard>,
        events: Vec<DomainEvent>,
    ) -> Result<Option<Vec<StoredEvent>>, StoreError> {
        // Encoded and planned here, on the caller's thread: the one writer thread only
        // runs the statements (LIVE-07).
        let events = events
            .into_iter()
            .map(Ready::prepare)
            .collect::<Result<Vec<_>, _>>()?;
        let (reply, rx) = oneshot::channel();
        self.jobs
            .send(Job::Write {
                fences,
                guard,
                events,
                reply,
            })
            .map_err(|_| StoreError::WriterGone)?;
        rx.await.map_err(|_| StoreError::WriterGone)?
    }

    /// Runs `f` on the writer thread inside the transaction of the appends queued with
    /// it (its own savepoint: an error rolls back `f`'s statements only) and awaits its
    /// result, which is answered after that transaction's COMMIT (LIVE-07: a lease taken
    /// per resumed thread no longer costs a transaction of its own). For small writes
    /// that need no transaction of their own; `f` must not begin or end one.
    ///
    /// Cancellation: as [`Writer::run`].
    pub(crate) async fn run_grouped<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T, DbError> + Send + 'static,
    {
        let (tx, rx) = oneshot::channel();
        let job = Job::Small(Box::new(move |conn: Option<&Connection>| {
            // Without a connection the group failed first: `voided` carries its error.
            let result = conn.map_or(Err(StoreError::WriterGone), |conn| {
                f(conn).map_err(StoreError::from)
            });
            let keep = result.is_ok();
            let answer: SmallAnswer = Box::new(move |voided| {
                // The caller may be gone (future dropped); the result is then discarded.
                let _ = tx.send(match voided {
                    Some(e) => Err(e),
                    None => result,
                });
            });
            (keep, answer)
        }));
        self.jobs.send(job).map_err(|_| StoreError::WriterGone)?;
        rx.await.map_err(|_| StoreError::WriterGone)?
    }

    /// Runs `f` on the writer thread and awaits its result.
    ///
    /// Cancellation: once this future has been polled the job is queued; dropping
    /// the future does not unqueue it, so the write may still commit (and publish).
    pub(crate) async fn run<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection) -> Result<T, DbError> + Send + 'static,
    {
        let (tx, rx) = oneshot::channel();
        let job = Job::Other(Box::new(move |conn| {
            // The caller may be gone (future dropped); the result is then discarded.
            let _ = tx.send(f(conn).map_err(StoreError::from));
        }));
        self.jobs.send(job).map_err(|_| StoreError::WriterGone)?;
        rx.await.map_err(|_| StoreError::WriterGone)?
    }
}

/// One member of a group commit: an append (its fences, its row guard, its events and
/// who waits for it) or a small write.
enum Member {
    Append(Append),
    Small(SmallWrite),
}

/// One queued append of a group.
struct Append {
    /// Leases the append is fenced by (SCALE-04).
    fences: Vec<Lease>,
    /// Its compare-and-set guard, if any.
    guard: Option<RowGuard>,
    /// Its events, in order.
    events: Vec<Ready>,
    /// Who waits for its outcome.
    reply: WriteReply,
}

/// Group commit: `first` and the appends and small writes already queued behind it (up
/// to [`GROUP`]) share one transaction (one savepoint each); a job of another kind met
/// on the way is left in `next`, to run after the group.
fn grouped(
    conn: &mut Connection,
    rx: &mpsc::Receiver<Job>,
    next: &mut Option<Job>,
    first: Member,
    live: &broadcast::Sender<StoredEvent>,
) -> std::thread::Result<()> {
    let mut group = vec![first];
    while group.len() < GROUP {
        match rx.try_recv() {
            Ok(Job::Write {
                fences,
                guard,
                events,
                reply,
            }) => group.push(Member::Append(Append {
                fences,
                guard,
                events,
                reply,
            })),
            Ok(Job::Small(f)) => group.push(Member::Small(f)),
            Ok(other) => {
                *next = Some(other);
                break;
            }
            Err(_) => break,
        }
    }
    std::panic::catch_unwind(AssertUnwindSafe(|| write_group(conn, group, live)))
}

/// How a member of a group is answered once the group's outcome is known.
enum Answer {
    Append(Result<Option<Vec<StoredEvent>>, StoreError>, WriteReply),
    Small(SmallAnswer),
}

impl Member {
    /// Answers a member that did not run with the error that voided its group.
    fn void(self, error: StoreError) {
        match self {
            Member::Append(append) => {
                let _ = append.reply.send(Err(error));
            }
            Member::Small(f) => f(None).1(Some(error)),
        }
    }
}

impl Answer {
    /// Answers with the error that voided the whole group.
    fn void(self, error: StoreError) {
        match self {
            Answer::Append(_, reply) => {
                let _ = reply.send(Err(error));
            }
            Answer::Small(answer) => answer(Some(error)),
        }
    }
}

/// Runs a group of appends and small writes in ONE `BEGIN IMMEDIATE` transaction, each
/// atomic on its own (a failed guard or an error undoes that member only), commits,
/// then publishes the stored events in order and answers every caller. A failed
/// COMMIT answers every caller with the error (nothing was written).
///
/// The small writes run first, each in its own savepoint (it may decide to roll back
/// what it ran); then the appends, in their queue order, share one ([`append_run`]).
fn write_group(conn: &mut Connection, group: Vec<Member>, live: &broadcast::Sender<StoredEvent>) {
    let mut tx = match conn.transaction_with_behavior(TransactionBehavior::Immediate) {
        Ok(tx) => tx,
        Err(e) => {
            for member in group {
                member.void(group_error(&e));
            }
            return;
        }
    };
    // The group's search rows are written together before COMMIT (search_queue.rs).
    let _search = search_queue::Queue::begin();
    let mut answers: Vec<Answer> = Vec::with_capacity(group.len());
    // The small writes first, then every append as one run: the members come from
    // concurrent callers (none waits for another's member), so any order is one they
    // could have had; and a savepoint opened after an append wrote search rows would
    // make the search index flush them (LIVE-07).
    let (small, appends): (Vec<Member>, Vec<Member>) = group
        .into_iter()
        .partition(|m| matches!(m, Member::Small(_)));
    let mut rest = small.into_iter().chain(appends).peekable();
    while let Some(member) = rest.next() {
        let outcomes = match member {
            Member::Append(append) => {
                let mut run = vec![append];
                while let Some(Member::Append(next)) =
                    rest.next_if(|m| matches!(m, Member::Append(_)))
                {
                    run.push(next);
                }
                append_run(&mut tx, run)
            }
            Member::Small(f) => vec![small_in_savepoint(&mut tx, f)],
        };
        let mut outcomes = outcomes.into_iter();
        while let Some((answer, failed)) = outcomes.next() {
            if failed.is_some() && tx.is_autocommit() {
                // SQLite rolled the whole transaction back (a full disk, an I/O
                // error): nothing of the group is written. This member gets its error;
                // every other member of the group is refused the same way (a full disk
                // stays `Full`).
                let (full, message) = failed.unwrap_or_default();
                match answer {
                    Answer::Append(result, reply) => {
                        let _ = reply.send(result);
                    }
                    Answer::Small(answer) => answer(Some(void_error(full, &message))),
                }
                for other in answers.into_iter().chain(outcomes.map(|(a, _)| a)) {
                    other.void(void_error(full, &message));
                }
                for member in rest {
                    member.void(void_error(full, &message));
                }
                return;
            }
            answers.push(answer);
        }
    }
    if let Err(e) = search_queue::flush(&tx) {
        // Nothing of the group is written (the transaction rolls back when dropped).
        let (full, message) = failed_of(&e);
        for answer in answers {
            answer.void(void_error(full, &message));
        }
        return;
    }
    if let Err(e) = tx.commit() {
        for answer in answers {
            answer.void(group_error(&e));
        }
        return;
    }
    // Published only after COMMIT, from the single writer thread, so the live feed
    // is in sequence order and never shows an event a reader could not find.
    for answer in &answers {
        if let Answer::Append(Ok(Some(stored)), _) = answer {
            for ev in stored {
                // An error only means nobody is subscribed right now.
                let _ = live.send(ev.clone());
            }
        }
    }
    for answer in answers {
        match answer {
            // The caller may be gone (future dropped); the result is then discarded.
            Answer::Append(result, reply) => {
                let _ = reply.send(result);
            }
            Answer::Small(answer) => answer(None),
        }
    }
}

/// A member's answer, and whether it failed with an error (`(disk full, message)`):
/// the group checks then whether SQLite rolled the whole transaction back.
type Outcome = (Answer, Option<(bool, String)>);

/// Writes a run of consecutive appends inside ONE savepoint instead of one each
/// (LIVE-07: a savepoint per append journals every page it touches again, and makes
/// the search index flush its pending rows). A failed guard or fence writes nothing, so
/// the shared savepoint is only rolled back when an append fails with an error after it
/// wrote (a duplicate event id, a project root taken): then the run is written again
/// with one savepoint per append ([`append_in_savepoint`]), which undoes that append
/// alone. Outcomes are in the run's order, except that when SQLite rolled the whole
/// transaction back the failing append comes first (the group voids the others).
fn append_run(tx: &mut rusqlite::Transaction<'_>, run: Vec<Append>) -> Vec<Outcome> {
    if run.len() == 1 {
        return run
            .into_iter()
            .map(|append| append_in_savepoint(tx, append))
            .collect();
    }
    let mut sp = match tx.savepoint() {
        Ok(sp) => sp,
        Err(e) => {
            let failed = Some(sqlite_failed(&e));
            let error = group_error(&e);
            let mut run = run.into_iter();
            let mut outcomes = Vec::new();
            if let Some(first) = run.next() {
                outcomes.push((Answer::Append(Err(error), first.reply), failed));
            }
            for append in run {
                outcomes.push((Answer::Append(Err(group_error(&e)), append.reply), None));
            }
            return outcomes;
        }
    };
    let search_mark = search_queue::mark();
    let mut done: Vec<(Append, Option<Vec<StoredEvent>>)> = Vec::with_capacity(run.len());
    let mut run = run.into_iter();
    while let Some(mut append) = run.next() {
        let events = std::mem::take(&mut append.events);
        match append_checked(&sp, &append.fences, append.guard.as_ref(), events) {
            Ok(Tried::Stored(stored)) => done.push((append, Some(stored))),
            Ok(Tried::Skipped(events)) => {
                append.events = events;
                done.push((append, None));
            }
            Err((error, events)) => {
                append.events = events;
                // Undo the run, then write it again one savepoint per append.
                let _ = sp.rollback();
                drop(sp);
                search_queue::undo_to(search_mark);
                let mut again: Vec<Append> = done
                    .into_iter()
                    .map(|(mut append, stored)| {
                        if let Some(stored) = stored {
                            append.events =
                                stored.into_iter().map(|s| Ready::again(s.event)).collect();
                        }
                        append
                    })
                    .collect();
                if tx.is_autocommit() {
                    // Nothing of the group is written: this append's error first.
                    let failed = Some(failed_of(&error));
                    let mut outcomes = vec![(
                        Answer::Append(Err(StoreError::from(error)), append.reply),
                        failed,
                    )];
                    // The others' answers are replaced by the group's error.
                    for other in again.into_iter().chain(run) {
                        outcomes.push((Answer::Append(Ok(None), other.reply), None));
                    }
                    return outcomes;
                }
                again.push(append);
                again.extend(run);
                return again
                    .into_iter()
                    .map(|append| append_in_savepoint(tx, append))
                    .collect();
            }
        }
    }
    if let Err(e) = sp.commit() {
        // The savepoint is rolled back as it drops: so are the run's search rows.
        search_queue::undo_to(search_mark);
        let failed = Some(sqlite_failed(&e));
        let mut outcomes = Vec::new();
        for (n, (append, _)) in done.into_iter().enumerate() {
            let error = group_error(&e);
            outcomes.push((
                Answer::Append(Err(error), append.reply),
                if n == 0 { failed.clone() } else { None },
            ));
        }
        return outcomes;
    }
    done.into_iter()
        .map(|(append, stored)| (Answer::Append(Ok(stored), append.reply), None))
        .collect()
}

/// `(disk full, message)` of an append's error.
fn failed_of(error: &DbError) -> (bool, String) {
    match error {
        DbError::Sqlite(e) => sqlite_failed(e),
        DbError::Store(e) => (e.is_disk_full(), e.to_string()),
    }
}

/// `(disk full, message)` of a SQLite error.
fn sqlite_failed(e: &rusqlite::Error) -> (bool, String) {
    (
        e.sqlite_error_code() == Some(rusqlite::ErrorCode::DiskFull),
        e.to_string(),
    )
}

/// Writes one append inside its own savepoint: an error undoes that append only.
fn append_in_savepoint(tx: &mut rusqlite::Transaction<'_>, append: Append) -> Outcome {
    let Append {
        fences,
        guard,
        events,
        reply,
    } = append;
    let search_mark = search_queue::mark();
    let result = tx.savepoint().map_err(DbError::from).and_then(|sp| {
        match append_checked(&sp, &fences, guard.as_ref(), events) {
            Ok(Tried::Stored(stored)) => {
                sp.commit()?;
                Ok(Some(stored))
            }
            // Nothing was written; dropping the savepoint rolls it back.
            Ok(Tried::Skipped(_)) => Ok(None),
            Err((e, _)) => Err(e),
        }
    });
    if !matches!(result, Ok(Some(_))) {
        // Rolled back: so are the search rows it queued.
        search_queue::undo_to(search_mark);
    }
    let failed = result.as_ref().err().map(failed_of);
    (
        Answer::Append(result.map_err(StoreError::from), reply),
        failed,
    )
}

/// Runs one small write inside its own savepoint, kept or rolled back as it says.
fn small_in_savepoint(tx: &mut rusqlite::Transaction<'_>, f: SmallWrite) -> Outcome {
    match tx.savepoint() {
        Ok(mut sp) => {
            let search_mark = search_queue::mark();
            let (keep, answer) = f(Some(&sp));
            let kept = if keep {
                sp.commit().map_err(|e| (false, e.to_string()))
            } else {
                search_queue::undo_to(search_mark);
                sp.rollback().map_err(|e| (false, e.to_string()))
            };
            (Answer::Small(answer), kept.err())
        }
        Err(e) => {
            let (full, message) = sqlite_failed(&e);
            let error = void_error(full, &message);
            (
                Answer::Small(Box::new(move |_| f(None).1(Some(error)))),
                Some((full, message)),
            )
        }
    }
}

/// The error of a whole group's transaction, for each of its callers (a full disk
/// stays [`StoreError::Full`], SEC-07).
fn group_error(e: &rusqlite::Error) -> StoreError {
    let (full, message) = sqlite_failed(e);
    void_error(full, &message)
}

/// The error of an append whose group transaction failed: `Full` when the disk is.
fn void_error(full: bool, message: &str) -> StoreError {
    let source = message.to_owned().into();
    if full {
        return StoreError::Full {
            backend: "SQLite",
            source,
        };
    }
    StoreError::Database {
        backend: "SQLite",
        hint: crate::error::SQLITE_HINT,
        source,
    }
}

/// What [`append_checked`] did with an append whose checks ran.
enum Tried {
    /// Written (not committed yet): the events with their sequences.
    Stored(Vec<StoredEvent>),
    /// The guard failed: nothing written; the events back.
    Skipped(Vec<Ready>),
}

/// Inside the current transaction (or savepoint): checks `fences` (SCALE-04: a lease
/// this node no longer holds refuses the append with `Fenced`) and `guard`, appends
/// `events` and folds each. A failed guard writes nothing ([`Tried::Skipped`]). An
/// error gives the events back with it (what was written of them is the caller's to
/// roll back), so the append can be written again.
fn append_checked(
    tx: &Connection,
    fences: &[Lease],
    guard: Option<&RowGuard>,
    events: Vec<Ready>,
) -> Result<Tried, (DbError, Vec<Ready>)> {
    for lease in fences {
        // Fencing (SCALE-04): under the write lock, so no takeover lands before COMMIT.
        if let Err(e) = crate::leases::check_fence(tx, lease) {
            return Err((e, events));
        }
    }
    if let Some(guard) = guard {
        // Compare-and-set (MGR-47): the version is re-read under the write lock, so no
        // other write can land between this check and the commit.
        let current = match read_version(tx, guard.kind.table(), &guard.id) {
            Ok(current) => current,
            Err(e) => return Err((e, events)),
        };
        if current != guard.expected_version {
            tracing::debug!(
                kind = ?guard.kind, id = %guard.id, expected = ?guard.expected_version,
                ?current, "compare-and-set write skipped: the row moved"
            );
            return Ok(Tried::Skipped(events));
        }
    }
    let mut stored: Vec<StoredEvent> = Vec::with_capacity(events.len());
    let mut events = events.into_iter();
    while let Some(ready) = events.next() {
        let Ready {
            event,
            payload,
            plan,
        } = ready;
        let failed = match append_event(tx, &event, payload) {
            Ok(sequence) => {
                let ev = StoredEvent { sequence, event };
                match apply_planned(tx, &ev, plan, FoldMode::Write) {
                    Ok(()) => {
                        stored.push(ev);
                        continue;
                    }
                    Err(e) => (e, ev.event),
                }
            }
            Err(e) => (e, event),
        };
        let (error, event) = failed;
        let back = stored
            .into_iter()
            .map(|s| Ready::again(s.event))
            .chain(std::iter::once(Ready::again(event)))
            .chain(events)
            .collect();
        return Err((error, back));
    }
    Ok(Tried::Stored(stored))
}

/// An event on its way to the writer thread, with its payload JSON and its fold plan
/// ([`knife_store::fold::plan`]) computed by the caller, off the one writer thread
/// (LIVE-07). `None`: computed by the writer (an append written again after its run
/// was undone).
pub(crate) struct Ready {
    event: DomainEvent,
    payload: Option<Encoded>,
    plan: Option<Vec<knife_store::fold::RowChange>>,
}

impl Ready {
    /// Encodes `event` and plans its fold. Errors: [`StoreError::Serde`].
    fn prepare(event: DomainEvent) -> Result<Ready, StoreError> {
        Ok(Ready {
            payload: Some(Encoded::of(&event)?),
            plan: Some(knife_store::fold::plan(&event)?),
            event,
        })
    }

    /// `event` to be written again: encoded and planned by the writer.
    fn again(event: DomainEvent) -> Ready {
        Ready {
            event,
            payload: None,
            plan: None,
        }
    }
}

/// The body of `rebuild`: in one transaction, empties the projections and folds every
/// event in sequence order through [`apply_event`]. Returns the number of events.
pub(crate) fn rebuild_projections(conn: &mut Connection) -> Result<u64, DbError> {
    const PAGE: i64 = 1024;
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    clear_projections(&tx)?;
    let mut after = 0_i64;
    let mut count = 0_u64;
    loop {
        let page: Vec<(i64, String)> = tx
            .prepare_cached(
                "SELECT sequence, payload_json FROM events WHERE sequence > ?1 \
                 ORDER BY sequence LIMIT ?2",
            )?
            .query_map([after, PAGE], |row| Ok((row.get(0)?, row.get(1)?)))?
            .collect::<Result<_, _>>()?;
        let Some(last) = page.last().map(|p| p.0) else {
            break;
        };
        for (sequence, payload) in &page {
            let event: DomainEvent = serde_json::from_str(payload)?;
            apply_event(
                &tx,
                &StoredEvent {
                    sequence: seq_u64(*sequence),
                    event,
                },
                FoldMode::Rebuild,
            )?;
            count += 1;
        }
        after = last;
    }
    tx.commit()?;
    Ok(count)
}

/// `PRAGMA wal_checkpoint(TRUNCATE)`: copies every committed WAL frame into the
/// database file and truncates the WAL to zero bytes. Returns whether it completed; a
/// checkpoint blocked by a reader (busy) or refused by a full disk is retried at the
/// next idle moment and only logged (SPEC.md SEC-07).
pub(crate) fn checkpoint_truncate(conn: &Connection) -> bool {
    // Row: (busy, frames in the WAL, frames checkpointed); busy = 1 when a reader or
    // writer kept it from finishing.
    match conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |row| {
        row.get::<_, i64>(0)
    }) {
        Ok(0) => true,
        Ok(_) => {
            tracing::debug!("WAL checkpoint blocked by a reader; retrying when idle");
            false
        }
        Err(e) => {
            tracing::warn!(error = %e, "cannot checkpoint the WAL (is the disk full?); retrying when idle");
            false
        }
    }
}

#[cfg(test)]
#[path = "writer_tests.rs"]
mod tests;
