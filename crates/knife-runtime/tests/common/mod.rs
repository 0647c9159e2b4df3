// Shared harness of the durable-execution tests: a real store on disk, an execution
// service over an in-process "drain" adapter whose turns the test scripts per thread
// (finish at once, hang until interrupted, fail, or wait for a release), and helpers
// that seed claims the way a dead process leaves them.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use futures::stream::BoxStream;
use knife_protocol::*;
use knife_runtime::commands::{create_project, create_thread};
use knife_runtime::*;
use knife_store::Store;
use tokio::sync::{Notify, mpsc, watch};

/// What a drain (one provider turn) does.
#[derive(Clone, Debug, PartialEq)]
pub enum Drain {
    /// Emits one assistant item and completes.
    Complete,
    /// Never ends on its own; honours interrupts.
    Hang,
    /// Fails with this error.
    Fail(RunError),
    /// Waits for [`Drains::release`], then completes; honours interrupts.
    Gated,
    /// `start_turn` panics (a defect in the runtime or the driver).
    Panic,
    /// Never ends on its own, and `interrupt_turn` hangs forever (a deaf runtime).
    Deaf,
    /// Reports this many tokens used (a provider turn usage update), then hangs;
    /// honours interrupts (an external runtime's usage report, TURN-07).
    Usage(u64),
}

/// A turn the fake runtime was asked to run.
#[derive(Clone, Debug)]
pub struct Started {
    pub thread: ThreadId,
    pub run: RunId,
    pub text: String,
    /// The transcript the turn was given (`StartTurnInput::history`).
    pub history: Vec<TurnItem>,
}

/// The test's control of the fake runtime: per-thread plans, the turns started.
#[derive(Clone)]
pub struct Drains {
    plans: Arc<Mutex<HashMap<ThreadId, Drain>>>,
    default: Arc<Mutex<Drain>>,
    started: Arc<Mutex<Vec<Started>>>,
    count: Arc<watch::Sender<usize>>,
    release: Arc<Notify>,
    /// Opens hang (never finish) while set; counts the opens begun.
    hang_opens: Arc<std::sync::atomic::AtomicBool>,
    opens: Arc<watch::Sender<usize>>,
    /// `steer_turn` delivers at once (records the steer's item) while set; else refuses.
    steerable: Arc<std::sync::atomic::AtomicBool>,
    /// Texts of the steers delivered, in order.
    steers: Arc<Mutex<Vec<String>>>,
}

impl Drains {
    pub fn new(default: Drain) -> Self {
        Self {
            plans: Arc::default(),
            default: Arc::new(Mutex::new(default)),
            started: Arc::default(),
            count: Arc::new(watch::Sender::new(0)),
            release: Arc::new(Notify::new()),
            hang_opens: Arc::default(),
            opens: Arc::new(watch::Sender::new(0)),
            steerable: Arc::default(),
            steers: Arc::default(),
        }
    }
    /// Lets `steer_turn` deliver (TURN-01): a runtime that can steer.
    pub fn allow_steering(&self) {
        self.steerable
            .store(true, std::sync::atomic::Ordering::SeqCst);
    }
    /// Texts of the steers delivered so far.
    pub fn steers(&self) -> Vec<String> {
        self.steers.lock().unwrap().clone()
    }
    /// Makes every later adapter open hang until it is cancelled.
    pub fn hang_opens(&self) {
        self.hang_opens
            .store(true, std::sync::atomic::Ordering::SeqCst);
    }
    /// Waits until at least `n` adapter opens began.
    pub async fn wait_opens(&self, n: usize) {
        let mut rx = self.opens.subscribe();
        rx.wait_for(|c| *c >= n).await.unwrap();
    }
    /// Plans `drain` for every turn of `thread`.
    pub fn plan(&self, thread: &ThreadId, drain: Drain) {
        self.plans.lock().unwrap().insert(thread.clone(), drain);
    }
    /// Plans `drain` for threads without their own plan.
    pub fn set_default(&self, drain: Drain) {
        *self.default.lock().unwrap() = drain;
    }
    fn plan_of(&self, thread: &ThreadId) -> Drain {
        self.plans
            .lock()
            .unwrap()
            .get(thread)
            .cloned()
            .unwrap_or_else(|| self.default.lock().unwrap().clone())
    }
    /// Every turn started so far, in order.
    pub fn started(&self) -> Vec<Started> {
        self.started.lock().unwrap().clone()
    }
    /// Waits until at least `n` turns started.
    pub async fn wait_started(&self, n: usize) {
        let mut rx = self.count.subscribe();
        rx.wait_for(|c| *c >= n).await.unwrap();
    }
    /// Lets every gated drain waiting now complete.
    pub fn release(&self) {
        self.release.notify_waiters();
    }
}

