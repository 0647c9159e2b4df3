// Store tests: write/read round trips, projections and queries, compare-and-set
// writes, rollback on error, latest_sequence, reopening, and open errors.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use knife_protocol::*;
use knife_store::{EntityKind, RowGuard, StoreError, StreamFilter};

#[tokio::test]
async fn write_returns_consecutive_sequences_and_reads_return_the_exact_events() {
    let (_dir, store) = temp_store().await;
    assert_eq!(store.latest_sequence(None).await.unwrap(), 0);
    let events = vec![
        ev(EventBody::ProjectCreated(project("p1", 1))),
        ev(EventBody::ThreadCreated(thread("t1", "p1", 1))),
        ev(EventBody::RunCreated(run("t1", 1, RunStatus::Queued))),
    ];
    let stored = store.write(events.clone()).await.unwrap();
    assert_eq!(
        stored.iter().map(|e| e.sequence).collect::<Vec<_>>(),
        vec![1, 2, 3]
    );
    assert_eq!(
        stored.iter().map(|e| e.event.clone()).collect::<Vec<_>>(),
        events
    );
    assert_eq!(
        store
            .read_events(&StreamFilter::after(0), 100)
            .await
            .unwrap(),
        stored
    );
    assert_eq!(
        store.read_events(&StreamFilter::after(1), 1).await.unwrap(),
        stored[1..2]
    );
    assert!(store.write(Vec::new()).await.unwrap().is_empty());
}

