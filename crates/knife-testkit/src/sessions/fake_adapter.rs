//! The one fake provider adapter of knife's tests (session manager, execution, restart,
//! `knife bench restart`): hooks before open, spawn-before-open, hanging close, failing
//! event stream, pending-work probes, start-turn and before-unload hooks, scripted turns
//! per thread ([`TurnPlan`]), exclusive/shared capabilities, counters.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use futures::StreamExt;
use futures::future::BoxFuture;
use futures::stream::BoxStream;
use knife_protocol::*;
use knife_runtime::{
    AdapterError, InterruptReason, OpenSessionInput, OpenSessionOptions, ProviderAdapter,
    SessionRuntime, StartTurnInput,
};
use tokio::sync::{Notify, mpsc, watch};

use super::turns::{EventSender, TurnPlan, terminal_of};

/// Async hook run before `open` does anything else, with the open's input; an error
/// fails the open.
pub type OpenHook = Arc<
    dyn Fn(OpenSessionInput, OpenSessionOptions) -> BoxFuture<'static, Result<(), AdapterError>>
        + Send
        + Sync,
>;
/// Async hook run by `start_turn` before it accepts the turn; an error fails the start.
pub type TurnHook =
    Arc<dyn Fn(StartTurnInput) -> BoxFuture<'static, Result<(), AdapterError>> + Send + Sync>;
/// Async probe of pending background work (session-wide).
pub type SessionProbe =
    Arc<dyn Fn() -> BoxFuture<'static, Result<bool, AdapterError>> + Send + Sync>;
/// Async probe of pending background work of one thread (thread, native id).
pub type ThreadProbe =
    Arc<dyn Fn(ThreadId, String) -> BoxFuture<'static, Result<bool, AdapterError>> + Send + Sync>;
/// Async hook run before `unload_thread` reaches the adapter (thread, native id).
pub type UnloadHook = Arc<dyn Fn(ThreadId, String) -> BoxFuture<'static, ()> + Send + Sync>;

/// Behaviour of a [`FakeAdapter`]; change it between calls through [`FakeAdapter::configure`].
#[derive(Clone, Default)]
pub struct FakeBehaviour {
    /// One session may serve several threads (MGR-10) or one (MGR-06).
    pub shared: bool,
    /// `steer_turn` refuses (a runtime that cannot steer, TURN-01); else it records
    /// the steer's delivery item on the thread's running turn at once.
    pub steer_refused: bool,
    /// Background tasks outlive the process (MGR-45).
    pub background_tasks_outlive_session: bool,
    /// `can_unload_threads` (shared runtimes, MGR-12..15).
    pub can_unload: bool,
    /// Registers a "process" on the session scope before the open hook runs, as an
    /// eager adapter spawns its process before the handshake (MGR-04).
    pub spawn_before_open: bool,
    /// The spawned process's stop hangs forever (MGR-05).
    pub process_stop_hangs: bool,
    /// `close` hangs forever after signalling [`FakeState::close_reached`] (MGR-33).
    pub close_hangs: bool,
    /// `interrupt_turn` hangs forever (after counting the interrupt).
    pub interrupt_hangs: bool,
    /// Runs at the start of every open (after spawn-before-open), with its input.
    pub before_open: Option<OpenHook>,
    /// Runs in `start_turn` before the turn is accepted.
    pub on_start_turn: Option<TurnHook>,
    /// `has_pending_background_work`; `None` = no work.
    pub pending_work: Option<SessionProbe>,
    /// `has_pending_background_work_for_thread`; `None` = no work.
    pub pending_thread_work: Option<ThreadProbe>,
    /// Runs in `unload_thread` before the unload is recorded.
    pub before_unload: Option<UnloadHook>,
    /// What turns of threads without their own [`FakeAdapter::plan`] do (default:
    /// [`TurnPlan::Manual`], the test pushes events).
    pub turns: TurnPlan,
    /// `interrupt_turn` ends the thread's running turn `Interrupted` (with the reason).
    pub interrupt_ends_turn: bool,
    /// Opens fail with `AdapterError::Handshake` carrying `message` (after they were counted).
    pub open_error: Option<String>,
    /// Opens hang until cancelled (after they were counted).
    pub open_hangs: bool,
}

