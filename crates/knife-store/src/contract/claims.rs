// Contract cases of Claims, ProcessGroups and Activity: claim columns follow the thread
// entity and survive a rebuild, process-group records round-trip, session activity.

use super::StoreFactory;
use super::fixtures::*;
use crate::ProcessGroupRecord;
use knife_protocol::*;

pub async fn claimed_threads_are_listed_by_kind_and_survive_a_rebuild(factory: &dyn StoreFactory) {
    let (_dir, store) = temp_store(factory).await;
    let mut parent = thread("parent", "p", 1);
    parent.claim(ts(5));
    parent.resume_attempts = 2;
    let mut child = thread("child", "p", 1);
    child.claim(ts(6));
    child.parent_thread_id = Some(parent.id.clone());
    let idle = thread("idle", "p", 1);
    store
        .write(vec![
            ev(EventBody::ProjectCreated(project("p", 1))),
            ev(EventBody::ThreadCreated(parent.clone())),
            ev(EventBody::ThreadCreated(child.clone())),
            ev(EventBody::ThreadCreated(idle)),
        ])
        .await
        .unwrap();
    let ids = |ts: Vec<Thread>| ts.into_iter().map(|t| t.id).collect::<Vec<_>>();
    assert_eq!(
        ids(store.list_suspended_threads().await.unwrap()),
        vec![parent.id.clone()]
    );
    assert_eq!(
        ids(store.list_claimed_child_threads().await.unwrap()),
        vec![child.id.clone()]
    );
    let before = store.dump_projections().await.unwrap();
    store.rebuild().await.unwrap();
    assert_eq!(store.dump_projections().await.unwrap(), before);
    let got = store.get_thread(&parent.id).await.unwrap().unwrap();
    assert_eq!(got.claimed_at, Some(ts(5)));
    assert_eq!(got.resume_attempts, 2);

    // Releasing is just another thread.updated: the claim column follows it.
    let mut released = got;
    released.release_claim();
    store
        .write(vec![ev(EventBody::ThreadUpdated(released))])
        .await
        .unwrap();
    assert!(store.list_suspended_threads().await.unwrap().is_empty());
}

pub async fn process_groups_round_trip_and_are_not_touched_by_rebuild(factory: &dyn StoreFactory) {
    let (_dir, store) = temp_store(factory).await;
    let record = ProcessGroupRecord {
        node: "local".into(),
        pgid: 4242,
        owner_pid: 17,
        leader_start: Some(99),
        thread_id: Some(ThreadId::from("t1")),
        label: "bash: sleep 100".into(),
        registered_at: ts(3),
    };
    store.register_process_group(record.clone()).await.unwrap();
    store
        .register_process_group(ProcessGroupRecord {
            pgid: 7,
            leader_start: None,
            thread_id: None,
            ..record.clone()
        })
        .await
        .unwrap();
    store.rebuild().await.unwrap();
    let all = store.list_process_groups().await.unwrap();
    assert_eq!(all.len(), 2);
    assert_eq!(all[1], record);
    store.unregister_process_group("local", 7).await.unwrap();
    store.unregister_process_group("local", 7).await.unwrap();
    assert_eq!(store.list_process_groups().await.unwrap(), vec![record]);
}

/// Activity (REAP): a bound session is listed with its thread and last-seen time; a
/// touch moves the mark forward only; an active run shows; an unknown id is a no-op;
/// a rebuild resets the mark to the session's `updated_at`.
pub async fn session_activity_follows_bindings_and_touches_only_move_forward(
    factory: &dyn StoreFactory,
) {
    let (_dir, store) = temp_store(factory).await;
    let mut busy = thread("t1", "p", 1);
    busy.active_run_id = Some(RunId::for_thread(&busy.id, 1));
    let s = session("s1", SessionStatus::Ready);
    store
        .write(vec![
            ev(EventBody::ProjectCreated(project("p", 1))),
            ev(EventBody::ThreadCreated(busy.clone())),
            ev(EventBody::ThreadCreated(thread("t2", "p", 1))),
            ev_on("t1", EventBody::ProviderSessionAttached(s.clone())),
            ev_on("t2", EventBody::ProviderSessionAttached(s.clone())),
        ])
        .await
        .unwrap();
    let rows = store.list_session_activity().await.unwrap();
    let seen: Vec<(String, bool, Timestamp)> = rows
        .iter()
        .map(|r| {
            (
                r.thread_id.as_str().to_owned(),
                r.thread_has_active_run,
                r.last_seen_at,
            )
        })
        .collect();
    assert_eq!(
        seen,
        vec![
            ("t1".to_owned(), true, s.updated_at),
            ("t2".to_owned(), false, s.updated_at),
        ]
    );

    store.touch_provider_session(&s.id, ts(100)).await.unwrap();
    store.touch_provider_session(&s.id, ts(50)).await.unwrap();
    store
        .touch_provider_session(&ProviderSessionId::from("nobody"), ts(200))
        .await
        .unwrap();
    let rows = store.list_session_activity().await.unwrap();
    assert!(rows.iter().all(|r| r.last_seen_at == ts(100)), "{rows:?}");

    store.rebuild().await.unwrap();
    let rows = store.list_session_activity().await.unwrap();
    assert!(
        rows.iter().all(|r| r.last_seen_at == s.updated_at),
        "{rows:?}"
    );
}
