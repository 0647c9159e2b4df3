//! Free space on the data directory's filesystem (SPEC.md SEC-07): measured at boot
//! and for `GET /healthz/detail`, so a nearly full disk is said, not met as a refusal.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// Below this many free bytes, and below a tenth of its size, the disk counts as low
/// (64 MiB): knife still serves, but may be unable to record runs and messages.
pub const LOW_FREE_BYTES: u64 = 64 * 1024 * 1024;

/// Whether `free` of `total` bytes is low: under [`LOW_FREE_BYTES`] and under a tenth
/// of the disk (a small disk that is mostly empty is not low).
pub fn is_low(free: u64, total: u64) -> bool {
    free < LOW_FREE_BYTES && free < total / 10
}

/// What a nearly full disk stops knife from doing, for the log and `/healthz/detail`.
pub const WHAT_A_FULL_DISK_STOPS: &str = "knife serves and answers reads, but cannot start \
     or end runs or record messages until space is freed (writes answer 507 disk_full; runs \
     that end meanwhile are recorded as soon as space returns)";

/// Free and total bytes of the filesystem holding `dir` (`statvfs`), or `None` when it
/// cannot be measured.
pub fn space_of(dir: &Path) -> Option<(u64, u64)> {
    let stat = nix::sys::statvfs::statvfs(dir).ok()?;
    let fragment = stat.fragment_size() as u64;
    Some((
        (stat.blocks_available() as u64).saturating_mul(fragment),
        (stat.blocks() as u64).saturating_mul(fragment),
    ))
}

/// The data directory's disk as the server reports it: live free space plus the boot
/// steps a full disk made knife skip.
#[derive(Clone, Debug)]
pub struct DiskReport {
    dir: PathBuf,
    skipped: Arc<Mutex<Vec<String>>>,
}

impl DiskReport {
    /// A report on the filesystem of `data_dir`.
    pub fn new(data_dir: &Path) -> DiskReport {
        DiskReport {
            dir: data_dir.to_owned(),
            skipped: Arc::default(),
        }
    }

    /// Notes that a boot step (e.g. "reconcile the previous process's state") was
    /// skipped because the disk is full, and logs what that means.
    pub fn skipped(&self, step: &str, error: &dyn std::fmt::Display) {
        tracing::warn!(
            step, %error,
            "the disk holding the data directory is full: knife starts without this boot \
             step; free space and restart knife to complete it"
        );
        if let Ok(mut skipped) = self.skipped.lock() {
            skipped.push(step.to_owned());
        }
    }

    /// Logs a warning when the disk is low at boot ([`is_low`]).
    pub fn warn_if_low(&self) {
        if let Some((free, total)) = space_of(&self.dir)
            && is_low(free, total)
        {
            tracing::warn!(
                dir = %self.dir.display(),
                free_kib = free / 1024,
                "the disk holding the data directory is nearly full: {WHAT_A_FULL_DISK_STOPS}"
            );
        }
    }

    /// `{"free_bytes", "total_bytes", "low", "note"?, "skipped_at_boot": [...]}` for
    /// `GET /healthz/detail`; sizes in bytes, `null` when unmeasurable.
    pub fn json(&self) -> serde_json::Value {
        let space = space_of(&self.dir);
        let skipped = self.skipped.lock().map(|s| s.clone()).unwrap_or_default();
        let low = space.is_some_and(|(free, total)| is_low(free, total)) || !skipped.is_empty();
        let mut json = serde_json::json!({
            "free_bytes": space.map(|(free, _)| free),
            "total_bytes": space.map(|(_, total)| total),
            "low": low,
            "skipped_at_boot": skipped,
        });
        if low {
            json["note"] = WHAT_A_FULL_DISK_STOPS.into();
        }
        json
    }
}

/// Whether `error` says the disk is full (a store write refused as
/// `StoreError::Full`).
pub fn is_disk_full(error: &knife_runtime::RuntimeError) -> bool {
    matches!(error, knife_runtime::RuntimeError::Store(s) if s.is_disk_full())
}

/// Whether an I/O error is "no space left on device".
pub fn is_enospc(error: &std::io::Error) -> bool {
    error.kind() == std::io::ErrorKind::StorageFull
}