/// One `open` as the adapter saw it.
#[derive(Clone, Debug)]
pub struct OpenRecord {
    /// The input the manager passed.
    pub input: OpenSessionInput,
    /// `OpenSessionOptions::item_identity_version`.
    pub item_identity_version: Option<u8>,
    /// The MCP credential the open was given.
    pub mcp: Option<knife_runtime::mcp::McpSessionConfig>,
}

/// Counters and handles shared by the adapter and its sessions.
#[derive(Default)]
pub struct FakeState {
    /// Opens that returned a runtime.
    pub opens: AtomicUsize,
    /// Opens that reached the adapter (including failed and cancelled ones).
    pub opens_started: AtomicUsize,
    /// `close` calls.
    pub closes: AtomicUsize,
    /// `interrupt_turn` calls.
    pub interrupts: AtomicUsize,
    /// `resume_thread` calls that reached the adapter.
    pub resumes: AtomicUsize,
    /// `steer_turn` calls.
    pub steers: AtomicUsize,
    /// Texts of the steers delivered, in order (TURN-01).
    pub steered: Mutex<Vec<String>>,
    /// Answers given to runtime requests, in order.
    pub responses: Mutex<Vec<(RuntimeRequestId, ApprovalDecision)>>,
    /// "Processes" spawned before open (spawn-before-open).
    pub processes_spawned: AtomicUsize,
    /// Spawned "processes" stopped by their scope finalizer.
    pub processes_stopped: AtomicUsize,
    /// Native thread ids unloaded, in order (read with [`FakeState::unloaded`]).
    pub unloaded: Mutex<Vec<String>>,
    /// Every open's input and options.
    pub open_records: Mutex<Vec<OpenRecord>>,
    /// Every `start_turn` input, in order.
    pub started_turns: Mutex<Vec<StartTurnInput>>,
    /// Notified each time an open starts (after its counter moved).
    pub open_started: Notify,
    /// Notified each time `close` is reached.
    pub close_reached: Notify,
    /// Notified each time `unload_thread` reaches the adapter.
    pub unload_reached: Notify,
    sessions: Mutex<HashMap<ProviderSessionId, Vec<FakeSessionControl>>>,
    plans: Mutex<HashMap<ThreadId, TurnPlan>>,
    opens_seen: watch::Sender<usize>,
    turns_seen: watch::Sender<usize>,
    release: Arc<Notify>,
}

