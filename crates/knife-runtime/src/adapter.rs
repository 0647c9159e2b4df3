//! The contract between knife and an agent runtime: [`ProviderAdapter`] opens
//! provider sessions, [`SessionRuntime`] runs turns on one. Shaped after SPEC.md's MGR section.

use std::path::PathBuf;
use std::sync::Arc;

use futures::stream::BoxStream;
use knife_protocol::*;

/// Everything an adapter needs to open a provider session (MGR-09).
#[derive(Clone, Debug)]
pub struct OpenSessionInput {
    /// The session to open (`psession_…`); the adapter records its rows under this id.
    pub provider_session_id: ProviderSessionId,
    /// The `knife.toml` provider instance whose runtime to start.
    pub provider_instance_id: ProviderInstanceId,
    /// The first thread the session serves.
    pub thread_id: ThreadId,
    /// Working directory: the project root, or the thread's worktree (CHG-07)
    /// (checked to exist before open, MGR-07).
    pub cwd: PathBuf,
    /// The project root whose settings (permissions, env, sandbox) apply when `cwd`
    /// is a thread's worktree (CHG-07); `None`: `cwd`'s own.
    pub project_root: Option<PathBuf>,
    /// Model override; `None` = the instance's default.
    pub model: Option<String>,
    /// The runtime's native thread id to resume, when the thread has one (MGR-09).
    pub native_thread_id: Option<String>,
}

/// Input of one provider turn (one attempt of a run).
#[derive(Clone, Debug)]
pub struct StartTurnInput {
    /// The app thread of the run.
    pub thread_id: ThreadId,
    /// The run this turn executes (`run:<thread>:<ordinal>`).
    pub run_id: RunId,
    /// 1-based ordinal of the run in its thread (turn item ordinals derive from it).
    pub run_ordinal: u32,
    /// The provider turn to record (`provider-turn:<run>:<attempt>`).
    pub provider_turn_id: ProviderTurnId,
    /// 1-based attempt of the run.
    pub attempt: u32,
    /// The user's message that opened the run.
    pub text: String,
    /// The thread's transcript before this run, ordered by ordinal. Runtimes with
    /// their own native history may ignore it; the built-in agent replays it.
    pub history: Vec<TurnItem>,
    /// Model of this run (TURN-10); `None` = the session's.
    pub model: Option<String>,
    /// The thread's workspace (its project root). A shared runtime serving threads of
    /// several projects starts each thread's native conversation there; `None` = the
    /// session's `cwd`.
    pub cwd: Option<PathBuf>,
    /// Checked before each model call when the runtime makes its own (the built-in
    /// agent; TURN-07); `None` = no budgets. Runtimes that cannot check are
    /// followed by execution at each usage report instead.
    pub budget: Option<crate::budget::BudgetGate>,
}

/// How a runtime forks a thread's conversation (CHG-09).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ForkSupport {
    /// The runtime replays the transcript it is given ([`StartTurnInput::history`]):
    /// a fork is a copy of the source's turn items (the built-in agent).
    Replay,
    /// The runtime keeps its own history and forks it itself
    /// ([`SessionRuntime::fork_thread`]; codex `thread/fork`).
    Native,
    /// The runtime cannot fork; the text says why (shown in the 409).
    Unsupported(String),
}

/// What [`SessionRuntime::fork_thread`] forks (CHG-09).
#[derive(Clone, Debug)]
pub struct ForkThreadInput {
    /// The source app thread and its native thread.
    pub source_thread_id: ThreadId,
    /// The source's native conversation id (the provider thread's `native_id`).
    pub source_native_thread_id: String,
    /// The runtime's id of the last turn the fork keeps; `None` = all of them.
    pub last_native_turn_id: Option<String>,
    /// The new app thread the fork belongs to.
    pub target_thread_id: ThreadId,
    /// The target's workspace.
    pub cwd: PathBuf,
    /// Model of the new conversation; `None` = the session's.
    pub model: Option<String>,
}

