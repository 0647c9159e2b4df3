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

/// SCALE-09: `knife db copy --to postgres://…` moves a stopped SQLite installation (one
/// thread deleted and purged, so its log has a sequence gap): refused while its server
/// runs; then every event with its sequence, projections equal to the source's (the
/// command prints the comparison); a second copy into the now non-empty database is
/// refused, `--continue` finds nothing left; and `knife serve` on the copy serves the
/// thread as the SQLite installation did.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(knife_has_postgres),
    ignore = "needs PostgreSQL (Debian package postgresql, or KNIFE_PG_BIN)"
)]
async fn scale_09_db_copy_moves_a_stopped_sqlite_installation_into_postgresql() {
    const THREE: &str = "[[response]]\ntext = \"gone answer\"\n[[response]]\ntext = \"first answer\"\n[[response]]\ntext = \"second answer\"\n";
    let mock = MockLlm::script(THREE, &[]).await;
    let mut sqlite = Server::start(&mock.base_url()).await;
    // A thread that is deleted and purged first: its events leave a gap.
    let project = sqlite.api.create_project(&sqlite.project_dir()).await;
    let gone = sqlite.api.create_thread(&project).await;
    let run = sqlite.api.post_message(&gone, "soon gone").await;
    sqlite.api.follow_run(&gone, &run, 0).await;
    sqlite.api.settled_thread_json(&gone).await;
    let thread = two_turns(&sqlite).await;
    let deleted = sqlite
        .api
        .http
        .delete(format!("{}/api/threads/{gone}", sqlite.api.base))
        .send()
        .await
        .unwrap();
    assert!(deleted.status().is_success(), "{deleted:?}");
    let cluster = cluster().await;
    let db = cluster.fresh_database().await;
    let url = cluster.tcp_url(&db);
    let data_dir = sqlite.data_dir().display().to_string();
    let home = sqlite.path().to_owned();
    let copy = |extra: &'static [&'static str]| {
        let (cwd, data_dir, url) = (home.clone(), data_dir.clone(), url.clone());
        async move {
            let mut args = vec!["db", "copy", "--data-dir", &data_dir, "--to", &url];
            args.extend_from_slice(extra);
            run_cli(&cwd, &args).await
        }
    };

    let busy = copy(&[]).await;
    assert!(!busy.status.success());
    assert!(busy.stderr.contains("stop it first"), "{}", busy.stderr);
    assert!(sqlite.proc.terminate().await.success());
    let purge = run_cli(sqlite.path(), &["db", "purge", "--data-dir", &data_dir]).await;
    assert!(purge.status.success(), "{}", purge.stderr);

    let source = knife_store_sqlite::open(sqlite.data_dir().join("knife.db"))
        .await
        .unwrap();
    let source_log = source
        .read_events(&StreamFilter::after(0), 100_000)
        .await
        .unwrap();
    let sequences: Vec<u64> = source_log.iter().map(|e| e.sequence).collect();
    assert_ne!(
        sequences,
        (1..=source_log.len() as u64).collect::<Vec<_>>(),
        "the purge left a gap"
    );
    let source_dump = source.dump_projections().await.unwrap();
    let source_answers = answers(
        &source
            .thread_projection(&ThreadId::from(thread.as_str()))
            .await
            .unwrap()
            .unwrap(),
    );
    assert_eq!(source_answers.len(), 2);
    drop(source);

    let out = copy(&[]).await;
    assert!(out.status.success(), "{}\n{}", out.stdout, out.stderr);
    assert!(
        out.stdout
            .contains(&format!("copied {} events", source_log.len())),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains("threads") && out.stdout.contains("equal"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout
            .contains("the copy's projections equal the source's")
    );
    assert!(!out.stdout.contains("DIFFERENT"), "{}", out.stdout);

    let target = knife_store_postgres::open(&cluster.url(&db)).await.unwrap();
    let copied = target
        .read_events(&StreamFilter::after(0), 100_000)
        .await
        .unwrap();
    assert_eq!(copied, source_log, "every event, with its sequence");
    let mut target_dump = target.dump_projections().await.unwrap();
    let mut source_dump = source_dump;
    for dump in [&mut target_dump, &mut source_dump] {
        for row in dump.values_mut().flatten() {
            row.as_object_mut().unwrap().remove("last_seen_at_us");
        }
    }
    assert_eq!(target_dump, source_dump);
    drop(target);

    let again = copy(&[]).await;
    assert!(!again.status.success());
    assert!(
        again.stderr.contains("already holds events"),
        "{}",
        again.stderr
    );
    let resumed = copy(&["--continue"]).await;
    assert!(resumed.status.success(), "{}", resumed.stderr);
    assert!(
        resumed.stdout.contains("copied 0 events"),
        "{}",
        resumed.stdout
    );

    // knife runs on the copy.
    let toml = format!(
        "{}\n[store]\nurl = \"{url}\"\n",
        config_toml(&mock.base_url())
    );
    let mut pg = Server::start_with_config(&toml).await;
    let p = pg.api.projection(&thread).await;
    assert_eq!(answers(&p), source_answers);
    let (status, _) = pg.api.get(&format!("/api/threads/{gone}")).await;
    assert_eq!(status, reqwest::StatusCode::NOT_FOUND);
    // `knife db rebuild` on `[store] url` is refused while a node runs on it...
    let busy = run_cli(pg.path(), &["db", "rebuild"]).await;
    assert!(!busy.status.success());
    assert!(busy.stderr.contains("stop them first"), "{}", busy.stderr);
    assert!(pg.proc.terminate().await.success());
    // ...and works on it, like `knife threads`, once the nodes are stopped.
    let rebuilt = run_cli(pg.path(), &["db", "rebuild"]).await;
    assert!(rebuilt.status.success(), "{}", rebuilt.stderr);
    assert!(
        rebuilt
            .stdout
            .contains(&format!("from {} events", source_log.len())),
        "{}",
        rebuilt.stdout
    );
    let listed = run_cli(pg.path(), &["threads", "list"]).await;
    assert!(listed.status.success(), "{}", listed.stderr);
    assert!(listed.stdout.contains(&thread), "{}", listed.stdout);
    assert!(!listed.stdout.contains(&gone), "{}", listed.stdout);
}
