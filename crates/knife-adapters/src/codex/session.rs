//! One codex app-server process as a [`SessionRuntime`]: open/handshake, thread
//! loading, turns, interrupts, answers, unload and close. Incoming messages are
//! handled in [`super::dispatch`].

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use futures::stream::BoxStream;
use knife_protocol::*;
use knife_runtime::mcp::McpSessionConfig;
use knife_runtime::{
    AdapterError, ForkThreadInput, InterruptReason, OpenSessionInput, OpenSessionOptions,
    SessionRuntime, StartTurnInput,
};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::wire::{self, method};
use super::{CodexConfig, DRIVER};
use crate::jsonrpc::{Incoming, RpcConnection, RpcError, RpcOptions};
use crate::process::{ChildProcess, ProcessSpec};
use knife_runtime::recording::{EventReceiver, EventSink, TurnIds, TurnRecorder};

/// How long the driver waits for the exit status once codex closed its output.
const EXIT_WAIT: Duration = Duration::from_secs(5);

/// A session of the codex driver; see the module docs.
pub(crate) struct CodexSession {
    pub(super) inner: Arc<Inner>,
}

pub(super) struct Inner {
    pub config: Arc<CodexConfig>,
    pub provider_session_id: ProviderSessionId,
    pub cwd: PathBuf,
    pub model: Option<String>,
    pub rpc: RpcConnection,
    pub sink: EventSink,
    events_rx: Mutex<Option<EventReceiver>>,
    pub state: Mutex<State>,
    /// Serialises thread loading (start / resume / unsubscribe).
    pub(super) thread_lock: tokio::sync::Mutex<()>,
    pub closing: AtomicBool,
    /// The credential the session was opened with (for its first thread).
    pub(super) first_mcp: Option<McpSessionConfig>,
}

/// What the session knows, under one lock (never held across an await).
#[derive(Default)]
pub(super) struct State {
    /// Loaded app thread → its codex thread.
    pub threads: HashMap<ThreadId, ProviderThread>,
    /// Codex thread id → app thread.
    pub natives: HashMap<String, ThreadId>,
    /// Running turn per codex thread id.
    pub turns: HashMap<String, ActiveTurn>,
    /// Approvals waiting for the user.
    pub requests: HashMap<RuntimeRequestId, PendingRequest>,
    /// Latest cumulative usage per codex thread (the baseline of its next turn).
    pub usage_totals: HashMap<String, wire::TokenBreakdown>,
    /// Native threads to resume at the thread's next turn (`resume_thread` of a thread
    /// that joined the session; its workspace is known only then).
    pub pending_resume: HashMap<ThreadId, String>,
}

/// A turn in flight on one codex thread.
pub(super) struct ActiveTurn {
    pub recorder: TurnRecorder,
    /// Codex's turn id, once `turn/start` answered or `turn/started` arrived.
    pub native_turn: Option<String>,
    /// Set by `interrupt_turn`; the reason the turn ends with.
    pub interrupt: Option<String>,
    /// The thread's cumulative usage when the turn started.
    pub baseline: wire::TokenBreakdown,
    /// The thread's cumulative usage at the turn's last usage report (starts at
    /// `baseline`): each report's growth past it is one model call (TURN-06).
    pub last_total: wire::TokenBreakdown,
    /// Retries codex announced (`error` with `willRetry`).
    pub retries: u32,
    /// The last MCP tool item started: (server, tool, item id), to link its approval.
    pub last_mcp_item: Option<(String, String, String)>,
    /// `turn/steer` calls sent to this turn and not answered yet (TURN-01/02).
    pub steers_in_flight: u32,
    /// A `turn/completed` that came while a steer was in flight: the turn ends once
    /// the steer is answered, so a steer codex took is recorded before the end.
    pub deferred_end: Option<wire::TurnNotification>,
}

/// Which answer shape a pending approval takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum ApprovalShape {
    /// `{"decision": …}` (command and file-change approvals).
    Decision,
    /// `{"action": …, "content": …}` (MCP elicitation).
    Elicitation,
}

