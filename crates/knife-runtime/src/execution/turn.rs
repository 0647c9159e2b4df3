//! Driving one run's turn: open the session, start the turn, follow the session's
//! events until the turn's first `TurnTerminal` (honouring interrupts and the grace
//! deadline), then write the run's terminal state and claim (EXEC-01/02/04/05/09).

use std::sync::atomic::Ordering;
use tracing::Instrument;

use futures::StreamExt;
use knife_protocol::*;

use super::*;
use crate::execution::runs::root_node;
use crate::sessions::{OpenRequest, SessionHandle};

impl ExecutionService {
    /// Drives `ctx`'s run to its terminal write; returns the queued run that write
    /// opened, if any (TURN-01).
    pub(super) async fn drive(&self, mut ctx: RunContext) -> Option<NextRun> {
        // Before the turn starts, whatever the driver (CHG-01).
        self.record_start(&mut ctx).await;
        // The model learns which files a revert restored since its last run (CHG-04).
        if !ctx.continuation
            && self.checkpoints().is_some()
            && let Some(note) = self.revert_note(&ctx.thread.id, ctx.run.ordinal).await
        {
            ctx.text = format!("{note}\n\n{}", ctx.text);
        }
        let Ended {
            outcome,
            usage,
            teardown,
        } = self
            .run_turn(&ctx)
            .instrument(tracing::info_span!("turn", continuation = ctx.continuation))
            .await;
        ctx.finishing.store(true, Ordering::SeqCst);
        // After it, however it ended (CHG-02); a failure is recorded, never raised.
        if let Some(event) = self.record_end(&mut ctx).await {
            ctx.end_events.push(event);
        }
        // The terminal write must land, or the thread stays "running" in the store:
        // a full disk or a failing database is retried until it commits (SEC-07);
        // only a shutdown stops that (the claim then survives in the log and the next
        // start recovers the run). Other errors get a few attempts, then `create_run`
        // settles the stale active run it finds.
        let retry = self.inner.terminal_retry;
        let mut wait = Duration::ZERO;
        let mut attempt: u32 = 0;
        loop {
            tokio::time::sleep(wait).await;
            attempt += 1;
            let e = match self
                .finalize(&ctx, outcome.clone(), usage.clone(), teardown)
                .await
            {
                Ok(next) => {
                    if attempt > 1 {
                        tracing::info!(
                            thread = %ctx.thread.id, run = %ctx.run.id, attempts = attempt,
                            "recorded the end of the run after retrying"
                        );
                    }
                    return next;
                }
                Err(e) => e,
            };
            let retryable = matches!(&e, RuntimeError::Store(s) if s.is_retryable());
            let again = if retryable {
                !self.inner.manager.is_shutting_down()
            } else {
                attempt < crate::execution::terminal::TerminalRetry::OTHER_ATTEMPTS
            };
            metrics::counter!("knife_terminal_write_failures_total").increment(1);
            if !again {
                tracing::error!(
                    thread = %ctx.thread.id, run = %ctx.run.id, attempts = attempt, error = %e,
                    "could not record the end of the run; gave up (the next start or message settles it)"
                );
                return None;
            }
            if attempt == 1 || attempt.is_multiple_of(20) {
                tracing::warn!(
                    thread = %ctx.thread.id, run = %ctx.run.id, attempts = attempt, error = %e,
                    "could not record the end of the run; retrying until it commits"
                );
            }
            wait = retry.next(wait);
        }
    }

