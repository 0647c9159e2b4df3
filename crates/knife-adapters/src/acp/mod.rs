//! The `acp` driver: agents speaking the Agent Client Protocol (v1) over stdio
//! (claude-agent-acp, `gemini --acp`, `opencode acp`, …).
//!
//! One provider session = one agent process = one ACP session = one knife thread
//! (exclusive sessions, MGR-06). ACP v1 has no standard way for an agent to say
//! that one process should serve several clients' threads, so knife always asks for
//! exclusive sessions; see docs/2026-11-29-external-runtimes.md ("ACP").
//!
//! Open: spawn the command (own process group, recorded in the store; [`crate::process`]),
//! `initialize` (`protocolVersion: 1`, no file system or terminal offered), then
//! - with a native session id to resume (the thread's last ACP session, MGR-09):
//!   `session/resume` when the agent advertises `sessionCapabilities.resume`, else
//!   `session/load` when it advertises `loadSession` (its history replay is not
//!   re-recorded: knife already has the transcript); if neither works, a fresh
//!   `session/new` (logged; the agent then starts without its memory);
//! - else `session/new`.
//!
//! Both pass `cwd` and, when knife knows its `/mcp` address and the agent advertises
//! `mcpCapabilities.http`, the thread's MCP server `{type: "http", name: "knife", url,
//! headers: [{name: "Authorization", value: "Bearer …"}]}`. The session's provider
//! thread `provider-thread:acp:<sessionId>` is emitted with the ACP session id as its
//! native id, which is what a later open resumes.
//!
//! Turns, approvals, interrupts and the process's end: see [`session`].

mod handshake;
pub mod mapping;
mod models;
mod session;
pub mod types;

use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use knife_protocol::*;
use knife_runtime::process_groups::ProcessGroups;
use knife_runtime::{
    AdapterError, ForkSupport, OpenSessionInput, OpenSessionOptions, ProviderAdapter,
    SessionRuntime, SharedClock, SystemClock,
};

use crate::process::{EOF_GRACE, ProcessSpec, TERM_GRACE};

/// Why an ACP thread cannot be forked (the 409 of `POST /api/threads/{id}/fork`).
pub const ACP_FORK_REFUSED: &str = "ACP agents keep their conversation inside the agent and the \
     Agent Client Protocol has no way to copy it; start a new thread instead, or use a \
     built-in or codex provider instance for threads you want to fork";

/// Driver name.
pub const DRIVER: &str = "acp";
/// Default bound of the handshake requests (`initialize`, `session/new|load|resume`).
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(60);
/// Default bound of `initialize`, the first request ([`crate::jsonrpc::INITIALIZE_TIMEOUT`], 20 s).
pub const INITIALIZE_TIMEOUT: Duration = crate::jsonrpc::INITIALIZE_TIMEOUT;
/// Name of knife's MCP server in the agent's session.
pub const MCP_SERVER_NAME: &str = "knife";

/// Configuration of one ACP provider instance (`driver = "acp"` in `knife.toml`).
#[derive(Clone)]
pub struct AcpConfig {
    /// The provider instance this adapter serves.
    pub provider_instance_id: ProviderInstanceId,
    /// The agent's program (looked up on `PATH` when it has no slash).
    pub command: OsString,
    /// Its arguments (e.g. `["--acp"]` for Gemini CLI, `["acp"]` for opencode).
    pub args: Vec<OsString>,
    /// Variables set on top of knife's environment (`KNIFE_*` are removed).
    pub env: Vec<(OsString, OsString)>,
    /// Variables of knife's environment not passed to the agent (exact names; knife
    /// fills in every instance's `api_key_env` and the API token's variable). `env`
    /// still sets a variable named here. Default: none.
    pub env_remove: Vec<String>,
    /// Records the agent's process group so the next boot kills a leftover.
    pub process_groups: Option<ProcessGroups>,
    /// Wall-clock source of items and turns.
    pub clock: SharedClock,
    /// Bound of `initialize` (default [`INITIALIZE_TIMEOUT`], 20 s; capped by
    /// `handshake_timeout`).
    pub initialize_timeout: Duration,
    /// Bound of the other handshake requests (`session/new|load|resume`; default
    /// [`HANDSHAKE_TIMEOUT`]).
    pub handshake_timeout: Duration,
    /// Close sequence: stdin EOF → this long → SIGTERM (default 3 s).
    pub eof_grace: Duration,
    /// Close sequence: SIGTERM → this long → SIGKILL (default 3 s).
    pub term_grace: Duration,
}

