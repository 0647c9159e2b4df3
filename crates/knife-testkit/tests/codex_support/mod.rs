//! Shared harness of the codex suites (`codex_lifecycle.rs`, `codex_process.rs`): a real
//! SQLite store, the session manager and execution service with the `codex` driver on the
//! scripted fake app-server (`src/bin/fake_codex.rs`).
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use knife_adapters::codex::{CodexAdapter, CodexConfig};
use knife_process::group_alive;
use knife_protocol::*;
use knife_runtime::commands::{create_project, create_thread};
use knife_runtime::mcp::{CredentialRegistry, McpSlots};
use knife_runtime::process_groups::ProcessGroups;
use knife_runtime::sessions::SessionManagerOptions;
use knife_runtime::*;
use knife_store::Store;
use serde_json::Value;

pub const INSTANCE: &str = "codex";
pub const WAIT: Duration = Duration::from_secs(15);

pub struct Harness {
    pub dir: tempfile::TempDir,
    pub store: Store,
    pub exec: ExecutionService,
    pub thread: Thread,
    pub root: PathBuf,
    pub codex_home: PathBuf,
    pub registry: Arc<CredentialRegistry>,
}

pub fn instance() -> ProviderInstanceId {
    ProviderInstanceId::from(INSTANCE)
}

pub fn session_id() -> ProviderSessionId {
    ProviderSessionId::shared(&instance())
}

/// A harness on a fresh temp dir; `idle` is the session idle timeout.
pub async fn harness(idle: Duration) -> Harness {
    let dir = tempfile::tempdir().unwrap();
    let store = knife_store_sqlite::open(dir.path().join("knife.db"))
        .await
        .unwrap();
    let root = dir.path().join("project");
    std::fs::create_dir(&root).unwrap();
    let codex_home = dir.path().join("codex-home");
    std::fs::create_dir(&codex_home).unwrap();
    let clock: SharedClock = Arc::new(SystemClock);
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
    let thread = create_thread(
        &store,
        clock.as_ref(),
        CreateThreadRequest {
            project_id: project.id,
            title: None,
            provider_instance_id: None,
            model: None,
            parent_thread_id: None,
            worktree: None,
        },
        &instance(),
        std::slice::from_ref(&instance()),
    )
    .await
    .unwrap();
    let (exec, registry) = service(&store, &codex_home, idle);
    Harness {
        root: std::fs::canonicalize(&root).unwrap(),
        dir,
        store,
        exec,
        thread,
        codex_home,
        registry,
    }
}

/// A session manager + execution service with the codex driver on the fake peer
/// (interrupt grace 5 s).
pub fn service(
    store: &Store,
    codex_home: &std::path::Path,
    idle: Duration,
) -> (ExecutionService, Arc<CredentialRegistry>) {
    service_with_grace(store, codex_home, idle, Duration::from_secs(5))
}

/// [`service`] with interrupt grace `grace`.
pub fn service_with_grace(
    store: &Store,
    codex_home: &std::path::Path,
    idle: Duration,
    grace: Duration,
) -> (ExecutionService, Arc<CredentialRegistry>) {
    let clock: SharedClock = Arc::new(SystemClock);
    let registry = CredentialRegistry::new(Some("http://127.0.0.1:43123/mcp".into()));
    let slots = Arc::new(McpSlots::default());
    let mut config = CodexConfig::new(instance());
    config.command = env!("CARGO_BIN_EXE_fake_codex").into();
    config.args = Vec::new();
    config.env = vec![("CODEX_HOME".into(), codex_home.as_os_str().to_owned())];
    config.model = Some("mock-model".into());
    config.mcp_slots = Some(Arc::clone(&slots));
    config.process_groups = Some(ProcessGroups::new(store.clone(), Arc::clone(&clock)));
    config.request_timeout = Duration::from_secs(5);
    config.eof_grace = Duration::from_millis(300);
    config.term_grace = Duration::from_millis(300);
    let mut adapters: HashMap<ProviderInstanceId, Arc<dyn ProviderAdapter>> = HashMap::new();
    adapters.insert(instance(), Arc::new(CodexAdapter::new(config)));
    let options = SessionManagerOptions {
        idle_timeout: idle,
        mcp: Some((Arc::clone(&registry), slots)),
        ..Default::default()
    };
    let manager = SessionManager::new(
        Arc::new(store.clone()),
        Arc::clone(&clock),
        adapters,
        options,
    );
    let exec = ExecutionService::new(store.clone(), clock, manager).with_interrupt_grace(grace);
    (exec, registry)
}

pub fn script(commands: &str) -> String {
    format!("please do this FAKE_CODEX: {commands}")
}

impl Harness {
    /// Answers runtime request `request` of the harness thread with `decision`
    /// (no message) through the execution service, as the approvals API does.
    pub async fn answer(
        &self,
        request: &RuntimeRequestId,
        decision: ApprovalDecision,
    ) -> Result<RuntimeRequest, RuntimeError> {
        self.exec
            .respond_to_request(
                &self.thread.id,
                request,
                RequestAnswer {
                    decision,
                    message: None,
                },
            )
            .await
    }

    pub async fn projection(&self) -> ThreadProjection {
        self.store
            .thread_projection(&self.thread.id)
            .await
            .unwrap()
            .unwrap()
    }

    pub async fn until(
        &self,
        what: &str,
        check: impl Fn(&ThreadProjection) -> bool,
    ) -> ThreadProjection {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let p = self.projection().await;
            if check(&p) {
                return p;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "timed out waiting for {what}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub async fn run(&self, text: String) -> Run {
        let run = self.exec.start_run(&self.thread.id, text).await.unwrap();
        self.finish(&run.id).await
    }

    pub async fn finish(&self, run: &RunId) -> Run {
        tokio::time::timeout(WAIT, self.exec.await_idle(&self.thread.id))
            .await
            .expect("the run did not finish");
        let p = self.projection().await;
        p.runs.iter().find(|r| &r.id == run).cloned().unwrap()
    }

    /// Every JSON-RPC line the fake peer(s) of this harness received, parsed.
    pub fn sent(&self) -> Vec<Value> {
        std::fs::read_to_string(self.codex_home.join("fake-requests.jsonl"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    pub fn sent_methods(&self, method: &str) -> Vec<Value> {
        self.sent()
            .into_iter()
            .filter(|m| m["method"] == method)
            .collect()
    }

    pub async fn pgids(&self) -> Vec<i32> {
        self.store
            .list_process_groups()
            .await
            .unwrap()
            .into_iter()
            .map(|g| g.pgid)
            .collect()
    }
}

pub fn assistant_texts(p: &ThreadProjection, run: &RunId) -> Vec<(String, TurnItemStatus)> {
    p.turn_items
        .iter()
        .filter(|i| i.run_id.as_ref() == Some(run))
        .filter_map(|i| match &i.kind {
            TurnItemKind::AssistantMessage { text, .. } => Some((text.clone(), i.status)),
            _ => None,
        })
        .collect()
}

pub async fn gone_within(pgid: i32, limit: Duration) -> bool {
    let deadline = tokio::time::Instant::now() + limit;
    while tokio::time::Instant::now() < deadline {
        if !group_alive(u32::try_from(pgid).unwrap()) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

pub async fn pending_request(h: &Harness) -> RuntimeRequest {
    let p = h
        .until("a pending runtime request", |p| {
            p.runtime_requests
                .iter()
                .any(|r| r.status == RuntimeRequestStatus::Pending)
        })
        .await;
    p.runtime_requests
        .into_iter()
        .find(|r| r.status == RuntimeRequestStatus::Pending)
        .unwrap()
}
