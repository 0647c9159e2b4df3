//! The execution service: starts runs, drives their provider turn through the
//! session manager ([`crate::sessions::SessionManager`]), follows the session's
//! events until the turn's first `TurnTerminal`, and writes the run's terminal state.
//! One task owns each active run (ARCHITECTURE.md "How a turn flows").
//!
//! The manager's pump persists every adapter event before broadcasting it, so
//! execution never writes adapter events itself; sessions outlive runs and are
//! released by the manager's idle timer (MGR-20), not per run.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use knife_protocol::*;
use knife_store::Store;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

use crate::adapter::*;
use crate::clock::SharedClock;
use crate::error::RuntimeError;
use crate::execution::runs::{Created, RunStart};
use crate::execution::terminal::{Terminal, terminal_of_outcome};
use crate::sessions::{SessionHandle, SessionManager};

// `impl ExecutionService` continues in `execution/turn.rs` (driving one run's turn),
// `execution/messages.rs` (the message queue, TURN-01/02), `execution/budget_raise.rs`
// (TURN-07),
// `execution/checkpoints.rs` (CHG-01/02/10), `execution/revert.rs` (CHG-04),
// `execution/remote.rs` (commands to the node driving a run, SCALE-06),
// `execution/remote_sessions.rs` (closing another node's provider session, SCALE-06) and
// `execution/worktrees.rs` (CHG-07): children of this module so they share the
// service's private state.
#[path = "budget_raise.rs"]
mod budget_raise;
pub use budget_raise::{BUDGET_CONTINUE_DESCRIPTION, CONTINUE_AFTER_BUDGET_RAISE};
#[path = "checkpoints.rs"]
mod checkpoints;
#[path = "messages.rs"]
mod messages;
#[path = "remote.rs"]
mod remote;
pub use remote::COMMAND_WAIT;
#[path = "remote_sessions.rs"]
mod remote_sessions;
pub use remote_sessions::RemoteClose;
#[path = "reservation.rs"]
mod reservation;
#[path = "revert.rs"]
mod revert;
use reservation::Reservation;
#[path = "turn.rs"]
mod turn;
#[path = "worktrees.rs"]
mod worktrees;
pub(crate) use worktrees::run_root;

/// Default budget of resumes per claimed piece of work (EXEC-08).
pub const DEFAULT_MAX_RESUME_ATTEMPTS: u32 = 10;

/// What [`ExecutionService::resume_within`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ResumeOutcome {
    /// A continuation run started; `attempt` is the thread's `resume_attempts` now.
    Resumed {
        /// The continuation run.
        run: RunId,
        /// The thread's `resume_attempts` after this resume (1-based).
        attempt: u32,
    },
    /// The thread already drains in this process: left untouched (EXEC-10).
    AlreadyActive,
    /// The thread holds no claim: nothing to resume.
    NotClaimed,
    /// The budget was spent after `attempts` resumes: terminalised with `aborted` (EXEC-08).
    Exhausted {
        /// Resumes already spent (the budget).
        attempts: u32,
    },
}

/// Result of reserving a thread and creating its run.
enum Begun {
    Started {
        run: Box<Run>,
        attempts: u32,
    },
    /// Another run is active in this process (its id, once known).
    Busy(Option<RunId>),
    NotClaimed,
    Exhausted {
        attempts: u32,
    },
}

/// How long an interrupted runtime gets to end its turn itself before the run is
/// recorded as interrupted anyway.
pub const INTERRUPT_GRACE: Duration = Duration::from_secs(5);

/// Longest `interrupt` waits for the id of a run that is still being created.
const RUN_ID_WAIT: Duration = Duration::from_secs(2);

/// Longest a new message waits for the previous run's terminal write.
const FINISH_WAIT: Duration = Duration::from_secs(5);

struct ActiveRun {
    /// `None` while the run is being created.
    run_id: watch::Receiver<Option<RunId>>,
    cancel: CancellationToken,
    reason: Arc<Mutex<Option<InterruptReason>>>,
    done: watch::Receiver<bool>,
    /// Set once the turn ended and its terminal state is being written: a new
    /// message then waits for that write instead of getting a spurious 409.
    finishing: Arc<AtomicBool>,
    /// The provider session the run's turn runs on, once opened.
    session: Arc<Mutex<Option<SessionHandle>>>,
}