    /// Waits (up to [`FINISH_WAIT`]) for a run of `thread` whose turn already ended
    /// to write its terminal state, so a message sent right after a run's last
    /// event is accepted rather than refused with `RunInProgress` (the same for a
    /// merge, revert, archive or delete right after a run).
    pub(crate) async fn wait_if_finishing(&self, thread: &ThreadId) {
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
        let instance = &ctx.thread.provider_instance_id;
        let (history, native_thread_id) = match inner.store.thread_projection(&ctx.thread.id).await
        {
            Ok(Some(p)) => {
                let native = native_thread_of(&p.provider_threads, instance);
                let history = p
                    .turn_items
                    .into_iter()
                    .filter(|i| i.run_id.as_ref() != Some(&ctx.run.id))
                    .collect();
                (history, native)
            }
            Ok(None) => (Vec::new(), None),
            Err(e) => return Ended::failed("store", e.to_string(), false),
        };
        // Interrupted while the run was being created: no session, no model call.
        if ctx.cancel.is_cancelled() {
            return Ended::interrupted(ctx);
        }
        // TURN-07: a spent budget stops the run before its first model call.
        if let Some(guard) = &inner.budgets {
            match guard
                .check(&ctx.thread, &ctx.run, None, inner.clock.now())
                .await
            {
                Ok(Some(over)) => return Ended::budget(over.run_error()),
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(thread = %ctx.thread.id, error = %e, "could not check the budgets")
                }
            }
        }
        // One session per thread unless the adapter declares shared sessions.
        let shared = inner
            .manager
            .capabilities(instance)
            .is_some_and(|caps| caps.shared_sessions);
        let session_id = if shared {
            ProviderSessionId::shared_on(instance, inner.store.node().node())
        } else {
            ProviderSessionId::exclusive_on(instance, &ctx.thread.id, inner.store.node().node())
        };
        let mut request = OpenRequest::new(
            session_id,
            ctx.thread.id.clone(),
            instance.clone(),
            &ctx.root,
        );
        request.model = ctx.thread.model.clone();
        // A worktree thread works under its project's settings (CHG-07).
        request.project_root = Some(ctx.project_root.clone());
        // A runtime with its own history (codex, ACP) continues the native thread it
        // reported for this thread, also after a restart (resume of external runtimes, MGR-09).
        request.native_thread_id = native_thread_id.clone();
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
        // A live shared session this thread joins loads the native thread too (a no-op
        // when it is loaded already, MGR-10). An exclusive session was opened with it.
        if let Some(native) = native_thread_id.filter(|_| shared) {
            let resumed = tokio::select! {
                resumed = handle.resume_thread(&ctx.thread.id, Some(native), ctx.thread.model.clone()) => resumed,
                _ = ctx.cancel.cancelled() => {
                    lock(&ctx.session).take();
                    return Ended::interrupted(ctx);
                }
            };
            if let Err(e) = resumed {
                lock(&ctx.session).take();
                let teardown = self.is_teardown(&e);
                return Ended::failed("provider.resume", e.to_string(), teardown);
            }
        }
        let provider_turn_id = ProviderTurnId::for_run(&ctx.run.id, 1);
        let input = StartTurnInput {
            thread_id: ctx.thread.id.clone(),
            run_id: ctx.run.id.clone(),
            run_ordinal: ctx.run.ordinal,
            provider_turn_id: provider_turn_id.clone(),
            attempt: 1,
            text: ctx.text.clone(),
            history,
            // The run's model: the message's (TURN-10), else the thread's.
            model: ctx.run.model.clone(),
            cwd: Some(ctx.root.clone()),
            budget: inner.budgets.clone().map(|guard| {
                crate::budget::BudgetGate(Arc::new(crate::budget::RunGate {
                    guard,
                    thread: ctx.thread.clone(),
                    run: ctx.run.clone(),
                    clock: inner.clock.clone(),
                }))
            }),
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
        // A turn that ends without a usage total (interrupted, broken) keeps the
        // last one it reported, so its tokens count (TURN-06/07).
        let mut last_usage = None;
        let mut ended = self
            .follow_turn(ctx, handle, events, turn, &mut last_usage)
            .await;
        if ended.usage.is_none() {
            ended.usage = last_usage;
        }
        ended
    }

