//! The restart sweep (SPEC.md EXEC-03..10): at boot, after reconciliation and before
//! serving, resume every claimed top-level thread whose owner died — once, counted,
//! within a budget — and release the claims of child threads.
//!
//! The sweep never clears a claim itself except a child's: only a run's terminal
//! event does (or the budget's `aborted` terminal). A death anywhere in the resume
//! path leaves the same claim for the next boot, bounded by `resume_attempts`.

use futures::StreamExt;
use knife_protocol::*;

use crate::error::RuntimeError;
use crate::execution::{DEFAULT_MAX_RESUME_ATTEMPTS, ExecutionService, ResumeOutcome};

/// Options of the restart sweep.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RestartOptions {
    /// Resumes allowed per claimed piece of work before it is terminalised with
    /// `aborted` (EXEC-08). Default [`DEFAULT_MAX_RESUME_ATTEMPTS`] (10).
    pub max_resume_attempts: u32,
    /// Resumes in flight at once (each reads the thread and writes its continuation);
    /// default [`DEFAULT_RESUME_CONCURRENCY`].
    pub concurrency: usize,
}

/// Default number of resumes the sweep has in flight (LIVE-07).
pub const DEFAULT_RESUME_CONCURRENCY: usize = 128;

impl Default for RestartOptions {
    fn default() -> Self {
        Self {
            max_resume_attempts: DEFAULT_MAX_RESUME_ATTEMPTS,
            concurrency: DEFAULT_RESUME_CONCURRENCY,
        }
    }
}

/// What one sweep did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SweepReport {
    /// Threads resumed with a continuation run: (thread, run, attempt).
    pub resumed: Vec<(ThreadId, RunId, u32)>,
    /// Threads terminalised with `aborted` because their budget was spent.
    pub exhausted: Vec<ThreadId>,
    /// Child threads whose claims were released (EXEC-03).
    pub children_released: Vec<ThreadId>,
    /// Claimed threads already draining in this process, left untouched (EXEC-10).
    pub skipped_active: Vec<ThreadId>,
    /// Threads whose resume failed, with the error (their claim stays for the next boot).
    pub failed: Vec<(ThreadId, String)>,
    /// Claimed threads another node holds a live lease on, left to it (SCALE-04).
    pub held_elsewhere: Vec<(ThreadId, String)>,
    /// Claimed threads whose workspace (worktree, else project root) does not exist on
    /// this node, left to a node that has it while other nodes are live (SCALE-08);
    /// their claims stay.
    pub missing_workspace: Vec<(ThreadId, std::path::PathBuf)>,
}

/// Resumes suspended work. Inert until [`RestartService::resume_suspended_threads`]
/// is called (the server calls it once at boot). Cheap to clone.
#[derive(Clone)]
pub struct RestartService {
    execution: ExecutionService,
    options: RestartOptions,
}

impl RestartService {
    /// A sweep that resumes through `execution`.
    pub fn new(execution: ExecutionService, options: RestartOptions) -> Self {
        Self { execution, options }
    }