struct FakeAdapter {
    drains: Drains,
}

struct FakeSession {
    drains: Drains,
    tx: Mutex<Option<mpsc::UnboundedSender<Result<AdapterEvent, AdapterError>>>>,
    rx: Mutex<Option<mpsc::UnboundedReceiver<Result<AdapterEvent, AdapterError>>>>,
    turn: Mutex<Option<StartTurnInput>>,
}

#[async_trait::async_trait]
impl ProviderAdapter for FakeAdapter {
    fn driver(&self) -> &str {
        "fake"
    }
    fn capabilities(&self) -> ProviderCapabilities {
        ProviderCapabilities::default()
    }
    async fn open(
        &self,
        _input: OpenSessionInput,
    ) -> Result<Arc<dyn SessionRuntime>, AdapterError> {
        self.drains.opens.send_modify(|c| *c += 1);
        if self
            .drains
            .hang_opens
            .load(std::sync::atomic::Ordering::SeqCst)
        {
            std::future::pending::<()>().await;
        }
        let (tx, rx) = mpsc::unbounded_channel();
        Ok(Arc::new(FakeSession {
            drains: self.drains.clone(),
            tx: Mutex::new(Some(tx)),
            rx: Mutex::new(Some(rx)),
            turn: Mutex::new(None),
        }))
    }
}

fn terminal_event(input: &StartTurnInput, outcome: TurnOutcome) -> AdapterEvent {
    AdapterEvent::TurnTerminal {
        thread_id: input.thread_id.clone(),
        run_id: input.run_id.clone(),
        provider_turn_id: input.provider_turn_id.clone(),
        outcome,
        usage: None,
    }
}

fn answer(input: &StartTurnInput) -> AdapterEvent {
    let now = chrono::Utc::now();
    AdapterEvent::TurnItemUpdated(TurnItem {
        id: TurnItemId::of_turn(&input.provider_turn_id, 1),
        thread_id: input.thread_id.clone(),
        run_id: Some(input.run_id.clone()),
        provider_turn_id: Some(input.provider_turn_id.clone()),
        ordinal: TurnItem::ordinal_in_run(input.run_ordinal, 1),
        status: TurnItemStatus::Completed,
        started_at: Some(now),
        completed_at: Some(now),
        updated_at: now,
        kind: TurnItemKind::AssistantMessage {
            text: "done".into(),
            streaming: false,
        },
    })
}

#[async_trait::async_trait]
impl SessionRuntime for FakeSession {
    async fn start_turn(&self, input: StartTurnInput) -> Result<(), AdapterError> {
        let tx = self
            .tx
            .lock()
            .unwrap()
            .clone()
            .ok_or(AdapterError::Closed)?;
        *self.turn.lock().unwrap() = Some(input.clone());
        let plan = self.drains.plan_of(&input.thread_id);
        self.drains.started.lock().unwrap().push(Started {
            thread: input.thread_id.clone(),
            run: input.run_id.clone(),
            text: input.text.clone(),
            history: input.history.clone(),
        });
        self.drains.count.send_modify(|c| *c += 1);
        match plan {
            Drain::Complete => {
                let _ = tx.send(Ok(answer(&input)));
                let _ = tx.send(Ok(terminal_event(&input, TurnOutcome::Completed)));
            }
            Drain::Fail(error) => {
                let _ = tx.send(Ok(terminal_event(&input, TurnOutcome::Failed { error })));
            }
            Drain::Hang | Drain::Deaf => {}
            Drain::Usage(tokens) => {
                let now = chrono::Utc::now();
                let _ = tx.send(Ok(AdapterEvent::ProviderTurnUpdated(ProviderTurn {
                    id: input.provider_turn_id.clone(),
                    thread_id: input.thread_id.clone(),
                    run_id: input.run_id.clone(),
                    provider_thread_id: None,
                    provider_session_id: ProviderSessionId::from("psession_fake"),
                    node_id: NodeId::root_of(&input.run_id),
                    ordinal: 1,
                    status: ProviderTurnStatus::Running,
                    started_at: now,
                    completed_at: None,
                    usage: Some(TokenUsage {
                        input_tokens: tokens,
                        total_tokens: tokens,
                        ..Default::default()
                    }),
                    error: None,
                    native_turn_id: None,
                })));
            }
            Drain::Panic => panic!("the fake runtime panics on start_turn"),
            Drain::Gated => {
                let release = self.drains.release.clone();
                let notified = release.notified_owned();
                tokio::spawn(async move {
                    notified.await;
                    let _ = tx.send(Ok(answer(&input)));
                    let _ = tx.send(Ok(terminal_event(&input, TurnOutcome::Completed)));
                });
            }
        }
        Ok(())
    }
    async fn interrupt_turn(
        &self,
        _thread: &ThreadId,
        reason: InterruptReason,
    ) -> Result<(), AdapterError> {
        let input = self.turn.lock().unwrap().clone();
        if input
            .as_ref()
            .is_some_and(|i| self.drains.plan_of(&i.thread_id) == Drain::Deaf)
        {
            std::future::pending::<()>().await;
        }
        if let (Some(input), Some(tx)) = (input, self.tx.lock().unwrap().clone()) {
            let _ = tx.send(Ok(terminal_event(
                &input,
                TurnOutcome::Interrupted {
                    reason: reason.as_str().into(),
                },
            )));
        }
        Ok(())
    }
    async fn resume_thread(
        &self,
        _thread: &ThreadId,
        _native: Option<String>,
    ) -> Result<(), AdapterError> {
        Ok(())
    }
    async fn steer_turn(&self, _thread: &ThreadId, steer: SteerInput) -> Result<(), AdapterError> {
        if !self
            .drains
            .steerable
            .load(std::sync::atomic::Ordering::SeqCst)
        {
            return Err(AdapterError::Runtime(
                "this fake runtime cannot steer".into(),
            ));
        }
        let input = self.turn.lock().unwrap().clone();
        let (Some(input), Some(tx)) = (input, self.tx.lock().unwrap().clone()) else {
            return Err(AdapterError::Runtime("no turn".into()));
        };
        let now = chrono::Utc::now();
        self.drains.steers.lock().unwrap().push(steer.text.clone());
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
        Ok(())
    }
    fn take_events(&self) -> Option<BoxStream<'static, Result<AdapterEvent, AdapterError>>> {
        let mut rx = self.rx.lock().unwrap().take()?;
        Some(futures::stream::poll_fn(move |cx| rx.poll_recv(cx)).boxed())
    }
    async fn close(&self) -> Result<(), AdapterError> {
        self.tx.lock().unwrap().take();
        Ok(())
    }
}

