// One project per root folder in the store (migration 0002): the fold refuses a second
// project on a root, rebuild folds unique-root logs unchanged, and old duplicate logs still open.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use knife_protocol::*;
use knife_store::StoreError;

fn project_on(id: &str, root: &str) -> Project {
    Project {
        root: root.to_owned(),
        ..project(id, 1)
    }
}

fn created(p: Project) -> DomainEvent {
    DomainEvent::new(ts(1), EventBody::ProjectCreated(p))
}

/// A database written by schema 1 (before the constraint) with two projects on one
/// folder: opening it migrates (the oldest keeps the root), and rebuild agrees.
#[tokio::test]
async fn schema_1_database_with_duplicate_roots_migrates_and_rebuilds() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("knife.db");
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute_batch(include_str!("../migrations/0001_init.sql"))
            .unwrap();
        conn.pragma_update(None, "user_version", 1).unwrap();
        for (seq, id) in [(1_i64, "old"), (2, "dup")] {
            let p = project_on(id, "/same");
            let event = created(p.clone());
            conn.execute(
                "INSERT INTO events (sequence, event_id, type, occurred_at, payload_json) \
                 VALUES (?1, ?2, 'project.created', 'x', ?3)",
                rusqlite::params![
                    seq,
                    event.id.as_str(),
                    serde_json::to_string(&event).unwrap()
                ],
            )
            .unwrap();
            conn.execute(
                "INSERT INTO projects (id, updated_at_us, payload_json, version, \
                 created_sequence, last_sequence) VALUES (?1, 0, ?2, 1, ?3, ?3)",
                rusqlite::params![id, serde_json::to_string(&p).unwrap(), seq],
            )
            .unwrap();
        }
    }
    let store = knife_store_sqlite::open(&path).await.unwrap();
    assert_eq!(store.list_projects().await.unwrap().len(), 2);
    let holder = store.project_by_root("/same").await.unwrap().unwrap();
    assert_eq!(holder.id.as_str(), "old");

    store.rebuild().await.unwrap();
    assert_eq!(store.list_projects().await.unwrap().len(), 2);
    let holder = store.project_by_root("/same").await.unwrap().unwrap();
    assert_eq!(holder.id.as_str(), "old");
    // New projects on that folder are refused from now on.
    let err = store
        .write(vec![created(project_on("new", "/same"))])
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::ProjectRootTaken { .. }), "{err}");
}
