// Contract cases of EventLog / EventFeed / ProjectionReads: write/read round trips,
// projections and queries, compare-and-set (also under contention), rollback on error.

use super::StoreFactory;
use super::fixtures::*;
use crate::{EntityKind, RowGuard, StoreError, StreamFilter};
use knife_protocol::*;

pub async fn write_returns_consecutive_sequences_and_reads_return_the_exact_events(
    factory: &dyn StoreFactory,
) {
    let (_dir, store) = temp_store(factory).await;
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

pub async fn latest_sequence_is_global_and_per_thread(factory: &dyn StoreFactory) {
    let (_dir, store) = temp_store(factory).await;
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

pub async fn projections_upsert_by_id_bump_versions_and_answer_queries(factory: &dyn StoreFactory) {
    let (_dir, store) = temp_store(factory).await;
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

pub async fn provider_sessions_bind_on_attach_only_and_unbind_on_detach(
    factory: &dyn StoreFactory,
) {
    let (_dir, store) = temp_store(factory).await;
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

/// `thread_with_version` (LIVE-07) answers what `get_thread` and `row_version` answer,
/// from one read; its version guards a compare-and-set write like `row_version`'s.
pub async fn live_07_a_thread_is_read_with_its_version_in_one_call(factory: &dyn StoreFactory) {
    let (_dir, store) = temp_store(factory).await;
    let id = ThreadId::from("t1");
    assert!(store.thread_with_version(&id).await.unwrap().is_none());
    store
        .write(vec![ev(EventBody::ThreadCreated(thread("t1", "p1", 1)))])
        .await
        .unwrap();
    store
        .write(vec![ev(EventBody::ThreadUpdated(thread("t1", "p1", 2)))])
        .await
        .unwrap();
    let (read, version) = store.thread_with_version(&id).await.unwrap().unwrap();
    assert_eq!(Some(&read), store.get_thread(&id).await.unwrap().as_ref());
    assert_eq!(
        Some(version),
        store.row_version(EntityKind::Thread, "t1").await.unwrap()
    );
    assert_eq!(version, 2);
    let guard = RowGuard::new(EntityKind::Thread, "t1", Some(version));
    let moved = store
        .write_if(
            guard.clone(),
            vec![ev(EventBody::ThreadUpdated(thread("t1", "p1", 3)))],
        )
        .await
        .unwrap();
    assert!(moved.is_some(), "the version read guards a write");
    assert!(
        store
            .write_if(
                guard,
                vec![ev(EventBody::ThreadUpdated(thread("t1", "p1", 4)))]
            )
            .await
            .unwrap()
            .is_none(),
        "and is stale after it"
    );
}

pub async fn write_if_commits_only_when_the_guarded_row_version_matches(
    factory: &dyn StoreFactory,
) {
    let (_dir, store) = temp_store(factory).await;
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

pub async fn a_failed_write_rolls_back_the_whole_batch(factory: &dyn StoreFactory) {
    let (_dir, store) = temp_store(factory).await;
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

pub async fn rebuild_reproduces_the_incremental_projections(factory: &dyn StoreFactory) {
    let (_dir, store) = temp_store(factory).await;
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

/// CAS under contention: writers racing with the same expected version commit exactly
/// one batch; every loser gets `Ok(None)` and leaves nothing in the log.
pub async fn concurrent_compare_and_set_writers_commit_exactly_one(factory: &dyn StoreFactory) {
    let (_dir, store) = temp_store(factory).await;
    let pt = "pt-race";
    store
        .write(vec![ev(EventBody::ProviderThreadUpdated(provider_thread(
            pt, "t1", None,
        )))])
        .await
        .unwrap();
    let version = store
        .row_version(EntityKind::ProviderThread, pt)
        .await
        .unwrap();
    assert_eq!(version, Some(1));
    let racers: Vec<_> = (0..8_u32)
        .map(|n| {
            let store = store.clone();
            tokio::spawn(async move {
                let event = ev(EventBody::ProviderThreadUpdated(provider_thread(
                    pt,
                    "t1",
                    Some(n + 1),
                )));
                store
                    .write_if(
                        RowGuard::new(EntityKind::ProviderThread, pt, version),
                        vec![event],
                    )
                    .await
                    .unwrap()
            })
        })
        .collect();
    let mut winners = Vec::new();
    for racer in racers {
        if let Some(stored) = racer.await.unwrap() {
            winners.push(stored);
        }
    }
    assert_eq!(winners.len(), 1, "exactly one CAS writer commits");
    assert_eq!(
        store.latest_sequence(None).await.unwrap(),
        winners[0][0].sequence,
        "no loser appended anything"
    );
    assert_eq!(
        store
            .row_version(EntityKind::ProviderThread, pt)
            .await
            .unwrap(),
        Some(2)
    );
    let EventBody::ProviderThreadUpdated(won) = &winners[0][0].event.body else {
        panic!("the winner wrote a provider thread");
    };
    let stored = store
        .get_provider_thread(&ProviderThreadId::from(pt))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stored.last_run_ordinal, won.last_run_ordinal);
}
