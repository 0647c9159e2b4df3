//! Messages sent to a thread (TURN-01/02): started at once when the thread is idle,
//! else queued, put ahead of the queue while the run is stopped (`interrupt`),
//! handed to the running turn (`steer`) or refused (`reject`); and the queue's
//! commands: list, cancel an entry, clear, resume after a pause.

use knife_store::{EntityKind, RowGuard};

use super::*;
use crate::adapter::SteerInput;

/// Longest a message waits for a run that is being created (or a revert) before
/// it is refused with `RunInProgress`.
const BUSY_WAIT: Duration = Duration::from_secs(5);

/// Poll interval of that wait.
const BUSY_POLL: Duration = Duration::from_millis(20);

/// Most compare-and-set attempts of one queue change before it gives up with `Conflict`.
const CAS_ATTEMPTS: usize = 50;

impl ExecutionService {
    /// Posts the user's `text` to `thread_id` (TURN-01): an idle thread starts run
    /// N+1 with it at once (every mode); while a run is active, `mode` decides:
    ///
    /// * `queue`: appended to the thread's queue (durable, in the thread row); it
    ///   starts when the active run ends, in the transaction of that run's terminal.
    /// * `interrupt`: put first in the queue, then the active run is stopped with
    ///   reason `superseded`; it starts next.
    /// * `steer`: recorded in the queue as a steer of the active run and handed to
    ///   its turn; a runtime that cannot take it leaves it queued (the answer says
    ///   so), and a steer the turn has not taken when the run ends is queued then.
    /// * `reject`: `RunInProgress` (HTTP 409).
    ///
    /// Errors: those of [`Self::start_run_with_model`], `Invalid` when the queue is
    /// full ([`QUEUE_MAX_ENTRIES`]), `Conflict` when the thread kept moving.
    pub async fn post_message(
        &self,
        thread_id: &ThreadId,
        text: String,
        model: Option<String>,
        mode: MessageMode,
    ) -> Result<PostMessageResponse, RuntimeError> {
        let model = validate_message(&text, model)?;
        let store = &self.inner.store;
        let deadline = tokio::time::Instant::now() + BUSY_WAIT;
        for _ in 0..CAS_ATTEMPTS {
            self.wait_if_finishing(thread_id).await;
            let version = store
                .row_version(EntityKind::Thread, thread_id.as_str())
                .await?;
            let mut thread = store
                .get_thread(thread_id)
                .await?
                .ok_or_else(|| RuntimeError::ThreadNotFound(thread_id.clone()))?;
            // Busy = a run this process drives, or one another node holds the lease
            // of (SCALE-06: queued here in the thread row, which that node's terminal
            // write re-reads). A run the store shows active but nobody drives (its
            // drive panicked) is settled by the start below.
            let remote = match &thread.active_run_id {
                Some(_) if !self.is_active(thread_id) => self.remote_holder(thread_id).await?,
                _ => None,
            };
            let running = thread
                .active_run_id
                .clone()
                .filter(|_| self.is_active(thread_id) || remote.is_some());
            let Some(run) = running else {
                let start = RunStart::User {
                    text: text.clone(),
                    model: model.clone(),
                };
                match self.begin(thread_id, start).await {
                    Ok(Begun::Started { run, .. }) => return Ok(started(thread_id, &run, mode)),
                    // A run being created (or a revert): its id shows up shortly. Or
                    // another node holds the lease of a thread that looked idle: it is
                    // starting a run, or letting its lease go after its run's end
                    // (SCALE-06). Look again.
                    Ok(Begun::Busy(_))
                    | Err(RuntimeError::Store(knife_store::StoreError::LeaseHeld { .. }))
                        if tokio::time::Instant::now() < deadline =>
                    {
                        tokio::time::sleep(BUSY_POLL).await;
                        continue;
                    }
                    Ok(Begun::Busy(run)) => {
                        return Err(RuntimeError::RunInProgress {
                            thread: thread_id.clone(),
                            run: run.unwrap_or_else(|| RunId::from("(starting)")),
                        });
                    }
                    Ok(Begun::NotClaimed | Begun::Exhausted { .. }) => {
                        return Err(RuntimeError::Internal(
                            "a user message was answered as a resume".into(),
                        ));
                    }
                    Err(e) => return Err(e),
                }
            };
            if mode == MessageMode::Reject {
                return Err(RuntimeError::RunInProgress {
                    thread: thread_id.clone(),
                    run,
                });
            }
            if thread.queue.entries.len() >= QUEUE_MAX_ENTRIES {
                return Err(RuntimeError::Invalid(format!(
                    "thread {thread_id} already has {QUEUE_MAX_ENTRIES} queued messages; wait for \
                     them to run, or cancel some (DELETE /api/threads/{thread_id}/queue/ENTRY)"
                )));
            }
            let now = self.inner.clock.now();
            let entry = QueuedMessage {
                id: QueuedMessageId::new(),
                text: text.clone(),
                model: model.clone(),
                queued_at: now,
                steer_run_id: (mode == MessageMode::Steer).then(|| run.clone()),
                note: None,
            };
            if mode == MessageMode::Interrupt {
                thread.queue.entries.insert(0, entry.clone());
            } else {
                thread.queue.entries.push(entry.clone());
            }
            thread.updated_at = now;
            let position = thread.queue.position(&entry.id);
            let guard = RowGuard::new(EntityKind::Thread, thread_id.as_str(), version);
            let event = DomainEvent::new(now, EventBody::ThreadUpdated(thread));
            if store.write_if(guard, vec![event]).await?.is_none() {
                // The thread moved (its run ended, another message): look again.
                continue;
            }
            return Ok(match mode {
                MessageMode::Interrupt => {
                    if remote.is_some() {
                        let reason = CommandInterruptReason::Superseded;
                        self.command(thread_id, &run, CommandAction::Interrupt { reason })
                            .await?;
                    } else {
                        self.signal_interrupt(thread_id, InterruptReason::Superseded);
                    }
                    queued(
                        thread_id,
                        &run,
                        entry,
                        position,
                        Some(format!(
                            "run {run} is being stopped (superseded); this message starts next"
                        )),
                    )
                }
                MessageMode::Steer => match remote {
                    Some(node) => self.steer_remote(thread_id, &run, entry, &node).await?,
                    None => self.deliver_steer(thread_id, &run, entry).await?,
                },
                _ => queued(thread_id, &run, entry, position, None),
            });
        }
        Err(RuntimeError::Conflict)
    }