/// A store on disk, a project, and execution services over the fake runtime.
pub struct Harness {
    pub dir: tempfile::TempDir,
    pub store: Store,
    pub clock: SharedClock,
    pub drains: Drains,
    pub project: Project,
    pub instance: ProviderInstanceId,
}

impl Harness {
    pub async fn new(default: Drain) -> Harness {
        let dir = tempfile::tempdir().unwrap();
        let store = knife_store_sqlite::open(dir.path().join("knife.db"))
            .await
            .unwrap();
        let clock: SharedClock = Arc::new(SystemClock);
        let root = dir.path().join("project");
        std::fs::create_dir(&root).unwrap();
        let (project, _) = create_project(
            &store,
            clock.as_ref(),
            CreateProjectRequest {
                root: root.display().to_string(),
                name: None,
            },
        )
        .await
        .unwrap();
        Harness {
            dir,
            store,
            clock,
            drains: Drains::new(default),
            project,
            instance: ProviderInstanceId::from("fake"),
        }
    }

    /// [`Self::execution`] with `budgets` (TURN-07; no prices: costs are 0).
    pub fn execution_with_budgets(
        &self,
        budgets: knife_runtime::budget::Budgets,
    ) -> ExecutionService {
        self.execution()
            .with_budgets(knife_runtime::budget::BudgetGuard::new(
                self.store.clone(),
                budgets,
                Arc::new(PriceTable::defaults()),
                HashMap::new(),
            ))
    }

    /// A fresh execution service (a new "process") over the same store.
    pub fn execution(&self) -> ExecutionService {
        let mut adapters: HashMap<ProviderInstanceId, Arc<dyn ProviderAdapter>> = HashMap::new();
        adapters.insert(
            self.instance.clone(),
            Arc::new(FakeAdapter {
                drains: self.drains.clone(),
            }),
        );
        let manager = SessionManager::new(
            Arc::new(self.store.clone()),
            self.clock.clone(),
            adapters,
            // Paused time auto-advances while the store's writer thread works: a
            // stuck-turn watchdog would end every hanging drain at once.
            SessionManagerOptions {
                turn_stall_timeout: std::time::Duration::ZERO,
                ..Default::default()
            },
        );
        ExecutionService::new(self.store.clone(), self.clock.clone(), manager)
    }

    /// A restart sweep over `exec` with budget `max`.
    pub fn restart(&self, exec: &ExecutionService, max: u32) -> RestartService {
        RestartService::new(
            exec.clone(),
            RestartOptions {
                max_resume_attempts: max,
            },
        )
    }

