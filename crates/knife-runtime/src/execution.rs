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

use futures::StreamExt;
use knife_protocol::*;
use knife_store::Store;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::adapter::*;
use crate::clock::SharedClock;
use crate::error::RuntimeError;
use crate::runs::{Created, RunStart};
use crate::sessions::{OpenRequest, SessionHandle, SessionManager};
use crate::terminal::{Terminal, terminal_of_outcome};

/// Default budget of resumes per claimed piece of work (EXEC-08).
pub const DEFAULT_MAX_RESUME_ATTEMPTS: u32 = 10;

/// What [`ExecutionService::resume_within`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ResumeOutcome {
    /// A continuation run started; `attempt` is the thread's `resume_attempts` now.
    Resumed { run: RunId, attempt: u32 },
    /// The thread already drains in this process: left untouched (EXEC-10).
    AlreadyActive,
    /// The thread holds no claim: nothing to resume.
    NotClaimed,
    /// The budget was spent after `attempts` resumes: terminalised with `aborted` (EXEC-08).
    Exhausted { attempts: u32 },
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
    // std Mutex: only held for map lookups, never across an `.await`.
    active: Mutex<HashMap<ThreadId, ActiveRun>>,
    tracker: TaskTracker,
    interrupt_grace: Duration,
    /// Set by `shutdown`: no new runs.
    closing: AtomicBool,
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
                active: Mutex::new(HashMap::new()),
                tracker: TaskTracker::new(),
                interrupt_grace: INTERRUPT_GRACE,
                closing: AtomicBool::new(false),
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
    /// version (a concurrent change → `Conflict`). Errors: `ThreadNotFound`,
    /// `RunInProgress` (one run per thread at a time), `Invalid` (empty text),
    /// `ProjectNotFound`, `ShuttingDown`.
    pub async fn start_run(&self, thread_id: &ThreadId, text: String) -> Result<Run, RuntimeError> {
        if text.trim().is_empty() {
            return Err(RuntimeError::Invalid(
                "the message text is empty; write what the agent should do".into(),
            ));
        }
        self.wait_if_finishing(thread_id).await;
        match self.begin(thread_id, RunStart::User(text)).await? {
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
            let created = crate::runs::create_run(
                &this.inner.store,
                this.inner.clock.as_ref(),
                &thread_id,
                &start,
            )
            .await?;
            let (thread, project, run) = match created {
                Created::Started(started) => *started,
                Created::NotClaimed => return Ok(Begun::NotClaimed),
                Created::Exhausted { attempts } => return Ok(Begun::Exhausted { attempts }),
            };
            reservation.disarm();
            let _ = run_tx.send(Some(run.id.clone()));
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
                let ctx = RunContext {
                    thread,
                    root: PathBuf::from(&project.root),
                    run,
                    text: start.text().to_owned(),
                    cancel,
                    reason,
                    finishing,
                    session,
                };
                driver.drive(ctx).await;
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
        match self.inner.store.get_thread(thread).await? {
            Some(_) => Ok(None),
            None => Err(RuntimeError::ThreadNotFound(thread.clone())),
        }
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
    /// stored once resolved (see [`crate::answers`]).
    ///
    /// Errors: `ThreadNotFound`, `RequestNotFound`, `RequestNotPending` (answered,
    /// expired, cancelled, or no live turn waits for it), `Store`.
    pub async fn respond_to_request(
        &self,
        thread: &ThreadId,
        request: &RuntimeRequestId,
        answer: RequestAnswer,
    ) -> Result<RuntimeRequest, RuntimeError> {
        use crate::answers::{check_pending, no_live_turn, refused, wait_resolved};
        check_pending(&self.inner.store, thread, request).await?;
        let Some(handle) = self.session_of(thread) else {
            return Err(no_live_turn(request));
        };
        match handle.respond_to_runtime_request(request, answer).await {
            Ok(()) => {}
            Err(crate::SessionError::Runtime(e)) => return Err(refused(request, e)),
            Err(e) => {
                return Err(RuntimeError::RequestNotPending {
                    request: request.clone(),
                    reason: e.to_string(),
                });
            }
        }
        wait_resolved(&self.inner.store, request).await
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

    async fn drive(&self, ctx: RunContext) {
        let Ended {
            outcome,
            usage,
            teardown,
        } = self.run_turn(&ctx).await;
        ctx.finishing.store(true, Ordering::SeqCst);
        // The terminal write must land, or the thread stays "running" in the store
        // until the next boot: retry a few times (a full disk may free up), then
        // leave it to `create_run`, which settles a stale active run it finds.
        for (attempt, backoff_ms) in [0u64, 200, 1000, 5000].into_iter().enumerate() {
            tokio::time::sleep(Duration::from_millis(backoff_ms)).await;
            match self
                .finalize(&ctx, outcome.clone(), usage.clone(), teardown)
                .await
            {
                Ok(()) => return,
                Err(e) => tracing::error!(
                    thread = %ctx.thread.id, run = %ctx.run.id, attempt = attempt + 1, error = %e,
                    "could not record the end of the run"
                ),
            }
        }
    }

    /// Waits (up to [`FINISH_WAIT`]) for a run of `thread` whose turn already ended
    /// to write its terminal state, so a message sent right after a run's last
    /// event is accepted rather than refused with `RunInProgress`.
    async fn wait_if_finishing(&self, thread: &ThreadId) {
        let done = lock(&self.inner.active)
            .get(thread)
            .filter(|r| r.finishing.load(Ordering::SeqCst))
            .map(|r| r.done.clone());
        if let Some(mut done) = done {
            let _ = tokio::time::timeout(FINISH_WAIT, done.wait_for(|d| *d)).await;
        }
    }

    async fn run_turn(&self, ctx: &RunContext) -> Ended {
        let inner = &self.inner;
        let history = match inner.store.thread_projection(&ctx.thread.id).await {
            Ok(Some(p)) => p
                .turn_items
                .into_iter()
                .filter(|i| i.run_id.as_ref() != Some(&ctx.run.id))
                .collect(),
            Ok(None) => Vec::new(),
            Err(e) => return Ended::failed("store", e.to_string(), false),
        };
        // Interrupted while the run was being created: no session, no model call.
        if ctx.cancel.is_cancelled() {
            return Ended::interrupted(ctx);
        }
        let instance = &ctx.thread.provider_instance_id;
        // One session per thread unless the adapter declares shared sessions.
        let session_id = match inner.manager.capabilities(instance) {
            Some(caps) if caps.shared_sessions => ProviderSessionId::shared(instance),
            _ => ProviderSessionId::exclusive(instance, &ctx.thread.id),
        };
        let mut request = OpenRequest::new(
            session_id,
            ctx.thread.id.clone(),
            instance.clone(),
            &ctx.root,
        );
        request.model = ctx.thread.model.clone();
        // An interrupt (or shutdown) during the open ends the run at once; the
        // dropped open cleans up after itself (MGR-04).
        let opened = tokio::select! {
            opened = inner.manager.open(request) => opened,
            _ = ctx.cancel.cancelled() => return Ended::interrupted(ctx),
        };
        let handle = match opened {
            Ok(h) => h,
            Err(e) => {
                let teardown = self.is_teardown(&e);
                return Ended::failed("provider.open", e.to_string(), teardown);
            }
        };
        *lock(&ctx.session) = Some(handle.clone());
        let provider_turn_id = ProviderTurnId::for_run(&ctx.run.id, 1);
        let input = StartTurnInput {
            thread_id: ctx.thread.id.clone(),
            run_id: ctx.run.id.clone(),
            run_ordinal: ctx.run.ordinal,
            provider_turn_id: provider_turn_id.clone(),
            attempt: 1,
            text: ctx.text.clone(),
            history,
            model: ctx.thread.model.clone(),
        };
        // Subscribed before the turn starts, so no event of the turn is missed.
        let mut events = handle.subscribe_events();
        let result = if ctx.cancel.is_cancelled() {
            Ended::interrupted(ctx)
        } else {
            let started = tokio::select! {
                started = handle.start_turn(input) => Some(started),
                _ = ctx.cancel.cancelled() => None,
            };
            match started {
                Some(Ok(())) => {
                    self.follow(ctx, &handle, &mut events, &provider_turn_id)
                        .await
                }
                Some(Err(e)) => {
                    let teardown = self.is_teardown(&e);
                    Ended::failed("provider.runtime", e.to_string(), teardown)
                }
                // Cancelled while the runtime was accepting the turn: it may have
                // begun it, so it is asked to stop (time-boxed) before the run ends.
                None => {
                    self.interrupt_runtime(ctx, &handle).await;
                    Ended::interrupted(ctx)
                }
            }
        };
        lock(&ctx.session).take();
        result
    }

    /// Follows the session's events until the first `TurnTerminal` of `turn` (the
    /// stuck-turn watchdog's synthetic terminal or the runtime's; a later duplicate is
    /// ignored). The manager's pump has persisted every event before it arrives here.
    /// An interrupt is passed to the runtime through the handle; if no terminal comes
    /// within the interrupt grace, the run ends interrupted anyway.
    async fn follow(
        &self,
        ctx: &RunContext,
        handle: &SessionHandle,
        events: &mut EventStream,
        turn: &ProviderTurnId,
    ) -> Ended {
        let inner = &self.inner;
        let mut grace_deadline: Option<tokio::time::Instant> = None;
        loop {
            let next = tokio::select! {
                next = events.next() => next,
                _ = ctx.cancel.cancelled(), if grace_deadline.is_none() => {
                    let deadline = tokio::time::Instant::now() + inner.interrupt_grace;
                    grace_deadline = Some(deadline);
                    // Time-boxed by the same grace: a runtime that hangs on the
                    // interrupt must not keep the run from ending.
                    if tokio::time::timeout_at(deadline, self.interrupt_runtime(ctx, handle))
                        .await
                        .is_err()
                    {
                        self.release_unresponsive(ctx, handle);
                        return Ended::interrupted(ctx);
                    }
                    continue;
                }
                _ = sleep_until_opt(grace_deadline) => {
                    self.release_unresponsive(ctx, handle);
                    return Ended::interrupted(ctx);
                }
            };
            match next {
                // The session ended without error: released by a shutdown or stopped
                // by the provider before this turn's terminal.
                None if ctx.cancel.is_cancelled() => return Ended::interrupted(ctx),
                // A session torn down under the turn (a shutdown's release, a broken
                // stream): a teardown failure, interrupted(shutdown) if that is why.
                None => {
                    return Ended::failed(
                        "provider.runtime",
                        "the agent runtime stopped before finishing the turn".into(),
                        true,
                    );
                }
                Some(Err(e)) => return Ended::failed("provider.runtime", e.to_string(), true),
                Some(Ok(AdapterEvent::TurnTerminal {
                    provider_turn_id,
                    outcome,
                    usage,
                    ..
                })) if &provider_turn_id == turn => {
                    return Ended {
                        outcome,
                        usage,
                        teardown: false,
                    };
                }
                Some(Ok(_)) => {}
            }
        }
    }

    /// Whether `e` is what a session torn down by a shutdown looks like to a run:
    /// the manager refusing or stopping the open, or the session gone under it.
    fn is_teardown(&self, e: &crate::sessions::SessionError) -> bool {
        use crate::sessions::SessionError as E;
        match e {
            E::ShuttingDown | E::SessionGone(_) | E::Runtime(AdapterError::Closed) => true,
            E::Open(_) => self.inner.manager.is_shutting_down(),
            _ => false,
        }
    }

    /// Asks the runtime to stop the thread's turn, time-boxed by the interrupt grace:
    /// a runtime that does not answer must not keep the run from ending.
    async fn interrupt_runtime(&self, ctx: &RunContext, handle: &SessionHandle) {
        let why = lock(&ctx.reason).unwrap_or(InterruptReason::User);
        match tokio::time::timeout(
            self.inner.interrupt_grace,
            handle.interrupt_turn(&ctx.thread.id, why),
        )
        .await
        {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                tracing::warn!(thread = %ctx.thread.id, error = %e, "the runtime refused the interrupt")
            }
            Err(_) => {
                tracing::warn!(thread = %ctx.thread.id, "the runtime did not answer the interrupt within the grace")
            }
        }
    }

    /// The runtime did not end its turn within the interrupt grace: an exclusive
    /// session is released in the background (reason `runtime_error`), so the thread's
    /// next message gets a fresh runtime instead of one still busy with the old turn.
    /// A shared session is left alone (other threads' turns run on it); the stuck-turn
    /// watchdog ends the turn there.
    fn release_unresponsive(&self, ctx: &RunContext, handle: &SessionHandle) {
        if handle.session().capabilities.shared_sessions {
            return;
        }
        let manager = self.inner.manager.clone();
        let id = handle.id().clone();
        let thread = ctx.thread.id.clone();
        let detail = format!(
            "The provider runtime did not stop its turn within the interrupt grace of {:.1} s; \
             knife closed it. The next message starts a new one.",
            self.inner.interrupt_grace.as_secs_f64()
        );
        tokio::spawn(async move {
            if let Err(e) = manager
                .release(
                    &id,
                    crate::sessions::ReleaseReason::RuntimeError,
                    Some(detail),
                )
                .await
            {
                tracing::warn!(%thread, session = %id, error = %e, "could not release an unresponsive provider session");
            }
        });
    }

    /// Writes the run's terminal state, an error item when it failed, and the idle
    /// thread, in one transaction. The terminal is classified by
    /// [`crate::terminal::terminal_of_outcome`] (EXEC-01/02); the claim is released in
    /// that same transaction unless the run was interrupted by a shutdown (EXEC-04/05).
    /// A failure caused by a teardown (`teardown`: the open refused or stopped, the
    /// session gone, its stream ended or broken) of a run the shutdown interrupted, or
    /// of any run while the manager shuts down, is that interruption,
    /// `interrupted{shutdown}`, so its claim survives (EXEC-04/09).
    async fn finalize(
        &self,
        ctx: &RunContext,
        outcome: TurnOutcome,
        usage: Option<TokenUsage>,
        teardown: bool,
    ) -> Result<(), RuntimeError> {
        let store = &self.inner.store;
        let now = self.inner.clock.now();
        let mut run = ctx.run.clone();
        run.completed_at = Some(now);
        run.usage = usage;
        let mut thread = store
            .get_thread(&ctx.thread.id)
            .await?
            .unwrap_or_else(|| ctx.thread.clone());
        thread.active_run_id = None;
        thread.updated_at = now;
        // A runtime that stopped without publishing `idle` (grace expiry, broken
        // stream) must not leave the thread looking busy (PROC-09).
        if thread.agent_status.is_some() {
            thread.agent_status = Some(AgentStatus::Idle);
        }
        // Whatever the runtime left unfinished ends with the run (a grace expiry, a
        // broken event stream or a failed write means its own settlement never came).
        let mut events = match store.thread_projection(&ctx.thread.id).await? {
            Some(p) => crate::recovery::settle_unfinished(&p, &run.id, now),
            None => Vec::new(),
        };
        let reason = *lock(&ctx.reason);
        // Nobody interrupted it but the manager is shutting down: the process is
        // going away, which is a shutdown too (EXEC-02: no reason given = shutdown).
        let shutdown = match reason {
            Some(why) => why == InterruptReason::Shutdown,
            None => self.inner.manager.is_shutting_down(),
        };
        let outcome = match outcome {
            TurnOutcome::Failed { .. } if teardown && shutdown => TurnOutcome::Interrupted {
                reason: InterruptReason::Shutdown.as_str().to_owned(),
            },
            outcome => outcome,
        };
        let terminal = terminal_of_outcome(outcome, reason);
        if terminal.releases_claim() {
            thread.release_claim();
        }
        let label = match &terminal {
            Terminal::Succeeded => {
                run.status = RunStatus::Completed;
                thread.status = ThreadStatus::Idle;
                "completed"
            }
            Terminal::Interrupted { reason } => {
                run.status = RunStatus::Interrupted;
                run.error = Some(RunError {
                    code: Some(reason.as_str().to_owned()),
                    ..RunError::new(
                        "interrupted",
                        format!("the run was interrupted ({})", reason.as_str()),
                    )
                });
                thread.status = ThreadStatus::Idle;
                "interrupted"
            }
            Terminal::Failed { error } => {
                run.status = RunStatus::Failed;
                run.error = Some(error.clone());
                thread.status = ThreadStatus::Failed;
                thread.last_error = Some(error.clone());
                events.push(DomainEvent::new(
                    now,
                    EventBody::TurnItemUpdated(crate::runs::error_item(&run, error, now)),
                ));
                "failed"
            }
        };
        let node_status = match run.status {
            RunStatus::Completed => NodeStatus::Completed,
            RunStatus::Interrupted => NodeStatus::Interrupted,
            _ => NodeStatus::Failed,
        };
        events.insert(
            0,
            DomainEvent::new(
                now,
                EventBody::NodeUpdated(root_node(&run, node_status, now)),
            ),
        );
        events.insert(0, DomainEvent::new(now, EventBody::RunUpdated(run.clone())));
        let claimed = thread.is_claimed();
        events.push(DomainEvent::new(now, EventBody::ThreadUpdated(thread)));
        store.write(events).await?;
        metrics::counter!("knife_runs_total", "outcome" => label).increment(1);
        let seconds = (now - run.requested_at).num_milliseconds().max(0) as f64 / 1000.0;
        metrics::histogram!("knife_run_duration_seconds", "outcome" => label).record(seconds);
        tracing::info!(
            thread = %ctx.thread.id, run = %run.id, outcome = label, claim_kept = claimed,
            "run finished"
        );
        Ok(())
    }
}

type EventStream =
    futures::stream::BoxStream<'static, Result<AdapterEvent, crate::sessions::SessionEventError>>;

async fn sleep_until_opt(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

/// How a run's turn ended, before classification.
struct Ended {
    outcome: TurnOutcome,
    usage: Option<TokenUsage>,
    /// The failure (if any) came from the session being torn down under the run.
    teardown: bool,
}

impl Ended {
    fn interrupted(ctx: &RunContext) -> Self {
        Self {
            outcome: interrupted(ctx),
            usage: None,
            teardown: false,
        }
    }

    fn failed(error_type: &str, message: String, teardown: bool) -> Self {
        Self {
            outcome: failed(error_type, message),
            usage: None,
            teardown,
        }
    }
}

struct RunContext {
    thread: Thread,
    root: PathBuf,
    run: Run,
    text: String,
    cancel: CancellationToken,
    reason: Arc<Mutex<Option<InterruptReason>>>,
    finishing: Arc<AtomicBool>,
    session: Arc<Mutex<Option<SessionHandle>>>,
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

struct Reservation {
    inner: Arc<Inner>,
    thread: ThreadId,
    armed: bool,
}

impl Reservation {
    fn disarm(mut self) {
        self.armed = false;
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if self.armed {
            lock(&self.inner.active).remove(&self.thread);
        }
    }
}

/// The root node of `run` (the tree of work the run produces; provider turns hang off it).
pub(crate) fn root_node(run: &Run, status: NodeStatus, now: Timestamp) -> Node {
    let id = NodeId::root_of(&run.id);
    let finished = !matches!(
        status,
        NodeStatus::Pending | NodeStatus::Running | NodeStatus::Waiting
    );
    Node {
        id: id.clone(),
        thread_id: run.thread_id.clone(),
        run_id: Some(run.id.clone()),
        parent_node_id: None,
        root_node_id: id,
        kind: NodeKind::RootTurn,
        status,
        provider_turn_id: None,
        runtime_request_id: None,
        started_at: run.started_at,
        completed_at: finished.then_some(now),
    }
}

/// The outcome of a run stopped by `interrupt` (reason from the request, default `user`).
fn interrupted(ctx: &RunContext) -> TurnOutcome {
    let why = lock(&ctx.reason).unwrap_or(InterruptReason::User);
    TurnOutcome::Interrupted {
        reason: why.as_str().to_owned(),
    }
}

fn failed(error_type: &str, message: String) -> TurnOutcome {
    TurnOutcome::Failed {
        error: RunError::new(error_type, message),
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}
