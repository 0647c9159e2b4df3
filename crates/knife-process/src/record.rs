//! What knife remembers about a process group it started ([`GroupRecord`]) and the
//! hook that writes it down ([`GroupRecorder`]; the store sits behind it, not here).

use knife_protocol::ThreadId;

use crate::signals::{boot_id, group_alive, process_start_ticks};

/// A process group knife started, with what tells it apart from a later group that
/// got the same number (pids are reused).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct GroupRecord {
    /// The group's id = its leader's pid (also its session id).
    pub pgid: u32,
    /// The leader's start time in clock ticks since boot (`/proc/<pid>/stat` field
    /// 22). Linux only.
    pub leader_start_ticks: Option<u64>,
    /// The kernel's boot id when the group started. Linux only.
    pub boot_id: Option<String>,
    /// The thread the group works for, when known.
    pub thread_id: Option<ThreadId>,
    /// What the group runs, for logs (`bash: <command>`, `codex: app-server`).
    pub label: String,
}

impl GroupRecord {
    /// The record of group `pgid`, read now (call it while the leader runs).
    pub fn capture(pgid: u32, thread_id: Option<ThreadId>, label: impl Into<String>) -> Self {
        Self {
            pgid,
            leader_start_ticks: process_start_ticks(pgid),
            boot_id: boot_id(),
            thread_id,
            label: label.into(),
        }
    }

    /// Whether a live process group with this id is still the one recorded, so
    /// killing it (after a crash) cannot hit an unrelated program: same boot, and
    /// either the leader is the recorded process (same start time) or the leader is
    /// gone but members remain (a pgid's number is not reused while members hold
    /// it). False when the group is gone, and off Linux (nothing to check against).
    pub fn is_still_ours(&self) -> bool {
        let (Some(boot), Some(ticks)) = (&self.boot_id, self.leader_start_ticks) else {
            return false;
        };
        if boot_id().as_ref() != Some(boot) {
            return false;
        }
        match process_start_ticks(self.pgid) {
            Some(now) => now == ticks,
            None => group_alive(self.pgid),
        }
    }
}

/// Why a [`GroupRecorder`] could not write: its own error, as a source.
pub type RecordError = Box<dyn std::error::Error + Send + Sync>;

/// Writes down the process groups knife starts, so the next boot can kill the ones
/// a crash left behind (knife-runtime's `ProcessGroups` over the store; tests
/// record in memory). Failures are logged by the caller and never stop a process:
/// a lost record only means a crash could leave that group running.
#[async_trait::async_trait]
pub trait GroupRecorder: Send + Sync + 'static {
    /// The group was started (its leader runs). Awaited right after the spawn,
    /// before the process is handed to its user.
    async fn register(&self, group: &GroupRecord) -> Result<(), RecordError>;
    /// The group is gone (every member exited or was killed; the leader was
    /// reaped). Not called when the server dies first, or when members survived
    /// SIGKILL: the record is then the next boot's cue.
    async fn unregister(&self, group: &GroupRecord) -> Result<(), RecordError>;
}

impl std::fmt::Debug for dyn GroupRecorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("GroupRecorder")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(target_os = "linux")]
    #[test]
    fn a_record_matches_its_live_process_and_not_a_reused_number() {
        let me = std::process::id();
        let record = GroupRecord::capture(me, None, "test");
        assert!(record.leader_start_ticks.is_some() && record.boot_id.is_some());
        // Our own pid as a "group": the leader is alive with the same start time.
        assert!(record.is_still_ours());
        // Same number, another start time: the number was reused.
        let reused = GroupRecord {
            leader_start_ticks: record.leader_start_ticks.map(|t| t + 1),
            ..record.clone()
        };
        assert!(!reused.is_still_ours());
        // Another boot: nothing of the old one survives.
        let rebooted = GroupRecord {
            boot_id: Some("another-boot".into()),
            ..record.clone()
        };
        assert!(!rebooted.is_still_ours());
        let unknown = GroupRecord {
            leader_start_ticks: None,
            ..record
        };
        assert!(!unknown.is_still_ours());
    }
}
