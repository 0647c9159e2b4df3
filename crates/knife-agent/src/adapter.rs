//! `BuiltinAgentAdapter`: the built-in agent as a `knife_runtime::ProviderAdapter`,
//! its config, and the session runtime that spawns one turn task at a time.

use std::sync::{Arc, Mutex};
use std::time::Duration;
use tracing::Instrument;

use futures::stream::BoxStream;
use knife_llm::LlmClient;
use knife_llm::retry::RetryPolicy;
use knife_protocol::*;
use knife_runtime::{
    AdapterError, InterruptReason, OpenSessionInput, OpenSessionOptions, ProviderAdapter,
    SessionRuntime, SharedClock, StartTurnInput, SystemClock,
};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::agent::{TurnPlan, run_turn};
use crate::approvals::ApprovalBroker;
use crate::compaction::{CompactionMode, DEFAULT_MAX_COMPACTIONS};
use crate::messages::{build_messages, default_system_prompt};
use crate::processor::ContextLimits;
use crate::recorder::{EventSender, TurnIdentity, TurnRecorder};
use crate::tools::{ToolContext, ToolPolicy, ToolSet};

/// Driver name of the built-in agent.
pub const DRIVER: &str = "builtin";
/// Upper bound of the text persistence window (250 ms, PROC-12): `flush_interval` is
/// clamped to it, and the window of a long stream grows to it (the one recorder's
/// [`knife_runtime::recording::MAX_FLUSH_INTERVAL`]).
pub const MAX_FLUSH_INTERVAL: Duration = knife_runtime::recording::MAX_FLUSH_INTERVAL;
/// How long `close` waits for a cancelled turn to settle its items before aborting it.
pub const CLOSE_TURN_GRACE: Duration = Duration::from_secs(5);
/// Default context window of a provider instance's model (tokens, PROC-02).
pub const DEFAULT_CONTEXT_LIMIT: u64 = 128_000;
/// Default output reserve of a provider instance's model (tokens, PROC-02).
pub const DEFAULT_OUTPUT_LIMIT: u64 = 32_000;

/// Configuration of one built-in agent provider instance.
#[derive(Clone)]
pub struct BuiltinAgentConfig {
    /// The provider instance (from `knife.toml`) this adapter serves.
    pub provider_instance_id: ProviderInstanceId,
    /// Model used when neither the turn nor the session names one.
    pub default_model: String,
    /// The streaming client of the instance's endpoint.
    pub llm: Arc<dyn LlmClient>,
    /// System prompt; `None` uses a short default naming the project root and the tools.
    pub system_prompt: Option<String>,
    /// Most model calls per turn (default 50); the turn fails with a `runtime`
    /// error when the model still calls tools after that many.
    pub max_steps: u32,
    /// First persistence window of streaming text (default 50 ms): an assistant or
    /// reasoning item's first durable state is written at most this long after its
    /// text arrived; each window written for the same item doubles it, up to
    /// [`MAX_FLUSH_INTERVAL`] (250 ms), so a crash mid-stream loses at most 250 ms or
    /// `flush_bytes` of text (PROC-12, LIVE-03). Values above 250 ms are clamped to it.
    pub flush_interval: Duration,
    /// Unsent streaming text (bytes) that forces a snapshot at once (default 4096).
    pub flush_bytes: usize,
    /// Source of wall-clock timestamps for items and turns.
    pub clock: SharedClock,
    /// Retry budget and backoff of model calls (PROC-10, PROC-11; default 8
    /// attempts, 2 s doubling, capped at 30 s).
    pub retry: RetryPolicy,
    /// The model's context window in tokens (default [`DEFAULT_CONTEXT_LIMIT`]);
    /// 0 turns the usage-based compaction check off (PROC-02).
    pub context_limit: u64,
    /// Tokens reserved for the model's answer (default [`DEFAULT_OUTPUT_LIMIT`]): a
    /// step whose usage reaches `context_limit - output_limit` triggers compaction.
    pub output_limit: u64,
    /// `Auto` (default) compacts the history when the context is full; `Off`
    /// fails the turn with a `provider.context_overflow` error instead (TURN-03).
    pub compaction: CompactionMode,
    /// Most compactions in a row that leave the context over the threshold
    /// before the turn fails as irreducible (default
    /// [`DEFAULT_MAX_COMPACTIONS`] = 2; at least 1; TURN-04).
    pub max_compactions: u32,
    /// Permissions, approvals, secret environment variables and process hooks
    /// of the tool calls (default: [`ToolPolicy::default`]).
    pub tool_policy: Arc<ToolPolicy>,
}

