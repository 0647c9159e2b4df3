//! Shared harness of the session-manager tests (`mgr_*.rs`): a real SQLite store in a
//! temp dir behind knife-testkit's flaky store, the fake adapter, MCP credentials.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use knife_protocol::*;
use knife_runtime::commands::{create_project, create_thread};
use knife_runtime::mcp::{CredentialRegistry, McpSlots};
use knife_runtime::sessions::SessionManager;
use knife_runtime::sessions::*;
use knife_runtime::*;
use knife_store::Store;
use knife_testkit::sessions::{FakeAdapter, FakeBehaviour, FlakyStore};

pub const INSTANCE: &str = "fake";

pub struct Harness {
    pub dir: tempfile::TempDir,
    pub store: Store,
    pub flaky: FlakyStore,
    pub adapter: FakeAdapter,
    /// A second provider instance (`other`) with its own fake adapter.
    pub other_adapter: FakeAdapter,
    pub manager: SessionManager,
    pub registry: Arc<CredentialRegistry>,
    pub slots: Arc<McpSlots>,
    pub workspace: PathBuf,
    pub project: ProjectId,
    pub clock: SharedClock,
}

pub fn instance() -> ProviderInstanceId {
    ProviderInstanceId::from(INSTANCE)
}

/// The second provider instance of the harness.
pub fn other_instance() -> ProviderInstanceId {
    ProviderInstanceId::from("other")
}

impl Harness {
    /// A harness with `behaviour` and options changed by `tune` (idle 1 s by default).
    pub async fn new(
        behaviour: FakeBehaviour,
        tune: impl FnOnce(&mut SessionManagerOptions),
    ) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let store = knife_store_sqlite::open(dir.path().join("knife.db"))
            .await
            .unwrap();
        let flaky = FlakyStore::new(store.clone());
        let clock: SharedClock = Arc::new(SystemClock);
        let workspace = dir.path().join("project");
        std::fs::create_dir(&workspace).unwrap();
        let (project, _) = create_project(
            &store,
            clock.as_ref(),
            CreateProjectRequest {
                root: workspace.display().to_string(),
                name: None,
            },
        )
        .await
        .unwrap();
        let adapter = FakeAdapter::new(behaviour);
        let registry = CredentialRegistry::new(Some("http://127.0.0.1:43123/mcp".into()));
        let slots = Arc::new(McpSlots::default());
        let mut options = SessionManagerOptions {
            idle_timeout: Duration::from_secs(1),
            mcp: Some((Arc::clone(&registry), Arc::clone(&slots))),
            ..Default::default()
        };
        tune(&mut options);
        let mut adapters: HashMap<ProviderInstanceId, Arc<dyn ProviderAdapter>> = HashMap::new();
        adapters.insert(instance(), Arc::new(adapter.clone()));
        let other_adapter = FakeAdapter::new(FakeBehaviour::default());
        adapters.insert(other_instance(), Arc::new(other_adapter.clone()));
        let manager = SessionManager::new(
            Arc::new(flaky.clone()),
            Arc::clone(&clock),
            adapters,
            options,
        );
        Self {
            dir,
            store,
            flaky,
            adapter,
            other_adapter,
            manager,
            registry,
            slots,
            workspace: std::fs::canonicalize(&workspace).unwrap(),
            project: project.id,
            clock,
        }
    }

    /// A new thread row in the store.
    pub async fn thread(&self) -> ThreadId {
        let instance = instance();
        create_thread(
            &self.store,
            self.clock.as_ref(),
            CreateThreadRequest {
                project_id: self.project.clone(),
                title: Some("mgr".into()),
                provider_instance_id: Some(instance.clone()),
                model: None,
                parent_thread_id: None,
                worktree: None,
            },
            &instance,
            std::slice::from_ref(&instance),
        )
        .await
        .unwrap()
        .id
    }

    /// Open request for `thread` on session `id` in the workspace.
    pub fn request(&self, id: &ProviderSessionId, thread: &ThreadId) -> OpenRequest {
        let mut r = OpenRequest::new(id.clone(), thread.clone(), instance(), &self.workspace);
        r.model = Some("gpt-5.4".into());
        r
    }

    pub async fn open(&self, id: &ProviderSessionId, thread: &ThreadId) -> SessionHandle {
        self.manager.open(self.request(id, thread)).await.unwrap()
    }

    /// The persisted session row.
    pub async fn session_row(&self, id: &ProviderSessionId) -> Option<ProviderSession> {
        self.store.get_provider_session(id).await.unwrap()
    }

    pub async fn session_status(&self, id: &ProviderSessionId) -> Option<SessionStatus> {
        self.session_row(id).await.map(|s| s.status)
    }
}