/// An approval codex waits on.
pub(super) struct PendingRequest {
    /// The JSON-RPC id of codex's request.
    pub rpc_id: Value,
    pub native_thread: String,
    pub shape: ApprovalShape,
}

pub(super) fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    state
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl CodexSession {
    pub(super) async fn open(
        config: Arc<CodexConfig>,
        input: OpenSessionInput,
        options: OpenSessionOptions,
    ) -> Result<CodexSession, AdapterError> {
        let label = format!("codex app-server ({})", config.provider_instance_id);
        let mut spec = ProcessSpec::new(config.command.clone(), &input.cwd, label.clone());
        spec.args = config.args.clone();
        spec.env = config.env.clone();
        spec.env_remove = config.env_remove.clone();
        spec.thread = Some(input.thread_id.clone());
        spec.eof_grace = config.eof_grace;
        spec.term_grace = config.term_grace;
        let (child, lines) = ChildProcess::spawn(spec, config.process_groups.clone())
            .await
            .map_err(AdapterError::spawn)?;
        // From here on, closing the scope (failed or cancelled open, release) stops it.
        child.register_on(&options.scope);
        let rpc_options = RpcOptions {
            request_timeout: config.request_timeout,
            version_field: false,
            strict_handshake: true,
        };
        let (rpc, incoming) = RpcConnection::start(child.clone(), lines, rpc_options);

        let init = wire::InitializeParams {
            client_info: wire::ClientInfo {
                name: "knife".into(),
                title: Some("knife".into()),
                version: env!("CARGO_PKG_VERSION").into(),
            },
            capabilities: wire::InitializeCapabilities {
                experimental_api: false,
            },
        };
        let handshake = async {
            let params = serde_json::to_value(&init).unwrap_or(Value::Null);
            rpc.request_with_timeout(method::INITIALIZE, params, config.handshake_timeout)
                .await?;
            rpc.notify(method::INITIALIZED, Value::Null)
        };
        if let Err(e) = handshake.await {
            let message = match &e {
                RpcError::NotJsonRpc { what, line, .. } => format!(
                    "`{}` does not speak the codex app-server protocol (JSON-RPC over stdio): its \
                     first output was {line} ({what}); check `command` and `args` of provider \
                     instance {} in knife.toml (default: `codex app-server`)",
                    config.command.to_string_lossy(),
                    config.provider_instance_id
                ),
                RpcError::Timeout { .. } => format!(
                    "{}; if `{}` is not codex's app-server, check `command` and `args` of \
                     provider instance {} in knife.toml",
                    failure_text(&child, &e, "the initialize handshake").await,
                    config.command.to_string_lossy(),
                    config.provider_instance_id
                ),
                _ => failure_text(&child, &e, "the initialize handshake").await,
            };
            stop_in_background(child);
            return Err(AdapterError::Handshake {
                step: method::INITIALIZE,
                reason: message,
            });
        }

        let (sink, events_rx) = EventSink::new();
        let inner = Arc::new(Inner {
            model: input.model.clone().or_else(|| config.model.clone()),
            config,
            provider_session_id: input.provider_session_id.clone(),
            cwd: input.cwd.clone(),
            rpc,
            sink,
            events_rx: Mutex::new(Some(events_rx)),
            state: Mutex::new(State::default()),
            thread_lock: tokio::sync::Mutex::new(()),
            closing: AtomicBool::new(false),
            first_mcp: options.mcp.clone(),
        });
        tokio::spawn(dispatch_loop(Arc::downgrade(&inner), incoming));
        if let Err(e) = inner
            .ensure_thread(&input.thread_id, input.native_thread_id.clone(), None)
            .await
        {
            inner.closing.store(true, Ordering::SeqCst);
            stop_in_background(child);
            return Err(AdapterError::Handshake {
                step: method::THREAD_START,
                reason: e.to_string(),
            });
        }
        Ok(CodexSession { inner })
    }
}

