//! One ACP provider session: its open (spawn, then [`super::handshake`]), and the
//! actor that owns the agent's messages and the running turn.
//!
//! The actor is the only place that changes a turn. It reads, in this priority
//! order, the agent's messages (notifications and agent → client requests, in the
//! order the agent wrote them) and the session's commands (start, interrupt, answer,
//! and "the `session/prompt` call returned"). Since the agent writes every
//! `session/update` of a turn before its `session/prompt` result, and the reader
//! queues those updates before it hands over that result, the turn's last chunks are
//! always mapped before the turn ends.
//!
//! - `session/request_permission` during a turn → runtime request (see
//!   [`super::mapping`]); the JSON-RPC request stays open until
//!   [`SessionRuntime::respond_to_runtime_request`] answers it with the agent's option
//!   of the decision's kind, or an interrupt answers it `cancelled` (as the protocol
//!   requires before `session/cancel`). Outside a turn it is answered `cancelled`.
//! - Other agent → client requests (`fs/*`, `terminal/*`: knife offers neither) get a
//!   JSON-RPC "method not found" error; other notifications are ignored; updates
//!   outside a turn (the history replay of `session/load`) are not recorded.
//! - Interrupt: `session/cancel`; the turn ends `interrupted` when the agent answers
//!   the prompt (with any stop reason).
//! - The agent's output closes: if knife was closing the session, the running turn
//!   ends `interrupted (shutdown)` and the event stream ends; otherwise the turn
//!   fails with the exit status (`acp agent X exited unexpectedly (exit status 3);
//!   last stderr: …`) and the stream yields that error, so the manager releases the
//!   session with `runtime_error` and the status in `lastError`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use futures::stream::BoxStream;
use knife_protocol::*;
use knife_runtime::{
    AdapterError, InterruptReason, OpenSessionInput, OpenSessionOptions, SessionRuntime,
    StartTurnInput,
};
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};

use super::handshake::handshake;
use super::mapping::{AcpTurn, TurnEnd, TurnIdentity, choose_option};
use super::types::*;
use super::{AcpConfig, DRIVER};
use crate::jsonrpc::{
    INVALID_PARAMS, Incoming, METHOD_NOT_FOUND, RpcConnection, RpcError, RpcOptions,
};
use crate::process::ChildProcess;

/// Bound of one `session/prompt` call. Turns may legitimately run for hours; the
/// session manager's stuck-turn watchdog is what stops a silent one.
const PROMPT_TIMEOUT: Duration = Duration::from_secs(30 * 24 * 3600);
/// How long the actor waits for the exit status after the agent's output closed.
const EXIT_WAIT: Duration = Duration::from_secs(5);

type EventTx = mpsc::UnboundedSender<Result<AdapterEvent, AdapterError>>;
type EventRx = mpsc::UnboundedReceiver<Result<AdapterEvent, AdapterError>>;