#[tokio::test]
async fn latest_sequence_is_global_and_per_thread() {
    let (_dir, store) = temp_store().await;
    store
        .write(vec![ev(EventBody::ProjectCreated(project("p1", 1)))])
        .await
        .unwrap();
    store
        .write(vec![
            ev(EventBody::ThreadCreated(thread("a", "p1", 1))),
            ev(EventBody::ThreadCreated(thread("b", "p1", 1))),
            ev(EventBody::RunCreated(run("a", 1, RunStatus::Running))),
        ])
        .await
        .unwrap();
    store
        .write(vec![ev(EventBody::ProjectUpdated(project("p1", 2)))])
        .await
        .unwrap();
    assert_eq!(store.latest_sequence(None).await.unwrap(), 5);
    assert_eq!(
        store
            .latest_sequence(Some(&ThreadId::from("a")))
            .await
            .unwrap(),
        4
    );
    assert_eq!(
        store
            .latest_sequence(Some(&ThreadId::from("b")))
            .await
            .unwrap(),
        3
    );
    assert_eq!(
        store
            .latest_sequence(Some(&ThreadId::from("zzz")))
            .await
            .unwrap(),
        0
    );
    let proj = store
        .thread_projection(&ThreadId::from("a"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(proj.latest_sequence, 4);
}

#[tokio::test]
async fn projections_upsert_by_id_bump_versions_and_answer_queries() {
    let (_dir, store) = temp_store().await;
    let t = ThreadId::from("t1");
    store
        .write(vec![
            ev(EventBody::ProjectCreated(project("p1", 1))),
            ev(EventBody::ProjectCreated(project("p2", 1))),
            ev(EventBody::ThreadCreated(thread("t1", "p1", 10))),
            ev(EventBody::ThreadCreated(thread("t2", "p1", 30))),
            ev(EventBody::ThreadCreated(thread("t3", "p2", 20))),
            ev(EventBody::RunCreated(run("t1", 2, RunStatus::Queued))),
            ev(EventBody::RunCreated(run("t1", 1, RunStatus::Queued))),
            ev(EventBody::TurnItemUpdated(turn_item(
                "t1",
                2,
                0,
                "second run",
            ))),
            ev(EventBody::TurnItemUpdated(turn_item("t1", 1, 1, "answer"))),
            ev(EventBody::TurnItemUpdated(turn_item(
                "t1", 1, 0, "question",
            ))),
            ev(EventBody::NodeUpdated(node(
                "t1",
                1,
                0,
                NodeStatus::Running,
            ))),
            ev(EventBody::ProviderThreadUpdated(provider_thread(
                "pt1",
                "t1",
                Some(1),
            ))),
            ev(EventBody::ProviderTurnUpdated(provider_turn(
                "t1",
                1,
                1,
                ProviderTurnStatus::Running,
            ))),
            ev(EventBody::RuntimeRequestUpdated(runtime_request(
                "rq1",
                "t1",
                RuntimeRequestStatus::Pending,
            ))),
        ])
        .await
        .unwrap();
    // Upserts: last write wins, version +1.
    let run1 = RunId::for_thread(&t, 1);
    assert_eq!(
        store
            .row_version(EntityKind::Run, run1.as_str())
            .await
            .unwrap(),
        Some(1)
    );
    store
        .write(vec![ev(EventBody::RunUpdated(run(
            "t1",
            1,
            RunStatus::Completed,
        )))])
        .await
        .unwrap();
    assert_eq!(
        store
            .row_version(EntityKind::Run, run1.as_str())
            .await
            .unwrap(),
        Some(2)
    );
    assert_eq!(
        store.get_run(&run1).await.unwrap().unwrap().status,
        RunStatus::Completed
    );
    assert_eq!(
        store.row_version(EntityKind::Run, "nope").await.unwrap(),
        None
    );
    store
        .write(vec![ev(EventBody::ThreadUpdated(thread("t1", "p1", 40)))])
        .await
        .unwrap();

    // Lists.
    let ids = |ts: Vec<Thread>| ts.into_iter().map(|t| t.id.0).collect::<Vec<_>>();
    assert_eq!(
        ids(store.list_threads(None).await.unwrap()),
        ["t1", "t2", "t3"]
    );
    assert_eq!(
        ids(store
            .list_threads(Some(&ProjectId::from("p1")))
            .await
            .unwrap()),
        ["t1", "t2"]
    );
    assert_eq!(store.list_projects().await.unwrap().len(), 2);
    assert_eq!(
        store.get_project(&ProjectId::from("p2")).await.unwrap(),
        Some(project("p2", 1))
    );
    assert_eq!(
        store.get_thread(&t).await.unwrap(),
        Some(thread("t1", "p1", 40))
    );
    assert_eq!(
        store.get_thread(&ThreadId::from("none")).await.unwrap(),
        None
    );
    assert!(
        store
            .get_provider_thread(&ProviderThreadId::from("pt1"))
            .await
            .unwrap()
            .is_some()
    );
    let rq = store
        .get_runtime_request(&RuntimeRequestId::from("rq1"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(rq.status, RuntimeRequestStatus::Pending);
    let item = turn_item("t1", 1, 1, "answer");
    assert_eq!(store.get_turn_item(&item.id).await.unwrap(), Some(item));

    // The thread projection: runs and turn items by ordinal.
    let p = store.thread_projection(&t).await.unwrap().unwrap();
    assert_eq!(p.thread.updated_at, ts(40));
    assert_eq!(p.runs.iter().map(|r| r.ordinal).collect::<Vec<_>>(), [1, 2]);
    let texts: Vec<&str> = p
        .turn_items
        .iter()
        .map(|i| match &i.kind {
            TurnItemKind::AssistantMessage { text, .. } => text.as_str(),
            _ => "",
        })
        .collect();
    assert_eq!(texts, ["question", "answer", "second run"]);
    assert_eq!(p.nodes.len(), 1);
    assert_eq!(p.provider_threads.len(), 1);
    assert_eq!(p.provider_turns.len(), 1);
    assert_eq!(p.runtime_requests.len(), 1);
    assert!(p.provider_sessions.is_empty());
    assert_eq!(
        p.latest_sequence,
        store.latest_sequence(Some(&t)).await.unwrap()
    );
    assert!(
        store
            .thread_projection(&ThreadId::from("none"))
            .await
            .unwrap()
            .is_none()
    );
}

#[tokio::test]
async fn provider_sessions_bind_on_attach_only_and_unbind_on_detach() {
    let (_dir, store) = temp_store().await;
    let s = ProviderSessionId::from("s1");
    store
        .write(vec![
            ev(EventBody::ThreadCreated(thread("a", "p", 1))),
            ev(EventBody::ThreadCreated(thread("b", "p", 1))),
            ev_on(
                "a",
                EventBody::ProviderSessionAttached(session("s1", SessionStatus::Starting)),
            ),
            // An update on thread b does not bind the session to b.
            ev_on(
                "b",
                EventBody::ProviderSessionUpdated(session("s1", SessionStatus::Ready)),
            ),
        ])
        .await
        .unwrap();
    let sessions = |t: &'static str| {
        let store = store.clone();
        async move {
            store
                .thread_projection(&ThreadId::from(t))
                .await
                .unwrap()
                .unwrap()
                .provider_sessions
        }
    };
    let a = sessions("a").await;
    assert_eq!(a.len(), 1);
    assert_eq!(
        a[0].status,
        SessionStatus::Ready,
        "bound threads see the latest snapshot"
    );
    assert!(sessions("b").await.is_empty());
    store
        .write(vec![ev_on(
            "b",
            EventBody::ProviderSessionAttached(session("s1", SessionStatus::Running)),
        )])
        .await
        .unwrap();
    assert_eq!(sessions("b").await.len(), 1);
    store
        .write(vec![ev_on(
            "a",
            EventBody::ProviderSessionDetached {
                provider_session_id: s.clone(),
                detached_at: ts(9),
                reason: None,
            },
        )])
        .await
        .unwrap();
    assert!(
        sessions("a").await.is_empty(),
        "detach removes only a's binding"
    );
    assert_eq!(sessions("b").await.len(), 1);
    // The session row itself stays, with version = number of upserts.
    assert_eq!(
        store
            .get_provider_session(&s)
            .await
            .unwrap()
            .unwrap()
            .status,
        SessionStatus::Running
    );
    assert_eq!(
        store
            .row_version(EntityKind::ProviderSession, "s1")
            .await
            .unwrap(),
        Some(3)
    );
    assert_eq!(store.list_provider_sessions().await.unwrap().len(), 1);
}

#[tokio::test]
async fn write_if_commits_only_when_the_guarded_row_version_matches() {
    let (_dir, store) = temp_store().await;
    let pt = "pt1";
    let guard = |v| RowGuard::new(EntityKind::ProviderThread, pt, v);
    let update = |last| {
        vec![ev(EventBody::ProviderThreadUpdated(provider_thread(
            pt, "t1", last,
        )))]
    };

    // Absent-row guard: commits when the row does not exist...
    let first = store.write_if(guard(None), update(Some(1))).await.unwrap();
    assert_eq!(first.map(|v| v.len()), Some(1));
    // ...and commits nothing once it does.
    let before = store.latest_sequence(None).await.unwrap();
    assert_eq!(
        store.write_if(guard(None), update(Some(99))).await.unwrap(),
        None
    );
    assert_eq!(store.latest_sequence(None).await.unwrap(), before);

    // A reader takes the version, someone else moves the row, the CAS write loses.
    let seen = store
        .row_version(EntityKind::ProviderThread, pt)
        .await
        .unwrap();
    assert_eq!(seen, Some(1));
    store.write(update(Some(1))).await.unwrap(); // same content, still moves the version
    let mut live = store.stream(StreamFilter::after(
        store.latest_sequence(None).await.unwrap(),
    ));
    assert_eq!(
        store.write_if(guard(seen), update(None)).await.unwrap(),
        None
    );
    let pthread = store
        .get_provider_thread(&ProviderThreadId::from(pt))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        pthread.last_run_ordinal,
        Some(1),
        "the concurrent update won"
    );
    assert_eq!(
        store
            .row_version(EntityKind::ProviderThread, pt)
            .await
            .unwrap(),
        Some(2)
    );

    // With the fresh version it commits, and only that write is published.
    let stored = store
        .write_if(guard(Some(2)), update(None))
        .await
        .unwrap()
        .unwrap();
    let next = futures::StreamExt::next(&mut live).await.unwrap().unwrap();
    assert_eq!(next, stored[0]);
    let pthread = store
        .get_provider_thread(&ProviderThreadId::from(pt))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(pthread.last_run_ordinal, None);
    assert_eq!(
        store
            .row_version(EntityKind::ProviderThread, pt)
            .await
            .unwrap(),
        Some(3)
    );
}

#[tokio::test]
async fn a_failed_write_rolls_back_the_whole_batch() {
    let (_dir, store) = temp_store().await;
    let first = ev(EventBody::ThreadCreated(thread("t1", "p", 1)));
    store.write(vec![first.clone()]).await.unwrap();
    let before = store.dump_projections().await.unwrap();
    // The second event reuses an event id: the first of the batch must not stay.
    let batch = vec![
        ev(EventBody::RunCreated(run("t1", 1, RunStatus::Queued))),
        first.clone(),
    ];
    let err = store.write(batch).await.unwrap_err();
    assert!(
        matches!(&err, StoreError::DuplicateEvent { event_id } if *event_id == first.id),
        "{err}"
    );
    assert!(err.to_string().contains("fresh EventId"), "{err}");
    assert_eq!(store.latest_sequence(None).await.unwrap(), 1);
    assert_eq!(store.dump_projections().await.unwrap(), before);
    assert_eq!(
        store
            .get_run(&RunId::for_thread(&ThreadId::from("t1"), 1))
            .await
            .unwrap(),
        None
    );
    // The next write continues without a gap in sequences.
    let next = store
        .write(vec![ev(EventBody::RunCreated(run(
            "t1",
            1,
            RunStatus::Queued,
        )))])
        .await
        .unwrap();
    assert_eq!(next[0].sequence, 2);
}

#[tokio::test]
async fn reopening_the_same_file_keeps_events_projections_and_sequences() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("knife.db");
    let store = knife_store_sqlite::open(&path).await.unwrap();
    let stored = store
        .write(vec![
            ev(EventBody::ProjectCreated(project("p1", 1))),
            ev(EventBody::ThreadCreated(thread("t1", "p1", 1))),
            ev(EventBody::TurnItemUpdated(turn_item("t1", 1, 0, "hi"))),
        ])
        .await
        .unwrap();
    let projections = store.dump_projections().await.unwrap();
    let version = store.schema_version().await.unwrap();
    drop(store);

    let store = knife_store_sqlite::open(&path).await.unwrap();
    assert_eq!(store.schema_version().await.unwrap(), version);
    assert_eq!(
        store
            .read_events(&StreamFilter::after(0), 100)
            .await
            .unwrap(),
        stored
    );
    assert_eq!(store.dump_projections().await.unwrap(), projections);
    let more = store
        .write(vec![ev(EventBody::ProjectUpdated(project("p1", 2)))])
        .await
        .unwrap();
    assert_eq!(more[0].sequence, 4);
    // Two handles on the same file at once also work (WAL; one writer at a time).
    let other = knife_store_sqlite::open(&path).await.unwrap();
    assert_eq!(other.latest_sequence(None).await.unwrap(), 4);
}

#[tokio::test]
async fn open_on_an_unwritable_path_says_which_path_and_what_to_do() {
    let dir = tempfile::tempdir().unwrap();
    // A regular file where the data directory should be (fails even as root).
    let blocker = dir.path().join("not-a-dir");
    std::fs::write(&blocker, b"x").unwrap();
    let err = knife_store_sqlite::open(blocker.join("data").join("knife.db"))
        .await
        .unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, StoreError::Open { .. }), "{msg}");
    assert!(msg.contains("cannot create the data directory"), "{msg}");
    assert!(
        msg.contains(&blocker.join("data").display().to_string()),
        "{msg}"
    );
    assert!(msg.contains("choose a writable --data-dir"), "{msg}");

    // A file that is not a SQLite database.
    let junk = dir.path().join("junk.db");
    std::fs::write(&junk, vec![7_u8; 4096]).unwrap();
    let err = knife_store_sqlite::open(&junk).await.unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, StoreError::Open { .. }), "{msg}");
    assert!(
        msg.contains("junk.db") && msg.contains("--data-dir"),
        "{msg}"
    );
}

#[tokio::test]
async fn rebuild_reproduces_the_incremental_projections() {
    let (_dir, store) = temp_store().await;
    store
        .write(vec![
            ev(EventBody::ThreadCreated(thread("a", "p", 1))),
            ev_on(
                "a",
                EventBody::ProviderSessionAttached(session("s1", SessionStatus::Ready)),
            ),
            ev(EventBody::TurnItemUpdated(turn_item("a", 1, 0, "x"))),
            ev(EventBody::TurnItemUpdated(turn_item("a", 1, 0, "y"))),
        ])
        .await
        .unwrap();
    let before = store.dump_projections().await.unwrap();
    let stats = store.rebuild().await.unwrap();
    assert_eq!(stats.events, 4);
    assert_eq!(store.dump_projections().await.unwrap(), before);
    assert_eq!(
        store
            .row_version(EntityKind::TurnItem, "item:run:a:1:0")
            .await
            .unwrap(),
        Some(2)
    );
}
