// Shared harness of the durable-execution tests: a real store on disk, an execution
// service over knife-testkit's fake adapter whose turns ("drains") the test scripts per thread
// (finish at once, hang until interrupted, fail, or wait for a release), and helpers
// that seed claims the way a dead process leaves them.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use knife_protocol::*;
use knife_runtime::commands::{create_project, create_thread};
use knife_runtime::*;
use knife_store::Store;
use knife_testkit::sessions::{FakeAdapter, FakeBehaviour, TurnPlan};

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
    /// Reports this many tokens used (a usage report), then hangs; honours
    /// interrupts (an external runtime's usage report, TURN-07).
    Usage(u64),
}

impl Drain {
    /// The testkit plan this drain stands for.
    fn plan(&self) -> TurnPlan {
        match self {
            Drain::Complete => TurnPlan::complete(),
            Drain::Hang => TurnPlan::hang(),
            Drain::Fail(error) => TurnPlan::fail(error.clone()),
            Drain::Gated => match TurnPlan::complete() {
                TurnPlan::Script(script) => TurnPlan::Gated(script),
                other => other,
            },
            Drain::Panic => TurnPlan::Panic,
            Drain::Deaf => TurnPlan::deaf(),
            Drain::Usage(tokens) => match TurnPlan::hang() {
                TurnPlan::Script(mut script) => {
                    script.reported_usage = Some(TokenUsage {
                        input_tokens: *tokens,
                        total_tokens: *tokens,
                        ..Default::default()
                    });
                    TurnPlan::Script(script)
                }
                other => other,
            },
        }
    }
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

/// The test's control of the fake runtime (knife-testkit's [`FakeAdapter`]): per-thread
/// plans, the turns started.
#[derive(Clone)]
pub struct Drains {
    adapter: FakeAdapter,
}

impl Drains {
    pub fn new(default: Drain) -> Self {
        Self {
            adapter: FakeAdapter::new(FakeBehaviour {
                turns: default.plan(),
                interrupt_ends_turn: true,
                // A runtime that cannot steer unless a test allows it (TURN-01).
                steer_refused: true,
                ..Default::default()
            }),
        }
    }
    /// Makes every later adapter open hang until it is cancelled.
    pub fn hang_opens(&self) {
        self.adapter.configure(|b| b.open_hangs = true);
    }
    /// Waits until at least `n` adapter opens began.
    pub async fn wait_opens(&self, n: usize) {
        self.adapter.state().wait_opens_started(n).await;
    }
    /// Plans `drain` for every turn of `thread`.
    pub fn plan(&self, thread: &ThreadId, drain: Drain) {
        self.adapter.plan(thread, drain.plan());
    }
    /// Plans `drain` for threads without their own plan.
    pub fn set_default(&self, drain: Drain) {
        self.adapter.configure(|b| b.turns = drain.plan());
    }
    /// Every turn started so far, in order.
    pub fn started(&self) -> Vec<Started> {
        self.adapter
            .state()
            .started_turns()
            .into_iter()
            .map(|input| Started {
                thread: input.thread_id,
                run: input.run_id,
                text: input.text,
                history: input.history,
            })
            .collect()
    }
    /// Waits until at least `n` turns started.
    pub async fn wait_started(&self, n: usize) {
        self.adapter.state().wait_turns_started(n).await;
    }
    /// Lets every gated drain waiting now complete.
    pub fn release(&self) {
        self.adapter.release_turns();
    }
    /// Steers are delivered at once (the testkit fake's default; TURN-01).
    pub fn allow_steering(&self) {
        self.adapter.configure(|b| b.steer_refused = false);
    }
    /// Texts of the steers delivered so far.
    pub fn steers(&self) -> Vec<String> {
        self.adapter.state().steered.lock().unwrap().clone()
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

    /// [`Self::execution`] with `budgets` (TURN-07; the default price table).
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

    /// A fresh execution service on node `node` (its own leases, SCALE-04/06) over the
    /// same database: two of them are two nodes sharing one store.
    pub fn execution_on(&self, node: &str) -> ExecutionService {
        let store = self.store.clone().with_node(knife_store::NodeLeases::new(
            node,
            knife_store::DEFAULT_LEASE_TTL,
        ));
        self.execution_over(store)
    }

    /// A fresh execution service (a new "process") over the same store.
    pub fn execution(&self) -> ExecutionService {
        self.execution_over(self.store.clone())
    }

    /// [`Self::execution`] writing through `store` (e.g. the same store as another node,
    /// `store.with_node(..)`).
    pub fn execution_over(&self, store: Store) -> ExecutionService {
        let mut adapters: HashMap<ProviderInstanceId, Arc<dyn ProviderAdapter>> = HashMap::new();
        adapters.insert(self.instance.clone(), Arc::new(self.drains.adapter.clone()));
        let manager = SessionManager::new(
            Arc::new(store.clone()),
            self.clock.clone(),
            adapters,
            // Paused time auto-advances while the store's writer thread works: a
            // stuck-turn watchdog would end every hanging drain at once.
            SessionManagerOptions {
                turn_stall_timeout: std::time::Duration::ZERO,
                ..Default::default()
            },
        );
        ExecutionService::new(store, self.clock.clone(), manager)
    }

    /// A restart sweep over `exec` with budget `max`.
    pub fn restart(&self, exec: &ExecutionService, max: u32) -> RestartService {
        RestartService::new(
            exec.clone(),
            RestartOptions {
                max_resume_attempts: max,
                ..RestartOptions::default()
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