    /// The sweep:
    ///
    /// 1. releases the claims of child threads (their stale runs end `interrupted`):
    ///    a resumed parent re-runs its tool call and spawns fresh children (EXEC-03);
    /// 2. lists claimed top-level threads, minus those draining in this process (EXEC-10)
    ///    and, while other nodes are live, those whose workspace does not exist on this
    ///    node (SCALE-08);
    /// 3. resumes all of them concurrently (EXEC-06), [`RestartOptions::concurrency`] at
    ///    a time, through
    ///    [`ExecutionService::resume_within`]: each counts its attempt durably and appends
    ///    the continuation in the same transaction before its drain starts (EXEC-07/09),
    ///    or is terminalised with `aborted` at the budget (EXEC-08).
    ///
    /// Returns once every resume's transaction committed; the drains continue in the
    /// background. One log line per resumed and per terminalised thread. Metrics:
    /// `knife_resumes_total{outcome}` (`resumed`, `exhausted`, `failed`) and
    /// `knife_resume_budget_exhausted_total`.
    ///
    /// Errors: only listing the claims ([`RuntimeError::Store`]); a single thread's
    /// failure is reported in [`SweepReport::failed`] and does not stop the others.
    pub async fn resume_suspended_threads(&self) -> Result<SweepReport, RuntimeError> {
        let mut report = SweepReport {
            children_released: self.release_child_claims().await?,
            ..SweepReport::default()
        };
        let active = self.execution.active_threads();
        let suspended = self.execution.store().list_suspended_threads().await?;
        let mut todo = Vec::new();
        let others = !suspended.is_empty()
            && crate::boot::paths::other_nodes_live(self.execution.store()).await;
        for thread in suspended {
            if active.contains(&thread.id) {
                report.skipped_active.push(thread.id);
                continue;
            }
            if !others {
                todo.push(thread.id);
                continue;
            }
            match crate::boot::paths::missing_workspace(self.execution.store(), &thread.id).await {
                Ok(Some(path)) => {
                    tracing::warn!(
                        thread = %thread.id, path = %path.display(),
                        "left a claimed thread for a node that has its workspace: the folder does not exist on this node (every node needs the same paths, e.g. a shared volume)"
                    );
                    report.missing_workspace.push((thread.id, path));
                }
                // Unknown: resumed as before (the run says what is missing).
                Ok(None) | Err(_) => todo.push(thread.id),
            }
        }
        let max = self.options.max_resume_attempts;
        // Concurrent, a bounded number at a time (LIVE-07): enough to fill the store's
        // group commits, few enough that 10,000 claims do not mean 10,000 reads in
        // flight (blocking threads, buffers) at once.
        let results: Vec<_> = futures::stream::iter(todo)
            .map(|thread| async move {
                let mut outcome = self.execution.resume_within(&thread, max).await;
                if matches!(outcome, Err(RuntimeError::Conflict)) {
                    // The row moved between the read and the write: read it again once.
                    outcome = self.execution.resume_within(&thread, max).await;
                }
                (thread, outcome)
            })
            .buffer_unordered(self.options.concurrency.max(1))
            .collect()
            .await;
        for (thread, outcome) in results {
            match outcome {
                Ok(ResumeOutcome::Resumed { run, attempt }) => {
                    tracing::info!(
                        thread = %thread, run = %run, attempt, max_attempts = max,
                        "resumed the thread's work after a restart"
                    );
                    metrics::counter!("knife_resumes_total", "outcome" => "resumed").increment(1);
                    report.resumed.push((thread, run, attempt));
                }
                Ok(ResumeOutcome::Exhausted { attempts }) => {
                    tracing::warn!(
                        thread = %thread, attempts,
                        "terminalised the thread: its work was interrupted {attempts} times \
                         and is not resumed again (error type `aborted`)"
                    );
                    metrics::counter!("knife_resumes_total", "outcome" => "exhausted").increment(1);
                    metrics::counter!("knife_resume_budget_exhausted_total").increment(1);
                    report.exhausted.push(thread);
                }
                Ok(ResumeOutcome::AlreadyActive) => report.skipped_active.push(thread),
                // Released between the listing and the resume (a run ended): nothing to do.
                Ok(ResumeOutcome::NotClaimed) => {}
                Err(RuntimeError::Store(knife_store::StoreError::LeaseHeld { node, .. })) => {
                    tracing::info!(thread = %thread, %node, "left the claimed thread to the node that holds its lease");
                    report.held_elsewhere.push((thread, node));
                }
                Err(e) => {
                    tracing::error!(thread = %thread, error = %e, "could not resume the thread; its claim stays for the next start");
                    metrics::counter!("knife_resumes_total", "outcome" => "failed").increment(1);
                    report.failed.push((thread, e.to_string()));
                }
            }
        }
        Ok(report)
    }

    /// Releases every child thread's claim (claim cleared, counter reset). A child
    /// not draining in this process also gets its stale run ended `interrupted`, in
    /// the same transaction. Returns the children released.
    async fn release_child_claims(&self) -> Result<Vec<ThreadId>, RuntimeError> {
        let store = self.execution.store();
        let clock = self.execution.clock();
        let mut released = Vec::new();
        for mut child in store.list_claimed_child_threads().await? {
            child.release_claim();
            let id = child.id.clone();
            if !self.execution.is_active(&id) && child.active_run_id.is_some() {
                crate::boot::recovery::settle_stale_runs(
                    store,
                    clock.as_ref(),
                    child,
                    "the server stopped while this sub-agent thread was active; its parent \
                     re-runs the work",
                )
                .await?;
            } else {
                let now = clock.now();
                child.updated_at = now;
                store
                    .write(vec![DomainEvent::new(now, EventBody::ThreadUpdated(child))])
                    .await?;
            }
            tracing::info!(thread = %id, "released the claim of a child thread (never resumed on its own)");
            released.push(id);
        }
        Ok(released)
    }
}