/// The exclusive session id of `thread`.
pub fn exclusive(thread: &ThreadId) -> ProviderSessionId {
    ProviderSessionId::exclusive(&instance(), thread)
}

/// The shared session id of the instance.
pub fn shared() -> ProviderSessionId {
    ProviderSessionId::shared(&instance())
}

/// Steps paused time 1 ms at a time until `cond` holds (at most `limit` of virtual time).
pub async fn wait_until(limit: Duration, what: &str, mut cond: impl FnMut() -> bool) {
    let start = tokio::time::Instant::now();
    while !cond() {
        assert!(start.elapsed() < limit, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// Like [`wait_until`] with an async condition.
pub async fn wait_until_async<F, Fut>(limit: Duration, what: &str, mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = tokio::time::Instant::now();
    while !cond().await {
        assert!(start.elapsed() < limit, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// Lets spawned tasks and store writes run without moving time much (10 ms).
pub async fn settle() {
    for _ in 0..10 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// A start-turn input for `thread`, run `ordinal`.
pub fn turn(thread: &ThreadId, ordinal: u32) -> StartTurnInput {
    let run_id = RunId::for_thread(thread, ordinal);
    StartTurnInput {
        thread_id: thread.clone(),
        provider_turn_id: ProviderTurnId::for_run(&run_id, 1),
        run_id,
        run_ordinal: ordinal,
        attempt: 1,
        text: "hi".into(),
        history: Vec::new(),
        model: None,
        cwd: None,
        budget: None,
    }
}

/// The `turn.terminal` of `input`.
pub fn terminal(input: &StartTurnInput) -> AdapterEvent {
    AdapterEvent::TurnTerminal {
        thread_id: input.thread_id.clone(),
        run_id: input.run_id.clone(),
        provider_turn_id: input.provider_turn_id.clone(),
        outcome: TurnOutcome::Completed,
        usage: None,
    }
}

/// A provider thread of `thread` on session `session` with native id `native`.
pub fn provider_thread(
    thread: &ThreadId,
    session: &ProviderSessionId,
    native: &str,
    tasks: &[&str],
) -> ProviderThread {
    let now = chrono::Utc::now();
    ProviderThread {
        id: ProviderThreadId::native("fake", native),
        driver: "fake".into(),
        provider_instance_id: instance(),
        provider_session_id: Some(session.clone()),
        app_thread_id: Some(thread.clone()),
        native_id: Some(native.into()),
        status: ProviderThreadStatus::Idle,
        last_run_ordinal: None,
        pending_background_tasks: tasks
            .iter()
            .map(|t| PendingBackgroundTask {
                task_id: (*t).into(),
                kind: None,
                description: None,
            })
            .collect(),
        created_at: now,
        updated_at: now,
    }
}

/// An assistant-message turn item of run 1 of `thread`.
pub fn assistant_item(thread: &ThreadId, n: u32, text: &str) -> TurnItem {
    let run = RunId::for_thread(thread, 1);
    let turn = ProviderTurnId::for_run(&run, 1);
    let now = chrono::Utc::now();
    TurnItem {
        id: TurnItemId::of_turn(&turn, n),
        thread_id: thread.clone(),
        run_id: Some(run),
        provider_turn_id: Some(turn),
        ordinal: TurnItem::ordinal_in_run(1, u64::from(n)),
        status: TurnItemStatus::Completed,
        started_at: Some(now),
        completed_at: Some(now),
        updated_at: now,
        kind: TurnItemKind::AssistantMessage {
            text: text.into(),
            streaming: false,
        },
    }
}

/// A provider turn of run 1 of `thread` on `session` with `status`.
pub fn provider_turn(
    thread: &ThreadId,
    session: &ProviderSessionId,
    status: ProviderTurnStatus,
) -> ProviderTurn {
    let run = RunId::for_thread(thread, 1);
    ProviderTurn {
        id: ProviderTurnId::for_run(&run, 1),
        thread_id: thread.clone(),
        node_id: NodeId::root_of(&run),
        run_id: run,
        provider_thread_id: None,
        provider_session_id: session.clone(),
        ordinal: 1,
        status,
        started_at: chrono::Utc::now(),
        completed_at: None,
        usage: None,
        error: None,
        native_turn_id: None,
    }
}

/// A session-scoped runtime request of `thread` live on `session` (no run), with its
/// node and transcript item, all `waiting`.
pub fn request_events(
    thread: &ThreadId,
    session: &ProviderSessionId,
    name: &str,
) -> (RuntimeRequestId, Vec<AdapterEvent>) {
    let now = chrono::Utc::now();
    let id = RuntimeRequestId::from(format!("request_{name}"));
    let node_id = NodeId::from(format!("node_{name}"));
    let request = RuntimeRequest {
        id: id.clone(),
        thread_id: thread.clone(),
        run_id: None,
        node_id: node_id.clone(),
        provider_turn_id: None,
        kind: RuntimeRequestKind::Command,
        status: RuntimeRequestStatus::Pending,
        response_capability: ResponseCapability::Live {
            provider_session_id: session.clone(),
        },
        prompt: Some("rm -rf build".into()),
        created_at: now,
        resolved_at: None,
        decision: None,
        tool_approval: None,
    };
    let node = Node {
        id: node_id.clone(),
        thread_id: thread.clone(),
        run_id: None,
        parent_node_id: None,
        root_node_id: node_id,
        kind: NodeKind::ApprovalRequest,
        status: NodeStatus::Waiting,
        provider_turn_id: None,
        runtime_request_id: Some(id.clone()),
        started_at: Some(now),
        completed_at: None,
    };
    // knife has no approval item kind yet; the item is found by its derived id.
    let item = TurnItem {
        id: knife_runtime::sessions::requests::request_item_id(&id),
        thread_id: thread.clone(),
        run_id: None,
        provider_turn_id: None,
        ordinal: 0,
        status: TurnItemStatus::Waiting,
        started_at: Some(now),
        completed_at: None,
        updated_at: now,
        kind: TurnItemKind::ToolCall {
            call_id: format!("call_{name}"),
            tool: "approval".into(),
            input: serde_json::json!({"command": "rm -rf build"}),
            output: None,
            error: None,
        },
    };
    (
        id,
        vec![
            AdapterEvent::RuntimeRequestUpdated(request),
            AdapterEvent::NodeUpdated(node),
            AdapterEvent::TurnItemUpdated(item),
        ],
    )
}

impl Harness {
    /// Emits a session-scoped request on the latest session `session` and waits until
    /// it is persisted.
    pub async fn push_request(
        &self,
        session: &ProviderSessionId,
        thread: &ThreadId,
        name: &str,
    ) -> RuntimeRequestId {
        let (id, events) = request_events(thread, session, name);
        let control = self.adapter.session(session).unwrap();
        for event in events {
            assert!(control.push(event));
        }
        let store = self.store.clone();
        let item = knife_runtime::sessions::requests::request_item_id(&id);
        wait_until_async(Duration::from_millis(500), "request persisted", || {
            let store = store.clone();
            let item = item.clone();
            async move { store.get_turn_item(&item).await.unwrap().is_some() }
        })
        .await;
        id
    }

    pub async fn request_row(&self, id: &RuntimeRequestId) -> RuntimeRequest {
        self.store.get_runtime_request(id).await.unwrap().unwrap()
    }
}

/// True when `r` was settled as not resumable.
pub fn not_resumable(r: &RuntimeRequest) -> bool {
    r.status == RuntimeRequestStatus::Expired
        && matches!(
            r.response_capability,
            ResponseCapability::NotResumable { .. }
        )
}

/// Writes `events` straight to the store on the blocking pool (no auto-advance of
/// paused time while the writer thread works).
pub async fn write_direct(store: &Store, events: Vec<DomainEvent>) {
    let store = store.clone();
    tokio::task::spawn_blocking(move || futures::executor::block_on(store.write(events)))
        .await
        .unwrap()
        .unwrap();
}

impl Harness {
    /// Emits provider thread `pt` on session `session` and waits until it is persisted
    /// with exactly its tasks.
    pub async fn push_provider_thread(&self, session: &ProviderSessionId, pt: ProviderThread) {
        let id = pt.id.clone();
        let tasks = pt.pending_background_tasks.clone();
        assert!(
            self.adapter
                .session(session)
                .unwrap()
                .push(AdapterEvent::ProviderThreadUpdated(pt))
        );
        let store = self.store.clone();
        wait_until_async(
            Duration::from_millis(500),
            "provider thread persisted",
            || {
                let (store, id, tasks) = (store.clone(), id.clone(), tasks.clone());
                async move {
                    store
                        .get_provider_thread(&id)
                        .await
                        .unwrap()
                        .is_some_and(|p| p.pending_background_tasks == tasks)
                }
            },
        )
        .await;
    }

    /// Task ids of provider thread `id`.
    pub async fn roster(&self, id: &ProviderThreadId) -> Vec<String> {
        self.store
            .get_provider_thread(id)
            .await
            .unwrap()
            .unwrap()
            .pending_background_tasks
            .into_iter()
            .map(|t| t.task_id)
            .collect()
    }
}