    /// Asks node `node`, which drives `run`, to hand steer `entry` (already in the
    /// queue) to its turn (SCALE-06), and answers as [`Self::deliver_steer`] does there.
    /// A node that does not answer in time leaves the entry a plain queued message.
    async fn steer_remote(
        &self,
        thread_id: &ThreadId,
        run: &RunId,
        entry: QueuedMessage,
        node: &str,
    ) -> Result<PostMessageResponse, RuntimeError> {
        let action = CommandAction::Steer {
            entry_id: entry.id.clone(),
        };
        let note = match self.command(thread_id, run, action).await? {
            Some(CommandOutcome::Applied) => {
                let position = self
                    .inner
                    .store
                    .get_thread(thread_id)
                    .await?
                    .and_then(|t| t.queue.position(&entry.id));
                return Ok(PostMessageResponse {
                    thread_id: thread_id.clone(),
                    status: MessageDelivery::Steering,
                    run_id: Some(run.clone()),
                    queued: Some(entry),
                    position,
                    note: None,
                });
            }
            // That node queued it already, with this note.
            Some(CommandOutcome::Refused { reason }) => reason,
            None => format!(
                "node {node}, which runs {run}, did not take this message within {} s; it was \
                 queued and starts when run {run} ends",
                super::remote::COMMAND_WAIT.as_secs()
            ),
        };
        let (entry, position) = self.unsteer(thread_id, entry, &note).await?;
        let note = entry.note.clone().unwrap_or(note);
        Ok(queued(thread_id, run, entry, position, Some(note)))
    }

