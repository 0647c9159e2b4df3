//! [`ToolPolicy`]: what a session's tool calls are allowed and where their
//! process groups are recorded.

use std::ffi::{OsStr, OsString};
use std::sync::Arc;

use knife_process::GroupRecorder;
use knife_process::sandbox::SandboxSettings;

use crate::permissions::{ApprovalGate, PermissionRules};

/// Prefix of knife's own environment variables; every variable starting with it
/// is removed from the environment of `bash` commands.
pub const KNIFE_ENV_PREFIX: &str = "KNIFE_";

/// The policy of a session's tool calls. The default asks the user for every
/// `ask` (runtime requests, see `crate::approvals`), applies the default rules,
/// strips only `KNIFE_*` variables and observes nothing.
#[derive(Clone)]
pub struct ToolPolicy {
    /// Environment variables removed from `bash` commands besides every
    /// `KNIFE_*` one: the API-key variables of the configured providers
    /// (`api_key_env`), so a command cannot read knife's secrets.
    pub secret_env_vars: Vec<String>,
    /// Records every process group `bash` starts and reaps (knife-runtime's
    /// `ProcessGroups` in the server), so the next boot kills what a crash left.
    pub process_recorder: Option<Arc<dyn GroupRecorder>>,
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
    /// The sandbox of `bash` commands (SEC-01): `None` runs them unsandboxed (unit
    /// tests, embedding); the server sets it from what the machine offers and the
    /// projects' `sandbox` settings.
    pub sandbox: Option<Arc<SandboxSettings>>,
    /// Variables set for `bash` commands of the project whose root is the key
    /// (canonical), on top of the allowlist (SEC-02; `[[projects]] env`).
    pub project_env: Vec<(std::path::PathBuf, Vec<(OsString, OsString)>)>,
    /// The project root whose settings (`project_env`, the sandbox's project
    /// settings) apply to this session's commands, when the session works in a
    /// thread's worktree of that project (CHG-07); `None`: the session's own root.
    /// Set by [`Self::for_project`].
    pub settings_root: Option<std::path::PathBuf>,
}

impl Default for ToolPolicy {
    fn default() -> Self {
        Self {
            secret_env_vars: Vec::new(),
            process_recorder: None,
            permissions: PermissionRules::defaults(),
            approvals: None,
            project_permissions: Vec::new(),
            sandbox: None,
            project_env: Vec::new(),
            settings_root: None,
        }
    }
}

impl std::fmt::Debug for ToolPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolPolicy")
            .field("secret_env_vars", &self.secret_env_vars)
            .field("process_recorder", &self.process_recorder.is_some())
            .field("permissions", &self.permissions.rules())
            .field("approvals", &self.approvals.is_some())
            .field("project_permissions", &self.project_permissions.len())
            .field("sandbox", &self.sandbox.as_ref().map(|s| s.support.kind()))
            .finish_non_exhaustive()
    }
}

impl ToolPolicy {
    /// The `env` table of the project whose root is or contains `root`.
    pub fn env_for(&self, root: &std::path::Path) -> &[(OsString, OsString)] {
        self.project_env
            .iter()
            .filter(|(r, _)| root.starts_with(r))
            .max_by_key(|(r, _)| r.as_os_str().len())
            .map(|(_, env)| env.as_slice())
            .unwrap_or(&[])
    }

    /// Whether environment variable `name` must not reach a command: it starts
    /// with [`KNIFE_ENV_PREFIX`] or is one of [`Self::secret_env_vars`].
    pub fn is_secret_env(&self, name: &OsStr) -> bool {
        let Some(name) = name.to_str() else {
            return false;
        };
        name.starts_with(KNIFE_ENV_PREFIX) || self.secret_env_vars.iter().any(|s| s == name)
    }

    /// The policy for a session of the project rooted at `root` (canonical; for a
    /// thread's worktree, the project's root, CHG-07): the same, with the rules of
    /// the matching [`Self::project_permissions`] entry (already combined with the
    /// global ones) as [`Self::permissions`], and `root` as [`Self::settings_root`].
    pub fn for_project(&self, root: &std::path::Path) -> Self {
        let permissions = self
            .project_permissions
            .iter()
            .find(|(r, _)| r == root)
            .map_or_else(|| self.permissions.clone(), |(_, rules)| rules.clone());
        Self {
            permissions,
            settings_root: Some(root.to_path_buf()),
            ..self.clone()
        }
    }

    /// The root whose project settings apply to commands run in `root`: the
    /// [`Self::settings_root`] when set, else `root` itself.
    pub fn settings_root_for<'a>(&'a self, root: &'a std::path::Path) -> &'a std::path::Path {
        self.settings_root.as_deref().unwrap_or(root)
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