/// Closes `child` without waiting (the open failed; the scope closes it too).
fn stop_in_background(child: ChildProcess) {
    tokio::spawn(async move {
        child.close().await;
    });
}

/// What to tell the user when a request failed: with the exit status when the
/// process is gone.
pub(super) async fn failure_text(child: &ChildProcess, error: &RpcError, what: &str) -> String {
    if matches!(error, RpcError::Closed { .. } | RpcError::Send(_))
        && let Ok(info) = tokio::time::timeout(EXIT_WAIT, child.wait_exit()).await
    {
        return format!("{what} failed: {}", info.describe(child.label()));
    }
    format!("{what} failed: {error}")
}

async fn dispatch_loop(weak: Weak<Inner>, mut incoming: mpsc::UnboundedReceiver<Incoming>) {
    loop {
        // Unsent streaming text is written when its item's persistence window ends
        // (PROC-12; the window grows from 50 to 250 ms per item, LIVE-03).
        let deadline = weak.upgrade().and_then(|inner| inner.text_deadline());
        let message = if let Some(deadline) = deadline {
            tokio::select! {
                message = incoming.recv() => message,
                () = tokio::time::sleep_until(deadline) => {
                    if let Some(inner) = weak.upgrade() {
                        inner.flush_due_text();
                    }
                    continue;
                }
            }
        } else {
            incoming.recv().await
        };
        let Some(message) = message else {
            break;
        };
        let Some(inner) = weak.upgrade() else {
            return;
        };
        inner.handle(message);
    }
    if let Some(inner) = weak.upgrade() {
        inner.on_output_closed().await;
    }
}

impl Inner {
    /// When a running turn's streamed text not emitted yet is due (the earliest end
    /// of a dirty item's persistence window), if any.
    fn text_deadline(&self) -> Option<tokio::time::Instant> {
        lock(&self.state)
            .turns
            .values()
            .filter_map(|t| t.recorder.next_flush_deadline())
            .min()
    }

    /// Emits the unsent streaming text of every running turn whose window ended.
    fn flush_due_text(&self) {
        for turn in lock(&self.state).turns.values_mut() {
            turn.recorder.flush_due();
        }
    }

    /// The codex process's output closed: unless knife is closing the session, the
    /// process died — its running turns fail and the stream ends with the exit status.
    async fn on_output_closed(&self) {
        if self.closing.load(Ordering::SeqCst) {
            return;
        }
        let child = self.rpc.child();
        let info = match tokio::time::timeout(EXIT_WAIT, child.wait_exit()).await {
            Ok(info) => info,
            Err(_) => child.close().await,
        };
        if self.closing.load(Ordering::SeqCst) {
            return;
        }
        let text = info.describe(child.label());
        let turns: Vec<ActiveTurn> = {
            let mut st = lock(&self.state);
            st.requests.clear();
            st.turns.drain().map(|(_, t)| t).collect()
        };
        for mut turn in turns {
            // Pending approvals stay pending: the release expires them (MGR-41).
            turn.recorder.finish_session_lost(TurnOutcome::Failed {
                error: RunError::new("runtime", text.clone()),
            });
        }
        self.sink.fail(AdapterError::Lost(text));
    }

    /// Emits `thread`'s provider thread with `status` (and the run ordinal, if given).
    pub(super) fn thread_status(
        &self,
        st: &mut State,
        thread: &ThreadId,
        status: ProviderThreadStatus,
        run_ordinal: Option<u32>,
    ) {
        let now = self.config.clock.now();
        if let Some(record) = st.threads.get_mut(thread) {
            record.status = status;
            record.updated_at = now;
            if run_ordinal.is_some() {
                record.last_run_ordinal = run_ordinal;
            }
            self.sink
                .send(AdapterEvent::ProviderThreadUpdated(record.clone()));
        }
    }

    pub(super) fn native_of(&self, thread: &ThreadId) -> Option<String> {
        lock(&self.state)
            .threads
            .get(thread)
            .and_then(|t| t.native_id.clone())
    }

