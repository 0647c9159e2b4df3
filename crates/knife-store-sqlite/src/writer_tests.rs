//! Unit tests of the group commit's runs of appends (LIVE-07): one savepoint per run,
//! and the fallback to one savepoint per append when an append fails after it wrote.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;
use knife_protocol::EventBody;
use knife_store::EntityKind;
use knife_store::contract::fixtures::{ev, run, thread};

/// A migrated writer connection on a fresh file (keep the TempDir alive).
fn writer() -> (tempfile::TempDir, Connection) {
    let dir = tempfile::tempdir().unwrap();
    let conn = crate::schema::open_writer(&dir.path().join("knife.db")).unwrap();
    (dir, conn)
}

type Reply = oneshot::Receiver<Result<Option<Vec<StoredEvent>>, StoreError>>;

fn append(guard: Option<RowGuard>, events: Vec<DomainEvent>) -> (Member, Reply) {
    let (reply, answer) = oneshot::channel();
    let member = Member::Append(Append {
        fences: Vec::new(),
        guard,
        events: events
            .into_iter()
            .map(|e| Ready::prepare(e).unwrap())
            .collect(),
        reply,
    });
    (member, answer)
}

fn sequences(conn: &Connection) -> Vec<(i64, String)> {
    conn.prepare("SELECT sequence, event_id FROM events ORDER BY sequence")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

/// One group: a plain append, a stale guard, an append whose second event is a
/// duplicate (its first event was written when the duplicate failed), and another
/// plain append. The shared savepoint is undone and the run written again one
/// savepoint per append: the duplicate's append alone fails, nothing of it stays, the
/// others commit gap-free and are published in order.
#[test]
fn live_07_a_run_of_appends_shares_a_savepoint_and_an_error_undoes_only_its_append() {
    let (_dir, mut conn) = writer();
    let (live, mut feed) = broadcast::channel(64);
    let dup = ev(EventBody::ThreadCreated(thread("dup", "p1", 1)));
    let (first, _) = append(None, vec![dup.clone()]);
    write_group(&mut conn, vec![first], &live);
    let _ = feed.try_recv();
    let before = sequences(&conn).len();

    let (a, a_reply) = append(
        None,
        vec![
            ev(EventBody::ThreadCreated(thread("a", "p1", 1))),
            ev(EventBody::RunCreated(run(
                "a",
                1,
                knife_protocol::RunStatus::Running,
            ))),
        ],
    );
    let (b, b_reply) = append(
        Some(RowGuard::new(EntityKind::Thread, "dup", Some(99))),
        vec![ev(EventBody::ThreadCreated(thread("b", "p1", 1)))],
    );
    let c_first = ev(EventBody::ThreadCreated(thread("c", "p1", 1)));
    let (c, c_reply) = append(None, vec![c_first.clone(), dup]);
    let (d, d_reply) = append(
        None,
        vec![ev(EventBody::ThreadCreated(thread("d", "p1", 1)))],
    );
    write_group(&mut conn, vec![a, b, c, d], &live);

    let a_stored = a_reply.blocking_recv().unwrap().unwrap().unwrap();
    assert_eq!(a_stored.len(), 2);
    assert!(
        b_reply.blocking_recv().unwrap().unwrap().is_none(),
        "stale guard"
    );
    assert!(matches!(
        c_reply.blocking_recv().unwrap(),
        Err(StoreError::DuplicateEvent { .. })
    ));
    let d_stored = d_reply.blocking_recv().unwrap().unwrap().unwrap();
    let rows = sequences(&conn);
    assert_eq!(rows.len(), before + 3, "a's two events and d's: {rows:?}");
    assert!(
        rows.iter().all(|(_, id)| id != c_first.id.as_str()),
        "nothing of the failed append stays: {rows:?}"
    );
    assert!(
        rows.windows(2).all(|w| w[1].0 == w[0].0 + 1),
        "gap-free: {rows:?}"
    );
    let stored: Vec<u64> = a_stored
        .iter()
        .chain(&d_stored)
        .map(|e| e.sequence)
        .collect();
    let published: Vec<u64> = std::iter::from_fn(|| feed.try_recv().ok())
        .map(|e| e.sequence)
        .collect();
    assert_eq!(published, stored, "published after COMMIT, in order");
    assert!(
        crate::fold::read_version(&conn, "threads", "c")
            .unwrap()
            .is_none()
    );
    assert!(
        crate::fold::read_version(&conn, "threads", "d")
            .unwrap()
            .is_some()
    );
}

/// A run with no error keeps every append's outcome: guards are checked against the
/// writes of the appends before them in the same run.
#[test]
fn live_07_appends_of_one_run_see_the_writes_before_them() {
    let (_dir, mut conn) = writer();
    let (live, _feed) = broadcast::channel(64);
    let (a, a_reply) = append(
        None,
        vec![ev(EventBody::ThreadCreated(thread("t", "p1", 1)))],
    );
    // Expects the version a's write gives the row (1): holds inside the same run.
    let (b, b_reply) = append(
        Some(RowGuard::new(EntityKind::Thread, "t", Some(1))),
        vec![ev(EventBody::ThreadUpdated(thread("t", "p1", 2)))],
    );
    // Expects the row absent: a stale guard, nothing written.
    let (c, c_reply) = append(
        Some(RowGuard::new(EntityKind::Thread, "t", None)),
        vec![ev(EventBody::ThreadUpdated(thread("t", "p1", 3)))],
    );
    write_group(&mut conn, vec![a, b, c], &live);
    assert_eq!(a_reply.blocking_recv().unwrap().unwrap().unwrap().len(), 1);
    assert_eq!(b_reply.blocking_recv().unwrap().unwrap().unwrap().len(), 1);
    assert!(c_reply.blocking_recv().unwrap().unwrap().is_none());
    assert_eq!(sequences(&conn).len(), 2);
    assert_eq!(
        crate::fold::read_version(&conn, "threads", "t").unwrap(),
        Some(2)
    );
}

/// A small write that rolls itself back undoes only its own statements, wherever it was
/// queued among the appends (the group runs the small writes first, then the appends
/// in their queue order as one run), and the appends' sequences follow their order.
#[test]
fn live_07_a_small_write_queued_between_appends_rolls_back_alone() {
    let (_dir, mut conn) = writer();
    conn.execute_batch("CREATE TABLE scratch (x INTEGER)")
        .unwrap();
    let (live, _feed) = broadcast::channel(64);
    let small = |x: i64, keep: bool| {
        let (tx, rx) = oneshot::channel::<Option<StoreError>>();
        let member = Member::Small(Box::new(move |conn: Option<&Connection>| {
            conn.unwrap()
                .execute("INSERT INTO scratch VALUES (?1)", [x])
                .unwrap();
            let answer: SmallAnswer = Box::new(move |voided| {
                let _ = tx.send(voided);
            });
            (keep, answer)
        }));
        (member, rx)
    };
    let (a, a_reply) = append(
        None,
        vec![ev(EventBody::ThreadCreated(thread("a", "p1", 1)))],
    );
    let (kept, kept_reply) = small(1, true);
    let (undone, undone_reply) = small(2, false);
    let (b, b_reply) = append(
        None,
        vec![ev(EventBody::ThreadCreated(thread("b", "p1", 1)))],
    );
    write_group(&mut conn, vec![a, kept, undone, b], &live);
    let a = a_reply.blocking_recv().unwrap().unwrap().unwrap();
    let b = b_reply.blocking_recv().unwrap().unwrap().unwrap();
    assert!(
        a[0].sequence < b[0].sequence,
        "appends keep their queue order"
    );
    assert!(kept_reply.blocking_recv().unwrap().is_none());
    assert!(undone_reply.blocking_recv().unwrap().is_none());
    let rows: Vec<i64> = conn
        .prepare("SELECT x FROM scratch")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(rows, vec![1], "the rolled-back small write left nothing");
    assert_eq!(sequences(&conn).len(), 2);
}

fn search_ids(conn: &Connection) -> Vec<String> {
    conn.prepare("SELECT id FROM search_docs ORDER BY id")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

fn fts_matches(conn: &Connection, word: &str) -> i64 {
    conn.query_row(
        "SELECT count(*) FROM search_fts WHERE search_fts MATCH ?1",
        [word],
        |r| r.get(0),
    )
    .unwrap()
}

/// The search rows of a group are written just before its COMMIT (search_queue.rs):
/// those of an append that failed are dropped with it, a thread deleted later in the
/// same group takes its rows with it, and the rest are indexed.
#[test]
fn live_07_search_rows_queued_in_a_group_follow_their_appends() {
    use knife_store::contract::fixtures::turn_item;
    let (_dir, mut conn) = writer();
    let (live, _feed) = broadcast::channel(64);
    let dup = ev(EventBody::ThreadCreated(thread("dup", "p1", 1)));
    let (first, _) = append(None, vec![dup.clone()]);
    write_group(&mut conn, vec![first], &live);

    let (kept, kept_reply) = append(
        None,
        vec![
            ev(EventBody::ThreadCreated(thread("a", "p1", 1))),
            ev(EventBody::TurnItemUpdated(turn_item(
                "a",
                1,
                1,
                "alphaword",
            ))),
        ],
    );
    let (failed, failed_reply) = append(
        None,
        vec![
            ev(EventBody::ThreadCreated(thread("b", "p1", 1))),
            ev(EventBody::TurnItemUpdated(turn_item("b", 1, 1, "betaword"))),
            dup,
        ],
    );
    let (gone, gone_reply) = append(
        None,
        vec![
            ev(EventBody::ThreadCreated(thread("c", "p1", 1))),
            ev(EventBody::TurnItemUpdated(turn_item(
                "c",
                1,
                1,
                "gammaword",
            ))),
        ],
    );
    let (deleted, deleted_reply) = append(
        None,
        vec![ev(EventBody::ThreadDeleted {
            thread_id: knife_protocol::ThreadId::from("c"),
            deleted_at: knife_store::contract::fixtures::ts(2),
        })],
    );
    write_group(&mut conn, vec![kept, failed, gone, deleted], &live);
    assert!(kept_reply.blocking_recv().unwrap().unwrap().is_some());
    assert!(failed_reply.blocking_recv().unwrap().is_err());
    assert!(gone_reply.blocking_recv().unwrap().unwrap().is_some());
    assert!(deleted_reply.blocking_recv().unwrap().unwrap().is_some());
    assert_eq!(fts_matches(&conn, "alphaword"), 1);
    assert_eq!(fts_matches(&conn, "betaword"), 0, "its append failed");
    assert_eq!(fts_matches(&conn, "gammaword"), 0, "its thread was deleted");
    let ids = search_ids(&conn);
    assert!(
        ids.iter().all(|id| !id.contains(":b:")
            && !id.contains(":c:")
            && !id.ends_with(":b")
            && !id.ends_with(":c")),
        "{ids:?}"
    );
}
