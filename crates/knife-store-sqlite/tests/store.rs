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

/// SCALE-04 naming (migration 0090): a database written at schema 50, when the claim
/// column was `time_suspended_us` and thread JSON said `time_suspended`, opens with the
/// claim column renamed `claimed_at_us`: the claimed thread is still listed for the
/// restart sweep with its claim time, before and after a rebuild from its log.
#[tokio::test]
async fn scale_04_a_claim_written_before_the_claimed_at_rename_is_still_claimed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("knife.db");
    let mut claimed = thread("t1", "p1", 1);
    claimed.claim(ts(5));
    // The thread as a schema-50 knife wrote it: the claim under its old name.
    let mut old = serde_json::to_value(&claimed).unwrap();
    let at = old["claimed_at"].take();
    let object = old.as_object_mut().unwrap();
    object.remove("claimed_at");
    object.insert("time_suspended".into(), at);
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        for sql in [
            include_str!("../migrations/0001_init.sql"),
            include_str!("../migrations/0002_project_unique_root.sql"),
            include_str!("../migrations/0003_execution_claims.sql"),
            include_str!("../migrations/0040_thread_leases.sql"),
            include_str!("../migrations/0041_search.sql"),
            include_str!("../migrations/0050_nodes.sql"),
        ] {
            conn.execute_batch(sql).unwrap();
        }
        conn.pragma_update(None, "user_version", 50).unwrap();
        let created = serde_json::json!({
            "id": "event-1", "thread_id": "t1", "run_id": null,
            "occurred_at": "2026-12-01T00:00:01Z",
            "type": "thread.created", "payload": old,
        });
        let decoded: DomainEvent = serde_json::from_value(created.clone()).unwrap();
        assert_eq!(decoded.event_type(), "thread.created");
        conn.execute(
            "INSERT INTO events (sequence, event_id, thread_id, type, occurred_at, payload_json) \
             VALUES (1, 'event-1', 't1', 'thread.created', 'x', ?1)",
            [created.to_string()],
        )
        .unwrap();
        conn.execute(
            "INSERT INTO threads (id, project_id, status, updated_at_us, payload_json, version, \
             created_sequence, last_sequence, time_suspended_us) \
             VALUES ('t1', 'p1', 'idle', 0, ?1, 1, 1, 1, ?2)",
            rusqlite::params![old.to_string(), ts(5).timestamp_micros()],
        )
        .unwrap();
    }
    let store = knife_store_sqlite::open(&path).await.unwrap();
    for when in ["after the migration", "after a rebuild"] {
        let listed = store.list_suspended_threads().await.unwrap();
        assert_eq!(listed.len(), 1, "{when}");
        assert_eq!(listed[0].claimed_at, Some(ts(5)), "{when}");
        store.rebuild().await.unwrap();
    }
}