    /// A new idle thread (a child of `parent` when given).
    pub async fn thread(&self, parent: Option<&ThreadId>) -> ThreadId {
        create_thread(
            &self.store,
            self.clock.as_ref(),
            CreateThreadRequest {
                project_id: self.project.id.clone(),
                title: None,
                provider_instance_id: None,
                model: None,
                parent_thread_id: parent.cloned(),
                worktree: None,
            },
            &self.instance,
            std::slice::from_ref(&self.instance),
        )
        .await
        .unwrap()
        .id
    }

    /// Leaves `thread` as a process killed mid-run leaves it: run N+1 `running` with
    /// a user message and a running tool call, the thread claimed with `attempts`.
    pub async fn seed_dead_run(&self, thread: &ThreadId, attempts: u32) -> RunId {
        let mut t = self.store.get_thread(thread).await.unwrap().unwrap();
        let now = self.clock.now();
        let ordinal = t.run_count + 1;
        let run_id = RunId::for_thread(thread, ordinal);
        let item = |n: u64, status, kind| TurnItem {
            id: TurnItemId::from(format!("item:{run_id}:seed:{n}")),
            thread_id: thread.clone(),
            run_id: Some(run_id.clone()),
            provider_turn_id: None,
            ordinal: TurnItem::ordinal_in_run(ordinal, n),
            status,
            started_at: Some(now),
            completed_at: None,
            updated_at: now,
            kind,
        };
        let run = Run {
            id: run_id.clone(),
            thread_id: thread.clone(),
            ordinal,
            provider_instance_id: t.provider_instance_id.clone(),
            model: None,
            status: RunStatus::Running,
            user_message_id: TurnItemId::user_message_of(&run_id),
            requested_at: now,
            started_at: Some(now),
            completed_at: None,
            error: None,
            usage: None,
            checkpoints: Default::default(),
            changes: None,
        };
        t.status = ThreadStatus::Running;
        t.active_run_id = Some(run_id.clone());
        t.run_count = ordinal;
        t.claim(now);
        t.resume_attempts = attempts;
        self.store
            .write(vec![
                DomainEvent::new(now, EventBody::RunCreated(run)),
                DomainEvent::new(
                    now,
                    EventBody::TurnItemUpdated(item(
                        0,
                        TurnItemStatus::Completed,
                        TurnItemKind::UserMessage {
                            text: "do the work".into(),
                            origin: MessageOrigin::User,
                            description: None,
                        },
                    )),
                ),
                DomainEvent::new(
                    now,
                    EventBody::TurnItemUpdated(item(
                        1,
                        TurnItemStatus::Running,
                        TurnItemKind::ToolCall {
                            call_id: "call_1".into(),
                            tool: "bash".into(),
                            input: serde_json::json!({"command": "sleep 100"}),
                            output: None,
                            error: None,
                        },
                    )),
                ),
                DomainEvent::new(now, EventBody::ThreadUpdated(t)),
            ])
            .await
            .unwrap();
        run_id
    }

    /// Claims `thread` with `attempts` and no active run (as a graceful shutdown leaves it).
    pub async fn seed_claim(&self, thread: &ThreadId, attempts: u32) {
        let mut t = self.store.get_thread(thread).await.unwrap().unwrap();
        t.claim(self.clock.now());
        t.resume_attempts = attempts;
        self.store
            .write(vec![DomainEvent::new(
                self.clock.now(),
                EventBody::ThreadUpdated(t),
            )])
            .await
            .unwrap();
    }

    pub async fn get(&self, thread: &ThreadId) -> Thread {
        self.store.get_thread(thread).await.unwrap().unwrap()
    }

    /// thread → claimed?
    pub async fn claims(&self, threads: &[&ThreadId]) -> BTreeMap<String, bool> {
        let mut out = BTreeMap::new();
        for t in threads {
            out.insert(t.to_string(), self.get(t).await.is_claimed());
        }
        out
    }

    pub async fn attempts(&self, thread: &ThreadId) -> u32 {
        self.get(thread).await.resume_attempts
    }

    pub async fn projection(&self, thread: &ThreadId) -> ThreadProjection {
        self.store.thread_projection(thread).await.unwrap().unwrap()
    }

    /// The system-originated continuation items of `thread`.
    pub async fn continuations(&self, thread: &ThreadId) -> Vec<TurnItem> {
        self.projection(thread)
            .await
            .turn_items
            .into_iter()
            .filter(|i| {
                matches!(
                    &i.kind,
                    TurnItemKind::UserMessage {
                        origin: MessageOrigin::System,
                        ..
                    }
                )
            })
            .collect()
    }
}

/// `{id: value}` for assertions.
pub fn map<V: Clone>(pairs: &[(&ThreadId, V)]) -> BTreeMap<String, V> {
    pairs
        .iter()
        .map(|(t, v)| (t.to_string(), v.clone()))
        .collect()
}