/// Spawns the agent, runs the handshake and starts the actor (see `super` docs).
pub(super) async fn open(
    config: Arc<AcpConfig>,
    input: OpenSessionInput,
    options: OpenSessionOptions,
) -> Result<Arc<dyn SessionRuntime>, AdapterError> {
    let spec = config.spec(input.cwd.clone(), &input.thread_id);
    let label = spec.label.clone();
    let (child, lines) = ChildProcess::spawn(spec, config.process_groups.clone())
        .await
        .map_err(AdapterError::spawn)?;
    child.register_on(&options.scope);
    let (rpc, incoming) = RpcConnection::start(
        child.clone(),
        lines,
        RpcOptions {
            request_timeout: config.handshake_timeout,
            version_field: true,
            strict_handshake: true,
        },
    );
    let initialize_timeout = config.initialize_timeout.min(config.handshake_timeout);
    let handshake = handshake(&rpc, &input, options.mcp.as_ref(), initialize_timeout);
    let (session_id, how, models) = match handshake.await {
        Ok(done) => done,
        Err((step, error)) => {
            let mut message = match &error {
                RpcError::NotJsonRpc { what, line, .. } => format!(
                    "`{}` does not speak ACP (JSON-RPC over stdio): its first output was {line} \
                     ({what}); check `command` and `args` of provider instance {} in knife.toml",
                    config.command.to_string_lossy(),
                    config.provider_instance_id
                ),
                RpcError::Timeout { .. } if step == "initialize" => format!(
                    "the ACP agent failed its {step}: {error}; if `{}` is not an ACP agent, \
                     check `command` and `args` of provider instance {} in knife.toml",
                    config.command.to_string_lossy(),
                    config.provider_instance_id
                ),
                _ => format!("the ACP agent failed its {step}: {error}"),
            };
            // The agent is gone (its output closed, or its input before we wrote):
            // say how it ended.
            if matches!(error, RpcError::Closed { .. } | RpcError::Send(_))
                && let Ok(exit) = tokio::time::timeout(EXIT_WAIT, child.wait_exit()).await
            {
                message = format!("{message}; {}", exit.describe(&label));
            }
            let closing = child.clone();
            tokio::spawn(async move {
                closing.close().await;
            });
            return Err(AdapterError::Handshake {
                step,
                reason: message,
            });
        }
    };
    tracing::info!(
        agent = %label, thread = %input.thread_id, acp_session = %session_id, how,
        "opened an ACP session"
    );

    let (events, events_rx) = mpsc::unbounded_channel();
    let now = config.clock.now();
    let provider_thread_id = ProviderThreadId::native(DRIVER, &session_id);
    let _ = events.send(Ok(AdapterEvent::ProviderThreadUpdated(ProviderThread {
        id: provider_thread_id.clone(),
        driver: DRIVER.to_owned(),
        provider_instance_id: input.provider_instance_id.clone(),
        provider_session_id: Some(input.provider_session_id.clone()),
        app_thread_id: Some(input.thread_id.clone()),
        native_id: Some(session_id.clone()),
        status: ProviderThreadStatus::Idle,
        last_run_ordinal: None,
        pending_background_tasks: Vec::new(),
        created_at: now,
        updated_at: now,
    })));

    let (commands, commands_rx) = mpsc::unbounded_channel();
    let closing = Arc::new(AtomicBool::new(false));
    let actor = Actor {
        config: Arc::clone(&config),
        rpc,
        child: child.clone(),
        label: label.clone(),
        session_id: session_id.clone(),
        provider_session_id: input.provider_session_id.clone(),
        provider_thread_id,
        events,
        commands: commands.downgrade(),
        closing: Arc::clone(&closing),
        turn: None,
        interrupt: None,
        permissions: HashMap::new(),
        current_model: models.as_ref().map(|m| m.current_model_id.clone()),
        models,
    };
    tokio::spawn(actor.run(incoming, commands_rx));
    Ok(Arc::new(AcpSession {
        label,
        native_id: session_id,
        child,
        commands,
        events: Mutex::new(Some(events_rx)),
        closing,
    }))
}

enum Command {
    StartTurn(
        Box<StartTurnInput>,
        oneshot::Sender<Result<(), AdapterError>>,
    ),
    Interrupt(ThreadId, InterruptReason, oneshot::Sender<()>),
    Answer(
        RuntimeRequestId,
        RequestAnswer,
        oneshot::Sender<Result<(), AdapterError>>,
    ),
    PromptDone(ProviderTurnId, Result<PromptResponse, RpcError>),
}

/// A permission request the agent waits on.
struct OpenPermission {
    rpc_id: Value,
    options: Vec<PermissionOption>,
}

struct Actor {
    config: Arc<AcpConfig>,
    rpc: RpcConnection,
    child: ChildProcess,
    label: String,
    session_id: String,
    provider_session_id: ProviderSessionId,
    provider_thread_id: ProviderThreadId,
    events: EventTx,
    /// Weak: the actor's commands end when the session handle is dropped.
    commands: mpsc::WeakUnboundedSender<Command>,
    closing: Arc<AtomicBool>,
    turn: Option<AcpTurn>,
    /// The reason of the interrupt knife asked for on the running turn.
    interrupt: Option<String>,
    permissions: HashMap<RuntimeRequestId, OpenPermission>,
    /// The models the agent offered when the session opened (TURN-10).
    models: Option<SessionModelState>,
    /// The model last selected (`None` when unknown: after a failed turn).
    current_model: Option<String>,
}