impl FakeState {
    /// Native thread ids unloaded so far, in order.
    pub fn unloaded(&self) -> Vec<String> {
        lock(&self.unloaded).clone()
    }
    /// Every open so far.
    pub fn open_records(&self) -> Vec<OpenRecord> {
        lock(&self.open_records).clone()
    }
    /// `opens` (completed opens) as a number.
    pub fn open_count(&self) -> usize {
        self.opens.load(Ordering::SeqCst)
    }
    /// `closes` as a number.
    pub fn close_count(&self) -> usize {
        self.closes.load(Ordering::SeqCst)
    }
    /// `resumes` as a number.
    pub fn resume_count(&self) -> usize {
        self.resumes.load(Ordering::SeqCst)
    }
    /// `interrupts` as a number.
    pub fn interrupt_count(&self) -> usize {
        self.interrupts.load(Ordering::SeqCst)
    }
    /// `opens_started` as a number.
    pub fn opens_started_count(&self) -> usize {
        self.opens_started.load(Ordering::SeqCst)
    }
    /// Every `start_turn` input so far, in order.
    pub fn started_turns(&self) -> Vec<StartTurnInput> {
        lock(&self.started_turns).clone()
    }
    /// Waits until at least `n` opens reached the adapter.
    pub async fn wait_opens_started(&self, n: usize) {
        let mut rx = self.opens_seen.subscribe();
        let _ = rx.wait_for(|c| *c >= n).await;
    }
    /// Waits until at least `n` turns reached `start_turn`.
    pub async fn wait_turns_started(&self, n: usize) {
        let mut rx = self.turns_seen.subscribe();
        let _ = rx.wait_for(|c| *c >= n).await;
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Pushes events into one fake session's stream.
#[derive(Clone)]
pub struct FakeSessionControl {
    tx: Arc<Mutex<Option<EventSender>>>,
    closed: Arc<AtomicBool>,
}

impl FakeSessionControl {
    /// Emits `event` on the session's stream; false when the stream ended.
    pub fn push(&self, event: AdapterEvent) -> bool {
        lock(&self.tx)
            .as_ref()
            .is_some_and(|tx| tx.send(Ok(event)).is_ok())
    }
    /// Fails the stream with `message` and ends it (MGR-31).
    pub fn fail(&self, message: &str) {
        if let Some(tx) = lock(&self.tx).take() {
            let _ = tx.send(Err(AdapterError::Lost(message.to_owned())));
        }
    }
    /// Ends the stream (the process exited).
    pub fn end(&self) {
        lock(&self.tx).take();
    }
    /// True once `close` was called on this session.
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }
}

/// A configurable fake [`ProviderAdapter`] (driver `fake`).
#[derive(Clone, Default)]
pub struct FakeAdapter {
    behaviour: Arc<Mutex<FakeBehaviour>>,
    state: Arc<FakeState>,
}

impl FakeAdapter {
    /// An adapter with `behaviour`.
    pub fn new(behaviour: FakeBehaviour) -> Self {
        Self {
            behaviour: Arc::new(Mutex::new(behaviour)),
            state: Arc::default(),
        }
    }

    /// Counters and notifications.
    pub fn state(&self) -> &Arc<FakeState> {
        &self.state
    }

    /// Changes the behaviour for later calls.
    pub fn configure(&self, f: impl FnOnce(&mut FakeBehaviour)) {
        f(&mut lock(&self.behaviour));
    }

    fn behaviour(&self) -> FakeBehaviour {
        lock(&self.behaviour).clone()
    }

    /// Plans `plan` for every later turn of `thread` (instead of [`FakeBehaviour::turns`]).
    pub fn plan(&self, thread: &ThreadId, plan: TurnPlan) {
        lock(&self.state.plans).insert(thread.clone(), plan);
    }

    /// Lets every [`TurnPlan::Gated`] turn waiting now play its script.
    pub fn release_turns(&self) {
        self.state.release.notify_waiters();
    }

    fn plan_of(&self, thread: &ThreadId) -> TurnPlan {
        lock(&self.state.plans)
            .get(thread)
            .cloned()
            .unwrap_or_else(|| lock(&self.behaviour).turns.clone())
    }

    /// Control of the latest session opened under `id`.
    pub fn session(&self, id: &ProviderSessionId) -> Option<FakeSessionControl> {
        lock(&self.state.sessions)
            .get(id)
            .and_then(|v| v.last().cloned())
    }

    /// Controls of every session opened under `id`, oldest first.
    pub fn sessions(&self, id: &ProviderSessionId) -> Vec<FakeSessionControl> {
        lock(&self.state.sessions)
            .get(id)
            .cloned()
            .unwrap_or_default()
    }
}

#[async_trait::async_trait]
impl ProviderAdapter for FakeAdapter {
    fn driver(&self) -> &str {
        "fake"
    }

    fn capabilities(&self) -> ProviderCapabilities {
        let b = lock(&self.behaviour);
        ProviderCapabilities {
            shared_sessions: b.shared,
            steer: true,
            background_tasks_outlive_session: b.background_tasks_outlive_session,
        }
    }

