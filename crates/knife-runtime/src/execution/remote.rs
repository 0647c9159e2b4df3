//! Any node serves the API for any thread (SPEC.md SCALE-06): a request for a run another
//! node drives becomes a `thread.command` event; that node's command listener applies it.
//!
//! The event log is the channel: on PostgreSQL an append is a durable row plus NOTIFY,
//! and every node's live feed carries it (docs/2026-12-01-any-node.md). The node that
//! took the request waits (bounded, [`COMMAND_WAIT`]) for the `thread.command_applied`
//! answer of the node driving the run, and builds the same HTTP answer one node gives.
//! A command names its run: only the node driving exactly that run applies it, so a
//! stale command never acts on a later run.

use futures::StreamExt;
use knife_store::StreamFilter;

use super::*;

/// Longest the node that took a request waits for the answer of the node driving the run.
pub const COMMAND_WAIT: Duration = Duration::from_secs(3);

/// Pause before the command listener follows the log again after a failed read.
const LISTEN_RETRY: Duration = Duration::from_millis(500);

impl ExecutionService {
    /// The node holding the lease of `thread`, when that is another node than this one
    /// (whether its lease is live or ran out: a dead node's claim is taken over, and its
    /// commands are then answered by nobody, see [`Self::command`]). `None` on one node.
    /// Errors: `Store`.
    pub(super) async fn remote_holder(
        &self,
        thread: &ThreadId,
    ) -> Result<Option<String>, RuntimeError> {
        let store = &self.inner.store;
        let Some(lease) = store.get_lease(thread).await? else {
            return Ok(None);
        };
        Ok((lease.node != store.node().node()).then_some(lease.node))
    }

    /// Appends a command for the node driving `run` of `thread` and waits up to
    /// [`COMMAND_WAIT`] for its answer; `None` when no node answered in time (the node
    /// died, or the run ended first). Errors: `Store` (writing the command).
    pub(super) async fn command(
        &self,
        thread: &ThreadId,
        run: &RunId,
        action: CommandAction,
    ) -> Result<Option<CommandOutcome>, RuntimeError> {
        let store = &self.inner.store;
        let now = self.inner.clock.now();
        let command = ThreadCommand {
            id: ThreadCommandId::new(),
            thread_id: thread.clone(),
            run_id: run.clone(),
            from_node: store.node().node().to_owned(),
            issued_at: now,
            action,
        };
        let id = command.id.clone();
        // Written past this node's fence: a request taken here is not work of a thread
        // this node may have lost (a lost lease refuses this node's own writes for the
        // thread for a while, SCALE-04); the answer of the node driving the run is fenced.
        let stored = store
            .backend()
            .write(vec![DomainEvent::new(
                now,
                EventBody::ThreadCommanded(command),
            )])
            .await?;
        let after = stored.last().map_or(0, |e| e.sequence);
        let mut answers = store.stream(StreamFilter {
            thread_id: Some(thread.clone()),
            after,
            event_type: Some(THREAD_COMMAND_APPLIED.to_owned()),
        });
        let answer = async {
            while let Some(event) = answers.next().await {
                if let EventBody::ThreadCommandApplied(applied) = event?.event.body
                    && applied.command_id == id
                {
                    return Ok(Some(applied.outcome));
                }
            }
            Ok(None)
        };
        match tokio::time::timeout(COMMAND_WAIT, answer).await {
            Ok(result) => result.map_err(|e: knife_store::StoreError| e.into()),
            Err(_) => {
                tracing::warn!(%thread, %run, command = %id,
                    "no node answered the command in time");
                Ok(None)
            }
        }
    }

    /// Follows the log's `thread.command` and `session.command` events from now on and
    /// applies those for runs and sessions of this node, each in its own task, until
    /// `stop` is cancelled. Start it once per node on a store several nodes share
    /// (SCALE-06); on one node no command is ever written.
    pub fn start_command_listener(&self, stop: CancellationToken) -> tokio::task::JoinHandle<()> {
        let this = self.clone();
        tokio::spawn(async move {
            let threads = this.follow_commands(THREAD_COMMAND, stop.clone(), |this, body| {
                if let EventBody::ThreadCommanded(command) = body {
                    this.on_command(command);
                }
            });
            let sessions = this.follow_commands(SESSION_COMMAND, stop.clone(), |this, body| {
                if let EventBody::SessionCommanded(command) = body {
                    this.on_session_command(command);
                }
            });
            futures::join!(threads, sessions);
        })
    }

