//! Creating runs: the one transaction that starts a run (run, root node, user item,
//! thread with its claim, EXEC-04), the continuation run a restart resumes with
//! (EXEC-07/09), and the terminal of a thread whose resume budget is spent (EXEC-08).

use knife_protocol::*;
use knife_store::{EntityKind, RowGuard, Store};

use crate::clock::Clock;
use crate::error::RuntimeError;
use crate::execution::terminal::settle_unfinished;

/// Text of the synthetic user message each resume appends (EXEC-07).
pub const CONTINUE_AFTER_SERVER_RESTART: &str = "The server restarted while you were working. \
     Continue from where you left off without repeating completed work.";

/// Description of that message, shown by clients (EXEC-07).
pub const CONTINUE_DESCRIPTION: &str = "Continuing after restart";

/// Error type of a thread whose resume budget is spent (EXEC-08).
pub const RESUME_EXHAUSTED_TYPE: &str = "aborted";

/// Message of that error (EXEC-08).
pub const RESUME_EXHAUSTED_MESSAGE: &str = "Execution was interrupted repeatedly and will not \
     be resumed automatically. Send a new message to continue.";

/// Error message of a run whose process died and whose work a continuation run took over.
const CONTINUED_AFTER_RESTART: &str =
    "the server stopped while this run was active; knife continues the work in the next run";

/// What opens a run.
#[derive(Clone, Debug)]
pub(crate) enum RunStart {
    /// A message typed by the user; `model` overrides the thread's model for
    /// this run (TURN-10).
    User { text: String, model: Option<String> },
    /// The queue entry `entry` of an idle thread (TURN-01/02): removed from the
    /// queue in the run's transaction; `resume` also lifts the queue's pause.
    Queued {
        entry: knife_protocol::QueuedMessage,
        resume: bool,
    },
    /// The continuation after a budget raise (TURN-07): the system message
    /// [`crate::execution::CONTINUE_AFTER_BUDGET_RAISE`].
    BudgetRaised,
    /// A resume of claimed work after a restart (EXEC-07): counts one attempt and
    /// opens the run with the system continuation message, unless `max_attempts`
    /// resumes were already spent (EXEC-08).
    Continuation { max_attempts: u32 },
}

impl RunStart {
    /// The text the model sees as the run's user message.
    pub(crate) fn text(&self) -> &str {
        match self {
            RunStart::User { text, .. } => text,
            RunStart::Queued { entry, .. } => &entry.text,
            RunStart::BudgetRaised => crate::execution::CONTINUE_AFTER_BUDGET_RAISE,
            RunStart::Continuation { .. } => CONTINUE_AFTER_SERVER_RESTART,
        }
    }
}

/// What [`create_run`] did.
#[derive(Debug)]
pub(crate) enum Created {
    /// The run was written (and, for a continuation, the attempt counted).
    Started(Box<(Thread, Project, Run)>),
    /// A continuation was asked for a thread that holds no claim: nothing written.
    NotClaimed,
    /// A continuation found the budget spent: the thread was terminalised with
    /// `aborted`, its claim released and its counter reset, in one transaction.
    Exhausted { attempts: u32 },
    /// A continuation found its run stopped through another node (SCALE-06): it was
    /// ended `interrupted` and the claim released instead ([`crate::execution::commanded`]).
    Stopped,
    /// As `Stopped`, by a superseding message: its run was opened in the same
    /// transaction (thread, project, run, the message's text).
    Next(Box<(Thread, Project, Run, String)>),
}