/// Sleeps until `at` (never, without one).
async fn sleep_until_some(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

impl Actor {
    async fn run(
        mut self,
        mut incoming: mpsc::UnboundedReceiver<Incoming>,
        mut commands: mpsc::UnboundedReceiver<Command>,
    ) {
        let mut handle_dropped = false;
        loop {
            // The running turn's unwritten text is due at the end of its item's
            // persistence window (PROC-12, LIVE-03); the agent's messages come first.
            let flush_at = self.turn.as_ref().and_then(AcpTurn::next_flush_deadline);
            tokio::select! {
                biased;
                message = incoming.recv() => match message {
                    Some(message) => self.on_incoming(message),
                    None => break,
                },
                () = sleep_until_some(flush_at), if flush_at.is_some() => {
                    if let Some(turn) = self.turn.as_mut() {
                        let events = turn.flush_due();
                        self.send(events);
                    }
                }
                command = commands.recv(), if !handle_dropped => match command {
                    Some(command) => self.on_command(command),
                    None => {
                        // The session was dropped without `close`: stop the agent.
                        handle_dropped = true;
                        self.closing.store(true, Ordering::SeqCst);
                        let child = self.child.clone();
                        tokio::spawn(async move {
                            child.close().await;
                        });
                    }
                },
            }
        }
        self.on_exit().await;
    }

    fn send(&self, events: Vec<AdapterEvent>) {
        for event in events {
            let _ = self.events.send(Ok(event));
        }
    }

    fn on_incoming(&mut self, message: Incoming) {
        match message {
            Incoming::Notification { method, params } if method == methods::SESSION_UPDATE => {
                match serde_json::from_value::<SessionNotification>(params.clone()) {
                    Ok(note) if note.session_id == self.session_id => {
                        if let Some(turn) = self.turn.as_mut() {
                            let events = turn.apply(note.update);
                            self.send(events);
                        }
                    }
                    Ok(_) => {}
                    Err(e) => self.rpc.stats().record_malformed(
                        &self.label,
                        "a session/update of an unexpected shape",
                        &format!("{e}: {params}"),
                    ),
                }
            }
            Incoming::Notification { method, .. } => {
                tracing::debug!(agent = %self.label, %method, "ignored an ACP notification");
            }
            Incoming::Request { id, method, params }
                if method == methods::SESSION_REQUEST_PERMISSION =>
            {
                self.on_permission(id, params);
            }
            Incoming::Request { id, method, .. } => {
                let _ = self.rpc.respond_error(
                    &id,
                    METHOD_NOT_FOUND,
                    &format!("knife does not offer {method} to agents"),
                );
            }
        }
    }

    fn on_permission(&mut self, id: Value, params: Value) {
        let ask = match serde_json::from_value::<RequestPermissionRequest>(params) {
            Ok(ask) => ask,
            Err(e) => {
                let _ = self.rpc.respond_error(
                    &id,
                    INVALID_PARAMS,
                    &format!("knife could not read this permission request: {e}"),
                );
                return;
            }
        };
        let live = self.interrupt.is_none() && ask.session_id == self.session_id;
        let Some(turn) = self.turn.as_mut().filter(|_| live) else {
            let _ = self
                .rpc
                .respond(&id, json!({"outcome": PermissionOutcome::Cancelled}));
            return;
        };
        let request_id = RuntimeRequestId::new();
        let events = turn.permission_requested(&request_id, &ask);
        self.permissions.insert(
            request_id,
            OpenPermission {
                rpc_id: id,
                options: ask.options,
            },
        );
        self.send(events);
    }

    fn on_command(&mut self, command: Command) {
        match command {
            Command::StartTurn(input, reply) => {
                let _ = reply.send(self.start_turn(*input));
            }
            Command::Interrupt(thread, reason, reply) => {
                self.interrupt_turn(&thread, reason);
                let _ = reply.send(());
            }
            Command::Answer(request, answer, reply) => {
                let _ = reply.send(self.answer(&request, answer));
            }
            Command::PromptDone(turn_id, result) => self.prompt_done(&turn_id, result),
        }
    }

    fn start_turn(&mut self, input: StartTurnInput) -> Result<(), AdapterError> {
        if self.closing.load(Ordering::SeqCst) || self.rpc.is_closed() {
            return Err(AdapterError::Closed);
        }
        if let Some(turn) = &self.turn {
            if turn.identity().provider_turn_id == input.provider_turn_id {
                return Err(AdapterError::Busy(format!(
                    "turn {} is already running on thread {}",
                    input.provider_turn_id,
                    turn.identity().thread_id
                )));
            }
            // Execution starts a turn only once the thread's previous run ended, so this
            // one was given up on (the stuck-turn watchdog ended it while the agent
            // ignored `session/cancel`). Without this the thread would refuse every
            // later turn until the session is released.
            tracing::warn!(
                agent = %self.label, thread = %input.thread_id,
                "the agent never ended the previous turn; it is recorded interrupted and a new prompt is sent"
            );
            let reason = self
                .interrupt
                .clone()
                .unwrap_or_else(|| "aborted".to_owned());
            self.finish(TurnEnd::Interrupted(reason));
        }
        // TURN-10: the run's model, selected before the prompt when it differs.
        let (switch, model) = super::models::plan(
            self.models.as_ref(),
            self.current_model.as_deref(),
            input.model.as_deref(),
        )?;
        if switch.is_some() {
            self.current_model.clone_from(&switch);
        }
        let mut turn = AcpTurn::new(
            Arc::clone(&self.config.clock),
            TurnIdentity {
                thread_id: input.thread_id.clone(),
                run_id: input.run_id.clone(),
                run_ordinal: input.run_ordinal,
                provider_turn_id: input.provider_turn_id.clone(),
                provider_session_id: self.provider_session_id.clone(),
                provider_thread_id: Some(self.provider_thread_id.clone()),
                attempt: input.attempt,
                provider_instance_id: self.config.provider_instance_id.clone(),
                model: model.or_else(|| input.model.clone()),
            },
        );
        let events = turn.start();
        self.send(events);
        self.turn = Some(turn);
        self.interrupt = None;
        let request = PromptRequest {
            session_id: self.session_id.clone(),
            prompt: vec![ContentBlock::text(input.text)],
        };
        let rpc = self.rpc.clone();
        let commands = self.commands.clone();
        let turn_id = input.provider_turn_id;
        let session_id = self.session_id.clone();
        tokio::spawn(async move {
            if let Some(model_id) = switch {
                let select = SetSessionModelRequest {
                    session_id,
                    model_id,
                };
                let params = serde_json::to_value(&select).unwrap_or(Value::Null);
                if let Err(e) = rpc.request(methods::SESSION_SET_MODEL, params).await {
                    if let Some(commands) = commands.upgrade() {
                        let _ = commands.send(Command::PromptDone(turn_id, Err(e)));
                    }
                    return;
                }
            }
            let result = match serde_json::to_value(&request) {
                Ok(params) => rpc
                    .request_with_timeout(methods::SESSION_PROMPT, params, PROMPT_TIMEOUT)
                    .await
                    .and_then(|v| {
                        serde_json::from_value::<PromptResponse>(v).map_err(|e| RpcError::Decode {
                            method: methods::SESSION_PROMPT.into(),
                            error: e.to_string(),
                        })
                    }),
                Err(e) => Err(RpcError::Decode {
                    method: methods::SESSION_PROMPT.into(),
                    error: e.to_string(),
                }),
            };
            if let Some(commands) = commands.upgrade() {
                let _ = commands.send(Command::PromptDone(turn_id, result));
            }
        });
        Ok(())
    }

    fn interrupt_turn(&mut self, thread: &ThreadId, reason: InterruptReason) {
        let Some(turn) = self.turn.as_mut() else {
            return;
        };
        if &turn.identity().thread_id != thread || self.interrupt.is_some() {
            return;
        }
        self.interrupt = Some(reason.as_str().to_owned());
        // The protocol: answer every open permission request `cancelled`, then cancel.
        let mut events = Vec::new();
        for (id, open) in self.permissions.drain() {
            let _ = self.rpc.respond(
                &open.rpc_id,
                json!({"outcome": PermissionOutcome::Cancelled}),
            );
            events.extend(turn.permission_settled(&id, None));
        }
        self.send(events);
        if let Err(e) = self.rpc.notify(
            methods::SESSION_CANCEL,
            json!(SessionIdParams {
                session_id: self.session_id.clone()
            }),
        ) {
            tracing::warn!(agent = %self.label, error = %e, "could not send session/cancel");
        }
    }

    fn answer(
        &mut self,
        request: &RuntimeRequestId,
        answer: RequestAnswer,
    ) -> Result<(), AdapterError> {
        let Some(open) = self.permissions.get(request) else {
            return Err(AdapterError::RequestNotPending(format!(
                "the ACP agent of this session is not waiting on request {request}: it is \
                 unknown, was already answered, or its turn stopped; check the request's status \
                 with GET /api/threads/<thread>/requests"
            )));
        };
        let Some(outcome) = choose_option(&open.options, answer.decision) else {
            let offered: Vec<&str> = open.options.iter().map(|o| o.option_id.as_str()).collect();
            return Err(AdapterError::Busy(format!(
                "the agent offered no option that allows this call (options: {}); answer deny \
                 instead",
                offered.join(", ")
            )));
        };
        self.rpc
            .respond(&open.rpc_id, json!({ "outcome": outcome }))
            .map_err(|e| AdapterError::send("the permission answer", e))?;
        self.permissions.remove(request);
        if let Some(turn) = self.turn.as_mut() {
            let events = turn.permission_settled(request, Some(&answer));
            self.send(events);
        }
        Ok(())
    }

    fn prompt_done(&mut self, turn_id: &ProviderTurnId, result: Result<PromptResponse, RpcError>) {
        if self
            .turn
            .as_ref()
            .is_none_or(|t| &t.identity().provider_turn_id != turn_id)
        {
            return;
        }
        let end = match result {
            Ok(response) => {
                if let (Some(usage), Some(turn)) = (&response.usage, self.turn.as_mut()) {
                    turn.set_usage(usage.to_token_usage());
                }
                TurnEnd::from_stop_reason(response.stop_reason, self.interrupt.as_deref())
            }
            // The agent's output closed: the exit path ends the turn with the status.
            Err(RpcError::Closed { .. }) => return,
            Err(_) if self.interrupt.is_some() => {
                TurnEnd::Interrupted(self.interrupt.clone().unwrap_or_default())
            }
            Err(e) => {
                // The model selection may have failed: select again next turn.
                self.current_model = None;
                TurnEnd::Failed(RunError::new("provider.runtime", e.to_string()))
            }
        };
        self.finish(end);
    }

    fn finish(&mut self, end: TurnEnd) {
        let Some(mut turn) = self.turn.take() else {
            return;
        };
        for (_, open) in self.permissions.drain() {
            let _ = self.rpc.respond(
                &open.rpc_id,
                json!({"outcome": PermissionOutcome::Cancelled}),
            );
        }
        self.interrupt = None;
        let events = turn.finish(end);
        self.send(events);
    }

    async fn on_exit(mut self) {
        let exit = tokio::time::timeout(EXIT_WAIT, self.child.wait_exit()).await;
        if self.closing.load(Ordering::SeqCst) {
            self.finish(TurnEnd::Interrupted(
                InterruptReason::Shutdown.as_str().to_owned(),
            ));
            return;
        }
        let message = match exit {
            Ok(exit) => exit.describe(&self.label),
            Err(_) => {
                let child = self.child.clone();
                tokio::spawn(async move {
                    child.close().await;
                });
                format!("{} closed its output", self.label)
            }
        };
        tracing::warn!(agent = %self.label, "{message}");
        // Nobody can answer the agent's open permission requests any more: they stay
        // pending until the release of the failed session expires them (MGR-41).
        self.permissions.clear();
        if let Some(turn) = self.turn.as_mut() {
            turn.leave_approvals_to_release();
        }
        self.finish(TurnEnd::Failed(RunError::new(
            "provider.runtime",
            message.clone(),
        )));
        let _ = self.events.send(Err(AdapterError::Lost(message)));
    }
}

/// The session handle given to the manager.
struct AcpSession {
    label: String,
    native_id: String,
    child: ChildProcess,
    commands: mpsc::UnboundedSender<Command>,
    events: Mutex<Option<EventRx>>,
    closing: Arc<AtomicBool>,
}

impl AcpSession {
    async fn ask<T>(
        &self,
        make: impl FnOnce(oneshot::Sender<T>) -> Command,
    ) -> Result<T, AdapterError> {
        let (tx, rx) = oneshot::channel();
        self.commands
            .send(make(tx))
            .map_err(|_| AdapterError::Closed)?;
        rx.await.map_err(|_| AdapterError::Closed)
    }
}

#[async_trait::async_trait]
impl SessionRuntime for AcpSession {
    /// Sends `session/prompt` and returns at once; the turn's items and terminal
    /// arrive on the event stream.
    ///
    /// Errors: [`AdapterError::Closed`] once the agent is closing or gone;
    /// [`AdapterError::Busy`] while another turn runs.
    async fn start_turn(&self, input: StartTurnInput) -> Result<(), AdapterError> {
        self.ask(|reply| Command::StartTurn(Box::new(input), reply))
            .await?
    }

    /// Answers open permission requests `cancelled` and sends `session/cancel`; the
    /// turn ends `interrupted` when the agent answers the prompt. No-op when no turn
    /// of `thread` runs.
    async fn interrupt_turn(
        &self,
        thread: &ThreadId,
        reason: InterruptReason,
    ) -> Result<(), AdapterError> {
        let thread = thread.clone();
        match self
            .ask(|reply| Command::Interrupt(thread, reason, reply))
            .await
        {
            Ok(()) | Err(AdapterError::Closed) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// The session was opened on the thread's native session already (`session/load`
    /// or `session/resume` at open). Errors: [`AdapterError::Busy`] when asked for
    /// another ACP session (one session per agent process).
    async fn resume_thread(
        &self,
        thread: &ThreadId,
        native_thread_id: Option<String>,
    ) -> Result<(), AdapterError> {
        match native_thread_id {
            Some(native) if native != self.native_id => Err(AdapterError::Busy(format!(
                "{} serves ACP session {} only and cannot take session {native} of thread \
                 {thread}; open a new session for it",
                self.label, self.native_id
            ))),
            _ => Ok(()),
        }
    }

    fn take_events(&self) -> Option<BoxStream<'static, Result<AdapterEvent, AdapterError>>> {
        let rx = self.events.lock().ok()?.take()?;
        Some(tokio_stream_from(rx))
    }

    /// Closes the agent process (stdin EOF → SIGTERM → SIGKILL to its group) and
    /// waits until it is reaped; a running turn ends `interrupted (shutdown)` and
    /// the event stream ends. Idempotent.
    async fn close(&self) -> Result<(), AdapterError> {
        self.closing.store(true, Ordering::SeqCst);
        let exit = self.child.close().await;
        tracing::info!(agent = %self.label, status = %exit.status_text(), "closed the ACP agent");
        Ok(())
    }

    /// Answers the agent's permission request behind runtime request `request` with
    /// its option of the decision's kind ([`choose_option`]).
    ///
    /// Errors: [`AdapterError::RequestNotPending`] when the agent does not wait on
    /// it; [`AdapterError::Busy`] when the agent offered no option to allow (an
    /// allow answer); [`AdapterError::Send`] when the answer could not be written.
    async fn respond_to_runtime_request(
        &self,
        request: &RuntimeRequestId,
        answer: RequestAnswer,
    ) -> Result<(), AdapterError> {
        let request = request.clone();
        self.ask(|reply| Command::Answer(request, answer, reply))
            .await?
    }
}

fn tokio_stream_from(mut rx: EventRx) -> BoxStream<'static, Result<AdapterEvent, AdapterError>> {
    futures::stream::poll_fn(move |cx| rx.poll_recv(cx)).boxed()
}
