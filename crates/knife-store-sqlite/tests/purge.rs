//! Deleted threads in the store (SPEC.md CHG-08): the tombstone drops a thread from
//! the projections and later events of it are ignored (rebuild agrees); `purge`
//! removes its events for good and leaves the other threads as they were.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use knife_protocol::*;
use knife_store::StreamFilter;

fn tombstone(thread: &str) -> DomainEvent {
    ev(EventBody::ThreadDeleted {
        thread_id: ThreadId::from(thread),
        deleted_at: ts(50),
    })
}

/// Events of two threads in project p1: a thread row, a run, an item, a request.
fn history(thread: &str) -> Vec<DomainEvent> {
    vec![
        ev(EventBody::ThreadCreated(common::thread(thread, "p1", 1))),
        ev(EventBody::RunCreated(run(thread, 1, RunStatus::Completed))),
        ev(EventBody::TurnItemUpdated(turn_item(
            thread,
            1,
            0,
            "secret text",
        ))),
        ev(EventBody::RuntimeRequestUpdated(runtime_request(
            &format!("req-{thread}"),
            thread,
            RuntimeRequestStatus::Resolved,
        ))),
    ]
}

#[tokio::test]
async fn chg_08_a_tombstone_drops_the_thread_and_ignores_its_later_events() {
    let (_dir, store) = temp_store().await;
    store
        .write(vec![ev(EventBody::ProjectCreated(project("p1", 1)))])
        .await
        .unwrap();
    store.write(history("t-keep")).await.unwrap();
    store.write(history("t-gone")).await.unwrap();
    store.write(vec![tombstone("t-gone")]).await.unwrap();
    // A late write of a stopped runtime, after the tombstone: kept, not projected.
    store
        .write(vec![
            ev(EventBody::TurnItemUpdated(turn_item(
                "t-gone", 1, 1, "late",
            ))),
            ev(EventBody::ThreadUpdated(common::thread("t-gone", "p1", 9))),
        ])
        .await
        .unwrap();
    assert!(
        store
            .get_thread(&ThreadId::from("t-gone"))
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        store
            .thread_projection(&ThreadId::from("t-gone"))
            .await
            .unwrap()
            .is_none()
    );
    let dump = store.dump_projections().await.unwrap();
    let mentions = serde_json::to_string(&dump).unwrap();
    assert!(!mentions.contains("t-gone"), "{mentions}");
    assert!(mentions.contains("t-keep"));
    store.rebuild().await.unwrap();
    assert_eq!(
        store.dump_projections().await.unwrap(),
        dump,
        "rebuild == incremental"
    );
}

#[tokio::test]
async fn chg_08_purge_removes_deleted_threads_events_for_good() {
    let (dir, store) = temp_store().await;
    store
        .write(vec![ev(EventBody::ProjectCreated(project("p1", 1)))])
        .await
        .unwrap();
    store.write(history("t-keep")).await.unwrap();
    store.write(history("t-gone")).await.unwrap();
    store.write(vec![tombstone("t-gone")]).await.unwrap();
    let kept_before = store
        .read_events(&StreamFilter::thread(ThreadId::from("t-keep"), 0), 100)
        .await
        .unwrap();
    let dump_before = store.dump_projections().await.unwrap();

    let stats = store.purge_deleted_threads().await.unwrap();
    assert_eq!(stats.threads, vec!["t-gone".to_owned()]);
    assert_eq!(stats.events, 5, "four events and the tombstone");
    assert_eq!(
        store
            .read_events(&StreamFilter::thread(ThreadId::from("t-gone"), 0), 100)
            .await
            .unwrap(),
        Vec::new()
    );
    // The other thread's events keep their sequences; the projections are unchanged.
    assert_eq!(
        store
            .read_events(&StreamFilter::thread(ThreadId::from("t-keep"), 0), 100)
            .await
            .unwrap(),
        kept_before
    );
    assert_eq!(store.dump_projections().await.unwrap(), dump_before);
    assert_eq!(stats.events_kept, 5, "project + t-keep's four");
    // Gone from the file itself (vacuumed), not just unlinked from the table.
    drop(store);
    let bytes = std::fs::read(dir.path().join("data").join("knife.db")).unwrap();
    let needle = b"req-t-gone";
    assert!(
        !bytes.windows(needle.len()).any(|w| w == needle),
        "the purged text is still in the database file"
    );
    assert!(bytes.windows(10).any(|w| w == b"req-t-keep"));
    // Purging again finds nothing.
    let store = knife_store_sqlite::open(dir.path().join("data").join("knife.db"))
        .await
        .unwrap();
    let again = store.purge_deleted_threads().await.unwrap();
    assert_eq!((again.threads.len(), again.events), (0, 0));
}
