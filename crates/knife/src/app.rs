//! The composition root: builds the store, the provider adapters, the session
//! manager, the execution service and the HTTP router from a [`Config`].

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use anyhow::{Context, bail};
use knife_agent::permissions::PermissionRules;
use knife_agent::{BuiltinAgentAdapter, BuiltinAgentConfig, ToolPolicy};
use knife_protocol::{ProviderInstanceId, ProviderInstanceInfo};
use knife_runtime::process_groups::kill_leftover_process_groups;
use knife_runtime::reaper::Reaper;
use knife_runtime::sessions::ManagerStopper;
use knife_runtime::{
    ExecutionService, ProviderAdapter, RestartOptions, RestartService, SessionManager, SharedClock,
    SystemClock,
};
use knife_server::AppState;
use knife_store::Store;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::lock::DataDirLock;

/// Name of the SQLite file inside the data directory.
pub const DB_FILE: &str = "knife.db";

/// How long graceful shutdown waits for active runs to stop.
pub const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(30);

/// A built knife: store, execution and the API state.
pub struct App {
    /// Held while this process owns the data directory.
    pub lock: DataDirLock,
    pub store: Store,
    pub execution: ExecutionService,
    pub state: AppState,
    /// The stale-session reaper; [`App::serve`] starts it (REAP-01..06).
    pub reaper: Reaper,
    /// Renews this node's leases and takes over expired claims; [`App::serve`] starts
    /// it (SCALE-04/05).
    pub leases: knife_runtime::boot::takeover::LeaseKeeper,
    /// The store is shared with other nodes (PostgreSQL): [`App::serve`] then follows
    /// the commands other nodes send for the runs this node drives (SCALE-06).
    pub shared_store: bool,
    /// Connection cap and header timeout of the server loop (SEC-04).
    pub limits: knife_server::ServerLimits,
    /// The sandbox of model-run commands (SEC-01), for `/healthz/detail`.
    pub sandbox: Arc<knife_process::sandbox::SandboxSettings>,
    /// The data directory's free space and the boot steps a full disk skipped
    /// (SEC-07), for `/healthz/detail`.
    pub disk: crate::disk::DiskReport,
    /// This node's membership row, heartbeated while the process runs (SCALE-05);
    /// `None` only when a full disk refused the join (SEC-07).
    pub membership: Option<knife_runtime::boot::membership::Membership>,
}

/// Where this process runs, as its membership row says: `<host>:<data directory>`.
/// A restart at the same place holds the same data-directory lock (SCALE-05).
fn node_location(data_dir: &Path) -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "unknown-host".to_owned());
    let dir = std::fs::canonicalize(data_dir).unwrap_or_else(|_| data_dir.to_path_buf());
    format!("{host}:{}", dir.display())
}

/// The process-wide Prometheus recorder (installed once).
pub fn metrics_handle() -> Option<PrometheusHandle> {
    static HANDLE: OnceLock<Option<PrometheusHandle>> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let handle = PrometheusBuilder::new().install_recorder().ok()?;
            describe_metrics();
            Some(handle)
        })
        .clone()
}

/// `# HELP` text of knife's own metrics.
fn describe_metrics() {
    metrics::describe_counter!("knife_runs_total", "Runs that ended, by outcome");
    metrics::describe_histogram!(
        "knife_run_duration_seconds",
        metrics::Unit::Seconds,
        "Time from a run's request to its end, by outcome"
    );
    metrics::describe_counter!(
        "knife_adapter_events_total",
        "Adapter events written to the event log (after coalescing)"
    );
    metrics::describe_counter!(
        "knife_resumes_total",
        "Claimed threads handled by the restart sweep, by outcome (resumed, exhausted, failed)"
    );
    metrics::describe_counter!(
        knife_runtime::sessions::metrics::SESSIONS_TOTAL,
        "Provider session operations (open, release) by provider, reason and outcome"
    );
    metrics::describe_counter!(
        knife_runtime::sessions::metrics::TURNS_TOTAL,
        "Provider turn operations (send, steer, interrupt, runtime-request-response) by outcome"
    );
    metrics::describe_histogram!(
        knife_runtime::sessions::metrics::TURN_DURATION_SECONDS,
        metrics::Unit::Seconds,
        "Time until the provider accepted a turn"
    );
    metrics::describe_counter!(
        "knife_sessions_reaped_total",
        "Provider sessions stopped by the reaper for inactivity"
    );
    metrics::describe_counter!(
        crate::usage_metrics::TOKENS_TOTAL,
        "Tokens of recorded model calls by provider instance, model and kind (input, cached_input, output, reasoning)"
    );
    metrics::describe_counter!(
        crate::usage_metrics::COST_TOTAL,
        "Cost of recorded model calls in micro-dollars by provider instance and model (priced models only)"
    );
    metrics::describe_counter!(
        "knife_resume_budget_exhausted_total",
        "Threads ended with `aborted` because their work was interrupted max_resume_attempts times"
    );
}