impl std::fmt::Debug for BuiltinAgentConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BuiltinAgentConfig")
            .field("provider_instance_id", &self.provider_instance_id)
            .field("default_model", &self.default_model)
            .field("system_prompt", &self.system_prompt)
            .field("max_steps", &self.max_steps)
            .field("flush_interval", &self.flush_interval)
            .field("flush_bytes", &self.flush_bytes)
            .field("retry", &self.retry)
            .field("context_limit", &self.context_limit)
            .field("output_limit", &self.output_limit)
            .field("compaction", &self.compaction)
            .field("max_compactions", &self.max_compactions)
            .field("tool_policy", &self.tool_policy)
            .finish_non_exhaustive()
    }
}

impl BuiltinAgentConfig {
    /// A config with the defaults: default system prompt, 50 steps, 50 ms (first
    /// window, growing to 250 ms) / 4096 bytes flush thresholds, the system clock, the default retry policy and
    /// context limits.
    pub fn new(
        provider_instance_id: ProviderInstanceId,
        default_model: impl Into<String>,
        llm: Arc<dyn LlmClient>,
    ) -> Self {
        Self {
            provider_instance_id,
            default_model: default_model.into(),
            llm,
            system_prompt: None,
            max_steps: 50,
            flush_interval: Duration::from_millis(50),
            flush_bytes: 4096,
            clock: Arc::new(SystemClock),
            retry: RetryPolicy::default(),
            context_limit: DEFAULT_CONTEXT_LIMIT,
            output_limit: DEFAULT_OUTPUT_LIMIT,
            compaction: CompactionMode::Auto,
            max_compactions: DEFAULT_MAX_COMPACTIONS,
            tool_policy: Arc::new(ToolPolicy::default()),
        }
    }

    /// `flush_interval` clamped to [`MAX_FLUSH_INTERVAL`].
    pub fn effective_flush_interval(&self) -> Duration {
        self.flush_interval.min(MAX_FLUSH_INTERVAL)
    }
}

/// The built-in agent runtime (driver `builtin`): exclusive sessions; steers are
/// taken before the turn's next model call (TURN-01).
#[derive(Clone, Debug)]
pub struct BuiltinAgentAdapter {
    config: Arc<BuiltinAgentConfig>,
    tools: ToolSet,
}

impl BuiltinAgentAdapter {
    /// An adapter with every built-in tool ([`ToolSet::standard`]: `read`, `list`,
    /// `glob`, `grep`, `write`, `edit`, `bash`) under the config's tool policy.
    pub fn new(config: BuiltinAgentConfig) -> Self {
        Self {
            config: Arc::new(config),
            tools: ToolSet::standard(),
        }
    }

    /// Replaces the tool set offered to the model.
    pub fn with_tools(mut self, tools: ToolSet) -> Self {
        self.tools = tools;
        self
    }

    /// The adapter's config.
    pub fn config(&self) -> &BuiltinAgentConfig {
        &self.config
    }
}

#[async_trait::async_trait]
impl ProviderAdapter for BuiltinAgentAdapter {
    fn driver(&self) -> &str {
        DRIVER
    }

    fn capabilities(&self) -> ProviderCapabilities {
        ProviderCapabilities {
            shared_sessions: false,
            steer: true,
            background_tasks_outlive_session: false,
        }
    }