/// Creates run N+1 of `thread_id` in one compare-and-set transaction on the thread
/// row: `run.created`, its root node, the user item and `thread.updated` carrying
/// the claim (taken, or kept with its original timestamp, EXEC-04).
///
/// A continuation also ends the run the dead process left active (tools "Tool
/// execution aborted", pending requests expired; the claim stays) and increments
/// `resume_attempts` in the same transaction, so the attempt is durable before the
/// drain starts (EXEC-09). At the budget it writes the `aborted` terminal instead.
///
/// Errors: `ThreadNotFound`, `ProjectNotFound`, `Conflict` (the row moved), `Store`.
pub(crate) async fn create_run(
    store: &Store,
    clock: &dyn Clock,
    thread_id: &ThreadId,
    start: &RunStart,
) -> Result<Created, RuntimeError> {
    // The row and the version its compare-and-set write is guarded by, in one read.
    let (mut thread, version) = store
        .thread_with_version(thread_id)
        .await?
        .ok_or_else(|| RuntimeError::ThreadNotFound(thread_id.clone()))?;
    let version = Some(version);
    let now = clock.now();
    let mut events = Vec::new();
    // The run's model (TURN-10): the message's, else the thread's; a continuation
    // keeps the model of the run it continues.
    let mut model = match start {
        RunStart::User { model, .. } => model.clone().or_else(|| thread.model.clone()),
        RunStart::Queued { entry, .. } => entry.model.clone().or_else(|| thread.model.clone()),
        RunStart::Continuation { .. } | RunStart::BudgetRaised => thread.model.clone(),
    };
    if let RunStart::Continuation { max_attempts } = start {
        if !thread.is_claimed() {
            return Ok(Created::NotClaimed);
        }
        // This node takes (or takes again) the thread's lease before it writes for the
        // claim: every write of the resume is fenced by the new epoch (SCALE-04).
        store.hold_lease(thread_id).await?;
        // SCALE-06: the user stopped this run through another node and its node died
        // before it applied the stop: end it as asked, never resume it.
        if let Some(active) = thread.active_run_id.clone()
            && let Some(reason) =
                crate::execution::commanded::stop_asked(store, thread_id, &active).await?
        {
            return crate::execution::commanded::stop(store, version, thread, reason, now).await;
        }
        let attempts = thread.resume_attempts.saturating_add(1);
        if attempts > *max_attempts {
            let events = exhausted_events(store, &mut thread, now).await?;
            let guard = RowGuard::new(EntityKind::Thread, thread_id.as_str(), version);
            let written = store.write_if(guard, events).await?;
            if written.is_some() {
                // The claim is released: so is the lease (a failure only lets it run out).
                if let Err(e) = store.let_go(thread_id).await {
                    tracing::warn!(thread = %thread_id, error = %e, "could not release the thread's lease; it runs out");
                }
            }
            return match written {
                Some(_) => Ok(Created::Exhausted {
                    attempts: attempts - 1,
                }),
                None => Err(RuntimeError::Conflict),
            };
        }
        thread.resume_attempts = attempts;
        if let Some(active) = &thread.active_run_id
            && let Some(run) = store.get_run(active).await?
            && run.model.is_some()
        {
            model = run.model;
        }
        if thread.active_run_id.is_some() {
            let error = RunError {
                code: Some("shutdown".into()),
                ..RunError::new("interrupted", CONTINUED_AFTER_RESTART)
            };
            events.extend(
                end_unfinished_runs(store, &thread, RunStatus::Interrupted, &error, now).await?,
            );
        }
    } else if thread.active_run_id.is_some() {
        // The caller holds this process's reservation for the thread and the data
        // directory belongs to this process: the run's end could not be recorded (its
        // terminal write failed). Settle it now rather than refuse forever.
        tracing::warn!(thread = %thread_id, "settling a run whose end was never recorded");
        let error = RunError::new(
            "interrupted",
            "knife could not record how this run ended; send the message again to continue",
        );
        events.extend(
            end_unfinished_runs(store, &thread, RunStatus::Interrupted, &error, now).await?,
        );
    }
    let project = store
        .get_project(&thread.project_id)
        .await?
        .ok_or_else(|| RuntimeError::ProjectNotFound(thread.project_id.clone()))?;
    if let RunStart::Queued { entry, resume } = start {
        // TURN-01/02: the entry leaves the queue in the transaction that starts it.
        let Some(at) = thread.queue.entries.iter().position(|e| e.id == entry.id) else {
            return Err(RuntimeError::QueuedMessageNotFound {
                thread: thread_id.clone(),
                entry: entry.id.clone(),
            });
        };
        thread.queue.entries.remove(at);
        if *resume {
            thread.queue.paused = None;
        }
    }
    if !matches!(start, RunStart::Continuation { .. }) {
        // A new run claims the thread: take its lease first, so the claim's write and
        // every later write of the run are fenced (SCALE-04). Another node's live lease
        // refuses the run (`StoreError::LeaseHeld`, HTTP 409).
        store.hold_lease(thread_id).await?;
    }
    let (origin, description) = match start {
        RunStart::User { .. } | RunStart::Queued { .. } => (MessageOrigin::User, None),
        RunStart::Continuation { .. } => {
            (MessageOrigin::System, Some(CONTINUE_DESCRIPTION.to_owned()))
        }
        RunStart::BudgetRaised => (
            MessageOrigin::System,
            Some(crate::execution::BUDGET_CONTINUE_DESCRIPTION.to_owned()),
        ),
    };
    let user_text = match start {
        RunStart::User { text, .. } => Some(text.as_str()),
        RunStart::Queued { entry, .. } => Some(entry.text.as_str()),
        RunStart::Continuation { .. } | RunStart::BudgetRaised => None,
    };
    let opened = open_run(
        &mut thread,
        OpenRun {
            text: start.text(),
            model,
            origin,
            description,
            user_text,
        },
        now,
    );
    events.extend(opened.1);
    let guard = RowGuard::new(EntityKind::Thread, thread_id.as_str(), version);
    let written = store.write_if(guard, events).await;
    if !matches!(start, RunStart::Continuation { .. }) && !matches!(written, Ok(Some(_))) {
        // No run started: the thread is not claimed by this attempt, free its lease.
        if let Err(e) = store.let_go(thread_id).await {
            tracing::warn!(thread = %thread_id, error = %e, "could not release the thread's lease; it runs out");
        }
    }
    match written? {
        Some(_) => Ok(Created::Started(Box::new((thread, project, opened.0)))),
        None => Err(RuntimeError::Conflict),
    }
}