impl App {
    /// Opens the data dir and store and wires every component.
    ///
    /// Errors: an unwritable or uncreatable data dir, a store that cannot be opened,
    /// a provider that cannot be built — each with the path or key and what to do.
    pub async fn build(
        config: &Config,
        data_dir: &Path,
        api_token: Option<String>,
    ) -> anyhow::Result<App> {
        std::fs::create_dir_all(data_dir).with_context(|| {
            format!(
                "cannot create the data directory {}; choose a writable --data-dir",
                data_dir.display()
            )
        })?;
        check_writable(data_dir)?;
        // SEC-07: a nearly full disk is said, and boot steps it refuses are skipped.
        let disk = crate::disk::DiskReport::new(data_dir);
        disk.warn_if_low();
        // Before touching the database: two processes on one data directory would
        // each take the other's runs for leftovers of a crash.
        let lock = DataDirLock::acquire(data_dir).await?;
        let location = crate::store_url::StoreLocation::parse(config.store.url.as_deref())?;
        let node = config.store.node()?;
        let store = location
            .open(data_dir)
            .await
            .with_context(|| {
                format!(
                    "cannot open the knife database at {}",
                    location.describe(data_dir)
                )
            })?
            .with_node(node);
        // SCALE-05: the node id is this process's before anything of the previous
        // process is touched (a live process elsewhere with this id refuses the start).
        let membership = match knife_runtime::boot::membership::Membership::join(
            &store,
            &node_location(data_dir),
        )
        .await
        {
            Err(e) if crate::disk::is_disk_full(&e) => {
                disk.skipped("record this node's membership", &e);
                None
            }
            r => Some(r.with_context(|| {
                format!(
                    "cannot start as node {:?} on the knife database at {}",
                    store.node().node(),
                    location.describe(data_dir)
                )
            })?),
        };
        let clock: SharedClock = Arc::new(SystemClock);
        // Installed before the boot's own work so its counters (resumes) are kept.
        let metrics = metrics_handle();
        // Boot order (docs/2026-11-29-durable-execution.md): reconcile what died with the previous process, kill
        // the process groups it left running, then (below, once execution exists) the
        // restart sweep resumes claimed work; only then does the server accept requests.
        let report =
            match knife_runtime::boot::recovery::reconcile_after_restart(&store, clock.as_ref())
                .await
            {
                Err(e) if crate::disk::is_disk_full(&e) => {
                    disk.skipped("reconcile the state left by the previous process", &e);
                    Default::default()
                }
                r => r.context("cannot reconcile the state left by the previous process")?,
            };
        if !report.runs_interrupted.is_empty()
            || report.sessions_stopped > 0
            || report.requests_expired > 0
        {
            tracing::info!(
                runs_interrupted = report.runs_interrupted.len(),
                sessions_stopped = report.sessions_stopped,
                requests_expired = report.requests_expired,
                "reconciled the previous process's state (runs_interrupted counts unclaimed runs; claimed ones are resumed by the restart sweep below)"
            );
        }
        let killed = match kill_leftover_process_groups(&store).await {
            Err(e) if crate::disk::is_disk_full(&e) => {
                disk.skipped("kill the process groups left by the previous process", &e);
                Default::default()
            }
            r => r.context("cannot kill the process groups left by the previous process")?,
        };
        if !killed.killed.is_empty() {
            tracing::info!(
                killed = killed.killed.len(),
                "killed process groups left by the previous process"
            );
        }
        let mut adapters: HashMap<ProviderInstanceId, Arc<dyn ProviderAdapter>> = HashMap::new();
        // Commands the agent runs must not see knife's secrets: every provider's
        // API-key variable and the API token's are stripped from their
        // environment (KNIFE_* always is).
        // Every `bash` process group is recorded, so the next boot kills the ones a
        // crash leaves running (the kill above).
        let recorder =
            knife_runtime::process_groups::ProcessGroups::new(store.clone(), clock.clone());
        // SEC-01: the sandbox of `bash` (probed once: bubblewrap, else Landlock, else none).
        let sandbox = Arc::new(crate::sandbox::settings(config, data_dir));
        match &sandbox.support {
            knife_process::sandbox::SandboxSupport::Unavailable { .. } => {
                tracing::warn!("sandbox: {}", sandbox.support.describe())
            }
            _ => tracing::info!("sandbox: {}", sandbox.support.describe()),
        }
        let tool_policy = Arc::new(ToolPolicy {
            sandbox: Some(Arc::clone(&sandbox)),
            project_env: crate::sandbox::project_env(config),
            process_recorder: Some(Arc::new(recorder)),
            secret_env_vars: crate::providers::secret_env_vars(config),
            permissions: PermissionRules::new(config.permissions.clone())
                .context("invalid [[permissions]] in the config")?,
            project_permissions: config.project_permissions()?,
            ..ToolPolicy::default()
        });
        // Per-thread MCP credentials, shared with the adapters of shared runtimes
        // (codex) so a thread joining a live session gets its own bearer.
        let mcp_slots = Arc::new(knife_runtime::mcp::McpSlots::default());
        for (id, p) in &config.providers {
            if p.driver == knife_adapters::acp::DRIVER {
                let groups =
                    knife_runtime::process_groups::ProcessGroups::new(store.clone(), clock.clone());
                let mut adapter = crate::providers::acp_config(id, p, groups, clock.clone())?;
                adapter.env_remove = crate::providers::agent_env_remove(config, p);
                let adapter = knife_adapters::acp::AcpAdapter::new(adapter);
                adapters.insert(ProviderInstanceId::from(id.as_str()), Arc::new(adapter));
                continue;
            }
            if p.driver == knife_adapters::codex::DRIVER {
                crate::providers::check_codex_instance(id, p)?;
                let mut codex = crate::providers::codex_config(id, p);
                codex.mcp_slots = Some(Arc::clone(&mcp_slots));
                // Like `bash`, an agent program does not see other instances' API keys
                // (its own `env` can still set any of them).
                codex.env_remove = crate::providers::agent_env_remove(config, p);
                codex.process_groups = Some(knife_runtime::process_groups::ProcessGroups::new(
                    store.clone(),
                    clock.clone(),
                ));
                codex.clock = clock.clone();
                adapters.insert(
                    ProviderInstanceId::from(id.as_str()),
                    Arc::new(knife_adapters::codex::CodexAdapter::new(codex)),
                );
                continue;
            }
            let api_key = p
                .api_key_env
                .as_deref()
                .and_then(|k| std::env::var(k).ok())
                .filter(|k| !k.is_empty());
            if let (Some(var), None) = (&p.api_key_env, &api_key) {
                tracing::warn!(
                    provider = %id,
                    "${var} is not set: requests to {} go without an API key (fine for local servers; hosted APIs will answer 401)",
                    p.base_url
                );
            }
            let llm = crate::providers::llm_client(id, p, api_key)?;
            let mut agent = BuiltinAgentConfig::new(
                ProviderInstanceId::from(id.as_str()),
                p.model.clone(),
                llm,
            );
            agent.system_prompt = p.system_prompt.clone();
            if let Some(tokens) = p.context_limit {
                agent.context_limit = tokens;
            }
            if let Some(tokens) = p.output_limit {
                agent.output_limit = u64::from(tokens);
            }
            if p.compaction == Some(crate::config::providers::Compaction::Off) {
                agent.compaction = knife_agent::compaction::CompactionMode::Off;
            }
            if let Some(n) = p.max_compactions {
                agent.max_compactions = n.max(1);
            }
            if let Some(n) = p.max_steps {
                agent.max_steps = n.max(1);
            }
            if let Some(attempts) = p.max_retry_attempts {
                agent.retry.max_attempts = attempts.max(1);
            }
            agent.tool_policy = Arc::clone(&tool_policy);
            adapters.insert(
                ProviderInstanceId::from(id.as_str()),
                Arc::new(BuiltinAgentAdapter::new(agent)),
            );
        }
        let default_instance = ProviderInstanceId::from(config.default_instance()?.as_str());
        // MCP credentials (SPEC.md MCP-01..12): every session gets one for its thread, with the
        // capabilities the access settings allow. The registry lives in memory: tokens
        // do not survive a restart.
        let mcp_registry = knife_runtime::mcp::CredentialRegistry::new(None);
        let mcp_access: Arc<dyn knife_runtime::mcp::McpAccessPolicy> =
            Arc::new(knife_runtime::mcp::StoreAccessPolicy {
                store: store.clone(),
                settings: config.access_settings(),
            });
        let prices = Arc::new(crate::config::prices::price_table(&config.prices));
        let mut manager_options = config.sessions.manager_options();
        manager_options.mcp = Some((Arc::clone(&mcp_registry), mcp_slots));
        manager_options.mcp_access = Some(Arc::clone(&mcp_access));
        // TURN-06: tokens and cost count in /metrics at each recorded model call.
        manager_options.model_calls = Some(Arc::new(crate::usage_metrics::UsageMetrics {
            prices: Arc::clone(&prices),
            default_models: config
                .providers
                .iter()
                .filter(|(_, p)| !p.model.is_empty())
                .map(|(id, p)| (id.clone(), p.model.clone()))
                .collect(),
        }));
        let manager = SessionManager::new(
            Arc::new(store.clone()),
            clock.clone(),
            adapters,
            manager_options,
        );
        // Several nodes: this node's live deltas also go to the other nodes (a no-op on
        // SQLite); the inbound half starts with the server (App::serve).
        manager.live().relay_to(store.clone());
        let reaper = Reaper::new(
            store.clone(),
            clock.clone(),
            Arc::new(ManagerStopper::new(
                manager.clone(),
                store.clone(),
                clock.clone(),
            )),
            config.sessions.reaper_options(),
        );
        let execution = ExecutionService::new(store.clone(), clock.clone(), manager);
        // TURN-07: budgets (validated at load), priced like `GET /api/usage`.
        let execution = execution.with_budgets(knife_runtime::budget::BudgetGuard::new(
            store.clone(),
            config.budgets.budgets()?,
            Arc::clone(&prices),
            config
                .providers
                .iter()
                .filter(|(_, p)| !p.model.is_empty())
                .map(|(id, p)| (ProviderInstanceId::from(id.as_str()), p.model.clone()))
                .collect(),
        ));
        let execution = crate::checkpoints::attach(execution, config, data_dir).await;
        let options = RestartOptions {
            max_resume_attempts: config
                .server
                .max_resume_attempts
                .unwrap_or(RestartOptions::default().max_resume_attempts),
            ..RestartOptions::default()
        };
        // A revert a crash cut short is finished before any run touches files (CHG-10).
        let reverts = match execution.replay_revert_journal().await {
            Err(e) if crate::disk::is_disk_full(&e) => {
                disk.skipped(
                    "finish the reverts the previous process left unfinished",
                    &e,
                );
                0
            }
            r => r.context("cannot finish the reverts the previous process left unfinished")?,
        };
        if reverts > 0 {
            tracing::info!(
                reverts,
                "finished reverts the previous process left unfinished"
            );
        }
        let leases = knife_runtime::boot::takeover::LeaseKeeper::new(execution.clone(), options);
        let sweep = match RestartService::new(execution.clone(), options)
            .resume_suspended_threads()
            .await
        {
            Err(e) if crate::disk::is_disk_full(&e) => {
                disk.skipped("resume the work claimed by the previous process", &e);
                Default::default()
            }
            r => r.context("cannot resume the work claimed by the previous process")?,
        };
        // After the sweep started the resumed turns (boot stays fast): the runs the
        // crash cut short that boot ended get their end checkpoint (CHG-10).
        execution.checkpoint_after_boot(
            report
                .runs_interrupted
                .iter()
                .map(|(thread, _)| thread.clone())
                .chain(sweep.exhausted.iter().cloned())
                .chain(sweep.children_released.iter().cloned())
                .collect(),
        );
        if !sweep.resumed.is_empty() || !sweep.exhausted.is_empty() {
            tracing::info!(
                resumed = sweep.resumed.len(),
                exhausted = sweep.exhausted.len(),
                children_released = sweep.children_released.len(),
                failed = sweep.failed.len(),
                "restart sweep done"
            );
        }
        let state = AppState {
            store: store.clone(),
            execution: execution.clone(),
            clock,
            providers: config
                .providers
                .iter()
                .map(|(id, p)| ProviderInstanceInfo {
                    id: ProviderInstanceId::from(id.as_str()),
                    driver: p.driver.clone(),
                    model: Some(p.model.clone()).filter(|m| !m.is_empty()),
                    default: id.as_str() == default_instance.as_str(),
                })
                .collect(),
            default_instance,
            metrics,
            api_token: api_token.map(Arc::from),
            closing: CancellationToken::new(),
            mcp: Some(knife_server::mcp::McpState {
                worktrees_dir: data_dir.join("worktrees"),
                registry: mcp_registry,
                access: mcp_access,
                debug_tokens: std::env::var("KNIFE_DEBUG_MCP_TOKENS").is_ok_and(|v| v == "1"),
            }),
            prices,
            subscribers: knife_server::Subscribers::default(),
        };
        Ok(App {
            lock,
            store,
            execution,
            state,
            reaper,
            leases,
            shared_store: matches!(location, crate::store_url::StoreLocation::Postgres(_)),
            limits: config.server.limits(),
            sandbox,
            disk,
            membership,
        })
    }

