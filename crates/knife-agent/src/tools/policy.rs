//! [`ToolPolicy`]: what a session's tool calls are allowed and how their
//! processes are observed; [`ProcessObserver`]: the hook that records process groups.

use std::ffi::OsStr;
use std::sync::Arc;

use crate::permissions::{AllowAll, ApprovalGate, PermissionRules};

/// Prefix of knife's own environment variables; every variable starting with it
/// is removed from the environment of `bash` commands.
pub const KNIFE_ENV_PREFIX: &str = "KNIFE_";

/// Told about every process group a tool spawns, so the durable-execution layer
/// can record it and a restarted server can kill groups a crash left behind.
///
/// Both calls are synchronous and made from the tool's task (or, for a call
/// dropped mid-run, from the task that kills its group): an implementation must
/// not block; send to a channel or spawn if it needs to write somewhere.
pub trait ProcessObserver: Send + Sync + 'static {
    /// A process group was started; `pgid` is its id (= the leader's pid), which
    /// is also its session id (commands run in a session of their own).
    fn spawned(&self, pgid: u32);
    /// The group `pgid` is gone: every member was killed or exited, and the
    /// leader was reaped. Not called if the server dies first: the recorded
    /// `spawned` is then the next boot's cue to kill the group.
    fn exited(&self, pgid: u32);
}

/// The policy of a session's tool calls. The default allows every `ask` (no
/// approvals yet), strips only `KNIFE_*` variables and observes nothing.
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
    /// Answers `ask` decisions.
    pub approvals: Arc<dyn ApprovalGate>,
}

impl Default for ToolPolicy {
    fn default() -> Self {
        Self {
            secret_env_vars: Vec::new(),
            process_observer: None,
            permissions: PermissionRules::defaults(),
            approvals: Arc::new(AllowAll),
        }
    }
}

impl std::fmt::Debug for ToolPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolPolicy")
            .field("secret_env_vars", &self.secret_env_vars)
            .field("process_observer", &self.process_observer.is_some())
            .field("permissions", &self.permissions.rules())
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
}
