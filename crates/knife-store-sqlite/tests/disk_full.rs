//! A full disk under the SQLite store (SPEC.md SEC-07): a write that does not fit is
//! refused as `StoreError::Full`, rolls back whole and loses nothing; the WAL is
//! checkpointed and cut to zero bytes when the writer is idle, and at open, so the
//! space it held is usable again.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::*;
use knife_protocol::*;
use knife_store::{Store, StreamFilter};
use knife_store_sqlite::{SqliteStore, StoreOptions};

fn big_item(n: u64) -> DomainEvent {
    ev(EventBody::TurnItemUpdated(turn_item(
        "t1",
        1,
        n,
        &"y".repeat(50_000),
    )))
}

async fn all_events(store: &Store) -> usize {
    store
        .read_events(&StreamFilter::default(), 10_000)
        .await
        .unwrap()
        .len()
}

#[tokio::test]
async fn sec_07_a_write_on_a_full_disk_is_refused_as_full_and_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let sqlite = SqliteStore::open(dir.path().join("knife.db"))
        .await
        .unwrap();
    let store = Store::new(sqlite.clone());
    store
        .write(vec![
            ev(EventBody::ProjectCreated(project("p1", 1))),
            ev(EventBody::ThreadCreated(thread("t1", "p1", 1))),
            big_item(1),
        ])
        .await
        .unwrap();
    let before = all_events(&store).await;

    sqlite.set_max_page_count(Some(1)).await.unwrap();
    let err = store
        .write(vec![big_item(2), big_item(3)])
        .await
        .unwrap_err();
    assert!(err.is_disk_full(), "{err:?}");
    assert!(err.is_retryable());
    let message = err.to_string();
    assert!(
        message.contains("disk holding the knife database is full"),
        "{message}"
    );
    assert!(message.contains("free space"), "says what to do: {message}");
    // Nothing of the refused batch, everything before it.
    assert_eq!(all_events(&store).await, before);
    let p = store
        .thread_projection(&ThreadId::from("t1"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(p.turn_items.len(), 1);

    // Space returns: the same batch goes in.
    sqlite.set_max_page_count(None).await.unwrap();
    store.write(vec![big_item(2), big_item(3)]).await.unwrap();
    assert_eq!(all_events(&store).await, before + 2);
}

fn wal_len(db: &std::path::Path) -> u64 {
    let mut wal = db.as_os_str().to_owned();
    wal.push("-wal");
    std::fs::metadata(wal).map(|m| m.len()).unwrap_or(0)
}

#[tokio::test]
async fn sec_07_the_wal_is_checkpointed_and_truncated_once_the_writer_is_idle() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("knife.db");
    let sqlite = SqliteStore::open_with(
        &db,
        StoreOptions {
            idle_checkpoint: Duration::from_millis(100),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let store = Store::new(sqlite);
    store
        .write(vec![
            ev(EventBody::ProjectCreated(project("p1", 1))),
            ev(EventBody::ThreadCreated(thread("t1", "p1", 1))),
        ])
        .await
        .unwrap();
    for n in 1..=20 {
        store.write(vec![big_item(n)]).await.unwrap();
    }
    // Real time: the writer thread checkpoints on its own clock.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while wal_len(&db) > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the WAL is still {} bytes after the writer went idle",
            wal_len(&db)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Everything is in the database file.
    let p = store
        .thread_projection(&ThreadId::from("t1"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(p.turn_items.len(), 20);
}

#[tokio::test]
async fn sec_07_a_wal_left_by_a_crash_is_folded_and_cut_at_open() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("knife.db");
    // A writer that never goes idle long enough to checkpoint, as before a SIGKILL.
    let sqlite = SqliteStore::open_with(
        &db,
        StoreOptions {
            idle_checkpoint: Duration::from_secs(3600),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let store = Store::new(sqlite);
    store
        .write(vec![
            ev(EventBody::ProjectCreated(project("p1", 1))),
            ev(EventBody::ThreadCreated(thread("t1", "p1", 1))),
        ])
        .await
        .unwrap();
    for n in 1..=10 {
        store.write(vec![big_item(n)]).await.unwrap();
    }
    assert!(wal_len(&db) > 100_000, "the WAL holds the writes");
    // Keep a copy of the files as a crash would leave them (the store still open).
    let crashed = dir.path().join("crashed");
    std::fs::create_dir(&crashed).unwrap();
    for suffix in ["", "-wal", "-shm"] {
        let from = format!("{}{suffix}", db.display());
        std::fs::copy(&from, crashed.join(format!("knife.db{suffix}"))).unwrap();
    }
    drop(store);

    let reopened = knife_store_sqlite::open(crashed.join("knife.db"))
        .await
        .unwrap();
    assert_eq!(wal_len(&crashed.join("knife.db")), 0, "cut to zero at open");
    let p = reopened
        .thread_projection(&ThreadId::from("t1"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(p.turn_items.len(), 10, "every committed write survived");
}
