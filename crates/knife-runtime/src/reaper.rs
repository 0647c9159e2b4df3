//! The stale provider session reaper (SPEC.md REAP-01..06): once at start, then every
//! `sweep_interval`, stops sessions not seen for `inactivity_threshold` whose thread
//! has no active turn. One failing or panicking stop never stops the sweep.
//!
//! Several nodes on one database (SPEC.md SCALE-07): a session's process lives on the
//! node named in its id ([`ProviderSessionId::node`]), and only that node stops it. The
//! rows of nodes that are gone (no live membership row) are swept by one node at a time:
//! the holder of the cluster singleton [`REAPER_SINGLETON`].

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use knife_protocol::{ProviderSessionId, SessionStatus, ThreadId};
use knife_store::Store;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::clock::SharedClock;
use crate::error::RuntimeError;

/// Default time a session may go unseen before it is reaped (30 min).
pub const DEFAULT_INACTIVITY_THRESHOLD: Duration = Duration::from_secs(30 * 60);

/// Default time between sweeps (60 s).
pub const DEFAULT_SWEEP_INTERVAL: Duration = Duration::from_secs(60);

/// Name of the cluster singleton whose holder also sweeps the session rows of nodes
/// that are gone (SCALE-07). Held for three sweep intervals, renewed at every sweep.
pub const REAPER_SINGLETON: &str = "session-reaper";

/// What a [`SessionStopper`] did with a stale row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopOutcome {
    /// Stopped (or the thread's binding settled).
    Stopped,
    /// Kept: the live session turned out busy (a running turn) or pinned by pending
    /// background work when the stop looked at it (REAP-02).
    Skipped,
}

/// Stops the provider session serving a thread (implemented by the session manager).
#[async_trait::async_trait]
pub trait SessionStopper: Send + Sync + 'static {
    /// Stops `session`, which serves `thread` (`stopSession{threadId}`).
    async fn stop_session(
        &self,
        thread: &ThreadId,
        session: &ProviderSessionId,
    ) -> Result<StopOutcome, RuntimeError>;
}

/// Reaper settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReaperOptions {
    /// A session unseen for at least this long is stale (default 30 min).
    pub inactivity_threshold: Duration,
    /// Time between sweeps (default 60 s).
    pub sweep_interval: Duration,
}

impl Default for ReaperOptions {
    fn default() -> Self {
        Self {
            inactivity_threshold: DEFAULT_INACTIVITY_THRESHOLD,
            sweep_interval: DEFAULT_SWEEP_INTERVAL,
        }
    }
}

/// What one sweep did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReapReport {
    /// Rows looked at (session, thread pairs).
    pub rows: usize,
    /// Sessions stopped: (session, thread).
    pub reaped: Vec<(ProviderSessionId, ThreadId)>,
    /// Stale rows kept because their thread has an active turn, or their live session
    /// was busy or pinned when the stopper looked (REAP-02).
    pub skipped_active: usize,
    /// Stops that failed or panicked, with the reason (REAP-05/06).
    pub failed: Vec<(ProviderSessionId, String)>,
    /// Stale rows left alone because another node runs the session (it is live), or
    /// because another node holds the cluster sweep (SCALE-07).
    pub skipped_other_node: usize,
    /// Whether this node held [`REAPER_SINGLETON`] for this sweep.
    pub cluster_sweep: bool,
}

/// The reaper. Cheap to clone.
#[derive(Clone)]
pub struct Reaper {
    store: Store,
    clock: SharedClock,
    stopper: Arc<dyn SessionStopper>,
    options: ReaperOptions,
}

impl Reaper {
    /// A reaper over the store's session rows, stopping through `stopper`.
    pub fn new(
        store: Store,
        clock: SharedClock,
        stopper: Arc<dyn SessionStopper>,
        options: ReaperOptions,
    ) -> Self {
        Self {
            store,
            clock,
            stopper,
            options,
        }
    }