    async fn open(
        &self,
        input: OpenSessionInput,
        options: OpenSessionOptions,
    ) -> Result<Arc<dyn SessionRuntime>, AdapterError> {
        let behaviour = self.behaviour();
        self.state.opens_started.fetch_add(1, Ordering::SeqCst);
        self.state.opens_seen.send_modify(|n| *n += 1);
        lock(&self.state.open_records).push(OpenRecord {
            input: input.clone(),
            item_identity_version: options.item_identity_version,
            mcp: options.mcp.clone(),
        });
        if behaviour.spawn_before_open {
            self.state.processes_spawned.fetch_add(1, Ordering::SeqCst);
            let state = Arc::clone(&self.state);
            let hangs = behaviour.process_stop_hangs;
            options.scope.add_finalizer(async move {
                if hangs {
                    std::future::pending::<()>().await;
                }
                state.processes_stopped.fetch_add(1, Ordering::SeqCst);
            });
        }
        self.state.open_started.notify_waiters();
        if let Some(hook) = &behaviour.before_open {
            hook(input.clone(), options.clone()).await?;
        }
        if let Some(message) = behaviour.open_error {
            return Err(AdapterError::Handshake {
                step: "open",
                reason: message,
            });
        }
        if behaviour.open_hangs {
            std::future::pending::<()>().await;
        }
        self.state.opens.fetch_add(1, Ordering::SeqCst);
        let (tx, rx) = mpsc::unbounded_channel();
        let control = FakeSessionControl {
            tx: Arc::new(Mutex::new(Some(tx))),
            closed: Arc::new(AtomicBool::new(false)),
        };
        lock(&self.state.sessions)
            .entry(input.provider_session_id.clone())
            .or_default()
            .push(control.clone());
        Ok(Arc::new(FakeSession {
            adapter: self.clone(),
            control,
            rx: Mutex::new(Some(rx)),
            turns: Mutex::default(),
        }))
    }
}

struct FakeSession {
    adapter: FakeAdapter,
    control: FakeSessionControl,
    rx: Mutex<Option<mpsc::UnboundedReceiver<Result<AdapterEvent, AdapterError>>>>,
    /// The latest turn started per thread, with its plan.
    turns: Mutex<HashMap<ThreadId, (StartTurnInput, TurnPlan)>>,
}

impl FakeSession {
    fn sender(&self) -> Option<EventSender> {
        lock(&self.control.tx).clone()
    }

    /// Runs `plan` for the accepted turn `input`.
    fn play(&self, input: StartTurnInput, plan: TurnPlan) {
        match plan {
            TurnPlan::Manual => {}
            TurnPlan::Script(script) => {
                if let Some(tx) = self.sender()
                    && script.play(&input, &tx)
                {
                    self.control.end();
                }
            }
            TurnPlan::Gated(script) => {
                let Some(tx) = self.sender() else {
                    return;
                };
                let control = self.control.clone();
                let released = Arc::clone(&self.adapter.state.release).notified_owned();
                tokio::spawn(async move {
                    released.await;
                    if script.play(&input, &tx) {
                        control.end();
                    }
                });
            }
            #[allow(clippy::panic)]
            TurnPlan::Panic => panic!("the fake runtime panics on start_turn"),
        }
    }
}

#[async_trait::async_trait]
impl SessionRuntime for FakeSession {
    async fn start_turn(&self, input: StartTurnInput) -> Result<(), AdapterError> {
        let plan = self.adapter.plan_of(&input.thread_id);
        if plan != TurnPlan::Manual && lock(&self.control.tx).is_none() {
            return Err(AdapterError::Closed);
        }
        lock(&self.adapter.state.started_turns).push(input.clone());
        self.adapter.state.turns_seen.send_modify(|n| *n += 1);
        if let Some(hook) = self.adapter.behaviour().on_start_turn {
            hook(input.clone()).await?;
        }
        lock(&self.turns).insert(input.thread_id.clone(), (input.clone(), plan.clone()));
        self.play(input, plan);
        Ok(())
    }

