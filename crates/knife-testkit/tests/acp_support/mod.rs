//! Shared harness of the ACP suite (`acp_lifecycle.rs`): a real SQLite store, the
//! session manager and execution service with the `acp` driver on the scripted fake
//! agent (`src/bin/fake_acp.rs`), and polling helpers over real processes.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use knife_adapters::acp::{AcpAdapter, AcpConfig};
use knife_protocol::*;
use knife_runtime::commands::{create_project, create_thread};
use knife_runtime::process_groups::ProcessGroups;
use knife_runtime::*;
use knife_store::Store;
use serde_json::{Value, json};

pub const LIMIT: Duration = Duration::from_secs(20);

pub struct Harness {
    pub dir: tempfile::TempDir,
    pub store: Store,
    pub clock: SharedClock,
    pub project: Project,
    pub instance: ProviderInstanceId,
}

impl Harness {
    pub async fn new() -> Harness {
        let dir = tempfile::tempdir().unwrap();
        let store = knife_store_sqlite::open(dir.path().join("knife.db"))
            .await
            .unwrap();
        let clock: SharedClock = Arc::new(SystemClock);
        let root = dir.path().join("project");
        std::fs::create_dir(&root).unwrap();
        std::fs::create_dir(dir.path().join("state")).unwrap();
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
            project,
            instance: ProviderInstanceId::from("fake-acp"),
        }
    }

    pub fn log_path(&self) -> PathBuf {
        self.dir.path().join("acp.log")
    }

    /// An execution service (a "server process") with `idle_timeout`.
    pub fn execution(
        &self,
        idle_timeout: Duration,
        extra_env: &[(&str, &str)],
    ) -> ExecutionService {
        self.execution_of(env!("CARGO_BIN_EXE_fake_acp"), idle_timeout, extra_env)
    }

    /// [`Harness::execution`] running `command` as the agent.
    pub fn execution_of(
        &self,
        command: &str,
        idle_timeout: Duration,
        extra_env: &[(&str, &str)],
    ) -> ExecutionService {
        self.execution_full(command, idle_timeout, Duration::ZERO, extra_env)
    }

    /// [`Harness::execution_of`] with the stuck-turn watchdog at `turn_stall_timeout`
    /// (zero: off).
    pub fn execution_full(
        &self,
        command: &str,
        idle_timeout: Duration,
        turn_stall_timeout: Duration,
        extra_env: &[(&str, &str)],
    ) -> ExecutionService {
        let mut config = AcpConfig::new(self.instance.clone(), command);
        config.env = vec![
            (
                "FAKE_ACP_STATE_DIR".into(),
                self.dir.path().join("state").into(),
            ),
            ("FAKE_ACP_LOG".into(), self.log_path().into()),
        ];
        for (k, v) in extra_env {
            config.env.push(((*k).into(), (*v).into()));
        }
        config.process_groups = Some(ProcessGroups::new(self.store.clone(), self.clock.clone()));
        config.handshake_timeout = Duration::from_secs(10);
        config.eof_grace = Duration::from_millis(500);
        config.term_grace = Duration::from_millis(500);
        let mut adapters: HashMap<ProviderInstanceId, Arc<dyn ProviderAdapter>> = HashMap::new();
        adapters.insert(self.instance.clone(), Arc::new(AcpAdapter::new(config)));
        let manager = SessionManager::new(
            Arc::new(self.store.clone()),
            self.clock.clone(),
            adapters,
            SessionManagerOptions {
                idle_timeout,
                turn_stall_timeout,
                ..Default::default()
            },
        );
        ExecutionService::new(self.store.clone(), self.clock.clone(), manager)
            .with_interrupt_grace(Duration::from_secs(1))
    }

    pub async fn thread(&self) -> ThreadId {
        create_thread(
            &self.store,
            self.clock.as_ref(),
            CreateThreadRequest {
                project_id: self.project.id.clone(),
                title: None,
                provider_instance_id: None,
                model: None,
                parent_thread_id: None,
                worktree: None,
            },
            &self.instance,
            std::slice::from_ref(&self.instance),
        )
        .await
        .unwrap()
        .id
    }

    pub async fn projection(&self, thread: &ThreadId) -> ThreadProjection {
        self.store.thread_projection(thread).await.unwrap().unwrap()
    }

    /// Every message the fake agent received (JSON lines), pid line excluded.
    pub fn received(&self) -> Vec<Value> {
        std::fs::read_to_string(self.log_path())
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|v| v.get("pid").is_none())
            .collect()
    }

    pub fn methods(&self) -> Vec<String> {
        self.received()
            .iter()
            .filter_map(|v| v["method"].as_str().map(str::to_owned))
            .collect()
    }

    /// Pids of every fake agent started so far.
    pub fn pids(&self) -> Vec<i32> {
        std::fs::read_to_string(self.log_path())
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter_map(|v| v["pid"].as_i64().map(|p| p as i32))
            .collect()
    }

    pub async fn run(&self, exec: &ExecutionService, thread: &ThreadId, text: &str) -> Run {
        let run = exec.start_run(thread, text.to_owned()).await.unwrap();
        tokio::time::timeout(LIMIT, exec.await_idle(thread))
            .await
            .expect("the run ended");
        self.run_row(thread, &run.id).await
    }

    pub async fn run_row(&self, thread: &ThreadId, run: &RunId) -> Run {
        self.projection(thread)
            .await
            .runs
            .into_iter()
            .find(|r| &r.id == run)
            .unwrap()
    }

    pub async fn pending_request(&self, thread: &ThreadId) -> RuntimeRequest {
        poll(|| async {
            self.projection(thread)
                .await
                .runtime_requests
                .into_iter()
                .find(|r| r.status == RuntimeRequestStatus::Pending)
        })
        .await
    }
}

/// Polls `f` every 20 ms until it returns `Some`, at most [`LIMIT`].
pub async fn poll<T, F, Fut>(mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + LIMIT;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "condition not met in time"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// True while `/proc/<pid>` exists (a zombie counts: it was not reaped).
pub fn alive(pid: i32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

pub async fn wait_gone(pid: i32) {
    poll(|| async { (!alive(pid)).then_some(()) }).await;
}

pub fn texts(p: &ThreadProjection, run: &RunId) -> Vec<String> {
    p.turn_items
        .iter()
        .filter(|i| i.run_id.as_ref() == Some(run))
        .filter_map(|i| match &i.kind {
            TurnItemKind::AssistantMessage { text, .. } => Some(text.clone()),
            _ => None,
        })
        .collect()
}

pub fn script(steps: Value) -> String {
    json!({ "steps": steps }).to_string()
}
