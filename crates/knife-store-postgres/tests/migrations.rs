// Migrations of databases written by older knife versions on PostgreSQL: the log and
// projections are written at the old schema, then `open` migrates them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use knife_store_postgres::testing::cluster;

/// The migrations before the usage records (0045), in order, as `knife_migrations` names them.
const BEFORE_USAGE_RECORDS: &[(i64, &str, &str)] = &[
    (1, "init", include_str!("../migrations/0001_init.sql")),
    (
        2,
        "thread_leases",
        include_str!("../migrations/0002_thread_leases.sql"),
    ),
    (3, "search", include_str!("../migrations/0003_search.sql")),
    (10, "nodes", include_str!("../migrations/0010_nodes.sql")),
];

async fn connect(db: &str) -> tokio_postgres::Client {
    let (client, connection) =
        tokio_postgres::connect(&cluster().await.url(db), tokio_postgres::NoTls)
            .await
            .unwrap();
    tokio::spawn(connection);
    client
}

/// Writes `events` with today's store into a scratch database, then copies the log,
/// its head and the tables `tables` (by column name: what both schemas have) into a
/// new database at schema 10, whose name it returns: what an older knife wrote.
async fn write_at_schema_10(events: Vec<knife_protocol::DomainEvent>, tables: &[&str]) -> String {
    let cluster = cluster().await;
    let today = cluster.fresh_database().await;
    {
        let store = knife_store_postgres::open(&cluster.url(&today))
            .await
            .unwrap();
        store.write(events).await.unwrap();
    }
    let old = cluster.fresh_database().await;
    let to = connect(&old).await;
    to.batch_execute(
        "CREATE TABLE knife_migrations (version BIGINT PRIMARY KEY, name TEXT NOT NULL, \
         applied_at TIMESTAMPTZ NOT NULL DEFAULT now())",
    )
    .await
    .unwrap();
    for (version, name, sql) in BEFORE_USAGE_RECORDS {
        to.batch_execute(sql).await.unwrap();
        to.execute(
            "INSERT INTO knife_migrations (version, name) VALUES ($1, $2)",
            &[version, name],
        )
        .await
        .unwrap();
    }
    let from = connect(&today).await;
    for table in ["events", "log_head"].iter().chain(tables) {
        to.batch_execute(&format!("DELETE FROM {table}"))
            .await
            .unwrap();
        let rows = from
            .query(&format!("SELECT row_to_json(t)::text FROM {table} t"), &[])
            .await
            .unwrap();
        for row in rows {
            let json: String = row.get(0);
            to.execute(
                &format!(
                    "INSERT INTO {table} SELECT * FROM json_populate_record(NULL::{table}, $1::text::json)"
                ),
                &[&json],
            )
            .await
            .unwrap();
        }
    }
    old
}

/// TURN-06: runs that ended before the usage records existed count once each after
/// the migration (0045 copies their totals), after a rebuild, and a run still running
/// at the migration counts once when it ends.
#[tokio::test]
#[cfg_attr(
    not(knife_has_postgres),
    ignore = "needs PostgreSQL (Debian package postgresql, or KNIFE_PG_BIN)"
)]
async fn turn_06_runs_from_before_the_usage_records_count_once_after_the_migration() {
    use knife_store::contract::migration::*;
    let db = write_at_schema_10(legacy_usage_log(), &["projects", "threads", "runs"]).await;
    let store = knife_store_postgres::open(&cluster().await.url(&db))
        .await
        .unwrap();
    turn_06_runs_from_before_the_usage_records_count_once_after_the_migration(&store).await;
}