    async fn send_interrupt(&self, native_thread: String, native_turn: String) {
        let params = wire::TurnInterruptParams {
            thread_id: native_thread,
            turn_id: native_turn,
        };
        if let Err(e) = self
            .rpc
            .call::<_, Value>(method::TURN_INTERRUPT, &params)
            .await
        {
            tracing::warn!(error = %e, "codex refused or did not answer turn/interrupt");
        }
    }
}

#[async_trait::async_trait]
impl SessionRuntime for CodexSession {
    /// Loads the thread if needed, registers the turn, sends `turn/start` and returns
    /// once codex accepted it.
    ///
    /// Errors: [`AdapterError::Closed`] after close; [`AdapterError::Busy`] while a
    /// turn runs on the thread; [`AdapterError::Refused`] when codex refuses the turn
    /// (the turn is then recorded failed).
    async fn start_turn(&self, input: StartTurnInput) -> Result<(), AdapterError> {
        let inner = &self.inner;
        if inner.closing.load(Ordering::SeqCst) || inner.sink.is_closed() {
            return Err(AdapterError::Closed);
        }
        let hint = lock(&inner.state).pending_resume.remove(&input.thread_id);
        let native = inner
            .ensure_thread(&input.thread_id, hint, input.cwd.as_deref())
            .await?;
        let abandoned = {
            let mut st = lock(&inner.state);
            if st
                .turns
                .get(&native)
                .is_some_and(|t| t.recorder.ids().provider_turn_id == input.provider_turn_id)
            {
                return Err(AdapterError::Busy(format!(
                    "turn {} is already running on thread {}",
                    input.provider_turn_id, input.thread_id
                )));
            }
            // Execution starts a turn only once the thread's previous run ended, so a turn
            // still registered here is one knife gave up on (codex ignored the interrupt
            // past the grace, or the stuck-turn watchdog ended it). Without this the
            // thread would refuse every later turn until the process goes.
            let abandoned = st.turns.remove(&native);
            if abandoned.is_some() {
                st.requests.retain(|_, p| p.native_thread != native);
            }
            abandoned
        };
        if let Some(mut old) = abandoned {
            tracing::warn!(
                thread = %input.thread_id, native = %native,
                "codex never ended the thread's previous turn; it is recorded interrupted and a new turn starts"
            );
            let native_turn = old.native_turn.clone();
            old.recorder.finish(TurnOutcome::Interrupted {
                reason: old.interrupt.clone().unwrap_or_else(|| "aborted".into()),
            });
            if let Some(native_turn) = native_turn {
                inner.send_interrupt(native.clone(), native_turn).await;
            }
        }
        {
            let mut st = lock(&inner.state);
            let baseline = st.usage_totals.get(&native).copied().unwrap_or_default();
            let recorder = TurnRecorder::start(
                inner.sink.clone(),
                inner.config.clock.clone(),
                TurnIds {
                    thread_id: input.thread_id.clone(),
                    run_id: input.run_id.clone(),
                    run_ordinal: input.run_ordinal,
                    provider_turn_id: input.provider_turn_id.clone(),
                    provider_session_id: inner.provider_session_id.clone(),
                    attempt: input.attempt,
                    provider_thread_id: Some(ProviderThreadId::native(DRIVER, &native)),
                    provider_instance_id: inner.config.provider_instance_id.clone(),
                    model: input.model.clone(),
                },
            );
            st.turns.insert(
                native.clone(),
                ActiveTurn {
                    recorder,
                    native_turn: None,
                    interrupt: None,
                    baseline,
                    last_total: baseline,
                    retries: 0,
                    last_mcp_item: None,
                    steers_in_flight: 0,
                    deferred_end: None,
                },
            );
            inner.thread_status(
                &mut st,
                &input.thread_id,
                ProviderThreadStatus::Active,
                Some(input.run_ordinal),
            );
        }
        let params = wire::TurnStartParams {
            thread_id: native.clone(),
            input: vec![wire::UserInput::Text {
                text: input.text.clone(),
            }],
            model: input.model.clone(),
        };
        match inner
            .rpc
            .call::<_, wire::TurnResponse>(method::TURN_START, &params)
            .await
        {
            Ok(resp) => {
                let interrupt = {
                    let mut st = lock(&inner.state);
                    match st.turns.get_mut(&native) {
                        // Whoever names the turn sends a pending interrupt (here, or
                        // `turn/started` in dispatch), so it goes out once.
                        Some(turn)
                            if turn.recorder.ids().run_id == input.run_id
                                && turn.native_turn.is_none() =>
                        {
                            turn.native_turn = Some(resp.turn.id.clone());
                            turn.recorder.set_native_turn_id(&resp.turn.id);
                            turn.interrupt.is_some()
                        }
                        _ => false,
                    }
                };
                if interrupt {
                    inner.send_interrupt(native, resp.turn.id).await;
                }
                Ok(())
            }
            Err(e) => {
                let text = failure_text(inner.rpc.child(), &e, "turn/start").await;
                let turn = {
                    let mut st = lock(&inner.state);
                    let turn = st.turns.remove(&native);
                    inner.thread_status(
                        &mut st,
                        &input.thread_id,
                        ProviderThreadStatus::Idle,
                        None,
                    );
                    turn
                };
                if let Some(mut turn) = turn {
                    turn.recorder.finish(TurnOutcome::Failed {
                        error: RunError::new("runtime", text.clone()),
                    });
                }
                Err(AdapterError::Refused {
                    operation: method::TURN_START,
                    reason: text,
                })
            }
        }
    }

