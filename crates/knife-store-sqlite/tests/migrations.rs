// Migrations of databases written by older knife versions: the log and projections are
// written at the old schema, then `open` migrates them (cases in knife_store::contract::migration).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

/// The migrations before the usage records (0085), in order.
const BEFORE_USAGE_RECORDS: &[(i64, &str)] = &[
    (1, include_str!("../migrations/0001_init.sql")),
    (
        2,
        include_str!("../migrations/0002_project_unique_root.sql"),
    ),
    (3, include_str!("../migrations/0003_execution_claims.sql")),
    (40, include_str!("../migrations/0040_thread_leases.sql")),
    (41, include_str!("../migrations/0041_search.sql")),
    (50, include_str!("../migrations/0050_nodes.sql")),
];

/// Writes `events` with today's store into a scratch database, then copies the log and
/// the tables `tables` (the columns both schemas have) into a database at schema 50
/// at `old`: what an older knife wrote for the same log.
async fn write_at_schema_50(old: &Path, events: Vec<knife_protocol::DomainEvent>, tables: &[&str]) {
    let scratch = tempfile::tempdir().unwrap();
    let today = scratch.path().join("today.db");
    {
        let store = knife_store_sqlite::open(&today).await.unwrap();
        store.write(events).await.unwrap();
    }
    let conn = rusqlite::Connection::open(old).unwrap();
    for (version, sql) in BEFORE_USAGE_RECORDS {
        conn.execute_batch(sql).unwrap();
        conn.pragma_update(None, "user_version", version).unwrap();
    }
    conn.execute("ATTACH DATABASE ?1 AS today", [today.display().to_string()])
        .unwrap();
    let columns = |schema: &str, table: &str| -> Vec<String> {
        let mut stmt = conn
            .prepare("SELECT name FROM pragma_table_info(?1, ?2)")
            .unwrap();
        stmt.query_map([table, schema], |r| r.get(0))
            .unwrap()
            .map(Result::unwrap)
            .collect()
    };
    for table in ["events"].iter().chain(tables) {
        let theirs = columns("today", table);
        let common: Vec<String> = columns("main", table)
            .into_iter()
            .filter(|c| theirs.contains(c))
            .collect();
        let list = common.join(", ");
        conn.execute_batch(&format!(
            "INSERT INTO main.{table} ({list}) SELECT {list} FROM today.{table}"
        ))
        .unwrap();
    }
    conn.execute_batch("DETACH DATABASE today").unwrap();
}

/// TURN-06: runs that ended before the usage records existed count once each after
/// the migration (0085 copies their totals), after a rebuild, and a run still running
/// at the migration counts once when it ends.
#[tokio::test]
async fn turn_06_runs_from_before_the_usage_records_count_once_after_the_migration() {
    use knife_store::contract::migration::*;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("knife.db");
    write_at_schema_50(&path, legacy_usage_log(), &["projects", "threads", "runs"]).await;
    let store = knife_store_sqlite::open(&path).await.unwrap();
    turn_06_runs_from_before_the_usage_records_count_once_after_the_migration(&store).await;
}

/// TURN-08: documents indexed before migration 0110 get their thread's project key, so
/// a project filter finds them (and only theirs) after the migration.
#[tokio::test]
async fn turn_08_documents_indexed_before_the_project_key_are_found_by_project() {
    use knife_protocol::*;
    use knife_store::contract::fixtures::*;
    let mut events = vec![
        ev(EventBody::ProjectCreated(project("p1", 1))),
        ev(EventBody::ProjectCreated(project("p2", 1))),
        ev(EventBody::ThreadCreated(thread("t1", "p1", 1))),
        ev(EventBody::ThreadCreated(thread("t2", "p2", 1))),
    ];
    for t in ["t1", "t2"] {
        let mut item = turn_item(t, 1, 1, &format!("the zeppelin of {t}"));
        item.status = TurnItemStatus::Completed;
        events.push(ev(EventBody::TurnItemUpdated(item)));
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("knife.db");
    write_at_schema_50(&path, events, &["projects", "threads", "search_docs"]).await;
    let store = knife_store_sqlite::open(&path).await.unwrap();
    let found = |project: Option<&str>| {
        let store = store.clone();
        let project = project.map(ProjectId::from);
        async move {
            let hits = store
                .search(&knife_store::SearchQuery {
                    text: "zeppelin".into(),
                    project,
                    limit: 10,
                })
                .await
                .unwrap();
            let mut threads: Vec<String> = hits.iter().map(|h| h.thread_id.to_string()).collect();
            threads.sort();
            threads
        }
    };
    assert_eq!(found(None).await, ["t1", "t2"]);
    assert_eq!(found(Some("p1")).await, ["t1"]);
    assert_eq!(found(Some("p2")).await, ["t2"]);
    // The titles carry it too.
    let hits = store
        .search(&knife_store::SearchQuery {
            text: "thread t2".into(),
            project: Some(ProjectId::from("p2")),
            limit: 10,
        })
        .await
        .unwrap();
    assert!(hits.iter().any(|h| h.kind == SearchKind::Title), "{hits:?}");
}