    /// Hands steer `entry` (already in the queue) to the turn of `run`; when the
    /// runtime cannot take it, the entry becomes a plain queued message.
    pub(super) async fn deliver_steer(
        &self,
        thread_id: &ThreadId,
        run: &RunId,
        entry: QueuedMessage,
    ) -> Result<PostMessageResponse, RuntimeError> {
        let steer = SteerInput {
            run_id: run.clone(),
            item_id: TurnItemId::steer_of(run, &entry.id),
            text: entry.text.clone(),
        };
        let still_running = self.driven_run_of(thread_id).as_ref() == Some(run);
        let refused = match self.session_of(thread_id).filter(|_| still_running) {
            Some(handle) => match handle.steer_turn(thread_id, steer).await {
                Ok(()) => None,
                Err(e) => Some(e.to_string()),
            },
            None => Some(format!("run {run} has no open turn to take it")),
        };
        let Some(why) = refused else {
            let position = self
                .inner
                .store
                .get_thread(thread_id)
                .await?
                .and_then(|t| t.queue.position(&entry.id));
            return Ok(PostMessageResponse {
                thread_id: thread_id.clone(),
                status: MessageDelivery::Steering,
                run_id: Some(run.clone()),
                queued: Some(entry),
                position,
                note: None,
            });
        };
        let note = format!(
            "the running turn cannot take this message ({why}); it was queued and starts when \
             run {run} ends"
        );
        let (entry, position) = self.unsteer(thread_id, entry, &note).await?;
        Ok(queued(thread_id, run, entry, position, Some(note)))
    }

    /// Turns steer `entry` into a plain queued message with `note` (CAS). An entry
    /// the run's end already settled is answered as it is now.
    async fn unsteer(
        &self,
        thread_id: &ThreadId,
        mut entry: QueuedMessage,
        note: &str,
    ) -> Result<(QueuedMessage, Option<usize>), RuntimeError> {
        for _ in 0..CAS_ATTEMPTS {
            let (version, mut thread) = self.thread_row(thread_id).await?;
            let Some(slot) = thread.queue.entries.iter_mut().find(|e| e.id == entry.id) else {
                entry.steer_run_id = None;
                return Ok((entry, None));
            };
            if slot.steer_run_id.is_none() {
                let found = slot.clone();
                return Ok((found, thread.queue.position(&entry.id)));
            }
            slot.steer_run_id = None;
            slot.note = Some(note.to_owned());
            let found = slot.clone();
            let position = thread.queue.position(&entry.id);
            if self.write_thread(thread_id, version, thread).await? {
                return Ok((found, position));
            }
        }
        Err(RuntimeError::Conflict)
    }

    /// Removes the steer `entry` of `thread_id` from the queue once its turn took it
    /// (its delivery item was recorded). Best effort: the run's end settles it too.
    pub(super) async fn drop_delivered_steer(&self, thread_id: &ThreadId, entry: &QueuedMessageId) {
        for _ in 0..CAS_ATTEMPTS {
            let Ok((version, mut thread)) = self.thread_row(thread_id).await else {
                return;
            };
            let before = thread.queue.entries.len();
            thread
                .queue
                .entries
                .retain(|e| !(&e.id == entry && e.steer_run_id.is_some()));
            if thread.queue.entries.len() == before {
                return;
            }
            match self.write_thread(thread_id, version, thread).await {
                Ok(true) | Err(_) => return,
                Ok(false) => continue,
            }
        }
    }

    /// The thread's queue and active run (`GET /api/threads/{id}/queue`).
    /// Errors: `ThreadNotFound`.
    pub async fn queue(&self, thread_id: &ThreadId) -> Result<QueueResponse, RuntimeError> {
        let (_, thread) = self.thread_row(thread_id).await?;
        Ok(queue_response(thread))
    }

