// Schema: the embedded SQL migrations (tracked with `PRAGMA user_version`) and the
// connection setup (pragmas) for the writer and the read-only connections.

use crate::error::DbError;
use knife_store::StoreError;
use rusqlite::{Connection, OpenFlags, TransactionBehavior};
use std::path::Path;
use std::time::Duration;

/// How long a connection waits for a lock held by another connection (5 s).
pub(crate) const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// Bytes a checkpointed WAL is cut back to (`PRAGMA journal_size_limit`, 64 MiB).
pub(crate) const JOURNAL_SIZE_LIMIT: i64 = 64 * 1024 * 1024;

/// One embedded migration: `migrations/<version padded to 4>_<name>.sql`.
#[derive(Debug)]
pub(crate) struct Migration {
    /// Schema version after this migration; stored in `PRAGMA user_version`.
    pub version: i64,
    pub name: &'static str,
    pub sql: &'static str,
}

/// Every migration, in the order they apply. Versions must be unique and strictly
/// increasing (checked by a unit test); never renumber or edit a released one.
pub(crate) const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        name: "init",
        sql: include_str!("../migrations/0001_init.sql"),
    },
    Migration {
        version: 2,
        name: "project_unique_root",
        sql: include_str!("../migrations/0002_project_unique_root.sql"),
    },
    Migration {
        version: 3,
        name: "execution_claims",
        sql: include_str!("../migrations/0003_execution_claims.sql"),
    },
    Migration {
        version: 40,
        name: "thread_leases",
        sql: include_str!("../migrations/0040_thread_leases.sql"),
    },
    Migration {
        version: 41,
        name: "search",
        sql: include_str!("../migrations/0041_search.sql"),
    },
    Migration {
        version: 50,
        name: "nodes",
        sql: include_str!("../migrations/0050_nodes.sql"),
    },
    Migration {
        version: 85,
        name: "model_calls",
        sql: include_str!("../migrations/0085_model_calls.sql"),
    },
    Migration {
        version: 90,
        name: "claimed_at",
        sql: include_str!("../migrations/0090_claimed_at.sql"),
    },
    Migration {
        version: 100,
        name: "turn_item_chunks",
        sql: include_str!("../migrations/0100_turn_item_chunks.sql"),
    },
    Migration {
        version: 110,
        name: "search_project_key",
        sql: include_str!("../migrations/0110_search_project_key.sql"),
    },
];

/// The schema version this build writes: the last migration's version.
pub(crate) fn latest_version() -> i64 {
    MIGRATIONS.last().map_or(0, |m| m.version)
}

/// Opens (creating if needed) the writer connection: WAL, `synchronous=NORMAL`,
/// 5 s busy timeout, foreign keys on, then applies pending migrations.
///
/// Durability choice: in WAL mode `synchronous=NORMAL` never corrupts the file and
/// keeps every committed transaction across a *process* crash (SIGKILL); only an OS
/// crash or power loss may roll back the last few commits. knife accepts that for
/// all writes, including claims and terminal events: a claim shares its transaction
/// with the run's start and a release with the run's terminal, so a rollback loses
/// both or neither (docs/2026-11-29-durable-execution.md).
pub(crate) fn open_writer(path: &Path) -> Result<Connection, DbError> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| StoreError::Open {
            location: path.display().to_string(),
            message: format!(
                "cannot create the data directory {}: {}; choose a writable --data-dir",
                dir.display(),
                io_reason(&e)
            ),
        })?;
    }
    let open_err = |e: rusqlite::Error| StoreError::Open {
        location: path.display().to_string(),
        message: format!(
            "{e}; check that the file is a knife database and that it and its directory are \
             writable, or choose another --data-dir"
        ),
    };
    let mut conn = Connection::open(path).map_err(open_err)?;
    conn.busy_timeout(BUSY_TIMEOUT).map_err(open_err)?;
    let mode: String = conn
        .pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get(0))
        .map_err(open_err)?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(StoreError::Open {
            location: path.display().to_string(),
            message: format!(
                "SQLite refused write-ahead logging (journal_mode stayed {mode}); put the \
                 --data-dir on a local filesystem"
            ),
        }
        .into());
    }
    conn.pragma_update(None, "synchronous", "NORMAL")
        .map_err(open_err)?;
    conn.pragma_update(None, "foreign_keys", "ON")
        .map_err(open_err)?;
    // The group commit puts each append in a savepoint (writer.rs); SQLite keeps a
    // savepoint's sub-journal in temp storage, a file by default. In memory it costs
    // no file created, written and unlinked per group (LIVE-07).
    conn.pragma_update(None, "temp_store", "MEMORY")
        .map_err(open_err)?;
    stable_plans(&conn).map_err(open_err)?;
    // A WAL left large by a crash (or by readers that kept checkpoints from finishing)
    // is folded into the file and cut to zero bytes before anything else; SQLite then
    // keeps it at most JOURNAL_SIZE_LIMIT after each checkpoint (SPEC.md SEC-07). On a
    // full disk the checkpoint may fail: knife still starts (it is only logged).
    conn.pragma_update(None, "journal_size_limit", JOURNAL_SIZE_LIMIT)
        .map_err(open_err)?;
    crate::writer::checkpoint_truncate(&conn);
    migrate(&mut conn)?;
    Ok(conn)
}