    /// One sweep over every (session, thread) row:
    /// * `stopped` → kept (REAP-04);
    /// * seen within the threshold → kept (REAP-03);
    /// * stale but its thread has an active run → kept (REAP-02);
    /// * otherwise stopped through the [`SessionStopper`] (REAP-01). Each stop runs in
    ///   its own task: an error or a panic is logged and the sweep goes on (REAP-05/06).
    ///
    /// Only rows of sessions this node runs (the node in the session id), plus, while
    /// this node holds [`REAPER_SINGLETON`], rows of nodes with no live membership.
    ///
    /// Errors: only reading the rows ([`RuntimeError::Store`]).
    pub async fn sweep(&self) -> Result<ReapReport, RuntimeError> {
        let rows = self.store.list_session_activity().await?;
        let now = self.clock.now();
        let threshold = chrono::Duration::from_std(self.options.inactivity_threshold)
            .unwrap_or(chrono::Duration::MAX);
        let me = self.store.node().node().to_owned();
        let mut report = ReapReport {
            rows: rows.len(),
            ..ReapReport::default()
        };
        // Decided once per sweep, and only when a stale row of another node exists.
        let mut cluster: Option<Option<HashSet<String>>> = None;
        for row in rows {
            if row.session.status == SessionStatus::Stopped {
                continue;
            }
            let idle = now - row.last_seen_at;
            if idle < threshold {
                continue;
            }
            let owner = row.session.id.node();
            if owner != me {
                if cluster.is_none() {
                    cluster = Some(self.cluster_sweep().await);
                    report.cluster_sweep = matches!(cluster, Some(Some(_)));
                }
                let gone = matches!(&cluster, Some(Some(live)) if !live.contains(owner));
                if !gone {
                    report.skipped_other_node += 1;
                    continue;
                }
            }
            if row.thread_has_active_run {
                tracing::debug!(session = %row.session.id, thread = %row.thread_id, "stale session kept: its thread has an active turn");
                report.skipped_active += 1;
                continue;
            }
            let stopper = self.stopper.clone();
            let (session, thread) = (row.session.id.clone(), row.thread_id.clone());
            let task = {
                let (session, thread) = (session.clone(), thread.clone());
                tokio::spawn(async move { stopper.stop_session(&thread, &session).await })
            };
            match task.await {
                Ok(Ok(StopOutcome::Skipped)) => {
                    tracing::debug!(session = %session, thread = %thread, "stale session kept: it is busy or pinned by pending work");
                    report.skipped_active += 1;
                }
                Ok(Ok(StopOutcome::Stopped)) => {
                    tracing::info!(
                        session = %session, thread = %thread, idle_secs = idle.num_seconds(),
                        reason = "inactivity_threshold", "reaped a stale provider session"
                    );
                    metrics::counter!("knife_sessions_reaped_total").increment(1);
                    report.reaped.push((session, thread));
                }
                Ok(Err(e)) => {
                    tracing::warn!(session = %session, thread = %thread, error = %e, "could not stop a stale provider session");
                    report.failed.push((session, e.to_string()));
                }
                Err(e) => {
                    tracing::error!(session = %session, thread = %thread, error = %e, "stopping a stale provider session panicked; this is a bug in knife");
                    report
                        .failed
                        .push((session, format!("the stop panicked: {e}")));
                }
            }
        }
        Ok(report)
    }

    /// The live node ids when this node holds (or now takes) [`REAPER_SINGLETON`];
    /// `None` when another node holds it or the store cannot say (then only this node's
    /// own rows are swept).
    async fn cluster_sweep(&self) -> Option<HashSet<String>> {
        let me = self.store.node().node();
        let ttl = self.options.sweep_interval.saturating_mul(3);
        match self.store.hold_singleton(REAPER_SINGLETON, me, ttl).await {
            Ok(true) => {}
            Ok(false) => return None,
            Err(e) => {
                tracing::warn!(error = %e, "could not take the cluster reaper's singleton; sweeping this node's sessions only");
                return None;
            }
        }
        match self.store.live_nodes().await {
            Ok(live) => Some(live.into_iter().map(|m| m.node).collect()),
            Err(e) => {
                tracing::warn!(error = %e, "could not list the live nodes; sweeping this node's sessions only");
                None
            }
        }
    }

    /// Sweeps at once, then every `sweep_interval`, until `stop` is cancelled. A sweep
    /// that fails is logged and the loop goes on. On stop it gives up
    /// [`REAPER_SINGLETON`] if it held it, so another node sweeps the cluster at once.
    pub fn start(self, stop: CancellationToken) -> JoinHandle<()> {
        tokio::spawn(async move {
            tracing::info!(
                inactivity_threshold_secs = self.options.inactivity_threshold.as_secs(),
                sweep_interval_secs = self.options.sweep_interval.as_secs(),
                "session reaper started"
            );
            let mut ticks =
                tokio::time::interval(self.options.sweep_interval.max(Duration::from_millis(1)));
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = stop.cancelled() => {
                        let me = self.store.node().node();
                        let _ = self.store.release_singleton(REAPER_SINGLETON, me).await;
                        return;
                    }
                    _ = ticks.tick() => {}
                }
                if let Err(e) = self.sweep().await {
                    tracing::warn!(error = %e, "the session reaper's sweep failed; it runs again at the next interval");
                }
            }
        })
    }
}