struct Inner {
    store: Store,
    clock: SharedClock,
    manager: SessionManager,
    /// Budgets checked around every turn (TURN-07); `None` = none configured.
    budgets: Option<crate::budget::BudgetGuard>,
    // std Mutex: only held for map lookups, never across an `.await`.
    active: Mutex<HashMap<ThreadId, ActiveRun>>,
    tracker: TaskTracker,
    interrupt_grace: Duration,
    /// How a failed terminal write is retried (SEC-07).
    terminal_retry: crate::execution::terminal::TerminalRetry,
    /// Set by `shutdown`: no new runs.
    closing: AtomicBool,
    /// Checkpoints around runs (CHG-01/02).
    tracking: checkpoints::Tracking,
    /// The working trees' boot checkpoints (CHG-10).
    boot: checkpoints::BootCheckpoints,
    /// Thread worktrees (CHG-07) and the project roots that default to one.
    worktrees: Option<(knife_workspace::Worktrees, Vec<String>)>,
    /// `thread_workspace` is this crate's own hook (rebuilt by the builders).
    own_hook: bool,
    /// Drops a deleted thread's worktree and checkpoints (CHG-08); `None` = nothing to drop.
    thread_workspace: Option<crate::lifecycle::SharedThreadWorkspace>,
}

/// Runs turns. Cheap to clone.
#[derive(Clone)]
pub struct ExecutionService {
    inner: Arc<Inner>,
}

impl ExecutionService {
    /// A service writing to `store` and opening sessions through `manager`.
    pub fn new(store: Store, clock: SharedClock, manager: SessionManager) -> Self {
        Self {
            inner: Arc::new(Inner {
                store,
                clock,
                manager,
                budgets: None,
                active: Mutex::new(HashMap::new()),
                tracker: TaskTracker::new(),
                interrupt_grace: INTERRUPT_GRACE,
                terminal_retry: crate::execution::terminal::TerminalRetry::default(),
                closing: AtomicBool::new(false),
                tracking: checkpoints::Tracking::default(),
                boot: checkpoints::BootCheckpoints::default(),
                worktrees: None,
                own_hook: false,
                thread_workspace: None,
            }),
        }
    }

    /// Sets how long an interrupted runtime gets before the run is recorded as
    /// interrupted anyway (default [`INTERRUPT_GRACE`]). Call before sharing the service.
    pub fn with_interrupt_grace(mut self, grace: Duration) -> Self {
        if let Some(inner) = Arc::get_mut(&mut self.inner) {
            inner.interrupt_grace = grace;
        }
        self
    }

    /// Checks `guard`'s budgets before each run's turn, at each usage report of the
    /// turn and (given to the runtime) before each model call (TURN-07). A guard
    /// without limits is dropped. Call before sharing the service.
    pub fn with_budgets(mut self, guard: crate::budget::BudgetGuard) -> Self {
        if let Some(inner) = Arc::get_mut(&mut self.inner) {
            inner.budgets = guard.budgets().any().then_some(guard);
        }
        self
    }

    /// How the write that ends a run is retried when it fails (SEC-07); the default
    /// waits 50 ms, doubling up to 5 s. Call before sharing the service.
    pub fn with_terminal_retry(mut self, retry: crate::execution::terminal::TerminalRetry) -> Self {
        if let Some(inner) = Arc::get_mut(&mut self.inner) {
            inner.terminal_retry = retry;
        }
        self
    }

    /// Installs what drops a deleted thread's worktree and checkpoints (CHG-08, see
    /// [`crate::lifecycle::ThreadWorkspace`]). Call before sharing the service.
    pub fn with_thread_workspace(
        mut self,
        workspace: crate::lifecycle::SharedThreadWorkspace,
    ) -> Self {
        if let Some(inner) = Arc::get_mut(&mut self.inner) {
            inner.thread_workspace = Some(workspace);
            inner.own_hook = false;
        }
        self
    }

    /// The installed [`crate::lifecycle::ThreadWorkspace`], if any.
    pub fn thread_workspace(&self) -> Option<&crate::lifecycle::SharedThreadWorkspace> {
        self.inner.thread_workspace.as_ref()
    }