/// Why a turn is interrupted (EXEC-02).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InterruptReason {
    /// The user asked to stop.
    User,
    /// A newer request replaces this one.
    Superseded,
    /// The server is shutting down; the claim is kept for the next start.
    Shutdown,
}

impl InterruptReason {
    /// Lower-case name as stored (`user`, `superseded`, `shutdown`).
    pub fn as_str(self) -> &'static str {
        match self {
            InterruptReason::User => "user",
            InterruptReason::Superseded => "superseded",
            InterruptReason::Shutdown => "shutdown",
        }
    }
}

/// A boxed error from the layer below an adapter (a process spawn, a JSON-RPC
/// connection), kept as the [`std::error::Error::source`] of an [`AdapterError`].
pub type AdapterErrorSource = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Errors an adapter or session runtime reports. Each variant names one way an
/// operation fails, so callers branch on the kind (the session manager keeps an
/// open's reason, answers map `RequestNotPending` to a 409, a `Closed` session is
/// reopened) and the message says what to do.
#[derive(Debug, thiserror::Error)]
pub enum AdapterError {
    /// The runtime's program could not be started (not found, not executable, the
    /// sandbox refused it); `source` is the spawn error. Check the instance's
    /// `command` and the sandbox settings.
    #[error("could not start the provider runtime: {source}")]
    Spawn {
        /// The spawn error (the adapter's process error).
        #[source]
        source: AdapterErrorSource,
    },
    /// The session's settings cannot be used (the working directory or project root
    /// cannot be resolved, a required setting is missing); `reason` says which.
    #[error("could not open the provider session: {reason}")]
    Config {
        /// What is wrong and what to change.
        reason: String,
    },
    /// The runtime started but its opening handshake failed: it answered an error,
    /// exited or timed out during `step` (`initialize`, `thread/start`, …);
    /// `reason` carries its answer or exit and stderr tail.
    #[error("could not open the provider session: {reason}")]
    Handshake {
        /// The handshake step that failed, as the protocol names it.
        step: &'static str,
        /// The runtime's answer, or how it exited, and what to do.
        reason: String,
    },
    /// The runtime answered `operation` (`turn/start`, `thread/fork`, …) with an
    /// error or a refusal, or died while it was asked; `reason` names the operation
    /// and carries the answer or the exit.
    #[error("{reason}")]
    Refused {
        /// The operation asked, as the protocol names it.
        operation: &'static str,
        /// What was asked and what the runtime answered.
        reason: String,
    },
    /// A message for `operation` could not be written to the runtime: its process
    /// is gone or its input is closed. The session is about to end; retry on a new one.
    #[error("could not send {operation} to the provider runtime: {source}")]
    Send {
        /// The operation whose message was lost.
        operation: &'static str,
        /// The write error.
        #[source]
        source: AdapterErrorSource,
    },
    /// The session cannot take the operation now (a turn already runs on the
    /// thread, no turn of the named run runs, the session serves another native
    /// thread); the text says which and what to do.
    #[error("{0}")]
    Busy(String),
    /// The runtime cannot do `operation` at all (steer a running turn, take answers,
    /// fork a conversation); `hint` says what to do instead.
    #[error("this runtime cannot {operation}; {hint}")]
    Unsupported {
        /// What was asked, as a verb phrase (`add input to a running turn`).
        operation: &'static str,
        /// What the user can do instead.
        hint: &'static str,
    },
    /// The runtime failed mid-session (it crashed or exited, or its output could not
    /// be read); the session is lost and its turns end failed. The text says how.
    #[error("the provider runtime failed: {0}")]
    Lost(String),
    /// A lock of the session's state was poisoned by a panic; the session cannot be
    /// used any more. Close it; the next turn opens a new one.
    #[error("the provider session's {0} is unusable after a panic; close the session")]
    Poisoned(&'static str),
    /// The session is closed; open a new one.
    #[error("the provider session is closed")]
    Closed,
    /// `respond_to_runtime_request` named a request this session is not waiting
    /// on (unknown, already answered, or its turn ended); the message says which.
    #[error("{0}")]
    RequestNotPending(String),
}

impl AdapterError {
    /// [`AdapterError::Spawn`] from any spawn error.
    pub fn spawn(source: impl std::error::Error + Send + Sync + 'static) -> Self {
        AdapterError::Spawn {
            source: Box::new(source),
        }
    }

