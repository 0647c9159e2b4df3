//! Group commit of the SQLite writer (LIVE-07): appends queued together share one
//! transaction, and each stays atomic on its own — a failed guard or a duplicate event
//! rolls back that append only; sequences stay gap-free and the live feed in order.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use futures::StreamExt;
use knife_protocol::*;
use knife_store::{EntityKind, RowGuard, StoreError, StreamFilter};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_07_queued_appends_commit_together_and_each_stays_atomic() {
    let (_dir, store) = temp_store().await;
    store
        .write(vec![ev(EventBody::ThreadCreated(thread("t0", "p1", 1)))])
        .await
        .unwrap();
    let version = store.row_version(EntityKind::Thread, "t0").await.unwrap();
    let duplicate = ev(EventBody::ThreadCreated(thread("dup", "p1", 1)));
    store.write(vec![duplicate.clone()]).await.unwrap();
    let mut live = store.stream(StreamFilter {
        thread_id: None,
        after: store.latest_sequence(None).await.unwrap(),
        event_type: None,
    });
    // 300 appends at once: plain ones (two events each), stale guards, duplicates.
    let mut calls = Vec::new();
    for i in 0..300 {
        let store = store.clone();
        let duplicate = duplicate.clone();
        calls.push(tokio::spawn(async move {
            let id = format!("t{}", i + 1);
            match i % 10 {
                3 => store
                    .write_if(
                        RowGuard::new(EntityKind::Thread, "t0", version.map(|v| v + 99)),
                        vec![ev(EventBody::ThreadCreated(thread(&id, "p1", 1)))],
                    )
                    .await
                    .map(|written| (i, written.map(|w| w.len()))),
                7 => store
                    .write(vec![
                        ev(EventBody::ThreadCreated(thread(&id, "p1", 1))),
                        duplicate,
                    ])
                    .await
                    .map(|w| (i, Some(w.len()))),
                _ => store
                    .write(vec![
                        ev(EventBody::ThreadCreated(thread(&id, "p1", 1))),
                        ev(EventBody::RunCreated(run(&id, 1, RunStatus::Running))),
                    ])
                    .await
                    .map(|w| (i, Some(w.len()))),
            }
        }));
    }
    let mut written = 0;
    for call in calls {
        match call.await.unwrap() {
            Ok((i, Some(n))) => {
                assert!(
                    i % 10 != 3 && i % 10 != 7,
                    "call {i} should not have written"
                );
                assert_eq!(n, 2);
                written += n;
            }
            Ok((i, None)) => assert_eq!(i % 10, 3, "only stale guards write nothing"),
            Err(StoreError::DuplicateEvent { .. }) => {}
            Err(e) => panic!("unexpected error: {e}"),
        }
    }
    assert_eq!(written, 240 * 2);
    // Each failed append left nothing behind; the others are all there.
    for i in 0..300 {
        let id = format!("t{}", i + 1);
        let there = store
            .get_thread(&ThreadId::from(id.as_str()))
            .await
            .unwrap()
            .is_some();
        assert_eq!(there, i % 10 != 3 && i % 10 != 7, "thread {id}");
    }
    // Gap-free, in order, on the live feed as in the table.
    let mut seqs = Vec::new();
    while seqs.len() < written {
        let ev = tokio::time::timeout(std::time::Duration::from_secs(10), live.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        seqs.push(ev.sequence);
    }
    assert!(
        seqs.windows(2).all(|w| w[1] == w[0] + 1),
        "gap-free: {seqs:?}"
    );
    assert_eq!(
        store.latest_sequence(None).await.unwrap(),
        *seqs.last().unwrap()
    );
}

/// Leases taken and let go while appends are queued share the appends' transactions
/// (LIVE-07: a resume's lease costs no transaction of its own) and stay atomic on their
/// own: a lease another node holds is refused without voiding the group.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_07_leases_queued_with_appends_commit_with_them_and_fail_alone() {
    let (_dir, store) = temp_store().await;
    let ttl = std::time::Duration::from_secs(60);
    let held = ThreadId::from("held");
    store.acquire_lease(&held, "node-b", ttl).await.unwrap();
    let mut calls = Vec::new();
    for i in 0..200 {
        let store = store.clone();
        let held = held.clone();
        calls.push(tokio::spawn(async move {
            let id = ThreadId::from(format!("t{i}").as_str());
            match i % 4 {
                0 => {
                    let lease = store.acquire_lease(&id, "node-a", ttl).await.unwrap();
                    assert_eq!((lease.node.as_str(), lease.epoch), ("node-a", 1));
                    if i % 8 == 0 {
                        store.release_lease(&lease).await.unwrap();
                    }
                }
                1 => match store.acquire_lease(&held, "node-a", ttl).await {
                    Err(StoreError::LeaseHeld { node, .. }) => assert_eq!(node, "node-b"),
                    other => panic!("a held lease was taken: {other:?}"),
                },
                _ => {
                    let written = store
                        .write(vec![ev(EventBody::ThreadCreated(thread(
                            id.as_str(),
                            "p1",
                            1,
                        )))])
                        .await
                        .unwrap();
                    assert_eq!(written.len(), 1);
                }
            }
        }));
    }
    for call in calls {
        call.await.unwrap();
    }
    let now = chrono::Utc::now();
    for i in 0..200 {
        let id = ThreadId::from(format!("t{i}").as_str());
        let lease = store.get_lease(&id).await.unwrap();
        let thread = store.get_thread(&id).await.unwrap();
        match i % 4 {
            0 => {
                let lease = lease.unwrap();
                assert_eq!(lease.node, "node-a");
                assert_eq!(lease.expires_at > now, i % 8 != 0, "lease of {id}");
            }
            1 => assert!(lease.is_none() && thread.is_none()),
            _ => assert!(lease.is_none() && thread.is_some(), "thread {id}"),
        }
    }
    let kept = store.get_lease(&held).await.unwrap().unwrap();
    assert_eq!((kept.node.as_str(), kept.epoch), ("node-b", 1));
}