    /// The session manager used to open sessions.
    pub fn manager(&self) -> &SessionManager {
        &self.inner.manager
    }

    /// The provider session the active run of `thread` runs on; `None` when the
    /// thread has no active run in this process or its session is not open yet.
    /// (For answering runtime requests of the running turn.)
    pub fn session_of(&self, thread: &ThreadId) -> Option<SessionHandle> {
        let active = lock(&self.inner.active);
        let run = active.get(thread)?;
        lock(&run.session).clone()
    }

    /// The store runs are written to.
    pub fn store(&self) -> &Store {
        &self.inner.store
    }

    /// The clock stamping events.
    pub fn clock(&self) -> &SharedClock {
        &self.inner.clock
    }

    /// Starts run N+1 of `thread` with the user's `text` and returns it at once
    /// (status `running`); the turn continues in the background.
    ///
    /// Writes `run.created`, the user-message turn item and `thread.updated` (with
    /// the thread's claim, EXEC-04) in one transaction guarded by the thread row's
    /// version (a concurrent change is retried a few times, then `Conflict`). Errors: `ThreadNotFound`,
    /// `RunInProgress` (one run per thread at a time), `Invalid` (empty text),
    /// `ProjectNotFound`, `ShuttingDown`.
    pub async fn start_run(&self, thread_id: &ThreadId, text: String) -> Result<Run, RuntimeError> {
        self.start_run_with_model(thread_id, text, None).await
    }

    /// [`Self::start_run`] with a model for this run only (TURN-10): `Some(m)`
    /// is recorded on the run (`Run::model`) and asked of the runtime for its
    /// turn; `None` uses the thread's model. Later runs go back to the thread's
    /// model unless they name one. Errors: those of `start_run`, and `Invalid`
    /// for a blank model name.
    pub async fn start_run_with_model(
        &self,
        thread_id: &ThreadId,
        text: String,
        model: Option<String>,
    ) -> Result<Run, RuntimeError> {
        let model = messages::validate_message(&text, model)?;
        self.wait_if_finishing(thread_id).await;
        // The run's write is guarded by the thread row's version: a bookkeeping write of
        // the thread landing in between (a released session's status, the previous run's
        // last events) is not the user's concern, so the start is tried again on the
        // fresh row a few times before `Conflict` is returned.
        let mut attempt = 1;
        let begun = loop {
            match self
                .begin(
                    thread_id,
                    RunStart::User {
                        text: text.clone(),
                        model: model.clone(),
                    },
                )
                .await
            {
                Err(RuntimeError::Conflict) if attempt < START_ATTEMPTS => attempt += 1,
                other => break other?,
            }
        };
        match begun {
            Begun::Started { run, .. } => Ok(*run),
            Begun::Busy(run) => Err(RuntimeError::RunInProgress {
                thread: thread_id.clone(),
                run: run.unwrap_or_else(|| RunId::from("(starting)")),
            }),
            Begun::NotClaimed | Begun::Exhausted { .. } => Err(RuntimeError::Internal(
                "a user run was answered as a resume".into(),
            )),
        }
    }

    /// Resumes the claimed work of `thread` after a restart (EXEC-07/09), within the
    /// default budget of [`DEFAULT_MAX_RESUME_ATTEMPTS`]. See [`Self::resume_within`].
    pub async fn resume(&self, thread_id: &ThreadId) -> Result<ResumeOutcome, RuntimeError> {
        self.resume_within(thread_id, DEFAULT_MAX_RESUME_ATTEMPTS)
            .await
    }

