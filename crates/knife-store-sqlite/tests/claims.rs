//! Claim columns (migration 0003) follow the thread entity, rebuild reproduces them,
//! and the process-group records round-trip.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use knife_protocol::*;
use knife_store::ProcessGroupRecord;

#[tokio::test]
async fn claimed_threads_are_listed_by_kind_and_survive_a_rebuild() {
    let dir = tempfile::tempdir().unwrap();
    let store = knife_store_sqlite::open(dir.path().join("knife.db"))
        .await
        .unwrap();
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
    assert_eq!(got.time_suspended, Some(ts(5)));
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

#[tokio::test]
async fn process_groups_round_trip_and_are_not_touched_by_rebuild() {
    let dir = tempfile::tempdir().unwrap();
    let store = knife_store_sqlite::open(dir.path().join("knife.db"))
        .await
        .unwrap();
    let record = ProcessGroupRecord {
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
    store.unregister_process_group(7).await.unwrap();
    store.unregister_process_group(7).await.unwrap();
    assert_eq!(store.list_process_groups().await.unwrap(), vec![record]);
}