    /// Opens a session rooted at `input.cwd` (canonicalized; tools cannot leave it),
    /// under the tool policy with the per-project rules, env and sandbox settings
    /// of `input.project_root` (else of the cwd; [`ToolPolicy::for_project`]).
    /// Nothing is spawned until a turn starts. The session entity itself
    /// (`ProviderSessionUpdated`) is the session manager's to write, so the
    /// session's event stream carries turn events only.
    ///
    /// Errors: [`AdapterError::Config`] when the project root cannot be resolved.
    async fn open(
        &self,
        input: OpenSessionInput,
        options: OpenSessionOptions,
    ) -> Result<Arc<dyn SessionRuntime>, AdapterError> {
        // The built-in agent spawns nothing at open and calls its tools in-process:
        // no scope finalizer, MCP credential or native item ids to take.
        let _ = options;
        let tool_ctx = ToolContext::new(&input.cwd).map_err(|e| AdapterError::Config {
            reason: format!(
                "the project root {} cannot be used: {e}",
                input.cwd.display()
            ),
        })?;
        // A thread's worktree works under its project's settings (CHG-07).
        let project_root = input
            .project_root
            .as_deref()
            .and_then(|p| std::fs::canonicalize(p).ok())
            .unwrap_or_else(|| tool_ctx.root().to_path_buf());
        let policy = Arc::new(self.config.tool_policy.for_project(&project_root));
        let tool_ctx = tool_ctx
            .with_policy(policy)
            .with_thread(input.thread_id.clone());
        let (tx, rx) = mpsc::unbounded_channel();
        Ok(Arc::new(BuiltinSession {
            config: Arc::clone(&self.config),
            tools: self.tools.clone(),
            tool_ctx,
            provider_session_id: input.provider_session_id,
            model: input.model,
            events_tx: Mutex::new(Some(tx)),
            events_rx: Mutex::new(Some(rx)),
            active: Arc::new(Mutex::new(None)),
            next_generation: Mutex::new(0),
            cancel: CancellationToken::new(),
            approvals: Arc::default(),
        }))
    }
}

/// The turn a session is running.
struct ActiveTurn {
    thread_id: ThreadId,
    /// Distinguishes this turn from a later one in the same slot.
    generation: u64,
    cancel: CancellationToken,
    /// Interrupt reason, written before `cancel` fires.
    reason: Arc<Mutex<Option<String>>>,
    handle: JoinHandle<()>,
    /// The run the turn belongs to, and its steer mailbox (TURN-01).
    run_id: RunId,
    steers: crate::agent::Steers,
}

/// One session of the built-in agent: one project root, one turn at a time.
struct BuiltinSession {
    config: Arc<BuiltinAgentConfig>,
    tools: ToolSet,
    tool_ctx: ToolContext,
    provider_session_id: ProviderSessionId,
    /// Session-level model override (from `OpenSessionInput::model`).
    model: Option<String>,
    /// `None` once closed. Turn tasks hold clones, so the stream ends when the
    /// session is closed AND the last turn task has finished.
    events_tx: Mutex<Option<EventSender>>,
    events_rx: Mutex<Option<mpsc::UnboundedReceiver<Result<AdapterEvent, AdapterError>>>>,
    active: Arc<Mutex<Option<ActiveTurn>>>,
    next_generation: Mutex<u64>,
    /// Parent of every turn's token; cancelled by `close`.
    cancel: CancellationToken,
    /// Approvals waiting for an answer and `allow_always` grants (session-scoped).
    approvals: Arc<ApprovalBroker>,
}

impl BuiltinSession {
    fn sender(&self) -> Option<EventSender> {
        self.events_tx.lock().ok().and_then(|tx| tx.clone())
    }

    /// Takes the running turn out of the slot (if any), records `reason` and
    /// cancels it. The turn task then settles its items and emits its terminal.
    fn cancel_active(&self, reason: InterruptReason) -> Option<ActiveTurn> {
        let turn = self.active.lock().ok().and_then(|mut a| a.take())?;
        if let Ok(mut slot) = turn.reason.lock() {
            slot.get_or_insert_with(|| reason.as_str().to_owned());
        }
        turn.cancel.cancel();
        Some(turn)
    }
}

