// Process tests of the store backends (SPEC.md SCALE-01): the real `knife serve` on the
// default SQLite data dir and on a PostgreSQL database named by `[store] url`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use knife_protocol::*;
use knife_store::StreamFilter;
use knife_store_postgres::testing::cluster;
use std::collections::BTreeSet;

const SCRIPT: &str = r#"
[[response]]
text = "first answer"
[[response]]
text = "second answer"
"#;

/// One thread with two turns, settled; returns the thread id.
async fn two_turns(server: &Server) -> String {
    let project = server.api.create_project(&server.project_dir()).await;
    let thread = server.api.create_thread(&project).await;
    let mut after = 0;
    for text in ["first question", "second question"] {
        let run = server.api.post_message(&thread, text).await;
        let (events, run) = server.api.follow_run(&thread, &run, after).await;
        assert_eq!(run.status, RunStatus::Completed, "{run:?}");
        after = events.last().map_or(after, |e| e.sequence);
    }
    server.api.settled_thread_json(&thread).await;
    thread
}

/// The kinds of events the turns recorded (how many text chunks a turn records
/// depends on timing, so counts are not compared), including the sessions' release
/// records (`provider-session.updated`) written at shutdown.
fn kinds(log: &[StoredEvent]) -> BTreeSet<&str> {
    log.iter().map(|e| e.event.event_type()).collect()
}

/// Every run's ordinal and status, and the answers, of the log's only thread.
fn outcome(p: &ThreadProjection) -> (Vec<(u32, RunStatus)>, Vec<String>) {
    (
        p.runs.iter().map(|r| (r.ordinal, r.status)).collect(),
        answers(p),
    )
}

/// The answers of a thread's projection, in order.
fn answers(p: &ThreadProjection) -> Vec<String> {
    p.turn_items
        .iter()
        .filter_map(|i| match &i.kind {
            TurnItemKind::AssistantMessage { text, .. } => Some(text.clone()),
            _ => None,
        })
        .collect()
}

/// SCALE-01: without a URL knife keeps its SQLite file in the data dir; with
/// `[store] url = "postgres://…"` the same binary runs the same turns on PostgreSQL
/// (no SQLite file is created), the log and projections are in that database (read
/// back with the PostgreSQL backend directly, sequences gap-free) and survive a
/// restart, and both backends end with the same outcome and the same kinds of events.
/// The contract suite runs on both backends (knife-store-sqlite and
/// knife-store-postgres `--test contract`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(knife_has_postgres),
    ignore = "needs PostgreSQL (Debian package postgresql, or KNIFE_PG_BIN)"
)]
async fn scale_01_a_postgres_url_runs_knife_on_postgresql_and_sqlite_stays_the_default() {
    let mock = MockLlm::script(SCRIPT, &[]).await;

    let mut sqlite = Server::start(&mock.base_url()).await;
    let sqlite_thread = two_turns(&sqlite).await;
    assert!(sqlite.proc.terminate().await.success());
    let sqlite_store = knife_store_sqlite::open(sqlite.data_dir().join("knife.db"))
        .await
        .unwrap();
    let sqlite_log = sqlite_store
        .read_events(&StreamFilter::after(0), 10_000)
        .await
        .unwrap();
    let sqlite_projection = sqlite_store
        .thread_projection(&ThreadId::from(sqlite_thread.as_str()))
        .await
        .unwrap()
        .unwrap();

    let cluster = cluster().await;
    let db = cluster.fresh_database().await;
    let mock2 = MockLlm::script(SCRIPT, &[]).await;
    let toml = format!(
        "{}\n[store]\nurl = \"{}\"\n",
        config_toml(&mock2.base_url()),
        cluster.tcp_url(&db)
    );
    let mut pg = Server::start_with_config(&toml).await;
    let thread = two_turns(&pg).await;
    assert!(pg.proc.terminate().await.success());
    assert!(
        !pg.data_dir().join("knife.db").exists(),
        "a store URL must not create the SQLite file"
    );

    // The log is in PostgreSQL: read it with the backend itself.
    let store = knife_store_postgres::open(&cluster.url(&db)).await.unwrap();
    let p = store
        .thread_projection(&ThreadId::from(thread.as_str()))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(answers(&p), vec!["first answer", "second answer"]);
    assert_eq!(
        outcome(&p),
        outcome(&sqlite_projection),
        "same outcome on both backends"
    );
    let log = store
        .read_events(&StreamFilter::after(0), 10_000)
        .await
        .unwrap();
    let sequences: Vec<u64> = log.iter().map(|e| e.sequence).collect();
    assert_eq!(
        sequences,
        (1..=log.len() as u64).collect::<Vec<_>>(),
        "gap-free sequences"
    );
    assert_eq!(
        kinds(&log),
        kinds(&sqlite_log),
        "both backends record the same kinds of events for the same conversation"
    );
    let stopped = |log: &[StoredEvent]| {
        log.iter()
            .filter(|e| {
                matches!(&e.event.body, EventBody::ProviderSessionUpdated(s)
                    if s.status == SessionStatus::Stopped)
            })
            .count()
    };
    assert!(
        stopped(&log) >= 1,
        "the release record of the shutdown (SIGTERM) is in PostgreSQL"
    );
    assert_eq!(stopped(&log), stopped(&sqlite_log), "as on SQLite");
    drop(store);

    // A new server on the same database serves the same thread.
    pg.respawn().await;
    let again = pg.api.projection(&thread).await;
    assert_eq!(answers(&again), vec!["first answer", "second answer"]);
    assert_eq!(again.latest_sequence, p.latest_sequence);
}