    /// [`AdapterError::Send`] of `operation` from any write error.
    pub fn send(
        operation: &'static str,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        AdapterError::Send {
            operation,
            source: Box::new(source),
        }
    }

    /// The reason of a failed open without the "could not open…" prefix, for callers
    /// that say that themselves (the session manager's `ProviderSessionOpenError`).
    pub fn open_reason(&self) -> String {
        match self {
            AdapterError::Config { reason } | AdapterError::Handshake { reason, .. } => {
                reason.clone()
            }
            other => other.to_string(),
        }
    }
}

/// A configured kind of agent runtime. Implemented by the built-in agent and by
/// external runtimes; the manager calls `open` at most once per provider session
/// (single-flight, MGR-02).
#[async_trait::async_trait]
pub trait ProviderAdapter: Send + Sync + 'static {
    /// Driver kind: `builtin`, `codex`, `acp`, …
    fn driver(&self) -> &str;
    /// What sessions of this adapter can do (shared vs exclusive, …).
    fn capabilities(&self) -> ProviderCapabilities;
    /// Opens a provider session for `input`, with the extras the session manager
    /// supplies ([`OpenSessionOptions`]: the item-identity version (MGR-09), the
    /// thread's MCP credential (MGR-04), and the session scope whose finalizers stop
    /// whatever the adapter spawned).
    ///
    /// Errors: [`AdapterError::Spawn`] (the program did not start),
    /// [`AdapterError::Config`] (unusable settings), [`AdapterError::Handshake`]
    /// (the runtime failed its opening handshake).
    ///
    /// Cancellation: the manager may drop this future mid-handshake; anything the
    /// adapter spawned before that must be registered on `options.scope`, which the
    /// manager then closes (time-boxed, MGR-04/05).
    async fn open(
        &self,
        input: OpenSessionInput,
        options: OpenSessionOptions,
    ) -> Result<Arc<dyn SessionRuntime>, AdapterError>;

    /// How threads of this runtime fork (CHG-09). Default [`ForkSupport::Replay`]:
    /// right for runtimes that replay [`StartTurnInput::history`]; runtimes with a
    /// history of their own override it.
    fn fork_support(&self) -> ForkSupport {
        ForkSupport::Replay
    }
}

/// Extras of [`ProviderAdapter::open`]; `Default` = none of them.
#[derive(Clone, Debug, Default)]
pub struct OpenSessionOptions {
    /// Version of the item-identity scheme the adapter must use for native item ids
    /// (MGR-09); `None` = the adapter's default.
    pub item_identity_version: Option<u8>,
    /// The thread's MCP credential, minted before the adapter spawns anything so an
    /// eager adapter can bake it into its process (MGR-04).
    pub mcp: Option<crate::mcp::McpSessionConfig>,
    /// Finalizers of everything the adapter spawns for this session; closed by the
    /// manager when the open fails or is cancelled, and when the session is released.
    pub scope: crate::scope::SessionScope,
}

/// A message for the running turn (TURN-01, [`SessionRuntime::steer_turn`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SteerInput {
    /// The run whose turn it is for; a runtime whose turn belongs to another run refuses it.
    pub run_id: RunId,
    /// Id of the user-message item that records the delivery
    /// ([`TurnItemId::steer_of`]).
    pub item_id: TurnItemId,
    /// The steer's text, delivered as user input into the running turn.
    pub text: String,
}