impl Drop for BuiltinSession {
    /// A session dropped without `close` still stops its turn (reason `shutdown`),
    /// so the turn task settles its items instead of running on unobserved.
    fn drop(&mut self) {
        let _ = self.cancel_active(InterruptReason::Shutdown);
        self.cancel.cancel();
    }
}

#[async_trait::async_trait]
impl SessionRuntime for BuiltinSession {
    /// Spawns the turn task and returns at once.
    ///
    /// Errors: [`AdapterError::Closed`] after `close`; [`AdapterError::Busy`]
    /// while another turn runs on this session.
    async fn start_turn(&self, input: StartTurnInput) -> Result<(), AdapterError> {
        let Some(events) = self.sender() else {
            return Err(AdapterError::Closed);
        };
        let mut active = self
            .active
            .lock()
            .map_err(|_| AdapterError::Poisoned("turn slot"))?;
        if let Some(running) = active.as_ref() {
            return Err(AdapterError::Busy(format!(
                "a turn is already running on thread {}; interrupt it or wait for it to end \
                 before starting another",
                running.thread_id
            )));
        }
        let generation = {
            let mut next = self
                .next_generation
                .lock()
                .map_err(|_| AdapterError::Poisoned("generation counter"))?;
            *next += 1;
            *next
        };

        let model = input
            .model
            .clone()
            .or_else(|| self.model.clone())
            .unwrap_or_else(|| self.config.default_model.clone());
        let call_model = model.clone();
        let system =
            self.config.system_prompt.clone().unwrap_or_else(|| {
                default_system_prompt(self.tool_ctx.root(), &self.tools.names())
            });
        let cancel = self.cancel.child_token();
        let steers = crate::agent::Steers::default();
        let plan = TurnPlan {
            llm: Arc::clone(&self.config.llm),
            tools: self.tools.clone(),
            tool_ctx: self.tool_ctx.with_cancel(cancel.clone()),
            model,
            max_steps: self.config.max_steps.max(1),
            messages: build_messages(&system, &input.history, &input.text),
            pending: input.text.clone(),
            retry: self.config.retry,
            limits: ContextLimits {
                context_limit: self.config.context_limit,
                output_limit: self.config.output_limit,
            },
            compaction: self.config.compaction,
            max_compactions: self.config.max_compactions,
            instance: self.config.provider_instance_id.to_string(),
            approvals: Arc::clone(&self.approvals),
            steers: Arc::clone(&steers),
            budget: input.budget.clone(),
        };
        let slot = Arc::clone(&self.active);
        let on_finish = Box::new(move || {
            // Generation check: only free the slot if it still holds THIS turn.
            if let Ok(mut active) = slot.lock()
                && active.as_ref().is_some_and(|a| a.generation == generation)
            {
                *active = None;
            }
        });
        let recorder = TurnRecorder::new(
            events,
            Arc::clone(&self.config.clock),
            TurnIdentity {
                thread_id: input.thread_id.clone(),
                run_id: input.run_id.clone(),
                run_ordinal: input.run_ordinal,
                provider_turn_id: input.provider_turn_id.clone(),
                provider_session_id: self.provider_session_id.clone(),
                attempt: input.attempt,
                provider_instance_id: self.config.provider_instance_id.clone(),
                model: Some(call_model),
            },
            self.config.effective_flush_interval(),
            self.config.flush_bytes,
            on_finish,
        );
        let reason = Arc::new(Mutex::new(None));
        // Spawned, not awaited: start_turn returns once the turn is accepted. The
        // slot lock is held across the spawn so the task cannot free the slot
        // before it is filled (the task's on_finish waits on the same lock).
        // In the caller's span (the run's): the turn's model calls join the run's trace.
        let handle = tokio::spawn(
            run_turn(recorder, plan, cancel.clone(), Arc::clone(&reason))
                .instrument(tracing::Span::current()),
        );
        *active = Some(ActiveTurn {
            thread_id: input.thread_id,
            generation,
            cancel,
            reason,
            handle,
            run_id: input.run_id,
            steers,
        });
        Ok(())
    }