    /// Sends `steer` to the running turn with `turn/steer` (TURN-01; see `steer.rs`).
    async fn steer_turn(
        &self,
        thread: &ThreadId,
        steer: knife_runtime::SteerInput,
    ) -> Result<(), AdapterError> {
        self.inner.steer(thread, steer).await
    }

    /// Answers every approval codex waits on for the running turn of `thread` with
    /// `cancel` (request, node and item `cancelled`), then sends `turn/interrupt` (once
    /// codex named the turn); codex then ends it with `turn/completed` status
    /// `interrupted`. An approval left unanswered would keep codex waiting on it.
    async fn interrupt_turn(
        &self,
        thread: &ThreadId,
        reason: InterruptReason,
    ) -> Result<(), AdapterError> {
        let inner = &self.inner;
        let Some(native) = inner.native_of(thread) else {
            return Ok(());
        };
        let target = {
            let mut st = lock(&inner.state);
            let target = match st.turns.get_mut(&native) {
                Some(turn) => {
                    turn.interrupt
                        .get_or_insert_with(|| reason.as_str().to_owned());
                    turn.native_turn.clone()
                }
                None => return Ok(()),
            };
            let mut open: Vec<RuntimeRequestId> = st
                .requests
                .iter()
                .filter(|(_, p)| p.native_thread == native)
                .map(|(id, _)| id.clone())
                .collect();
            open.sort_by(|a, b| a.as_str().cmp(b.as_str()));
            for id in open {
                let Some(pending) = st.requests.remove(&id) else {
                    continue;
                };
                if let Err(e) = inner
                    .rpc
                    .respond(&pending.rpc_id, cancel_answer(pending.shape))
                {
                    tracing::warn!(error = %e, "could not answer codex's approval request before the interrupt");
                }
                if let Some(turn) = st.turns.get_mut(&native) {
                    turn.recorder.approval_cancelled(&id);
                }
            }
            target
        };
        if let Some(native_turn) = target {
            inner.send_interrupt(native, native_turn).await;
        }
        Ok(())
    }

    /// Marks `thread` to be loaded from `native_thread_id` (`thread/resume`) at its next
    /// turn, which knows the thread's workspace. A no-op when it is loaded already.
    async fn resume_thread(
        &self,
        thread: &ThreadId,
        native_thread_id: Option<String>,
    ) -> Result<(), AdapterError> {
        let mut st = lock(&self.inner.state);
        if st.threads.contains_key(thread) {
            return Ok(());
        }
        match native_thread_id {
            Some(native) => {
                st.pending_resume.insert(thread.clone(), native);
            }
            None => {
                st.pending_resume.remove(thread);
            }
        }
        Ok(())
    }

