//! [`ToolPolicy`]: what a session's tool calls are allowed and how their
//! processes are observed; [`ProcessObserver`]: the hook that records process groups.

use std::ffi::OsStr;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::permissions::{ApprovalGate, PermissionRules};

/// Prefix of knife's own environment variables; every variable starting with it
/// is removed from the environment of `bash` commands.
pub const KNIFE_ENV_PREFIX: &str = "KNIFE_";

/// Told about every process group a tool spawns, so the durable-execution layer
/// can record it and a restarted server can kill groups a crash left behind
/// (after [`ProcessGroupRecord::is_still_ours`] says the number was not reused).
///
/// Both calls are synchronous and made from the tool's task (or, for a call
/// dropped mid-run, from the task that kills its group): an implementation must
/// not block; send to a channel or spawn if it needs to write somewhere.
pub trait ProcessObserver: Send + Sync + 'static {
    /// A process group was started (its leader, the shell, is running).
    fn spawned(&self, group: &ProcessGroupRecord);
    /// The group is gone: every member was killed or exited, and the leader was
    /// reaped. Not called if the server dies first: a recorded `spawned` without
    /// `exited` is then the next boot's cue to kill the group.
    fn exited(&self, group: &ProcessGroupRecord);
}

/// A process group started by a tool, with what tells it apart from a later
/// group that got the same number (pids are reused). Serializable, to be stored.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ProcessGroupRecord {
    /// The group's id = its leader's pid (also its session id).
    pub pgid: u32,
    /// The leader's start time in clock ticks since boot (`/proc/<pid>/stat`
    /// field 22). Linux only.
    pub leader_start_ticks: Option<u64>,
    /// The kernel's boot id when the group started
    /// (`/proc/sys/kernel/random/boot_id`). Linux only.
    pub boot_id: Option<String>,
    /// The thread whose tool call started the group (the session's thread), when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thread_id: Option<knife_protocol::ThreadId>,
    /// What the group runs, for logs: `bash: <command>` (first line, ≤ 80 chars).
    #[serde(default)]
    pub label: String,
}

impl ProcessGroupRecord {
    /// The record of group `pgid`, read now (call it while the leader runs); no
    /// thread, empty label.
    pub fn capture(pgid: u32) -> Self {
        Self {
            pgid,
            leader_start_ticks: start_ticks(pgid),
            boot_id: boot_id(),
            thread_id: None,
            label: String::new(),
        }
    }

    /// Whether a live process group with this id is still the one recorded, so
    /// killing it (after a crash) cannot hit an unrelated program: same boot,
    /// and either the leader is the recorded process (same start time) or the
    /// leader is gone but members remain (a pgid's number is not reused while
    /// members hold it). False when the group is gone, and off Linux (nothing to
    /// check against).
    pub fn is_still_ours(&self) -> bool {
        let (Some(boot), Some(ticks)) = (&self.boot_id, self.leader_start_ticks) else {
            return false;
        };
        if boot_id().as_ref() != Some(boot) {
            return false;
        }
        match start_ticks(self.pgid) {
            Some(now) => now == ticks,
            None => super::process::group_alive(self.pgid),
        }
    }
}

/// Start time (clock ticks since boot) of process `pid`, from `/proc`.
fn start_ticks(pid: u32) -> Option<u64> {
    if !cfg!(target_os = "linux") {
        return None;
    }
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // `pid (comm) state …`: field 22 is the 20th after the command name.
    let (_, rest) = stat.rsplit_once(')')?;
    rest.split_whitespace().nth(19)?.parse().ok()
}

fn boot_id() -> Option<String> {
    if !cfg!(target_os = "linux") {
        return None;
    }
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .ok()
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
}