    async fn interrupt_turn(
        &self,
        thread: &ThreadId,
        reason: InterruptReason,
    ) -> Result<(), AdapterError> {
        self.adapter.state.interrupts.fetch_add(1, Ordering::SeqCst);
        let turn = lock(&self.turns).get(thread).cloned();
        if self.adapter.behaviour().interrupt_hangs
            || turn.as_ref().is_some_and(|(_, plan)| plan.is_deaf())
        {
            std::future::pending::<()>().await;
        }
        if self.adapter.behaviour().interrupt_ends_turn
            && let (Some((input, _)), Some(tx)) = (turn, self.sender())
        {
            let outcome = TurnOutcome::Interrupted {
                reason: reason.as_str().into(),
            };
            let _ = tx.send(Ok(terminal_of(&input, outcome, None)));
        }
        Ok(())
    }

    async fn resume_thread(
        &self,
        _thread: &ThreadId,
        _native_thread_id: Option<String>,
    ) -> Result<(), AdapterError> {
        self.adapter.state.resumes.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }

    fn take_events(&self) -> Option<BoxStream<'static, Result<AdapterEvent, AdapterError>>> {
        let mut rx = lock(&self.rx).take()?;
        Some(futures::stream::poll_fn(move |cx| rx.poll_recv(cx)).boxed())
    }

    async fn close(&self) -> Result<(), AdapterError> {
        self.adapter.state.closes.fetch_add(1, Ordering::SeqCst);
        self.control.closed.store(true, Ordering::SeqCst);
        self.adapter.state.close_reached.notify_waiters();
        if self.adapter.behaviour().close_hangs {
            std::future::pending::<()>().await;
        }
        self.control.end();
        Ok(())
    }

    async fn steer_turn(
        &self,
        thread: &ThreadId,
        steer: knife_runtime::SteerInput,
    ) -> Result<(), AdapterError> {
        if self.adapter.behaviour().steer_refused {
            return Err(AdapterError::Unsupported {
                operation: "add input to a running turn",
                hint: "this fake runtime is set to refuse steers",
            });
        }
        self.adapter.state.steers.fetch_add(1, Ordering::SeqCst);
        let turn = lock(&self.turns).get(thread).cloned();
        if let (Some((input, _)), Some(tx)) = (turn, self.sender()) {
            lock(&self.adapter.state.steered).push(steer.text.clone());
            let now = chrono::Utc::now();
            let _ = tx.send(Ok(AdapterEvent::TurnItemUpdated(TurnItem {
                id: steer.item_id,
                thread_id: input.thread_id.clone(),
                run_id: Some(input.run_id.clone()),
                provider_turn_id: Some(input.provider_turn_id.clone()),
                ordinal: TurnItem::ordinal_in_run(input.run_ordinal, 5),
                status: TurnItemStatus::Completed,
                started_at: Some(now),
                completed_at: Some(now),
                updated_at: now,
                kind: TurnItemKind::UserMessage {
                    text: steer.text,
                    origin: MessageOrigin::User,
                    description: None,
                },
            })));
        }
        Ok(())
    }

    async fn respond_to_runtime_request(
        &self,
        request: &RuntimeRequestId,
        answer: RequestAnswer,
    ) -> Result<(), AdapterError> {
        lock(&self.adapter.state.responses).push((request.clone(), answer.decision));
        Ok(())
    }

    fn can_unload_threads(&self) -> bool {
        self.adapter.behaviour().can_unload
    }

    async fn unload_thread(
        &self,
        thread: &ThreadId,
        native_thread_id: &str,
    ) -> Result<(), AdapterError> {
        if let Some(hook) = self.adapter.behaviour().before_unload {
            hook(thread.clone(), native_thread_id.to_owned()).await;
        }
        lock(&self.adapter.state.unloaded).push(native_thread_id.to_owned());
        self.adapter.state.unload_reached.notify_waiters();
        Ok(())
    }

    async fn has_pending_background_work(&self) -> Result<bool, AdapterError> {
        match self.adapter.behaviour().pending_work {
            Some(probe) => probe().await,
            None => Ok(false),
        }
    }

    async fn has_pending_background_work_for_thread(
        &self,
        thread: &ThreadId,
        native_thread_id: &str,
    ) -> Result<bool, AdapterError> {
        match self.adapter.behaviour().pending_thread_work {
            Some(probe) => probe(thread.clone(), native_thread_id.to_owned()).await,
            None => Ok(false),
        }
    }
}
