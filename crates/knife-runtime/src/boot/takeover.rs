//! The lease keeper (SPEC.md SCALE-04/05): while the node serves, it renews the node's
//! leases every third of their length, abandons the work of a lease it lost, and takes
//! over the claimed threads whose lease expired (a dead node's) and resumes them under
//! the EXEC rules (once per claim, within the budget, never after a user stop).

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use knife_protocol::*;
use knife_store::{StoreError, TakeScope};
use tokio_util::sync::CancellationToken;

use crate::boot::restart::RestartOptions;
use crate::error::RuntimeError;
use crate::execution::{ExecutionService, ResumeOutcome};

/// Claimed threads one beat takes over at most.
const TAKE_PER_BEAT: usize = 16;

/// What one beat did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BeatReport {
    /// Threads whose lease this node lost (another node took them over); their
    /// active runs were abandoned.
    pub lost: Vec<ThreadId>,
    /// Threads taken over and resumed: (thread, continuation run, attempt).
    pub resumed: Vec<(ThreadId, RunId, u32)>,
    /// Threads taken over whose budget was spent (ended `aborted`) or whose claim was
    /// gone by the time of the resume.
    pub settled: Vec<ThreadId>,
    /// Takeovers whose resume failed, with the error (the lease runs out; the next
    /// beat of some node tries again).
    pub failed: Vec<(ThreadId, String)>,
    /// Threads taken whose workspace does not exist on this node while other nodes are
    /// live: given back at once and excluded from this node's takeovers for
    /// [`NOT_HERE_FOR`] (SCALE-08).
    pub not_here: Vec<(ThreadId, PathBuf)>,
}

/// How long a node leaves a thread whose workspace it lacks before looking again (a
/// volume may be mounted later).
pub const NOT_HERE_FOR: Duration = Duration::from_secs(60);

/// Renews, abandons and takes over; see the module doc. Cheap to clone.
#[derive(Clone)]
pub struct LeaseKeeper {
    execution: ExecutionService,
    options: RestartOptions,
    heartbeat: Duration,
    /// Threads whose workspace this node lacks, until when they are excluded from its
    /// takeovers, and whether that was logged (once per thread).
    not_here: Arc<Mutex<HashMap<ThreadId, Instant>>>,
    logged: Arc<Mutex<HashSet<ThreadId>>>,
}

impl LeaseKeeper {
    /// A keeper beating every third of the store's lease length (10 s leases: 3.3 s).
    pub fn new(execution: ExecutionService, options: RestartOptions) -> LeaseKeeper {
        let heartbeat = execution.store().node().ttl() / 3;
        LeaseKeeper {
            execution,
            options,
            heartbeat,
            not_here: Arc::default(),
            logged: Arc::default(),
        }
    }

