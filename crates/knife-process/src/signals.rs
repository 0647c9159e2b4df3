//! Signals to a whole process group and what `/proc` says about it: whether a group
//! still has a live member, a process's start time, the kernel's boot id.

use nix::errno::Errno;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

/// Sends `signal` to every member of process group `pgid`. A group that is gone
/// already (ESRCH) is fine; other failures are logged at debug. Group ids 0 and 1
/// (and ids that do not fit a `pid_t`) are never signalled.
pub fn signal_group(pgid: u32, signal: Signal) {
    let Ok(raw) = i32::try_from(pgid) else {
        return;
    };
    if raw <= 1 {
        return;
    }
    if let Err(e) = killpg(Pid::from_raw(raw), signal)
        && e != Errno::ESRCH
    {
        tracing::debug!(pgid, ?signal, "signalling the process group failed: {e}");
    }
}

/// Whether process group `pgid` has a member that is not a zombie. Linux: scans
/// `/proc` (a group of zombies its parent has not reaped yet counts as gone);
/// elsewhere, or when `/proc` cannot be read: whether the group exists at all.
pub fn group_alive(pgid: u32) -> bool {
    let Ok(raw) = i32::try_from(pgid) else {
        return false;
    };
    if raw <= 1 || killpg(Pid::from_raw(raw), None) == Err(Errno::ESRCH) {
        return false;
    }
    live_member(pgid).unwrap_or(true)
}

/// Linux: whether `/proc` lists a member of `pgid` that is not a zombie; `None`
/// when `/proc` cannot be read.
#[cfg(target_os = "linux")]
fn live_member(pgid: u32) -> Option<bool> {
    let wanted = pgid.to_string();
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let name = entry.file_name();
        if !name.to_string_lossy().bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // `pid (comm) state ppid pgrp …`; comm may hold spaces and parentheses.
        let Some((_, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        let mut fields = rest.split_whitespace();
        let state = fields.next();
        let pgrp = fields.nth(1);
        if pgrp == Some(wanted.as_str()) && !matches!(state, Some("Z" | "X")) {
            return Some(true);
        }
    }
    Some(false)
}

/// Elsewhere zombies cannot be told apart: the group is alive while it exists.
#[cfg(not(target_os = "linux"))]
fn live_member(_pgid: u32) -> Option<bool> {
    None
}

/// Start time of process `pid` in clock ticks since boot (`/proc/<pid>/stat` field
/// 22), or `None` when it does not exist or there is no `/proc`.
pub fn process_start_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // `comm` (field 2) may hold spaces and parentheses: fields 3.. follow the last ')'.
    let (_, rest) = stat.rsplit_once(')')?;
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// The kernel's boot id (`/proc/sys/kernel/random/boot_id`), or `None` off Linux.
pub fn boot_id() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .ok()
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
}