impl std::fmt::Debug for AcpConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Env values may hold API keys: names only.
        let env: Vec<_> = self.env.iter().map(|(k, _)| k).collect();
        f.debug_struct("AcpConfig")
            .field("provider_instance_id", &self.provider_instance_id)
            .field("command", &self.command)
            .field("args", &self.args)
            .field("env", &env)
            .field("env_remove", &self.env_remove)
            .field("initialize_timeout", &self.initialize_timeout)
            .field("handshake_timeout", &self.handshake_timeout)
            .finish_non_exhaustive()
    }
}

impl AcpConfig {
    /// A config with no args, no env, the system clock and the default timeouts.
    pub fn new(provider_instance_id: ProviderInstanceId, command: impl Into<OsString>) -> Self {
        Self {
            provider_instance_id,
            command: command.into(),
            args: Vec::new(),
            env: Vec::new(),
            env_remove: Vec::new(),
            process_groups: None,
            clock: Arc::new(SystemClock),
            initialize_timeout: INITIALIZE_TIMEOUT,
            handshake_timeout: HANDSHAKE_TIMEOUT,
            eof_grace: EOF_GRACE,
            term_grace: TERM_GRACE,
        }
    }

    fn spec(&self, cwd: PathBuf, thread: &ThreadId) -> ProcessSpec {
        let mut spec = ProcessSpec::new(
            self.command.clone(),
            cwd,
            format!("acp agent {}", self.provider_instance_id),
        );
        spec.args = self.args.clone();
        spec.env = self.env.clone();
        spec.env_remove = self.env_remove.clone();
        spec.thread = Some(thread.clone());
        spec.eof_grace = self.eof_grace;
        spec.term_grace = self.term_grace;
        spec
    }
}

/// The ACP driver as a [`ProviderAdapter`]; see the module docs.
#[derive(Clone, Debug)]
pub struct AcpAdapter {
    config: Arc<AcpConfig>,
}

impl AcpAdapter {
    /// An adapter for `config`.
    pub fn new(config: AcpConfig) -> Self {
        Self {
            config: Arc::new(config),
        }
    }
}

#[async_trait::async_trait]
impl ProviderAdapter for AcpAdapter {
    fn driver(&self) -> &str {
        DRIVER
    }

    /// Exclusive sessions (one thread per agent process), no steering.
    fn capabilities(&self) -> ProviderCapabilities {
        ProviderCapabilities {
            shared_sessions: false,
            steer: false,
            background_tasks_outlive_session: false,
        }
    }

    /// ACP agents keep their own history and the protocol has no way to copy it (CHG-09).
    fn fork_support(&self) -> ForkSupport {
        ForkSupport::Unsupported(ACP_FORK_REFUSED.into())
    }

    /// Spawns the agent and opens its ACP session (module docs). The process is
    /// registered on `options.scope` right after the spawn, so a cancelled or failed
    /// open stops it.
    ///
    /// Errors: [`AdapterError::Spawn`] when the program cannot start;
    /// [`AdapterError::Handshake`] when it exits, fails or times out in the handshake
    /// (the message names the step and how it ended).
    async fn open(
        &self,
        input: OpenSessionInput,
        options: OpenSessionOptions,
    ) -> Result<Arc<dyn SessionRuntime>, AdapterError> {
        session::open(Arc::clone(&self.config), input, options).await
    }
}
