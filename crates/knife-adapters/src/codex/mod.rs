//! The `codex` driver: Codex's app-server (`codex app-server`, JSON-RPC over stdio,
//! no `"jsonrpc"` field) as a knife provider runtime.
//!
//! One process serves many threads (shared sessions). Per session:
//!
//! - **open**: spawn `command args…` (default `codex app-server` with the outbound
//!   features off, see [`DEFAULT_ARGS`]) in the project root, `initialize` +
//!   `initialized`, then load the first thread: `thread/resume` of the native thread id
//!   when knife has one (a resume that finds no rollout falls back to `thread/start`),
//!   else `thread/start`. Both carry `cwd`, the approval policy, the sandbox mode, the
//!   model, and a config override `mcp_servers.<mcp_server_name> = {url, http_headers:
//!   {Authorization: "Bearer …"}}` with the thread's own MCP credential (from
//!   `OpenSessionOptions::mcp`, or the manager's [`McpSlots`] for threads that join later).
//!   The loaded thread is reported as a `ProviderThread` (`provider-thread:codex:<id>`,
//!   `native_id` = codex's thread id), which the store keeps, so a later session — also
//!   after a crash — resumes the same codex thread.
//! - **turns**: `turn/start {threadId, input:[{type:text}]}`; notifications → adapter
//!   events (see [`session`]); `turn/interrupt` for interrupts (approvals still open
//!   are answered `cancel` first); `thread/unsubscribe` to unload a thread.
//! - **approvals**: `item/commandExecution/requestApproval`,
//!   `item/fileChange/requestApproval` and `mcpServer/elicitation/request` (MCP tool call
//!   approvals) become runtime requests with a `live` capability, answered through
//!   [`SessionRuntime::respond_to_runtime_request`](knife_runtime::SessionRuntime):
//!   `allow_once` → `accept`, `allow_always` → `acceptForSession` (elicitation: `accept`
//!   with `_meta.persist = "session"`), `deny` → `decline`.
//! - **end**: `close` = stdin EOF (codex exits at once), then the process module's
//!   SIGTERM/SIGKILL escalation. A process that exits on its own fails its running turns
//!   and ends the event stream with an error naming the exit status.

use std::ffi::OsString;
use std::sync::Arc;
use std::time::Duration;

use knife_protocol::*;
use knife_runtime::mcp::McpSlots;
use knife_runtime::process_groups::ProcessGroups;
use knife_runtime::{
    AdapterError, ForkSupport, OpenSessionInput, OpenSessionOptions, ProviderAdapter,
    SessionRuntime, SharedClock, SystemClock,
};

mod diff;
mod dispatch;
mod session;
mod steer;
mod threads;
pub mod wire;

/// Driver name.
pub const DRIVER: &str = "codex";
/// Arguments used when the instance sets none: the app-server with the features that
/// reach out to github.com / chatgpt.com at startup turned off (codex 0.169.0).
pub const DEFAULT_ARGS: &[&str] = &[
    "app-server",
    "--disable",
    "plugins",
    "--disable",
    "apps",
    "--disable",
    "remote_plugin",
    "--disable",
    "in_app_updates",
    "--disable",
    "plugin_sharing",
];