/// The policy of a session's tool calls. The default asks the user for every
/// `ask` (runtime requests, see `crate::approvals`), applies the default rules,
/// strips only `KNIFE_*` variables and observes nothing.
#[derive(Clone)]
pub struct ToolPolicy {
    /// Environment variables removed from `bash` commands besides every
    /// `KNIFE_*` one: the API-key variables of the configured providers
    /// (`api_key_env`), so a command cannot read knife's secrets.
    pub secret_env_vars: Vec<String>,
    /// Told about every process group `bash` starts and reaps.
    pub process_observer: Option<Arc<dyn ProcessObserver>>,
    /// Rules deciding allow / ask / deny per call.
    pub permissions: PermissionRules,
    /// Answers `ask` decisions automatically when set (tests, headless embedding:
    /// e.g. [`crate::permissions::AllowAll`]). `None` (the default): the built-in
    /// agent asks the user with a runtime request and the turn waits for the answer.
    pub approvals: Option<Arc<dyn ApprovalGate>>,
    /// Rules appended after [`Self::permissions`] for sessions whose project root is
    /// the key (canonical path): per-project overrides from `knife.toml`
    /// (`[[projects]]`), so they win over the global rules.
    pub project_permissions: Vec<(std::path::PathBuf, PermissionRules)>,
}

impl Default for ToolPolicy {
    fn default() -> Self {
        Self {
            secret_env_vars: Vec::new(),
            process_observer: None,
            permissions: PermissionRules::defaults(),
            approvals: None,
            project_permissions: Vec::new(),
        }
    }
}

impl std::fmt::Debug for ToolPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolPolicy")
            .field("secret_env_vars", &self.secret_env_vars)
            .field("process_observer", &self.process_observer.is_some())
            .field("permissions", &self.permissions.rules())
            .field("approvals", &self.approvals.is_some())
            .field("project_permissions", &self.project_permissions.len())
            .finish_non_exhaustive()
    }
}

impl ToolPolicy {
    /// Whether environment variable `name` must not reach a command: it starts
    /// with [`KNIFE_ENV_PREFIX`] or is one of [`Self::secret_env_vars`].
    pub fn is_secret_env(&self, name: &OsStr) -> bool {
        let Some(name) = name.to_str() else {
            return false;
        };
        name.starts_with(KNIFE_ENV_PREFIX) || self.secret_env_vars.iter().any(|s| s == name)
    }

    /// The policy for a session rooted at `root` (canonical): the same, with the
    /// rules of the matching [`Self::project_permissions`] entry (already combined
    /// with the global ones) as [`Self::permissions`]. `None` when no entry matches.
    pub fn for_project(&self, root: &std::path::Path) -> Option<Self> {
        let (_, rules) = self.project_permissions.iter().find(|(r, _)| r == root)?;
        Some(Self {
            permissions: rules.clone(),
            ..self.clone()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn knife_variables_and_configured_secrets_are_secret() {
        let policy = ToolPolicy {
            secret_env_vars: vec!["OPENAI_API_KEY".into()],
            ..ToolPolicy::default()
        };
        assert!(policy.is_secret_env(OsStr::new("KNIFE_TOKEN")));
        assert!(policy.is_secret_env(OsStr::new("OPENAI_API_KEY")));
        assert!(!policy.is_secret_env(OsStr::new("OPENAI_API_KEY_2")));
        assert!(!policy.is_secret_env(OsStr::new("PATH")));
        assert!(!policy.is_secret_env(OsStr::new("knife_lower")));
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_record_matches_its_live_process_and_not_a_reused_number() {
        let me = std::process::id();
        let record = ProcessGroupRecord::capture(me);
        assert!(record.leader_start_ticks.is_some() && record.boot_id.is_some());
        // Our own pid as a "group": the leader is alive with the same start time.
        assert!(record.is_still_ours());
        // Same number, another start time: the number was reused.
        let reused = ProcessGroupRecord {
            leader_start_ticks: record.leader_start_ticks.map(|t| t + 1),
            ..record.clone()
        };
        assert!(!reused.is_still_ours());
        // Another boot: nothing of the old one survives.
        let rebooted = ProcessGroupRecord {
            boot_id: Some("another-boot".into()),
            ..record.clone()
        };
        assert!(!rebooted.is_still_ours());
        let unknown = ProcessGroupRecord {
            leader_start_ticks: None,
            ..record
        };
        assert!(!unknown.is_still_ours());
    }
}
