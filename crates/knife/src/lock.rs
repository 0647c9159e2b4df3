//! The data-directory lock: one knife process owns a data directory at a time.
//! The lock file also says who owns it (pid, server URL) so other commands can find that server.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::{Deserialize, Serialize};

/// Name of the lock file inside the data directory.
pub const LOCK_FILE: &str = "knife.lock";

/// Who holds a data directory (the lock file's JSON content).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct LockOwner {
    pub pid: u32,
    /// `http://ADDR` when the owner serves the API.
    pub url: Option<String>,
}

/// An exclusive advisory lock (`flock`) on `<data dir>/knife.lock`, released when
/// dropped or when the process dies (so a crash never leaves a stale lock).
#[derive(Debug)]
pub struct DataDirLock {
    file: File,
    path: PathBuf,
    owner: LockOwner,
}

impl DataDirLock {
    /// Takes the lock of `dir` (which must exist).
    ///
    /// Errors: the directory is in use by another knife process — the message names
    /// its pid and server URL and says what to do instead.
    pub async fn acquire(dir: &Path) -> anyhow::Result<DataDirLock> {
        let path = dir.join(LOCK_FILE);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .with_context(|| format!("cannot open the lock file {}", path.display()))?;
        match try_lock_briefly(&file).await {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                let owner = read_owner(&path).unwrap_or_default();
                let how = match &owner.url {
                    Some(url) => format!(
                        "serving {url}); send your requests there (e.g. `knife run --server {url} …`)"
                    ),
                    None => "without a server); wait for it to finish".to_owned(),
                };
                anyhow::bail!(
                    "another knife process (pid {}, {how}, or choose another --data-dir than {}",
                    owner.pid,
                    dir.display()
                );
            }
            Err(TryLockError::Error(e)) => {
                return Err(e).with_context(|| format!("cannot lock {}", path.display()));
            }
        }
        let mut lock = DataDirLock {
            file,
            path,
            owner: LockOwner {
                pid: std::process::id(),
                url: None,
            },
        };
        lock.write_owner()?;
        Ok(lock)
    }

    /// Records the URL this process serves the API on, for other commands to find.
    pub fn record_url(&mut self, url: String) -> anyhow::Result<()> {
        self.owner.url = Some(url);
        self.write_owner()
    }

    /// Overwrites the owner record in place, then trims the file to it, so a reader
    /// never sees an empty file (at worst a record with trailing bytes of the old one,
    /// which the JSON reader rejects and [`current_owner`] treats as "starting").
    fn write_owner(&mut self) -> anyhow::Result<()> {
        let json = serde_json::to_vec(&self.owner)?;
        self.file.seek(SeekFrom::Start(0))?;
        self.file
            .write_all(&json)
            .and_then(|()| self.file.set_len(json.len() as u64))
            .and_then(|()| self.file.flush())
            .with_context(|| format!("cannot write {}", self.path.display()))
    }
}

/// `try_lock`, retried for up to [`LOCK_RETRY`]: [`current_owner`] probes the lock with
/// a brief shared lock, which must not make a starting server give up.
async fn try_lock_briefly(file: &File) -> Result<(), TryLockError> {
    let deadline = tokio::time::Instant::now() + LOCK_RETRY;
    loop {
        match file.try_lock() {
            Err(TryLockError::WouldBlock) if tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
            other => return other,
        }
    }
}

/// How long [`DataDirLock::acquire`] retries a lock that is held.
const LOCK_RETRY: std::time::Duration = std::time::Duration::from_millis(200);

/// The owner of `dir`'s lock while some live process holds it; `None` when the
/// directory is free (no lock file, or a file left by a process that is gone).
pub async fn current_owner(dir: &Path) -> Option<LockOwner> {
    let path = dir.join(LOCK_FILE);
    let file = File::open(&path).ok()?;
    match file.try_lock_shared() {
        // We could lock it: nobody holds it. Dropping `file` releases our lock.
        Ok(()) => None,
        Err(TryLockError::WouldBlock) => {
            drop(file);
            // The owner may be writing its record right now: give it a moment.
            for _ in 0..20 {
                if let Some(owner) = read_owner(&path) {
                    return Some(owner);
                }
                tokio::time::sleep(std::time::Duration::from_millis(25)).await;
            }
            Some(LockOwner::default())
        }
        Err(TryLockError::Error(_)) => None,
    }
}

fn read_owner(path: &Path) -> Option<LockOwner> {
    let mut text = String::new();
    File::open(path).ok()?.read_to_string(&mut text).ok()?;
    serde_json::from_str(&text).ok()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[tokio::test]
    async fn a_second_lock_is_refused_with_the_owner_and_freed_on_drop() {
        let dir = tempfile::tempdir().unwrap();
        assert!(current_owner(dir.path()).await.is_none());
        let mut lock = DataDirLock::acquire(dir.path()).await.unwrap();
        lock.record_url("http://127.0.0.1:7878".into()).unwrap();
        let owner = current_owner(dir.path()).await.unwrap();
        assert_eq!(owner.pid, std::process::id());
        assert_eq!(owner.url.as_deref(), Some("http://127.0.0.1:7878"));
        let err = DataDirLock::acquire(dir.path())
            .await
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("knife run --server http://127.0.0.1:7878"),
            "{err}"
        );
        drop(lock);
        assert!(
            current_owner(dir.path()).await.is_none(),
            "a dropped lock frees the directory"
        );
        DataDirLock::acquire(dir.path()).await.unwrap();
    }
}