    /// Cancels the running turn of `thread`; its task settles the in-flight items
    /// and emits `TurnTerminal { Interrupted { reason } }`. No-op when none runs.
    async fn interrupt_turn(
        &self,
        thread: &ThreadId,
        reason: InterruptReason,
    ) -> Result<(), AdapterError> {
        let active = self
            .active
            .lock()
            .map_err(|_| AdapterError::Poisoned("turn slot"))?;
        if let Some(turn) = active.as_ref().filter(|t| &t.thread_id == thread) {
            if let Ok(mut slot) = turn.reason.lock() {
                slot.get_or_insert_with(|| reason.as_str().to_owned());
            }
            turn.cancel.cancel();
        }
        Ok(())
    }

    /// Puts `steer` in the running turn's mailbox; the turn takes it before its
    /// next model call and records it as a user message with `steer.item_id`
    /// (TURN-01). A turn that makes no further call never takes it.
    ///
    /// Errors: [`AdapterError::Busy`] when no turn of `steer.run_id` runs on
    /// `thread` in this session.
    async fn steer_turn(
        &self,
        thread: &ThreadId,
        steer: knife_runtime::SteerInput,
    ) -> Result<(), AdapterError> {
        let active = self
            .active
            .lock()
            .map_err(|_| AdapterError::Poisoned("turn slot"))?;
        let Some(turn) = active
            .as_ref()
            .filter(|t| &t.thread_id == thread && t.run_id == steer.run_id)
        else {
            return Err(AdapterError::Busy(format!(
                "no turn of run {} is running on thread {thread}",
                steer.run_id
            )));
        };
        if let Ok(mut mailbox) = turn.steers.lock() {
            mailbox.push(steer);
        }
        Ok(())
    }

    /// No-op: the built-in agent has no native history; each turn replays the
    /// transcript it is given in [`StartTurnInput::history`].
    async fn resume_thread(
        &self,
        _thread: &ThreadId,
        _native_thread_id: Option<String>,
    ) -> Result<(), AdapterError> {
        Ok(())
    }

    /// Delivers the user's answer to the turn waiting on approval `request`; the
    /// turn then records the request `resolved` and runs (or refuses) the call.
    ///
    /// Errors: [`AdapterError::RequestNotPending`] when no turn of this session
    /// waits on `request` (unknown, already answered, or its turn stopped).
    async fn respond_to_runtime_request(
        &self,
        request: &RuntimeRequestId,
        answer: RequestAnswer,
    ) -> Result<(), AdapterError> {
        self.approvals.answer(request, answer)
    }

    fn take_events(&self) -> Option<BoxStream<'static, Result<AdapterEvent, AdapterError>>> {
        let mut rx = self.events_rx.lock().ok()?.take()?;
        Some(Box::pin(futures::stream::poll_fn(move |cx| {
            rx.poll_recv(cx)
        })))
    }

    /// Cancels the running turn (reason `shutdown`), waits up to
    /// [`CLOSE_TURN_GRACE`] for it to settle its items (then aborts it; the
    /// recorder still settles them on drop) and ends the event stream. Idempotent.
    async fn close(&self) -> Result<(), AdapterError> {
        let Some(events) = self.events_tx.lock().ok().and_then(|mut tx| tx.take()) else {
            return Ok(());
        };
        if let Some(turn) = self.cancel_active(InterruptReason::Shutdown) {
            let abort = turn.handle.abort_handle();
            if tokio::time::timeout(CLOSE_TURN_GRACE, turn.handle)
                .await
                .is_err()
            {
                tracing::warn!(
                    "a built-in agent turn did not stop within its grace period; aborting it"
                );
                abort.abort();
            }
        }
        self.cancel.cancel();
        // `events` (the session's own sender) drops here; the stream ends once
        // the turn task, which holds the only other sender, has finished.
        drop(events);
        Ok(())
    }
}