/// Opens one read-only connection to an existing database (used by the read pool).
pub(crate) fn open_reader(path: &Path) -> Result<Connection, DbError> {
    let open_err = |e: rusqlite::Error| StoreError::Open {
        location: path.display().to_string(),
        message: format!("cannot open a read-only connection: {e}; check the file's permissions"),
    };
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY
            | OpenFlags::SQLITE_OPEN_NO_MUTEX
            | OpenFlags::SQLITE_OPEN_URI,
    )
    .map_err(open_err)?;
    conn.busy_timeout(BUSY_TIMEOUT).map_err(open_err)?;
    conn.pragma_update(None, "query_only", "ON")
        .map_err(open_err)?;
    stable_plans(&conn).map_err(open_err)?;
    Ok(conn)
}

/// Turns on SQLite's query planner stability guarantee (`SQLITE_DBCONFIG_ENABLE_QPSG`)
/// for `conn` (LIVE-07). Without it SQLite 3.54 marks a cached statement such as
/// `… WHERE thread_id = ?1` to be compiled again each time a new value is bound (the
/// plan might depend on the value), so every per-thread read and fold paid a full SQL
/// parse: a tenth of the CPU of a 10,000-thread restart. knife's queries have one plan
/// whatever the values (no `ANALYZE` statistics, no `LIKE ?`), so nothing is lost.
pub(crate) fn stable_plans(conn: &Connection) -> rusqlite::Result<()> {
    conn.set_db_config(
        rusqlite::config::DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG,
        true,
    )
    .map(drop)
}

/// Applies every migration newer than `PRAGMA user_version`, each in its own
/// `BEGIN IMMEDIATE` transaction (so two processes opening at once cannot both apply
/// it: the second re-reads the version under the write lock). Idempotent.
pub(crate) fn migrate(conn: &mut Connection) -> Result<(), DbError> {
    for m in MIGRATIONS {
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let current: i64 = tx.pragma_query_value(None, "user_version", |row| row.get(0))?;
        if current > latest_version() {
            return Err(StoreError::SchemaTooNew {
                found: current,
                supported: latest_version(),
            }
            .into());
        }
        if current >= m.version {
            continue; // already applied; `tx` rolls back (nothing written)
        }
        let wrap = |source: rusqlite::Error| StoreError::Migration {
            version: m.version,
            name: m.name,
            source: Box::new(source),
        };
        tx.execute_batch(m.sql).map_err(wrap)?;
        // user_version lives in the file header, which is part of the transaction.
        tx.pragma_update(None, "user_version", m.version)
            .map_err(wrap)?;
        tx.commit().map_err(wrap)?;
        tracing::info!(
            version = m.version,
            name = m.name,
            "applied store migration"
        );
    }
    Ok(())
}

/// Reads `PRAGMA user_version`.
pub(crate) fn schema_version(conn: &Connection) -> Result<i64, DbError> {
    Ok(conn.pragma_query_value(None, "user_version", |row| row.get(0))?)
}