    /// Follows the log's events of type `event_type` from its end, handing each body to
    /// `handle` (which must not block), until `stop` is cancelled; a lost stream is
    /// followed again from the last event seen.
    async fn follow_commands(
        &self,
        event_type: &str,
        stop: CancellationToken,
        handle: impl Fn(&ExecutionService, EventBody),
    ) {
        let store = self.inner.store.clone();
        let mut after = loop {
            match store.latest_sequence(None).await {
                Ok(at) => break at,
                Err(e) => {
                    tracing::warn!(error = %e, "the command listener cannot read the log; retrying");
                    tokio::select! {
                        _ = stop.cancelled() => return,
                        _ = tokio::time::sleep(LISTEN_RETRY) => {}
                    }
                }
            }
        };
        loop {
            let mut commands = store.stream(StreamFilter {
                thread_id: None,
                after,
                event_type: Some(event_type.to_owned()),
            });
            loop {
                let next = tokio::select! {
                    _ = stop.cancelled() => return,
                    next = commands.next() => next,
                };
                match next {
                    Some(Ok(event)) => {
                        after = event.sequence;
                        handle(self, event.event.body);
                    }
                    Some(Err(e)) => {
                        tracing::warn!(error = %e, "the command listener lost the log; following it again");
                        break;
                    }
                    None => return,
                }
            }
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(LISTEN_RETRY) => {}
            }
        }
    }

    /// Applies `command` in the background if this node drives its run (or is creating
    /// it, waited for up to [`RUN_ID_WAIT`]), then appends the answer. Other commands
    /// are left alone: another node drives the run, or it is over.
    fn on_command(&self, command: ThreadCommand) {
        let run_id = lock(&self.inner.active)
            .get(&command.thread_id)
            .map(|r| r.run_id.clone());
        let Some(mut run_id) = run_id else {
            return;
        };
        let this = self.clone();
        tokio::spawn(async move {
            let known = tokio::time::timeout(RUN_ID_WAIT, async {
                run_id
                    .wait_for(Option::is_some)
                    .await
                    .ok()
                    .and_then(|id| id.clone())
            })
            .await;
            let driven = known.ok().flatten();
            if driven.as_ref() != Some(&command.run_id) {
                return;
            }
            let outcome = this.apply(&command).await;
            let store = &this.inner.store;
            let now = this.inner.clock.now();
            let applied = ThreadCommandApplied {
                command_id: command.id.clone(),
                thread_id: command.thread_id.clone(),
                run_id: command.run_id.clone(),
                node: store.node().node().to_owned(),
                applied_at: now,
                outcome,
            };
            let event = DomainEvent::new(now, EventBody::ThreadCommandApplied(applied));
            if let Err(e) = store.write(vec![event]).await {
                tracing::warn!(thread = %command.thread_id, command = %command.id, error = %e,
                    "could not record the answer to a command; its sender times out");
            }
        });
    }

    /// Applies `command` to the run this node drives, through the code paths of a local
    /// request.
    async fn apply(&self, command: &ThreadCommand) -> CommandOutcome {
        let thread = &command.thread_id;
        let run = &command.run_id;
        match &command.action {
            CommandAction::Interrupt { reason } => {
                let why = match reason {
                    CommandInterruptReason::User => InterruptReason::User,
                    CommandInterruptReason::Superseded => InterruptReason::Superseded,
                };
                match self.signal_interrupt(thread, why) {
                    Some(_) => CommandOutcome::Applied,
                    None => CommandOutcome::Refused {
                        reason: format!("run {run} already ended"),
                    },
                }
            }
            CommandAction::Steer { entry_id } => {
                let entry = match self.inner.store.get_thread(thread).await {
                    Ok(Some(t)) => t
                        .queue
                        .entries
                        .into_iter()
                        .find(|e| &e.id == entry_id && e.steer_run_id.as_ref() == Some(run)),
                    Ok(None) => None,
                    Err(e) => {
                        return CommandOutcome::Refused {
                            reason: format!("the node running {run} could not read the queue: {e}"),
                        };
                    }
                };
                let Some(entry) = entry else {
                    return CommandOutcome::Refused {
                        reason: format!(
                            "queued message {entry_id} is no longer a steer of run {run}"
                        ),
                    };
                };
                match self.deliver_steer(thread, run, entry).await {
                    Ok(answer) if answer.status == MessageDelivery::Steering => {
                        CommandOutcome::Applied
                    }
                    Ok(answer) => CommandOutcome::Refused {
                        reason: answer
                            .note
                            .unwrap_or_else(|| format!("run {run} did not take it")),
                    },
                    Err(e) => CommandOutcome::Refused {
                        reason: e.to_string(),
                    },
                }
            }
            CommandAction::AnswerRequest { request_id, answer } => {
                match self.answer_here(thread, request_id, answer.clone()).await {
                    Ok(()) => CommandOutcome::Applied,
                    Err(RuntimeError::RequestNotPending { reason, .. }) => {
                        CommandOutcome::Refused { reason }
                    }
                    Err(e) => CommandOutcome::Refused {
                        reason: e.to_string(),
                    },
                }
            }
        }
    }
}