    /// Cancels queue entry `entry` of `thread_id` (TURN-01). Errors:
    /// `QueuedMessageNotFound` (started, cancelled or unknown), `Invalid` for a
    /// steer already handed to the running turn, `ThreadNotFound`, `Conflict`.
    pub async fn cancel_queued(
        &self,
        thread_id: &ThreadId,
        entry: &QueuedMessageId,
    ) -> Result<QueueResponse, RuntimeError> {
        for _ in 0..CAS_ATTEMPTS {
            let (version, mut thread) = self.thread_row(thread_id).await?;
            let Some(at) = thread.queue.entries.iter().position(|e| &e.id == entry) else {
                return Err(RuntimeError::QueuedMessageNotFound {
                    thread: thread_id.clone(),
                    entry: entry.clone(),
                });
            };
            if let Some(run) = &thread.queue.entries[at].steer_run_id {
                return Err(RuntimeError::Invalid(format!(
                    "queued message {entry} was handed to the running turn of {run} and cannot \
                     be taken back; interrupt the run to stop it"
                )));
            }
            thread.queue.entries.remove(at);
            if !thread
                .queue
                .entries
                .iter()
                .any(|e| e.steer_run_id.is_none())
            {
                thread.queue.paused = None;
            }
            if self
                .write_thread(thread_id, version, thread.clone())
                .await?
            {
                return Ok(queue_response(thread));
            }
        }
        Err(RuntimeError::Conflict)
    }

    /// Drops every queued message of `thread_id` and lifts its pause (TURN-02);
    /// steers already handed to the running turn stay. Errors: `ThreadNotFound`, `Conflict`.
    pub async fn clear_queue(&self, thread_id: &ThreadId) -> Result<QueueResponse, RuntimeError> {
        for _ in 0..CAS_ATTEMPTS {
            let (version, mut thread) = self.thread_row(thread_id).await?;
            thread.queue.entries.retain(|e| e.steer_run_id.is_some());
            thread.queue.paused = None;
            if self
                .write_thread(thread_id, version, thread.clone())
                .await?
            {
                return Ok(queue_response(thread));
            }
        }
        Err(RuntimeError::Conflict)
    }

    /// Lifts the pause of `thread_id`'s queue (TURN-02). An idle thread starts its
    /// first queued message at once, in the same transaction as the lift; a busy one
    /// starts it when its run ends. Errors: `ThreadNotFound`, `Conflict`, and those
    /// of starting a run.
    pub async fn resume_queue(&self, thread_id: &ThreadId) -> Result<QueueResponse, RuntimeError> {
        let deadline = tokio::time::Instant::now() + BUSY_WAIT;
        for _ in 0..CAS_ATTEMPTS {
            self.wait_if_finishing(thread_id).await;
            let (version, mut thread) = self.thread_row(thread_id).await?;
            // Busy here, or on the node holding the lease (SCALE-06).
            let busy = thread.active_run_id.is_some()
                && (self.is_active(thread_id) || self.remote_holder(thread_id).await?.is_some());
            let first = thread
                .queue
                .entries
                .iter()
                .find(|e| e.steer_run_id.is_none())
                .cloned();
            match first {
                Some(entry) if !busy => {
                    let start = RunStart::Queued {
                        entry,
                        resume: true,
                    };
                    match self.begin(thread_id, start).await {
                        Ok(Begun::Started { .. }) => return self.queue(thread_id).await,
                        Ok(Begun::Busy(_)) if tokio::time::Instant::now() < deadline => {
                            tokio::time::sleep(BUSY_POLL).await;
                        }
                        Ok(Begun::Busy(run)) => {
                            return Err(RuntimeError::RunInProgress {
                                thread: thread_id.clone(),
                                run: run.unwrap_or_else(|| RunId::from("(starting)")),
                            });
                        }
                        Ok(_) => {
                            return Err(RuntimeError::Internal(
                                "a queued message was answered as a resume".into(),
                            ));
                        }
                        // The entry was cancelled or the row moved meanwhile: look again.
                        Err(
                            RuntimeError::Conflict | RuntimeError::QueuedMessageNotFound { .. },
                        ) => {}
                        Err(e) => return Err(e),
                    }
                }
                _ => {
                    if thread.queue.paused.is_none() {
                        return Ok(queue_response(thread));
                    }
                    thread.queue.paused = None;
                    if self
                        .write_thread(thread_id, version, thread.clone())
                        .await?
                    {
                        return Ok(queue_response(thread));
                    }
                }
            }
        }
        Err(RuntimeError::Conflict)
    }

