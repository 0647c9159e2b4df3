// Schema of the PostgreSQL backend: the embedded, numbered migrations, applied once per
// database under an advisory lock and tracked in `knife_migrations`.

use crate::error::{PgError, PgResult};
use knife_store::StoreError;

/// One embedded migration: `migrations/<version padded to 4>_<name>.sql`.
#[derive(Debug)]
pub(crate) struct Migration {
    /// Schema version after this migration.
    pub version: i64,
    pub name: &'static str,
    pub sql: &'static str,
}

/// Every migration, in order; versions unique and strictly increasing (unit test).
pub(crate) const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        name: "init",
        sql: include_str!("../migrations/0001_init.sql"),
    },
    Migration {
        version: 2,
        name: "thread_leases",
        sql: include_str!("../migrations/0002_thread_leases.sql"),
    },
    Migration {
        version: 3,
        name: "search",
        sql: include_str!("../migrations/0003_search.sql"),
    },
    Migration {
        version: 10,
        name: "nodes",
        sql: include_str!("../migrations/0010_nodes.sql"),
    },
    Migration {
        version: 45,
        name: "model_calls",
        sql: include_str!("../migrations/0045_model_calls.sql"),
    },
    Migration {
        version: 50,
        name: "claimed_at",
        sql: include_str!("../migrations/0050_claimed_at.sql"),
    },
    Migration {
        version: 60,
        name: "turn_item_chunks",
        sql: include_str!("../migrations/0060_turn_item_chunks.sql"),
    },
    Migration {
        version: 75,
        name: "append_pipeline",
        sql: include_str!("../migrations/0075_append_pipeline.sql"),
    },
];

/// Advisory lock key that serialises migrations of one database across nodes.
const MIGRATION_LOCK: i64 = 0x6b6e_6966_6501; // "knife" + 1

/// The schema version this build writes.
pub(crate) fn latest_version() -> i64 {
    MIGRATIONS.last().map_or(0, |m| m.version)
}

/// Applies every migration newer than the database's, each in its own transaction,
/// while holding a transaction-scoped advisory lock (two nodes starting at once apply
/// each migration once). Idempotent.
pub(crate) async fn migrate(client: &mut tokio_postgres::Client) -> PgResult<()> {
    client
        .batch_execute(
            "CREATE TABLE IF NOT EXISTS knife_migrations (
                 version    BIGINT PRIMARY KEY,
                 name       TEXT NOT NULL,
                 applied_at TIMESTAMPTZ NOT NULL DEFAULT now()
             )",
        )
        .await
        .or_else(ignore_concurrent_create)?;
    for m in MIGRATIONS {
        let tx = client.transaction().await?;
        tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
            .await?;
        let current = current_version(&tx).await?;
        if current > latest_version() {
            return Err(StoreError::SchemaTooNew {
                found: current,
                supported: latest_version(),
            }
            .into());
        }
        if current >= m.version {
            continue;
        }
        let wrap = |source: tokio_postgres::Error| -> PgError {
            StoreError::Migration {
                version: m.version,
                name: m.name,
                source: Box::new(source),
            }
            .into()
        };
        tx.batch_execute(m.sql).await.map_err(wrap)?;
        tx.execute(
            "INSERT INTO knife_migrations (version, name) VALUES ($1, $2)",
            &[&m.version, &m.name],
        )
        .await
        .map_err(wrap)?;
        tx.commit().await.map_err(wrap)?;
        tracing::info!(
            version = m.version,
            name = m.name,
            "applied store migration"
        );
    }
    Ok(())
}

/// The highest applied migration (0 for a fresh database).
pub(crate) async fn current_version(client: &impl tokio_postgres::GenericClient) -> PgResult<i64> {
    let row = client
        .query_one(
            "SELECT COALESCE(MAX(version), 0) FROM knife_migrations",
            &[],
        )
        .await?;
    Ok(row.get(0))
}

/// Two nodes racing on `CREATE TABLE IF NOT EXISTS` can both pass the existence check;
/// the loser gets a unique violation on the catalog, which means "it exists now".
fn ignore_concurrent_create(e: tokio_postgres::Error) -> PgResult<()> {
    match e.code() {
        Some(code) if *code == tokio_postgres::error::SqlState::UNIQUE_VIOLATION => Ok(()),
        _ => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use std::path::Path;

    #[test]
    fn migration_files_are_embedded_once_in_increasing_order() {
        let mut prev = 0;
        for m in MIGRATIONS {
            assert!(m.version > prev, "migration {} after {}", m.version, prev);
            prev = m.version;
        }
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations");
        let mut files: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".sql"))
            .collect();
        files.sort();
        let embedded: Vec<String> = MIGRATIONS
            .iter()
            .map(|m| format!("{:04}_{}.sql", m.version, m.name))
            .collect();
        assert_eq!(files, embedded, "migrations/ and MIGRATIONS disagree");
    }
}