/// What [`open_run`] opens a run with.
pub(crate) struct OpenRun<'a> {
    /// The run's user message.
    pub text: &'a str,
    pub model: Option<String>,
    pub origin: MessageOrigin,
    pub description: Option<String>,
    /// The text typed by the user (names an untitled thread, un-archives it);
    /// `None` for system messages.
    pub user_text: Option<&'a str>,
}

/// Opens run N+1 on `thread` (updated in place: running, active run, run count,
/// claim, automatic title) and returns it with its `run.created`, root node, user
/// item and `thread.updated` events, for the caller's one transaction (EXEC-04,
/// TURN-01: also the next queued run written with the previous run's terminal).
pub(crate) fn open_run(
    thread: &mut Thread,
    open: OpenRun<'_>,
    now: Timestamp,
) -> (Run, Vec<DomainEvent>) {
    let ordinal = thread.run_count + 1;
    let run_id = RunId::for_thread(&thread.id, ordinal);
    let user_item = TurnItem {
        id: TurnItemId::user_message_of(&run_id),
        thread_id: thread.id.clone(),
        run_id: Some(run_id.clone()),
        provider_turn_id: None,
        ordinal: TurnItem::ordinal_in_run(ordinal, 0),
        status: TurnItemStatus::Completed,
        started_at: Some(now),
        completed_at: Some(now),
        updated_at: now,
        kind: TurnItemKind::UserMessage {
            text: open.text.to_owned(),
            origin: open.origin,
            description: open.description,
        },
    };
    let run = Run {
        id: run_id.clone(),
        thread_id: thread.id.clone(),
        ordinal,
        provider_instance_id: thread.provider_instance_id.clone(),
        model: open.model,
        status: RunStatus::Running,
        user_message_id: user_item.id.clone(),
        requested_at: now,
        started_at: Some(now),
        completed_at: None,
        error: None,
        usage: None,
        checkpoints: Default::default(),
        changes: None,
    };
    thread.status = ThreadStatus::Running;
    thread.active_run_id = Some(run_id);
    thread.run_count = ordinal;
    thread.last_error = None;
    thread.updated_at = now;
    thread.claim(now);
    if let Some(text) = open.user_text {
        // CHG-08: the first message names an untitled thread, in this same
        // transaction; a message to an archived thread brings it back.
        if thread.untitled
            && let Some(title) = crate::lifecycle::auto_title(text)
        {
            thread.title = title;
            thread.untitled = false;
        }
        thread.archived_at = None;
    }
    let events = vec![
        DomainEvent::new(now, EventBody::RunCreated(run.clone())),
        DomainEvent::new(
            now,
            EventBody::NodeUpdated(root_node(&run, NodeStatus::Running, now)),
        ),
        DomainEvent::new(now, EventBody::TurnItemUpdated(user_item)),
        DomainEvent::new(now, EventBody::ThreadUpdated(thread.clone())),
    ];
    (run, events)
}