    /// Resumes the claimed work of `thread`: start-or-join.
    ///
    /// * Already running in this process → [`ResumeOutcome::AlreadyActive`], nothing
    ///   written (EXEC-10).
    /// * Not claimed → [`ResumeOutcome::NotClaimed`], nothing written.
    /// * `max_attempts` resumes already spent → the thread is terminalised with an
    ///   `aborted` failure and its claim released and counter reset, atomically
    ///   ([`ResumeOutcome::Exhausted`], EXEC-08).
    /// * Otherwise, in one transaction: the run the dead process left active ends
    ///   `interrupted` (claim kept), `resume_attempts` is incremented, and a new run
    ///   opens with the system-originated continuation message (EXEC-07/09); its drain
    ///   starts in the background ([`ResumeOutcome::Resumed`]).
    ///
    /// Errors: `ThreadNotFound`, `ProjectNotFound`, `Conflict`, `ShuttingDown`, `Store`.
    pub async fn resume_within(
        &self,
        thread_id: &ThreadId,
        max_attempts: u32,
    ) -> Result<ResumeOutcome, RuntimeError> {
        Ok(
            match self
                .begin(thread_id, RunStart::Continuation { max_attempts })
                .await?
            {
                Begun::Started { run, attempts } => ResumeOutcome::Resumed {
                    run: run.id,
                    attempt: attempts,
                },
                Begun::Busy(_) => ResumeOutcome::AlreadyActive,
                Begun::NotClaimed => ResumeOutcome::NotClaimed,
                Begun::Exhausted { attempts } => ResumeOutcome::Exhausted { attempts },
            },
        )
    }

    /// Reserves `thread_id` in this process, writes its new run and starts the drain.
    async fn begin(&self, thread_id: &ThreadId, start: RunStart) -> Result<Begun, RuntimeError> {
        let inner = &self.inner;
        let (done_tx, done_rx) = watch::channel(false);
        let (run_tx, run_rx) = watch::channel(None);
        let cancel = CancellationToken::new();
        let reason = Arc::new(Mutex::new(None));
        let finishing = Arc::new(AtomicBool::new(false));
        let session = Arc::new(Mutex::new(None));
        {
            let mut active = lock(&inner.active);
            // Checked under the same lock `shutdown` sets it under: a run either is
            // in shutdown's snapshot or is refused here.
            if inner.closing.load(Ordering::SeqCst) {
                return Err(RuntimeError::ShuttingDown);
            }
            if let Some(run) = active.get(thread_id) {
                return Ok(Begun::Busy(run.run_id.borrow().clone()));
            }
            active.insert(
                thread_id.clone(),
                ActiveRun {
                    run_id: run_rx,
                    cancel: cancel.clone(),
                    reason: reason.clone(),
                    done: done_rx,
                    finishing: finishing.clone(),
                    session: session.clone(),
                },
            );
        }
        // The rest runs in its own task: if the caller goes away (an HTTP client
        // disconnects) after the run's write was queued, the run must still be
        // driven, not committed and left without an owner.
        let this = self.clone();
        let thread_id = thread_id.clone();
        let task = tokio::spawn(async move {
            // Reservation guard: if no run is created, the thread is free again.
            let reservation = Reservation {
                inner: this.inner.clone(),
                thread: thread_id.clone(),
                armed: true,
            };
            let created = crate::execution::runs::create_run(
                &this.inner.store,
                this.inner.clock.as_ref(),
                &thread_id,
                &start,
            )
            .await?;
            let continuation = matches!(start, RunStart::Continuation { .. });
            let (thread, project, run, text, continuation) = match created {
                Created::Started(started) => {
                    let (thread, project, run) = *started;
                    (thread, project, run, start.text().to_owned(), continuation)
                }
                // A stop commanded through another node ended the run (SCALE-06); a
                // superseding message starts instead.
                Created::Next(next) => {
                    let (thread, project, run, text) = *next;
                    (thread, project, run, text, false)
                }
                Created::NotClaimed | Created::Stopped => return Ok(Begun::NotClaimed),
                Created::Exhausted { attempts } => return Ok(Begun::Exhausted { attempts }),
            };
            reservation.disarm();
            run_tx.send_replace(Some(run.id.clone()));
            let started = Begun::Started {
                run: Box::new(run.clone()),
                attempts: thread.resume_attempts,
            };
            let driver = this.clone();
            this.inner.tracker.spawn(async move {
                // Frees the thread and wakes waiters however the drive ends, a panic
                // included (otherwise the thread would answer `run_in_progress` until
                // the next start).
                let _driving = Driving {
                    inner: driver.inner.clone(),
                    thread: thread_id,
                    run: run.id.clone(),
                    done: done_tx,
                };
                let root = worktrees::run_root(&thread, &project);
                let mut ctx = RunContext {
                    thread,
                    root,
                    project_root: PathBuf::from(&project.root),
                    run,
                    text,
                    continuation,
                    end_events: Vec::new(),
                    cancel,
                    reason,
                    finishing,
                    session,
                    budget_hit: Mutex::new(None),
                };
                // A run whose terminal write started the next queued message
                // (TURN-01) hands over to it: same task, same reservation.
                // Every log line of the run carries its thread and run (one span per run,
                // also for each queued run this task hands over to).
                loop {
                    let span = run_span(&ctx);
                    match driver.drive(ctx).instrument(span).await {
                        Some(next) => ctx = driver.rearm(next, &run_tx),
                        None => break,
                    }
                }
            });
            Ok(started)
        });
        task.await
            .map_err(|e| RuntimeError::Internal(format!("starting the run failed: {e}")))?
    }