    /// Beats until `stop` is cancelled (the server's shutdown), one beat at a time.
    pub fn start(self, stop: CancellationToken) -> tokio::task::JoinHandle<()> {
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(self.heartbeat.max(Duration::from_millis(10)));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tick.tick() => {}
                }
                let report = self.beat().await;
                if !report.failed.is_empty() {
                    tracing::warn!(failed = ?report.failed, "lease takeovers failed; retried at a later beat");
                }
            }
        })
    }

    /// One beat: renew every held lease (a lost one abandons its run), then take over
    /// expired claims and resume each. Errors are reported, never returned: a failed
    /// renewal is retried at the next beat (the lease may run out meanwhile, then the
    /// run is fenced and another node resumes it).
    pub async fn beat(&self) -> BeatReport {
        let store = self.execution.store();
        let mut report = BeatReport::default();
        let (lost, failed) = store.renew_held_leases().await;
        for (thread, e) in failed {
            tracing::warn!(thread = %thread, error = %e, "could not renew the thread's lease; retrying at the next beat");
        }
        for thread in lost {
            let abandoned = self.execution.abandon(&thread);
            tracing::warn!(thread = %thread, abandoned, "this node lost the thread's lease to another node; its run here stops without writing");
            report.lost.push(thread);
        }
        let node = store.node().node().to_owned();
        let exclude: Vec<ThreadId> = {
            let mut not_here = self
                .not_here
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let now = Instant::now();
            not_here.retain(|_, until| *until > now);
            not_here.keys().cloned().collect()
        };
        let taken = match store
            .take_expired_leases(
                &node,
                store.node().ttl(),
                TakeScope::Expired,
                TAKE_PER_BEAT,
                &exclude,
            )
            .await
        {
            Ok(taken) => taken,
            Err(e) => {
                tracing::warn!(error = %e, "could not look for expired leases; retrying at the next beat");
                return report;
            }
        };
        let others = !taken.is_empty() && crate::boot::paths::other_nodes_live(store).await;
        for lease in taken {
            let thread = lease.thread_id.clone();
            store.adopt_lease(lease);
            if self.execution.is_active(&thread) {
                // Our own run, whose renewal came late: it keeps running under the
                // new epoch this node now holds.
                continue;
            }
            let missing = if others {
                crate::boot::paths::missing_workspace(store, &thread).await
            } else {
                Ok(None)
            };
            match missing {
                Ok(None) => {}
                Ok(Some(path)) => {
                    self.leave_here(&thread, &path).await;
                    report.not_here.push((thread, path));
                    continue;
                }
                Err(e) => {
                    tracing::warn!(thread = %thread, error = %e, "could not check the thread's workspace; retrying at a later beat");
                    let _ = store.let_go(&thread).await;
                    report.failed.push((thread, e.to_string()));
                    continue;
                }
            }
            match self.take_over(&thread).await {
                Ok(ResumeOutcome::Resumed { run, attempt }) => {
                    tracing::info!(thread = %thread, run = %run, attempt, "took over the thread of a node whose lease expired and resumed its work");
                    metrics::counter!("knife_takeovers_total", "outcome" => "resumed").increment(1);
                    report.resumed.push((thread, run, attempt));
                }
                Ok(ResumeOutcome::AlreadyActive) => {}
                Ok(ResumeOutcome::Exhausted { .. } | ResumeOutcome::NotClaimed) => {
                    let _ = store.let_go(&thread).await;
                    report.settled.push(thread);
                }
                Err(e) => {
                    metrics::counter!("knife_takeovers_total", "outcome" => "failed").increment(1);
                    tracing::error!(thread = %thread, error = %e, "could not resume a thread taken over");
                    report.failed.push((thread, e.to_string()));
                }
            }
        }
        report
    }

    /// Gives the lease of `thread` back at once (expired: another node takes it) and
    /// excludes it from this node's takeovers for [`NOT_HERE_FOR`]; logs it once.
    async fn leave_here(&self, thread: &ThreadId, path: &std::path::Path) {
        let store = self.execution.store();
        if let Err(e) = store.let_go(thread).await {
            tracing::warn!(thread = %thread, error = %e, "could not give back the lease of a thread whose workspace is missing here; it runs out");
        }
        self.not_here
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(thread.clone(), Instant::now() + NOT_HERE_FOR);
        let first = self
            .logged
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(thread.clone());
        if first {
            tracing::warn!(
                thread = %thread, path = %path.display(), node = store.node().node(),
                "left a claimed thread to another node: its workspace does not exist on this node (every node needs the same paths, e.g. a shared volume)"
            );
        }
    }

    /// Settles what the dead node left of `thread` (its provider sessions are gone
    /// with it) and resumes the claimed work through the restart rules.
    async fn take_over(&self, thread: &ThreadId) -> Result<ResumeOutcome, RuntimeError> {
        let store = self.execution.store();
        let now = self.execution.clock().now();
        let mut events = Vec::new();
        for activity in store.list_session_activity().await? {
            let mut session = activity.session;
            if &activity.thread_id != thread
                || matches!(
                    session.status,
                    SessionStatus::Stopped | SessionStatus::Error
                )
            {
                continue;
            }
            session.status = SessionStatus::Stopped;
            session.updated_at = now;
            events.push(
                DomainEvent::new(now, EventBody::ProviderSessionUpdated(session))
                    .with_thread(thread),
            );
        }
        if !events.is_empty() {
            store.write(events).await?;
        }
        let max = self.options.max_resume_attempts;
        let mut outcome = self.execution.resume_within(thread, max).await;
        if matches!(outcome, Err(RuntimeError::Conflict)) {
            outcome = self.execution.resume_within(thread, max).await;
        }
        match outcome {
            Err(RuntimeError::Store(StoreError::LeaseHeld { node, .. })) => {
                // A node came back for its own lease between the take and the resume.
                tracing::info!(thread = %thread, %node, "the thread's lease was taken back first");
                Ok(ResumeOutcome::AlreadyActive)
            }
            other => other,
        }
    }
}
