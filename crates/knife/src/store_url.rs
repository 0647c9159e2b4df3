// The composition root's choice of store backend: SQLite in the data dir by default, or
// the PostgreSQL database named by `[store] url` / `--database` (SPEC SCALE-01).

use std::path::Path;

use anyhow::bail;
use knife_store::Store;

use crate::app::DB_FILE;

/// Where the store lives, from `[store] url` (or `--database`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StoreLocation {
    /// `<data dir>/knife.db` (no URL: the zero-config default).
    SqliteInDataDir,
    /// A SQLite file elsewhere (`sqlite:///abs/path.db` or `sqlite:relative.db`).
    SqliteFile(std::path::PathBuf),
    /// A PostgreSQL database (`postgres://…` or `postgresql://…`).
    Postgres(String),
}

impl StoreLocation {
    /// Parses `url`; `None` is the default.
    ///
    /// Errors: a URL of another scheme, naming the URL (password hidden) and the forms
    /// knife accepts.
    pub fn parse(url: Option<&str>) -> anyhow::Result<StoreLocation> {
        let Some(url) = url.map(str::trim).filter(|u| !u.is_empty()) else {
            return Ok(StoreLocation::SqliteInDataDir);
        };
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            return Ok(StoreLocation::Postgres(url.to_owned()));
        }
        if let Some(path) = url
            .strip_prefix("sqlite://")
            .or_else(|| url.strip_prefix("sqlite:"))
        {
            return Ok(StoreLocation::SqliteFile(path.into()));
        }
        bail!(
            "unknown store URL {}: use postgres://user:password@host:port/database for \
             PostgreSQL, sqlite:/path/to/knife.db for a SQLite file, or leave [store] url unset \
             for SQLite in the data directory",
            knife_store_postgres::redact(url)
        )
    }

    /// What to show in logs: the path, or the URL with its password hidden.
    pub fn describe(&self, data_dir: &Path) -> String {
        match self {
            StoreLocation::SqliteInDataDir => data_dir.join(DB_FILE).display().to_string(),
            StoreLocation::SqliteFile(p) => p.display().to_string(),
            StoreLocation::Postgres(url) => knife_store_postgres::redact(url),
        }
    }

    /// Opens the store. Errors carry the backend's message (path or redacted URL and
    /// what to do).
    pub async fn open(&self, data_dir: &Path) -> anyhow::Result<Store> {
        let store = match self {
            StoreLocation::SqliteInDataDir => {
                knife_store_sqlite::open(data_dir.join(DB_FILE)).await
            }
            StoreLocation::SqliteFile(p) => knife_store_sqlite::open(p).await,
            StoreLocation::Postgres(url) => knife_store_postgres::open(url).await,
        };
        Ok(store?)
    }
}