    /// Asks the active run of `thread` to stop. Returns the run asked, or `None` when
    /// the thread is idle. The run ends `interrupted` once the runtime confirms, or
    /// after the interrupt grace. A run still being created is cancelled before its
    /// turn starts. Errors: `ThreadNotFound`.
    pub async fn interrupt(
        &self,
        thread: &ThreadId,
        why: InterruptReason,
    ) -> Result<Option<RunId>, RuntimeError> {
        if let Some(mut run_id) = self.signal_interrupt(thread, why) {
            // A run being created gets its id within milliseconds; if creating it
            // fails, the sender is dropped and there is no run to report.
            let known = tokio::time::timeout(RUN_ID_WAIT, run_id.wait_for(Option::is_some)).await;
            return Ok(match known {
                Ok(Ok(id)) => id.clone(),
                _ => None,
            });
        }
        let Some(row) = self.inner.store.get_thread(thread).await? else {
            return Err(RuntimeError::ThreadNotFound(thread.clone()));
        };
        // SCALE-06: a run another node drives is stopped by that node. The command is
        // durable: a node that died before applying it leaves it to the takeover, which
        // does not resume a run the user stopped.
        if let Some(run) = row.active_run_id
            && self.remote_holder(thread).await?.is_some()
        {
            let reason = match why {
                InterruptReason::Superseded => CommandInterruptReason::Superseded,
                InterruptReason::User | InterruptReason::Shutdown => CommandInterruptReason::User,
            };
            self.command(thread, &run, CommandAction::Interrupt { reason })
                .await?;
            return Ok(Some(run));
        }
        Ok(None)
    }

    /// Stops driving the active run of `thread` because this node lost its lease
    /// (SCALE-04): cancelled like a shutdown (the claim stays, for the node that took
    /// the thread over); its remaining writes are refused by the fence. Returns whether
    /// a run was active.
    pub fn abandon(&self, thread: &ThreadId) -> bool {
        self.signal_interrupt(thread, InterruptReason::Shutdown)
            .is_some()
    }

    /// Cancels the active run of `thread`, if any; returns its run-id watch.
    ///
    /// The first reason wins: a run the user (or a newer message) already stopped
    /// keeps that reason when a shutdown follows before its terminal is written, so
    /// its claim is still released and the stopped work is never resumed (EXEC-05).
    fn signal_interrupt(
        &self,
        thread: &ThreadId,
        why: InterruptReason,
    ) -> Option<watch::Receiver<Option<RunId>>> {
        let active = lock(&self.inner.active);
        let run = active.get(thread)?;
        lock(&run.reason).get_or_insert(why);
        run.cancel.cancel();
        Some(run.run_id.clone())
    }