/// One live provider session.
///
/// Events: the session has ONE event stream, taken once by the manager's pump
/// with [`SessionRuntime::take_events`]. It yields adapter events for every
/// turn of the session and ends when the session stops.
#[async_trait::async_trait]
pub trait SessionRuntime: Send + Sync + 'static {
    /// Starts a turn. Returns once the runtime accepted it; the turn's items and its
    /// `TurnTerminal` arrive on the event stream.
    async fn start_turn(&self, input: StartTurnInput) -> Result<(), AdapterError>;
    /// Asks the running turn of `thread` to stop; the runtime then emits
    /// `TurnTerminal { outcome: Interrupted }`. No-op when nothing runs.
    async fn interrupt_turn(
        &self,
        thread: &ThreadId,
        reason: InterruptReason,
    ) -> Result<(), AdapterError>;
    /// Loads `thread`'s native conversation on this session (resume after attach).
    async fn resume_thread(
        &self,
        thread: &ThreadId,
        native_thread_id: Option<String>,
    ) -> Result<(), AdapterError>;
    /// The session's event stream; `None` after the first call.
    fn take_events(&self) -> Option<BoxStream<'static, Result<AdapterEvent, AdapterError>>>;
    /// Stops the session and its process; the event stream ends. Idempotent.
    async fn close(&self) -> Result<(), AdapterError>;

    /// Adds `steer.text` to the running turn of `thread` (active steering, TURN-01).
    /// `Ok` = accepted for delivery; the runtime records the delivery by emitting a
    /// user-message `TurnItemUpdated` with id `steer.item_id` once the turn has
    /// taken it (a steer whose item never comes is queued when the run ends).
    /// Default: [`AdapterError::Unsupported`].
    async fn steer_turn(&self, thread: &ThreadId, steer: SteerInput) -> Result<(), AdapterError> {
        let _ = (thread, steer);
        Err(AdapterError::Unsupported {
            operation: "add input to a running turn",
            hint: "interrupt it and send the message again",
        })
    }

    /// Answers runtime request `request` (an approval) with `answer` (decision and the
    /// user's optional message). The runtime emits the request's `resolved` update
    /// itself. Default: [`AdapterError::Unsupported`].
    /// Errors: an unknown or already answered request →
    /// [`AdapterError::RequestNotPending`].
    async fn respond_to_runtime_request(
        &self,
        request: &RuntimeRequestId,
        answer: RequestAnswer,
    ) -> Result<(), AdapterError> {
        let _ = (request, answer);
        Err(AdapterError::Unsupported {
            operation: "take answers to runtime requests",
            hint: "answer in the runtime itself",
        })
    }

    /// Forks the native conversation `input.source_native_thread_id` through
    /// `input.last_native_turn_id` into a new native thread for
    /// `input.target_thread_id` (CHG-09, [`ForkSupport::Native`]), leaves it unloaded
    /// (the target's first turn resumes it with its own settings) and returns its
    /// record (`app_thread_id` = the target). Default: [`AdapterError::Unsupported`].
    async fn fork_thread(&self, input: ForkThreadInput) -> Result<ProviderThread, AdapterError> {
        let _ = input;
        Err(AdapterError::Unsupported {
            operation: "fork a conversation",
            hint: "start a new thread instead",
        })
    }

    /// True when [`SessionRuntime::unload_thread`] does something (shared runtimes that
    /// can drop one native thread while serving others, MGR-12/14). Default `false`.
    fn can_unload_threads(&self) -> bool {
        false
    }

    /// Unloads the native thread `native_thread_id` of `thread` from this session; a
    /// later [`SessionRuntime::resume_thread`] reloads it (MGR-12..15). Default: no-op.
    async fn unload_thread(
        &self,
        thread: &ThreadId,
        native_thread_id: &str,
    ) -> Result<(), AdapterError> {
        let _ = (thread, native_thread_id);
        Ok(())
    }

    /// Whether the session runs background work (dev server, sub-agent) that must
    /// keep it alive past idleness (MGR-24..28). Errors count as "no work". Default `false`.
    async fn has_pending_background_work(&self) -> Result<bool, AdapterError> {
        Ok(false)
    }

    /// Whether `thread` (native id `native_thread_id`) has background work that must
    /// keep it loaded (MGR-15). Errors count as "no work". Default `false`.
    async fn has_pending_background_work_for_thread(
        &self,
        thread: &ThreadId,
        native_thread_id: &str,
    ) -> Result<bool, AdapterError> {
        let _ = (thread, native_thread_id);
        Ok(false)
    }
}
