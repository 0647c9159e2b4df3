// Store tests: write/read round trips, projections and queries, compare-and-set
// writes, rollback on error, latest_sequence, reopening, and open errors.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use knife_protocol::*;
use knife_store::{StoreError, StreamFilter};

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