/// Configuration of one `codex` provider instance.
#[derive(Clone)]
pub struct CodexConfig {
    /// The instance (from `knife.toml`) this adapter serves.
    pub provider_instance_id: ProviderInstanceId,
    /// The program (default `codex`, looked up on `PATH`).
    pub command: OsString,
    /// Its arguments (default [`DEFAULT_ARGS`]).
    pub args: Vec<OsString>,
    /// Extra environment (e.g. `CODEX_HOME`, the model provider's API key variable).
    /// `CODEX_HOME` must be a persistent directory: resuming a thread needs its rollout.
    pub env: Vec<(OsString, OsString)>,
    /// Variables of knife's environment not passed to the process (exact names; knife
    /// fills in every instance's `api_key_env` and the API token's variable). `env`
    /// still sets a variable named here. Default: none (`KNIFE_*` are always removed).
    pub env_remove: Vec<String>,
    /// Model passed to `thread/start`; `None` = codex's configured default.
    pub model: Option<String>,
    /// `approvalPolicy` of new threads (`untrusted`, `on-request`, `never`; default
    /// `on-request`); `None` = codex's configured default.
    pub approval_policy: Option<String>,
    /// `sandbox` of new threads (`read-only`, `workspace-write`, `danger-full-access`;
    /// default `workspace-write`); `None` = codex's configured default.
    pub sandbox: Option<String>,
    /// Name of knife's MCP server in codex's config (default `knife`); codex shows its
    /// tools to the model as `mcp__<name>__<tool>`.
    pub mcp_server_name: String,
    /// The manager's per-thread MCP credential slots (threads joining a live session).
    pub mcp_slots: Option<Arc<McpSlots>>,
    /// Where process groups are recorded (killed at the next boot after a crash).
    pub process_groups: Option<ProcessGroups>,
    /// Wall-clock source of items and turns.
    pub clock: SharedClock,
    /// Bound of `initialize` (default [`crate::jsonrpc::INITIALIZE_TIMEOUT`], 20 s).
    /// Output that is not its answer fails the open at once.
    pub handshake_timeout: Duration,
    /// Bound of every other request (default 60 s).
    pub request_timeout: Duration,
    /// Close sequence: stdin EOF → SIGTERM (default 3 s).
    pub eof_grace: Duration,
    /// Close sequence: SIGTERM → SIGKILL (default 3 s).
    pub term_grace: Duration,
}

impl std::fmt::Debug for CodexConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // `env` may hold API keys: only the names are shown.
        let env: Vec<_> = self.env.iter().map(|(k, _)| k.clone()).collect();
        f.debug_struct("CodexConfig")
            .field("provider_instance_id", &self.provider_instance_id)
            .field("command", &self.command)
            .field("args", &self.args)
            .field("env_names", &env)
            .field("env_remove", &self.env_remove)
            .field("model", &self.model)
            .field("approval_policy", &self.approval_policy)
            .field("sandbox", &self.sandbox)
            .field("mcp_server_name", &self.mcp_server_name)
            .finish_non_exhaustive()
    }
}

impl CodexConfig {
    /// A config with the defaults listed on each field.
    pub fn new(provider_instance_id: ProviderInstanceId) -> Self {
        Self {
            provider_instance_id,
            command: "codex".into(),
            args: DEFAULT_ARGS.iter().map(OsString::from).collect(),
            env: Vec::new(),
            env_remove: Vec::new(),
            model: None,
            approval_policy: Some("on-request".into()),
            sandbox: Some("workspace-write".into()),
            mcp_server_name: "knife".into(),
            mcp_slots: None,
            process_groups: None,
            clock: Arc::new(SystemClock),
            handshake_timeout: crate::jsonrpc::INITIALIZE_TIMEOUT,
            request_timeout: Duration::from_secs(60),
            eof_grace: crate::process::EOF_GRACE,
            term_grace: crate::process::TERM_GRACE,
        }
    }
}

/// The `codex` provider adapter.
#[derive(Clone, Debug)]
pub struct CodexAdapter {
    config: Arc<CodexConfig>,
}

impl CodexAdapter {
    /// An adapter for `config`.
    pub fn new(config: CodexConfig) -> Self {
        Self {
            config: Arc::new(config),
        }
    }

    /// The adapter's config.
    pub fn config(&self) -> &CodexConfig {
        &self.config
    }
}

#[async_trait::async_trait]
impl ProviderAdapter for CodexAdapter {
    fn driver(&self) -> &str {
        DRIVER
    }

    fn capabilities(&self) -> ProviderCapabilities {
        ProviderCapabilities {
            shared_sessions: true,
            steer: true,
            background_tasks_outlive_session: false,
        }
    }

    /// codex forks its own history (`thread/fork`, CHG-09).
    fn fork_support(&self) -> ForkSupport {
        ForkSupport::Native
    }

    /// Spawns the app-server, runs the handshake and loads the first thread (module
    /// docs). Errors: [`AdapterError::Spawn`] when the app-server cannot start;
    /// [`AdapterError::Handshake`] naming the step that failed (initialize, thread
    /// start/resume; with the exit status when the process died).
    async fn open(
        &self,
        input: OpenSessionInput,
        options: OpenSessionOptions,
    ) -> Result<Arc<dyn SessionRuntime>, AdapterError> {
        let session = session::CodexSession::open(Arc::clone(&self.config), input, options).await?;
        Ok(Arc::new(session))
    }
}