    fn take_events(&self) -> Option<BoxStream<'static, Result<AdapterEvent, AdapterError>>> {
        let mut rx = self.inner.events_rx.lock().ok()?.take()?;
        Some(Box::pin(futures::stream::poll_fn(move |cx| {
            rx.poll_recv(cx)
        })))
    }

    /// Interrupts the running turns (reason `shutdown`), ends the event stream and
    /// closes the process (stdin EOF → SIGTERM → SIGKILL). Idempotent.
    async fn close(&self) -> Result<(), AdapterError> {
        let inner = &self.inner;
        if !inner.closing.swap(true, Ordering::SeqCst) {
            let turns: Vec<ActiveTurn> = {
                let mut st = lock(&inner.state);
                st.requests.clear();
                st.turns.drain().map(|(_, t)| t).collect()
            };
            for mut turn in turns {
                turn.recorder.finish(TurnOutcome::Interrupted {
                    reason: InterruptReason::Shutdown.as_str().to_owned(),
                });
            }
            inner.sink.close();
        }
        inner.rpc.child().close().await;
        Ok(())
    }

    /// Answers the approval codex waits on (see the driver docs for the mapping).
    ///
    /// Errors: [`AdapterError::RequestNotPending`] for an unknown or answered request;
    /// [`AdapterError::Send`] when the answer cannot be written (process gone).
    async fn respond_to_runtime_request(
        &self,
        request: &RuntimeRequestId,
        answer: RequestAnswer,
    ) -> Result<(), AdapterError> {
        let inner = &self.inner;
        let mut st = lock(&inner.state);
        let Some(pending) = st.requests.remove(request) else {
            return Err(AdapterError::RequestNotPending(format!(
                "runtime request {request} is not waiting for an answer on this codex session \
                 (unknown, already answered, or its turn ended)"
            )));
        };
        let result = match pending.shape {
            ApprovalShape::Decision => json!(wire::ApprovalResponse {
                decision: match answer.decision {
                    ApprovalDecision::AllowOnce => "accept",
                    ApprovalDecision::AllowAlways => "acceptForSession",
                    ApprovalDecision::Deny => "decline",
                },
            }),
            ApprovalShape::Elicitation => json!(match answer.decision {
                ApprovalDecision::AllowOnce => wire::ElicitationResponse {
                    action: "accept",
                    content: Some(json!({})),
                    meta: None,
                },
                ApprovalDecision::AllowAlways => wire::ElicitationResponse {
                    action: "accept",
                    content: Some(json!({})),
                    meta: Some(json!({"persist": "session"})),
                },
                ApprovalDecision::Deny => wire::ElicitationResponse {
                    action: "decline",
                    content: None,
                    meta: None,
                },
            }),
        };
        if let Err(e) = inner.rpc.respond(&pending.rpc_id, result) {
            return Err(AdapterError::send("the approval's answer", e));
        }
        if let Some(turn) = st.turns.get_mut(&pending.native_thread) {
            turn.recorder.approval_answered(request, &answer);
        }
        Ok(())
    }

    fn can_unload_threads(&self) -> bool {
        true
    }

    /// `thread/fork` of the source's codex thread through `last_native_turn_id`
    /// (CHG-09), then `thread/unsubscribe` of the new one: the target's first turn
    /// resumes it with its own settings (its MCP credential). Returns the target's
    /// provider thread (`not_loaded`). Errors: [`AdapterError::Closed`] after close;
    /// [`AdapterError::Refused`] with codex's answer when it refuses.
    async fn fork_thread(&self, input: ForkThreadInput) -> Result<ProviderThread, AdapterError> {
        let inner = &self.inner;
        if inner.closing.load(Ordering::SeqCst) || inner.sink.is_closed() {
            return Err(AdapterError::Closed);
        }
        let params = wire::ThreadForkParams {
            thread_id: input.source_native_thread_id.clone(),
            last_turn_id: input.last_native_turn_id.clone(),
            cwd: input.cwd.display().to_string(),
            approval_policy: inner.config.approval_policy.clone(),
            sandbox: inner.config.sandbox.clone(),
            model: input.model.clone().or_else(|| inner.model.clone()),
        };
        let forked = match inner
            .rpc
            .call::<_, wire::ThreadResponse>(method::THREAD_FORK, &params)
            .await
        {
            Ok(resp) => resp.thread.id,
            Err(e) => {
                return Err(AdapterError::Refused {
                    operation: method::THREAD_FORK,
                    reason: failure_text(inner.rpc.child(), &e, "forking the codex thread").await,
                });
            }
        };
        // Best effort: a loaded fork only costs memory until the idle unload.
        let unsubscribe = wire::ThreadUnsubscribeParams {
            thread_id: forked.clone(),
        };
        if let Err(e) = inner
            .rpc
            .call::<_, Value>(method::THREAD_UNSUBSCRIBE, &unsubscribe)
            .await
        {
            tracing::debug!(error = %e, native = %forked, "could not unsubscribe the forked codex thread");
        }
        let now = inner.config.clock.now();
        Ok(ProviderThread {
            id: ProviderThreadId::native(DRIVER, &forked),
            driver: DRIVER.to_owned(),
            provider_instance_id: inner.config.provider_instance_id.clone(),
            provider_session_id: Some(inner.provider_session_id.clone()),
            app_thread_id: Some(input.target_thread_id.clone()),
            native_id: Some(forked),
            status: ProviderThreadStatus::NotLoaded,
            last_run_ordinal: None,
            pending_background_tasks: Vec::new(),
            created_at: now,
            updated_at: now,
        })
    }

    /// `thread/unsubscribe` of `native_thread_id`; the thread is forgotten by this
    /// session (a later turn or resume loads it again).
    async fn unload_thread(
        &self,
        thread: &ThreadId,
        native_thread_id: &str,
    ) -> Result<(), AdapterError> {
        let inner = &self.inner;
        let _serial = inner.thread_lock.lock().await;
        let params = wire::ThreadUnsubscribeParams {
            thread_id: native_thread_id.to_owned(),
        };
        let result = inner
            .rpc
            .call::<_, Value>(method::THREAD_UNSUBSCRIBE, &params)
            .await;
        {
            let mut st = lock(&inner.state);
            inner.thread_status(&mut st, thread, ProviderThreadStatus::NotLoaded, None);
            if st
                .threads
                .get(thread)
                .is_some_and(|t| t.native_id.as_deref() == Some(native_thread_id))
            {
                st.threads.remove(thread);
            }
            st.natives.remove(native_thread_id);
        }
        result.map(|_| ()).map_err(|e| AdapterError::Refused {
            operation: method::THREAD_UNSUBSCRIBE,
            reason: format!("thread/unsubscribe failed: {e}"),
        })
    }
}

/// The answer to an approval whose turn is being interrupted: `cancel` (decline and
/// end the turn) for command / file-change approvals, `cancel` for an elicitation.
fn cancel_answer(shape: ApprovalShape) -> Value {
    match shape {
        ApprovalShape::Decision => json!(wire::ApprovalResponse { decision: "cancel" }),
        ApprovalShape::Elicitation => json!(wire::ElicitationResponse {
            action: "cancel",
            content: None,
            meta: None,
        }),
    }
}

impl Drop for CodexSession {
    /// A session dropped without `close` still ends its turns; the process closes
    /// when its last handle (the connection's) goes.
    fn drop(&mut self) {
        self.inner.closing.store(true, Ordering::SeqCst);
        let turns: Vec<ActiveTurn> = {
            let mut st = lock(&self.inner.state);
            st.turns.drain().map(|(_, t)| t).collect()
        };
        drop(turns);
        self.inner.sink.close();
        let child = self.inner.rpc.child().clone();
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            handle.spawn(async move {
                child.close().await;
            });
        }
    }
}
