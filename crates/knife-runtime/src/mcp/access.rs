//! Agent access settings: which MCP capabilities a thread's credential carries
//! (SPEC.md MCP-02..05; the access settings of docs/2026-11-29-mcp.md).
//!
//! Global `agent_browser_access` / `agent_device_access` come from `knife.toml`;
//! a project may override either, both ways. [`resolve_access`] is the pure decision;
//! [`StoreAccessPolicy`] looks the thread's project up in the store and applies it.
//! Anything that cannot be resolved fails closed: no browser, no device.

use std::collections::{BTreeSet, HashMap};

use futures::future::BoxFuture;
use knife_protocol::{McpCapability, Project, ThreadId};
use knife_store::Store;

/// Whether an agent may use browser (preview) and device tools.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AgentAccess {
    /// `preview` capability, `browserToolsAvailable`.
    pub browser: bool,
    /// `device` capability.
    pub device: bool,
}

impl Default for AgentAccess {
    /// The defaults of knife.toml: browser on, device off (MCP-02).
    fn default() -> Self {
        Self {
            browser: true,
            device: false,
        }
    }
}

impl AgentAccess {
    /// No browser, no device: the fail-closed answer (MCP-04, MCP-05).
    pub const CLOSED: AgentAccess = AgentAccess {
        browser: false,
        device: false,
    };
}

/// `{orchestration, worktree, pull-requests}` ∪ `preview` (browser) ∪ `device`
/// (SPEC.md MCP-02, MCP-05).
pub fn capabilities_for(access: AgentAccess) -> BTreeSet<McpCapability> {
    let mut caps = BTreeSet::from([
        McpCapability::Orchestration,
        McpCapability::Worktree,
        McpCapability::PullRequests,
    ]);
    if access.browser {
        caps.insert(McpCapability::Preview);
    }
    if access.device {
        caps.insert(McpCapability::Device);
    }
    caps
}

/// One project's overrides (a `[[projects]]` entry with `root` in knife.toml); `None` = follow the
/// global setting.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProjectAccessOverride {
    /// Overrides the global browser access, both ways (MCP-03).
    pub agent_browser_access: Option<bool>,
    /// Overrides the global device access (MCP-05).
    pub agent_device_access: Option<bool>,
}

/// The access settings of knife.toml.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AccessSettings {
    /// Global browser access (default true).
    pub agent_browser_access: bool,
    /// Global device access (default false).
    pub agent_device_access: bool,
    /// Per-project overrides keyed by the project's root path or its id.
    pub projects: HashMap<String, ProjectAccessOverride>,
}

impl Default for AccessSettings {
    fn default() -> Self {
        let access = AgentAccess::default();
        Self {
            agent_browser_access: access.browser,
            agent_device_access: access.device,
            projects: HashMap::new(),
        }
    }
}

impl AccessSettings {
    /// The override of `project`: by id first, then by root path.
    pub fn override_for(&self, project: &Project) -> ProjectAccessOverride {
        self.projects
            .get(&project.id.to_string())
            .or_else(|| self.projects.get(&project.root))
            .copied()
            .unwrap_or_default()
    }
}

/// What is known about a thread when deciding its access.
#[derive(Clone, Debug)]
pub enum ThreadLookup<'a> {
    /// The thread does not exist (or could not be read).
    ThreadMissing,
    /// The thread exists but its project does not (or could not be read).
    ProjectMissing,
    /// The thread's project.
    Found(&'a Project),
}

/// The pure access decision (SPEC.md MCP-02..05): the project's override if it has
/// one, else the global setting, per capability independently; a missing thread or
/// project fails closed ([`AgentAccess::CLOSED`]).
pub fn resolve_access(settings: &AccessSettings, lookup: ThreadLookup<'_>) -> AgentAccess {
    match lookup {
        ThreadLookup::ThreadMissing | ThreadLookup::ProjectMissing => AgentAccess::CLOSED,
        ThreadLookup::Found(project) => {
            let o = settings.override_for(project);
            AgentAccess {
                browser: o
                    .agent_browser_access
                    .unwrap_or(settings.agent_browser_access),
                device: o
                    .agent_device_access
                    .unwrap_or(settings.agent_device_access),
            }
        }
    }
}

/// Decides a thread's [`AgentAccess`] when the session manager prepares its MCP
/// credential. Implementations must fail closed on errors.
pub trait McpAccessPolicy: Send + Sync + std::fmt::Debug {
    /// The access of `thread`.
    fn access<'a>(&'a self, thread: &'a ThreadId) -> BoxFuture<'a, AgentAccess>;
}

/// [`McpAccessPolicy`] with fixed answers for every thread (tests, no settings).
#[derive(Clone, Copy, Debug, Default)]
pub struct FixedAccess(pub AgentAccess);

impl McpAccessPolicy for FixedAccess {
    fn access<'a>(&'a self, _thread: &'a ThreadId) -> BoxFuture<'a, AgentAccess> {
        let access = self.0;
        Box::pin(async move { access })
    }
}

/// [`McpAccessPolicy`] reading the thread and its project from the store and applying
/// [`resolve_access`]; store errors count as missing (fail closed).
#[derive(Clone, Debug)]
pub struct StoreAccessPolicy {
    /// The store to look threads and projects up in.
    pub store: Store,
    /// The settings of knife.toml.
    pub settings: AccessSettings,
}

impl StoreAccessPolicy {
    /// The access of `thread`, looked up now.
    pub async fn lookup(&self, thread: &ThreadId) -> AgentAccess {
        let thread_row = match self.store.get_thread(thread).await {
            Ok(Some(t)) => t,
            Ok(None) => return resolve_access(&self.settings, ThreadLookup::ThreadMissing),
            Err(e) => {
                tracing::warn!(%thread, error = %e, "Could not resolve agent access; withholding browser and device tools.");
                return AgentAccess::CLOSED;
            }
        };
        match self.store.get_project(&thread_row.project_id).await {
            Ok(Some(project)) => resolve_access(&self.settings, ThreadLookup::Found(&project)),
            Ok(None) => resolve_access(&self.settings, ThreadLookup::ProjectMissing),
            Err(e) => {
                tracing::warn!(%thread, error = %e, "Could not resolve agent access; withholding browser and device tools.");
                AgentAccess::CLOSED
            }
        }
    }
}

impl McpAccessPolicy for StoreAccessPolicy {
    fn access<'a>(&'a self, thread: &'a ThreadId) -> BoxFuture<'a, AgentAccess> {
        Box::pin(self.lookup(thread))
    }
}