    /// The id of the run this process drives on `thread`, once known.
    fn driven_run_of(&self, thread: &ThreadId) -> Option<RunId> {
        lock(&self.inner.active)
            .get(thread)
            .and_then(|r| r.run_id.borrow().clone())
    }

    /// The thread row and its version. Errors: `ThreadNotFound`, `Store`.
    async fn thread_row(
        &self,
        thread_id: &ThreadId,
    ) -> Result<(Option<i64>, Thread), RuntimeError> {
        let store = &self.inner.store;
        let version = store
            .row_version(EntityKind::Thread, thread_id.as_str())
            .await?;
        let thread = store
            .get_thread(thread_id)
            .await?
            .ok_or_else(|| RuntimeError::ThreadNotFound(thread_id.clone()))?;
        Ok((version, thread))
    }

    /// Writes `thread` (stamped now) if its row is still at `version`; `false` when it moved.
    async fn write_thread(
        &self,
        thread_id: &ThreadId,
        version: Option<i64>,
        mut thread: Thread,
    ) -> Result<bool, RuntimeError> {
        let now = self.inner.clock.now();
        thread.updated_at = now;
        let guard = RowGuard::new(EntityKind::Thread, thread_id.as_str(), version);
        let event = DomainEvent::new(now, EventBody::ThreadUpdated(thread));
        Ok(self
            .inner
            .store
            .write_if(guard, vec![event])
            .await?
            .is_some())
    }
}

/// Checks a message's text and model (non-empty, within the limits) and returns
/// the model trimmed. Errors: `Invalid`.
pub(super) fn validate_message(
    text: &str,
    model: Option<String>,
) -> Result<Option<String>, RuntimeError> {
    if text.trim().is_empty() {
        return Err(RuntimeError::Invalid(
            "the message text is empty; write what the agent should do".into(),
        ));
    }
    if let Some(m) =
        knife_protocol::limits::over_bytes("text", text, knife_protocol::limits::MESSAGE_MAX_BYTES)
    {
        return Err(RuntimeError::Invalid(m));
    }
    if let Some(m) = model.as_deref().and_then(|m| {
        knife_protocol::limits::over_chars("model", m, knife_protocol::limits::MODEL_MAX_CHARS)
    }) {
        return Err(RuntimeError::Invalid(m));
    }
    if model.as_deref().is_some_and(|m| m.trim().is_empty()) {
        return Err(RuntimeError::Invalid(
            "the message's model is empty; name a model, or leave `model` out to use the \
             thread's"
                .into(),
        ));
    }
    Ok(model.map(|m| m.trim().to_owned()))
}

fn started(thread_id: &ThreadId, run: &Run, mode: MessageMode) -> PostMessageResponse {
    PostMessageResponse {
        thread_id: thread_id.clone(),
        status: MessageDelivery::Started,
        run_id: Some(run.id.clone()),
        queued: None,
        position: None,
        note: (mode == MessageMode::Steer || mode == MessageMode::Interrupt).then(|| {
            format!(
                "no run was active, so there was nothing to {}: the message started run {}",
                if mode == MessageMode::Steer {
                    "steer"
                } else {
                    "interrupt"
                },
                run.id
            )
        }),
    }
}

fn queued(
    thread_id: &ThreadId,
    run: &RunId,
    entry: QueuedMessage,
    position: Option<usize>,
    note: Option<String>,
) -> PostMessageResponse {
    PostMessageResponse {
        thread_id: thread_id.clone(),
        status: MessageDelivery::Queued,
        run_id: Some(run.clone()),
        queued: Some(entry),
        position,
        note,
    }
}

fn queue_response(thread: Thread) -> QueueResponse {
    QueueResponse {
        thread_id: thread.id,
        active_run_id: thread.active_run_id,
        queue: thread.queue,
    }
}