    async fn follow_turn(
        &self,
        ctx: &RunContext,
        handle: &SessionHandle,
        events: &mut EventStream,
        turn: &ProviderTurnId,
        last_usage: &mut Option<TokenUsage>,
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
                // TURN-07: each usage report of the turn is checked against the
                // budgets; a spent one stops the turn (interrupted, then recorded
                // as `budget_exceeded`).
                Some(Ok(AdapterEvent::ProviderTurnUpdated(t)))
                    if t.run_id == ctx.run.id && t.usage.is_some() =>
                {
                    last_usage.clone_from(&t.usage);
                    if grace_deadline.is_none()
                        && let Some(error) = self.budget_spent(ctx, t.usage.as_ref()).await
                    {
                        *lock(&ctx.budget_hit) = Some(error);
                        ctx.cancel.cancel();
                    }
                }
                // A steer the turn took (TURN-01): it leaves the queue now.
                Some(Ok(AdapterEvent::TurnItemUpdated(item))) => {
                    if let Some(entry) =
                        crate::execution::queue::steer_entry_of(&item.id, &ctx.run.id)
                    {
                        self.drop_delivered_steer(&ctx.thread.id, &entry).await;
                    }
                }
                Some(Ok(_)) => {}
            }
        }
    }

    /// The run error of the first budget spent with `usage` as the run's use so far.
    async fn budget_spent(&self, ctx: &RunContext, usage: Option<&TokenUsage>) -> Option<RunError> {
        let guard = self.inner.budgets.as_ref()?;
        let thread = match self.inner.store.get_thread(&ctx.thread.id).await {
            Ok(Some(t)) => t,
            _ => ctx.thread.clone(),
        };
        match guard
            .check(&thread, &ctx.run, usage, self.inner.clock.now())
            .await
        {
            Ok(over) => over.map(|o| o.run_error()),
            Err(e) => {
                tracing::warn!(thread = %ctx.thread.id, error = %e, "could not check the budgets");
                None
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
    /// [`crate::execution::terminal::terminal_of_outcome`] (EXEC-01/02); the claim is released in
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
    ) -> Result<Option<NextRun>, RuntimeError> {
        // Compare-and-set on the thread row: a message queued meanwhile (TURN-01)
        // makes the write miss and go again with it, so no queued message is lost.
        for _ in 0..FINALIZE_ATTEMPTS {
            if let Some(done) = self
                .finalize_once(ctx, outcome.clone(), usage.clone(), teardown)
                .await?
            {
                return Ok(done);
            }
        }
        Err(RuntimeError::Conflict)
    }

    /// One attempt of [`Self::finalize`]: `None` when the thread row moved.
    async fn finalize_once(
        &self,
        ctx: &RunContext,
        outcome: TurnOutcome,
        usage: Option<TokenUsage>,
        teardown: bool,
    ) -> Result<Option<Option<NextRun>>, RuntimeError> {
        let store = &self.inner.store;
        let now = self.inner.clock.now();
        let mut run = ctx.run.clone();
        run.completed_at = Some(now);
        run.usage = usage;
        let (mut thread, version) = match store.thread_with_version(&ctx.thread.id).await? {
            Some((thread, version)) => (thread, Some(version)),
            None => (ctx.thread.clone(), None),
        };
        thread.active_run_id = None;
        thread.updated_at = now;
        // A runtime that stopped without publishing `idle` (grace expiry, broken
        // stream) must not leave the thread looking busy (PROC-09).
        if thread.agent_status.is_some() {
            thread.agent_status = Some(AgentStatus::Idle);
        }
        // Whatever the runtime left unfinished ends with the run (a grace expiry, a
        // broken event stream or a failed write means its own settlement never came).
        let projection = store.thread_projection(&ctx.thread.id).await?;
        let mut events = match &projection {
            Some(p) => crate::execution::terminal::settle_unfinished(
                p,
                &run.id,
                now,
                crate::execution::terminal::REQUEST_RUN_ENDED,
            ),
            None => Vec::new(),
        };
        // The run's steers: delivered ones leave the queue, the others wait in it.
        let delivered: Vec<TurnItemId> = projection
            .iter()
            .flat_map(|p| p.turn_items.iter())
            .filter(|i| i.run_id.as_ref() == Some(&run.id))
            .map(|i| i.id.clone())
            .collect();
        crate::execution::queue::settle_steers(&mut thread, &run.id, &delivered);
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
        // A turn execution stopped for a spent budget ends with that budget (TURN-07).
        let budget_hit = lock(&ctx.budget_hit).clone();
        let (outcome, reason) = match budget_hit {
            Some(error) if !shutdown => (TurnOutcome::Failed { error }, None),
            _ => (outcome, reason),
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
            Terminal::Failed { error } if error.error_type == crate::budget::BUDGET_EXCEEDED => {
                run.status = RunStatus::BudgetExceeded;
                run.error = Some(error.clone());
                thread.status = ThreadStatus::Failed;
                thread.last_error = Some(error.clone());
                events.push(DomainEvent::new(
                    now,
                    EventBody::TurnItemUpdated(crate::execution::runs::error_item(
                        &run, error, now,
                    )),
                ));
                // What waits in the queue would only hit the same budget.
                crate::execution::queue::pause_if_waiting(
                    &mut thread,
                    QueuePauseReason::BudgetExceeded,
                    now,
                );
                "budget_exceeded"
            }
            Terminal::Failed { error } => {
                run.status = RunStatus::Failed;
                run.error = Some(error.clone());
                thread.status = ThreadStatus::Failed;
                thread.last_error = Some(error.clone());
                events.push(DomainEvent::new(
                    now,
                    EventBody::TurnItemUpdated(crate::execution::runs::error_item(
                        &run, error, now,
                    )),
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
        // The end checkpoint is logged just before the run's terminal state.
        for (i, event) in ctx.end_events.iter().enumerate() {
            events.insert(i, event.clone());
        }
        // TURN-02: a user interrupt pauses what waits in the queue.
        if terminal
            == (Terminal::Interrupted {
                reason: InterruptReason::User,
            })
        {
            crate::execution::queue::pause_if_waiting(
                &mut thread,
                QueuePauseReason::UserInterrupt,
                now,
            );
        }
        // TURN-01: the next queued message starts in this same transaction (run and
        // claim), unless the run keeps its claim for a restart (shutdown).
        let next = match thread.queue.next_to_start().cloned() {
            Some(entry)
                if terminal.releases_claim() && !self.inner.closing.load(Ordering::SeqCst) =>
            {
                store
                    .get_project(&thread.project_id)
                    .await?
                    .map(|project| (entry, project))
            }
            _ => None,
        };
        let claimed;
        let next = match next {
            Some((entry, project)) => {
                thread.queue.entries.retain(|e| e.id != entry.id);
                let model = entry.model.clone().or_else(|| thread.model.clone());
                let (next_run, opened) = crate::execution::runs::open_run(
                    &mut thread,
                    crate::execution::runs::OpenRun {
                        text: &entry.text,
                        model,
                        origin: MessageOrigin::User,
                        description: None,
                        user_text: Some(&entry.text),
                    },
                    now,
                );
                claimed = true;
                events.extend(opened);
                Some(NextRun {
                    thread: thread.clone(),
                    project,
                    run: next_run,
                    text: entry.text,
                })
            }
            None => {
                claimed = thread.is_claimed();
                events.push(DomainEvent::new(now, EventBody::ThreadUpdated(thread)));
                None
            }
        };
        let guard = knife_store::RowGuard::new(
            knife_store::EntityKind::Thread,
            ctx.thread.id.as_str(),
            version,
        );
        if store.write_if(guard, events).await?.is_none() {
            return Ok(None);
        }
        if !claimed && let Err(e) = store.let_go(&ctx.thread.id).await {
            // The claim is released; an unreleased lease only runs out (SCALE-04).
            tracing::warn!(thread = %ctx.thread.id, error = %e, "could not release the thread's lease; it runs out");
        }
        metrics::counter!("knife_runs_total", "outcome" => label).increment(1);
        let seconds = (now - run.requested_at).num_milliseconds().max(0) as f64 / 1000.0;
        metrics::histogram!("knife_run_duration_seconds", "outcome" => label).record(seconds);
        tracing::info!(
            thread = %ctx.thread.id, run = %run.id, outcome = label, claim_kept = claimed,
            "run finished"
        );
        if let Some(next) = &next {
            tracing::info!(thread = %ctx.thread.id, run = %next.run.id, "a queued message started");
        }
        Ok(Some(next))
    }
}

/// Most compare-and-set attempts of one terminal write (the thread row moves when a
/// message is queued or the agent status changes meanwhile).
const FINALIZE_ATTEMPTS: usize = 20;

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

    fn budget(error: RunError) -> Self {
        Self {
            outcome: TurnOutcome::Failed { error },
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

/// The native thread id of the latest provider thread of `instance` that names one
/// (runtimes with their own history report it in `provider-thread.updated`).
fn native_thread_of(threads: &[ProviderThread], instance: &ProviderInstanceId) -> Option<String> {
    threads
        .iter()
        .filter(|t| &t.provider_instance_id == instance && t.native_id.is_some())
        .max_by_key(|t| t.updated_at)
        .and_then(|t| t.native_id.clone())
}