    /// Answers runtime request `request` of `thread` (a tool approval) with `answer`,
    /// through the runtime of the thread's active run, and returns the request as
    /// stored once resolved (see [`crate::execution::answers`]).
    ///
    /// Errors: `ThreadNotFound`, `RequestNotFound`, `RequestNotPending` (answered,
    /// expired, cancelled, or no live turn waits for it), `Store`.
    pub async fn respond_to_request(
        &self,
        thread: &ThreadId,
        request: &RuntimeRequestId,
        answer: RequestAnswer,
    ) -> Result<RuntimeRequest, RuntimeError> {
        use crate::execution::answers::{check_pending, no_live_turn, wait_resolved};
        if let Some(m) = answer.message.as_deref().and_then(|m| {
            knife_protocol::limits::over_bytes(
                "message",
                m,
                knife_protocol::limits::ANSWER_MESSAGE_MAX_BYTES,
            )
        }) {
            return Err(RuntimeError::Invalid(m));
        }
        check_pending(&self.inner.store, thread, request).await?;
        if self.session_of(thread).is_none() {
            // SCALE-06: the turn waiting for the answer may run on another node.
            let active = self
                .inner
                .store
                .get_thread(thread)
                .await?
                .and_then(|t| t.active_run_id);
            if let Some(run) = active
                && let Some(node) = self.remote_holder(thread).await?
            {
                let action = CommandAction::AnswerRequest {
                    request_id: request.clone(),
                    answer,
                };
                return match self.command(thread, &run, action).await? {
                    Some(CommandOutcome::Applied) => {
                        wait_resolved(&self.inner.store, request).await
                    }
                    Some(CommandOutcome::Refused { reason }) => {
                        Err(RuntimeError::RequestNotPending {
                            request: request.clone(),
                            reason,
                        })
                    }
                    None => Err(RuntimeError::RequestNotPending {
                        request: request.clone(),
                        reason: format!(
                            "node {node}, which runs {run}, did not take the answer within {} s \
                             (it may have stopped; another node then takes the run over and \
                             the request expires); send a new message instead",
                            remote::COMMAND_WAIT.as_secs()
                        ),
                    }),
                };
            }
            return Err(no_live_turn(request));
        }
        self.answer_here(thread, request, answer).await?;
        wait_resolved(&self.inner.store, request).await
    }

    /// Hands `answer` to the runtime of the run this node drives on `thread`, after
    /// checking `request` is still pending (no wait for its resolution). Errors: those of
    /// [`Self::respond_to_request`].
    async fn answer_here(
        &self,
        thread: &ThreadId,
        request: &RuntimeRequestId,
        answer: RequestAnswer,
    ) -> Result<(), RuntimeError> {
        use crate::execution::answers::{check_pending, no_live_turn, refused};
        check_pending(&self.inner.store, thread, request).await?;
        let Some(handle) = self.session_of(thread) else {
            return Err(no_live_turn(request));
        };
        match handle.respond_to_runtime_request(request, answer).await {
            Ok(()) => Ok(()),
            Err(crate::SessionError::Runtime(e)) => Err(refused(request, e)),
            Err(e) => Err(RuntimeError::RequestNotPending {
                request: request.clone(),
                reason: e.to_string(),
            }),
        }
    }

    /// Waits until `thread` has no active run in this process.
    pub async fn await_idle(&self, thread: &ThreadId) {
        let done = lock(&self.inner.active).get(thread).map(|r| r.done.clone());
        if let Some(mut done) = done {
            let _ = done.wait_for(|d| *d).await;
        }
    }

    /// Threads with an active run in this process, and their runs.
    pub fn active(&self) -> Vec<(ThreadId, RunId)> {
        lock(&self.inner.active)
            .iter()
            .filter_map(|(t, r)| Some((t.clone(), r.run_id.borrow().clone()?)))
            .collect()
    }

    /// Every thread with an execution in this process, including runs still being
    /// created: what the restart sweep must leave untouched (EXEC-10).
    pub fn active_threads(&self) -> std::collections::HashSet<ThreadId> {
        lock(&self.inner.active).keys().cloned().collect()
    }

    /// Whether `thread` has an execution in this process.
    pub fn is_active(&self, thread: &ThreadId) -> bool {
        lock(&self.inner.active).contains_key(thread)
    }

    /// Refuses new runs ([`RuntimeError::ShuttingDown`]), interrupts every active run
    /// with reason `shutdown`, and waits (up to `timeout`) for their tasks to finish.
    /// Idempotent.
    pub async fn shutdown(&self, timeout: Duration) {
        let threads: Vec<ThreadId> = {
            let active = lock(&self.inner.active);
            // From now on `start_run` refuses (checked under this same lock).
            self.inner.closing.store(true, Ordering::SeqCst);
            active.keys().cloned().collect()
        };
        for thread in threads {
            self.signal_interrupt(&thread, InterruptReason::Shutdown);
        }
        self.inner.tracker.close();
        let _ = tokio::time::timeout(timeout, self.inner.tracker.wait()).await;
    }
}