/// A short, lower-case reason for an I/O error ("permission denied", "not a directory").
fn io_reason(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::PermissionDenied => "permission denied".to_owned(),
        std::io::ErrorKind::NotADirectory => {
            "a path component is a file, not a directory".to_owned()
        }
        std::io::ErrorKind::ReadOnlyFilesystem => "read-only file system".to_owned(),
        _ => e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use std::collections::BTreeSet;

    #[test]
    fn migration_versions_are_unique_and_strictly_increasing() {
        let mut prev = 0;
        for m in MIGRATIONS {
            assert!(m.version > prev, "migration {} after {}", m.version, prev);
            prev = m.version;
        }
        let unique: BTreeSet<i64> = MIGRATIONS.iter().map(|m| m.version).collect();
        assert_eq!(unique.len(), MIGRATIONS.len());
    }

    #[test]
    fn every_migration_file_is_embedded_once_with_its_number() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations");
        let mut files: Vec<(i64, String)> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".sql"))
            .map(|n| {
                let (num, rest) = n.split_once('_').expect("NNNN_name.sql");
                assert_eq!(num.len(), 4, "{n}: four-digit number");
                (
                    num.parse().unwrap(),
                    rest.trim_end_matches(".sql").to_owned(),
                )
            })
            .collect();
        files.sort();
        let numbers: BTreeSet<i64> = files.iter().map(|f| f.0).collect();
        assert_eq!(
            numbers.len(),
            files.len(),
            "two migration files share a number"
        );
        let embedded: Vec<(i64, String)> = MIGRATIONS
            .iter()
            .map(|m| (m.version, m.name.to_owned()))
            .collect();
        assert_eq!(files, embedded, "migrations/ and MIGRATIONS disagree");
    }

    #[test]
    fn migrating_twice_is_idempotent() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("knife.db");
        let conn = open_writer(&path).unwrap();
        assert_eq!(schema_version(&conn).unwrap(), latest_version());
        conn.execute(
            "INSERT INTO events (event_id, type, occurred_at, payload_json) VALUES ('e', 't', 'x', '{}')",
            [],
        )
        .unwrap();
        drop(conn);
        let mut conn = open_writer(&path).unwrap();
        migrate(&mut conn).unwrap();
        assert_eq!(schema_version(&conn).unwrap(), latest_version());
        let n: i64 = conn
            .query_row("SELECT COUNT(*) FROM events", [], |r| r.get(0))
            .unwrap();
        assert_eq!(n, 1, "reopening kept the data");
        let mode: String = conn
            .pragma_query_value(None, "journal_mode", |r| r.get(0))
            .unwrap();
        assert_eq!(mode, "wal");
    }

    #[test]
    fn newer_schema_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("knife.db");
        let conn = open_writer(&path).unwrap();
        conn.pragma_update(None, "user_version", latest_version() + 1)
            .unwrap();
        drop(conn);
        let err = open_writer(&path).unwrap_err();
        let err = StoreError::from(err);
        assert!(matches!(err, StoreError::SchemaTooNew { .. }), "{err}");
        assert!(err.to_string().contains("upgrade knife"));
    }

    /// LIVE-07: a cached per-thread read bound to a new thread id runs the plan it was
    /// compiled with (no SQL parse per value), on the writer and on the readers.
    #[test]
    fn live_07_cached_statements_are_not_compiled_again_for_each_value() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("knife.db");
        let writer = open_writer(&path).unwrap();
        let reader = open_reader(&path).unwrap();
        for conn in [&writer, &reader] {
            for sql in [
                "SELECT payload_json FROM runs WHERE thread_id = ?1 ORDER BY ordinal, id",
                "SELECT MAX(sequence) FROM events WHERE thread_id = ?1",
                "SELECT sequence FROM events WHERE sequence > ?1 AND thread_id = ?2 \
                 ORDER BY sequence LIMIT ?3",
            ] {
                for (i, thread) in ["thread_a", "thread_b", "thread_c"].into_iter().enumerate() {
                    let mut stmt = conn.prepare_cached(sql).unwrap();
                    let i = i as i64;
                    let rows = match stmt.parameter_count() {
                        1 => stmt.query_map([thread], |_| Ok(())).unwrap().count(),
                        _ => stmt
                            .query_map(rusqlite::params![i, thread, i + 10], |_| Ok(()))
                            .unwrap()
                            .count(),
                    };
                    assert_eq!(rows, usize::from(sql.contains("MAX")));
                    assert_eq!(
                        stmt.get_status(rusqlite::StatementStatus::RePrepare),
                        0,
                        "{sql} was compiled again for {thread}"
                    );
                }
            }
        }
    }
}
