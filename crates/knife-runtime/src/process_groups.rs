//! Process groups a knife server spawned (tool commands, adapter processes), recorded
//! in the store so the next server can kill the ones that outlived a crashed owner
//! (ARCHITECTURE.md "Child processes"; issue 4, boot order).
//!
//! Whoever spawns a process group calls [`ProcessGroups::register`] right after the
//! spawn and [`ProcessGroups::unregister`] once the group was reaped. At boot, before
//! the restart sweep, [`kill_leftover_process_groups`] kills every recorded group of
//! a previous process that is still alive and forgets all rows of dead owners.

use knife_protocol::ThreadId;
use knife_store::{ProcessGroupRecord, Store};
use nix::errno::Errno;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

use crate::clock::SharedClock;
use crate::error::RuntimeError;

/// Registry of the process groups this server spawns. Cheap to clone.
#[derive(Clone)]
pub struct ProcessGroups {
    store: Store,
    clock: SharedClock,
    owner: u32,
}

impl ProcessGroups {
    /// A registry recording groups as owned by this process.
    pub fn new(store: Store, clock: SharedClock) -> Self {
        Self {
            store,
            clock,
            owner: std::process::id(),
        }
    }

    /// Records process group `pgid` (the pid of its leader, spawned with its own
    /// group), working for `thread`, described by `label` (for logs). Call right after
    /// the spawn. Errors: [`RuntimeError::Store`].
    pub async fn register(
        &self,
        pgid: i32,
        thread: Option<&ThreadId>,
        label: &str,
    ) -> Result<(), RuntimeError> {
        self.store
            .register_process_group(ProcessGroupRecord {
                pgid,
                owner_pid: self.owner,
                leader_start: process_start_ticks(pgid),
                thread_id: thread.cloned(),
                label: label.to_owned(),
                registered_at: self.clock.now(),
            })
            .await?;
        Ok(())
    }

    /// Forgets process group `pgid` once it ended. Errors: [`RuntimeError::Store`].
    pub async fn unregister(&self, pgid: i32) -> Result<(), RuntimeError> {
        self.store.unregister_process_group(pgid).await?;
        Ok(())
    }
}

/// What [`kill_leftover_process_groups`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KillReport {
    /// Groups that were still alive and got SIGKILL: (pgid, label).
    pub killed: Vec<(i32, String)>,
    /// Rows of groups that were already gone.
    pub gone: usize,
}

/// Kills every recorded process group whose owner is not this process and that is
/// still alive (SIGKILL to the whole group), then forgets those rows. A group whose
/// leader pid now belongs to a different process (start time differs) is not ours any
/// more and is only forgotten. Call at boot while holding the data-directory lock, so
/// every other owner is known dead.
///
/// Errors: [`RuntimeError::Store`]; a failed kill is logged and the row kept.
pub async fn kill_leftover_process_groups(store: &Store) -> Result<KillReport, RuntimeError> {
    let me = std::process::id();
    let mut report = KillReport::default();
    for record in store.list_process_groups().await? {
        if record.owner_pid == me {
            continue;
        }
        let reused = match (record.leader_start, process_start_ticks(record.pgid)) {
            (Some(recorded), Some(now)) => recorded != now,
            _ => false,
        };
        if reused || record.pgid <= 1 {
            report.gone += 1;
        } else {
            match killpg(Pid::from_raw(record.pgid), Signal::SIGKILL) {
                Ok(()) => {
                    tracing::warn!(
                        pgid = record.pgid, label = %record.label, owner = record.owner_pid,
                        "killed a process group left running by a previous knife process"
                    );
                    report.killed.push((record.pgid, record.label.clone()));
                }
                Err(Errno::ESRCH) => report.gone += 1,
                Err(e) => {
                    tracing::error!(
                        pgid = record.pgid, label = %record.label, error = %e,
                        "could not kill a process group left by a previous knife process; kill it by hand"
                    );
                    continue;
                }
            }
        }
        store.unregister_process_group(record.pgid).await?;
    }
    Ok(report)
}

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
/// Shared by the built-in agent's `bash` and the external runtimes' supervisor.
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
pub fn process_start_ticks(pid: i32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // `comm` (field 2) may hold spaces and parentheses: fields 3.. follow the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(19)?.parse().ok()
}