/// Events that end every unfinished run of `thread` with `status` and `error`
/// (items, provider turns and pending requests settled, root node ended). The
/// thread itself is not included.
pub(crate) async fn end_unfinished_runs(
    store: &Store,
    thread: &Thread,
    status: RunStatus,
    error: &RunError,
    now: Timestamp,
) -> Result<Vec<DomainEvent>, RuntimeError> {
    let Some(projection) = store.thread_projection(&thread.id).await? else {
        return Ok(Vec::new());
    };
    let node_status = match status {
        RunStatus::Failed => NodeStatus::Failed,
        _ => NodeStatus::Interrupted,
    };
    let mut events = Vec::new();
    for run in projection.runs.iter().filter(|r| !r.status.is_terminal()) {
        let mut run = run.clone();
        run.status = status;
        run.completed_at = Some(now);
        run.error = Some(error.clone());
        events.extend(settle_unfinished(
            &projection,
            &run.id,
            now,
            // Runs of a previous server process (boot, restart sweep, exhausted resumes).
            crate::execution::terminal::REQUEST_NOT_RESUMABLE,
        ));
        if status == RunStatus::Failed {
            events.push(DomainEvent::new(
                now,
                EventBody::TurnItemUpdated(error_item(&run, error, now)),
            ));
        }
        events.push(DomainEvent::new(
            now,
            EventBody::NodeUpdated(root_node(&run, node_status, now)),
        ));
        events.push(DomainEvent::new(now, EventBody::RunUpdated(run)));
    }
    Ok(events)
}

/// The `error` turn item of a failed `run` (id `item:<run>:error`, the run's last ordinal).
pub(crate) fn error_item(run: &Run, error: &RunError, now: Timestamp) -> TurnItem {
    TurnItem {
        id: TurnItemId::from(format!("item:{}:error", run.id)),
        thread_id: run.thread_id.clone(),
        run_id: Some(run.id.clone()),
        provider_turn_id: None,
        ordinal: TurnItem::ordinal_in_run(run.ordinal, 999_999),
        status: TurnItemStatus::Failed,
        started_at: Some(now),
        completed_at: Some(now),
        updated_at: now,
        kind: TurnItemKind::Error {
            error: error.clone(),
        },
    }
}

/// The terminal of a thread whose resume budget is spent (EXEC-08): its unfinished
/// run fails with `aborted` (or, when the last run already ended with a shutdown
/// interrupt, that run gets the `aborted` error item), the thread fails with that
/// error, and the claim is released with the counter reset — all in the returned
/// events, for one transaction. Updates `thread` in place.
async fn exhausted_events(
    store: &Store,
    thread: &mut Thread,
    now: Timestamp,
) -> Result<Vec<DomainEvent>, RuntimeError> {
    let error = RunError::new(RESUME_EXHAUSTED_TYPE, RESUME_EXHAUSTED_MESSAGE);
    let mut events = Vec::new();
    if thread.active_run_id.is_some() {
        events = end_unfinished_runs(store, thread, RunStatus::Failed, &error, now).await?;
    } else if thread.run_count > 0
        && let Some(run) = store
            .get_run(&RunId::for_thread(&thread.id, thread.run_count))
            .await?
    {
        events.push(DomainEvent::new(
            now,
            EventBody::TurnItemUpdated(error_item(&run, &error, now)),
        ));
    }
    thread.status = ThreadStatus::Failed;
    thread.active_run_id = None;
    thread.last_error = Some(error);
    thread.updated_at = now;
    thread.release_claim();
    // TURN-02: what waits in the queue does not start on its own after this.
    crate::execution::queue::pause_if_waiting(thread, QueuePauseReason::ResumeExhausted, now);
    events.push(DomainEvent::new(
        now,
        EventBody::ThreadUpdated(thread.clone()),
    ));
    Ok(events)
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
