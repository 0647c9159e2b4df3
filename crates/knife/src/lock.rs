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
    pub fn acquire(dir: &Path) -> anyhow::Result<DataDirLock> {
        let path = dir.join(LOCK_FILE);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .with_context(|| format!("cannot open the lock file {}", path.display()))?;
        match file.try_lock() {
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

    fn write_owner(&mut self) -> anyhow::Result<()> {
        let json = serde_json::to_vec(&self.owner)?;
        self.file.set_len(0)?;
        self.file.seek(SeekFrom::Start(0))?;
        self.file
            .write_all(&json)
            .and_then(|()| self.file.flush())
            .with_context(|| format!("cannot write {}", self.path.display()))
    }
}

/// The owner of `dir`'s lock while some live process holds it; `None` when the
/// directory is free (no lock file, or a file left by a process that is gone).
pub fn current_owner(dir: &Path) -> Option<LockOwner> {
    let path = dir.join(LOCK_FILE);
    let file = File::open(&path).ok()?;
    match file.try_lock_shared() {
        // We could lock it: nobody holds it. Dropping `file` releases our lock.
        Ok(()) => None,
        Err(TryLockError::WouldBlock) => Some(read_owner(&path).unwrap_or_default()),
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

    #[test]
    fn a_second_lock_is_refused_with_the_owner_and_freed_on_drop() {
        let dir = tempfile::tempdir().unwrap();
        assert!(current_owner(dir.path()).is_none());
        let mut lock = DataDirLock::acquire(dir.path()).unwrap();
        lock.record_url("http://127.0.0.1:7878".into()).unwrap();
        let owner = current_owner(dir.path()).unwrap();
        assert_eq!(owner.pid, std::process::id());
        assert_eq!(owner.url.as_deref(), Some("http://127.0.0.1:7878"));
        let err = DataDirLock::acquire(dir.path()).unwrap_err().to_string();
        assert!(
            err.contains("knife run --server http://127.0.0.1:7878"),
            "{err}"
        );
        drop(lock);
        assert!(
            current_owner(dir.path()).is_none(),
            "a dropped lock frees the directory"
        );
        DataDirLock::acquire(dir.path()).unwrap();
    }
}