/// The queued run a finished run's terminal write opened (TURN-01).
struct NextRun {
    thread: Thread,
    project: Project,
    run: Run,
    text: String,
}

impl ExecutionService {
    /// The context of `next`, with fresh cancel, reason, finishing and session
    /// slots installed in the thread's active entry, and its run id published.
    fn rearm(&self, next: NextRun, run_tx: &watch::Sender<Option<RunId>>) -> RunContext {
        let cancel = CancellationToken::new();
        let reason = Arc::new(Mutex::new(None));
        let finishing = Arc::new(AtomicBool::new(false));
        let session = Arc::new(Mutex::new(None));
        if let Some(active) = lock(&self.inner.active).get_mut(&next.thread.id) {
            active.cancel = cancel.clone();
            active.reason = reason.clone();
            active.finishing = finishing.clone();
            active.session = session.clone();
        }
        run_tx.send_replace(Some(next.run.id.clone()));
        // A shutdown that began meanwhile stops the new run at once (its claim stays).
        if self.inner.closing.load(Ordering::SeqCst) {
            lock(&reason).get_or_insert(InterruptReason::Shutdown);
            cancel.cancel();
        }
        RunContext {
            root: worktrees::run_root(&next.thread, &next.project),
            project_root: PathBuf::from(&next.project.root),
            thread: next.thread,
            run: next.run,
            text: next.text,
            continuation: false,
            end_events: Vec::new(),
            cancel,
            reason,
            finishing,
            session,
            budget_hit: Mutex::new(None),
        }
    }
}

struct RunContext {
    thread: Thread,
    /// Where the run works: the thread's worktree, else the project root.
    root: PathBuf,
    /// The project's root (its settings apply in a worktree too, CHG-07).
    project_root: PathBuf,
    run: Run,
    text: String,
    /// A resume after a restart (its start checkpoint is the boot checkpoint, CHG-10).
    continuation: bool,
    /// Written with the run's terminal state (the end `checkpoint.recorded`).
    end_events: Vec<DomainEvent>,
    cancel: CancellationToken,
    reason: Arc<Mutex<Option<InterruptReason>>>,
    finishing: Arc<AtomicBool>,
    session: Arc<Mutex<Option<SessionHandle>>>,
    /// The budget a usage report found spent (TURN-07): the run ends `budget_exceeded`.
    budget_hit: Mutex<Option<RunError>>,
}

/// Held by the task driving a run: on drop (the drive ended or panicked) the
/// thread's active entry is removed and `done` signalled. A run whose drive panicked
/// is not written here (no await in `Drop`, and the panic may have come from the
/// store); it stays `running` in the store until the thread's next message settles
/// it (`create_run` ends a stale active run it finds) or the next boot reconciles
/// it (`recovery::reconcile_after_restart`; its claim resumes it).
struct Driving {
    inner: Arc<Inner>,
    thread: ThreadId,
    run: RunId,
    done: watch::Sender<bool>,
}

impl Drop for Driving {
    fn drop(&mut self) {
        if std::thread::panicking() {
            tracing::error!(
                thread = %self.thread, run = %self.run,
                "the task driving the run panicked; the thread is free again and the run \
                 is settled by its next message or the next start"
            );
        }
        lock(&self.inner.active).remove(&self.thread);
        let _ = self.done.send(true);
    }
}

/// The span of one run: `run{thread=… run=… ordinal=…}` on every log line it writes (and
/// the root of its OTLP trace when `[telemetry] otlp_endpoint` is set).
fn run_span(ctx: &RunContext) -> tracing::Span {
    tracing::info_span!(
        "run",
        thread = %ctx.thread.id,
        run = %ctx.run.id,
        ordinal = ctx.run.ordinal,
        provider = %ctx.thread.provider_instance_id,
    )
}

/// Tries of a user start whose compare-and-set lost to a concurrent write of the
/// thread row ([`ExecutionService::start_run_with_model`]).
const START_ATTEMPTS: u32 = 5;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