    /// Starts the stale-session reaper (after the restart sweep, which `build` ran),
    /// serves on `listener` until `shutdown` resolves, then shuts down in order:
    /// stop accepting connections; stop the reaper; interrupt active runs (reason
    /// `shutdown`) and wait up to [`SHUTDOWN_TIMEOUT`] for their terminal writes, so
    /// clients following them see how they ended; release every provider session
    /// (the session manager's `shutdown`, one shared 30 s box); then end every event
    /// stream so open SSE / WebSocket clients do not hold the process; finally let the
    /// HTTP server drain.
    pub async fn serve(
        mut self,
        listener: TcpListener,
        shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> anyhow::Result<()> {
        let url = format!("http://{}", listener.local_addr()?);
        if let Some(mcp) = &self.state.mcp {
            mcp.registry
                .set_endpoint(knife_runtime::mcp::endpoint_for(listener.local_addr()?));
        }
        self.lock.record_url(url)?;
        // `GET /healthz/detail`: which sandbox commands get (SEC-01), open like /healthz.
        // The disk's free space is measured at each request (SEC-07).
        let detail = serde_json::json!({
            "status": "ok",
            "sandbox": {
                "kind": self.sandbox.support.kind(),
                "detail": self.sandbox.support.describe(),
            },
        });
        let disk = self.disk.clone();
        let router = knife_server::router(self.state.clone()).route(
            "/healthz/detail",
            axum::routing::get(move || {
                let mut detail = detail.clone();
                detail["disk"] = disk.json();
                async move { axum::Json(detail) }
            }),
        );
        let reaper_stop = CancellationToken::new();
        let reaper = self.reaper.clone().start(reaper_stop.clone());
        // Stopped with the reaper: a stopping node takes nothing over any more (its
        // interrupted runs keep their claims and leases, which then run out).
        let keeper = self.leases.clone().start(reaper_stop.clone());
        // The other nodes' live deltas, for this node's subscribers (None on SQLite).
        let relay = knife_runtime::live_relay::start(
            self.execution.manager().live().clone(),
            self.store.clone(),
            reaper_stop.clone(),
        );
        // SCALE-06: interrupts, steers and approval answers other nodes took for the
        // runs this node drives. One node (SQLite) gets none, so it does not listen.
        let commands = self
            .shared_store
            .then(|| self.execution.start_command_listener(reaper_stop.clone()));
        let execution = self.execution.clone();
        let closing = self.state.closing.clone();
        let stop_reaper = reaper_stop.clone();
        // A node whose id another process took over stops (SCALE-05).
        let id_lost = self
            .membership
            .as_ref()
            .map(knife_runtime::boot::membership::Membership::lost);
        let graceful = async move {
            match id_lost {
                Some(lost) => tokio::select! {
                    _ = shutdown => {}
                    _ = lost.cancelled() => {}
                },
                None => shutdown.await,
            }
            // Spawned: the server stops accepting as soon as this future returns, while
            // runs wind down and streams are closed in the background.
            tokio::spawn(async move {
                stop_reaper.cancel();
                execution.shutdown(SHUTDOWN_TIMEOUT).await;
                execution.manager().shutdown().await;
                closing.cancel();
            });
        };
        // Accepted sockets get TCP_NODELAY (LIVE-04); connection cap and header
        // timeout (SEC-04).
        let served = knife_server::serve_with(listener, router, self.limits.clone(), graceful)
            .await
            .context("the HTTP server failed");
        // Idempotent; covers a server that stopped for another reason.
        reaper_stop.cancel();
        self.execution.shutdown(SHUTDOWN_TIMEOUT).await;
        self.execution.manager().shutdown().await;
        let _ = reaper.await;
        let _ = keeper.await;
        if let Some(relay) = relay {
            let _ = relay.await;
        }
        if let Some(commands) = commands {
            let _ = commands.await;
        }
        if let Some(membership) = self.membership.take() {
            membership.leave().await;
        }
        served
    }
}

/// A knife server inside this process on a free loopback port (used by `knife run`
/// without a server, `knife demo` and `knife bench stream`).
pub struct InProcessServer {
    pub addr: SocketAddr,
    pub store: Store,
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
}

impl InProcessServer {
    /// Builds the app on `data_dir` and serves it on `127.0.0.1:0`.
    pub async fn start(config: &Config, data_dir: &Path) -> anyhow::Result<Self> {
        let app = App::build(config, data_dir, None).await?;
        let store = app.store.clone();
        let listener = bind(SocketAddr::from(([127, 0, 0, 1], 0))).await?;
        let addr = listener.local_addr()?;
        let (stop, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(app.serve(listener, async move {
            let _ = stop_rx.await;
        }));
        Ok(Self {
            addr,
            store,
            stop,
            task,
        })
    }

    /// An API client of this server.
    pub fn client(&self) -> anyhow::Result<crate::client::ApiClient> {
        crate::client::ApiClient::new(format!("http://{}", self.addr), None)
    }

    /// Graceful stop: stops accepting, interrupts active runs, waits for them.
    pub async fn stop(self) -> anyhow::Result<()> {
        let _ = self.stop.send(());
        self.task.await.context("the in-process server panicked")?
    }
}

/// Binds `addr`, with a clear error when it is taken.
pub async fn bind(addr: SocketAddr) -> anyhow::Result<TcpListener> {
    TcpListener::bind(addr).await.with_context(|| {
        format!(
            "cannot listen on {addr}; is another knife running? Use --listen to pick another port"
        )
    })
}

fn check_writable(dir: &Path) -> anyhow::Result<()> {
    let probe = dir.join(".knife-write-check");
    match std::fs::write(&probe, b"ok") {
        Ok(()) => {
            let _ = std::fs::remove_file(&probe);
            Ok(())
        }
        // Writable, only full: start anyway and say so (SEC-07).
        Err(e) if crate::disk::is_enospc(&e) => {
            let _ = std::fs::remove_file(&probe);
            tracing::warn!(
                dir = %dir.display(),
                "the disk holding the data directory is full: {}",
                crate::disk::WHAT_A_FULL_DISK_STOPS
            );
            Ok(())
        }
        Err(e) => bail!(
            "the data directory {} is not writable ({e}); choose a writable --data-dir",
            dir.display()
        ),
    }
}
