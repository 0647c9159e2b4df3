//! Boot reconciliation: settles what the previous process left in flight, before
//! the server accepts requests. The durable-execution issue extends this with claims
//! and resumption (EXEC-03..10); until then an interrupted run is ended, not resumed.

use knife_protocol::*;
use knife_store::Store;

use crate::clock::Clock;
use crate::error::RuntimeError;

/// Error text of a tool call that was running when its process died (PROC-08 wording).
pub const TOOL_ABORTED: &str = "Tool execution aborted";

/// Error message of a run the previous process left active.
const STALE_AFTER_RESTART: &str =
    "the server stopped while this run was active; send the message again to continue";

/// What [`reconcile_after_restart`] changed.
#[derive(Debug, Default)]
pub struct ReconcileReport {
    /// Runs that were active in the previous process, now `interrupted`.
    pub runs_interrupted: Vec<(ThreadId, RunId)>,
    /// Provider sessions that were neither `stopped` nor `error`, now `stopped`.
    pub sessions_stopped: usize,
}

/// Settles the state a previous process left behind. For each thread with an active
/// run: the run becomes `interrupted` (error type `interrupted`, saying to send the
/// message again), its unfinished turn items end (`interrupted`; tool calls `failed` with
/// [`TOOL_ABORTED`]), its unfinished provider turns become `interrupted`, and the thread
/// goes idle — all in one transaction per thread. Then every provider session not
/// `stopped`/`error` is marked `stopped` (its process died with the old server).
///
/// Call once at boot, before serving. Idempotent: a second call changes nothing.
pub async fn reconcile_after_restart(
    store: &Store,
    clock: &dyn Clock,
) -> Result<ReconcileReport, RuntimeError> {
    let mut report = ReconcileReport::default();
    for thread in store.list_threads(None).await? {
        if thread.active_run_id.is_none() && thread.status != ThreadStatus::Running {
            continue;
        }
        let thread_id = thread.id.clone();
        let ended = settle_stale_runs(store, clock, thread, STALE_AFTER_RESTART).await?;
        tracing::info!(thread = %thread_id, runs = ended.len(), "ended the runs the previous process left active");
        report
            .runs_interrupted
            .extend(ended.into_iter().map(|r| (thread_id.clone(), r)));
    }
    for mut session in store.list_provider_sessions().await? {
        if matches!(
            session.status,
            SessionStatus::Stopped | SessionStatus::Error
        ) {
            continue;
        }
        session.status = SessionStatus::Stopped;
        session.updated_at = clock.now();
        store
            .write(vec![DomainEvent::new(
                session.updated_at,
                EventBody::ProviderSessionUpdated(session),
            )])
            .await?;
        report.sessions_stopped += 1;
    }
    Ok(report)
}

/// Ends every unfinished run of `thread` as `interrupted` with `message`: its
/// unfinished items end (tool calls `failed` with [`TOOL_ABORTED`]), its unfinished
/// provider turns and root node become `interrupted`, and the thread goes idle — in
/// one transaction. Returns the runs it ended (possibly none; the thread is still
/// made idle). Used at boot and when a run's own end could not be recorded.
pub async fn settle_stale_runs(
    store: &Store,
    clock: &dyn Clock,
    mut thread: Thread,
    message: &str,
) -> Result<Vec<RunId>, RuntimeError> {
    let Some(projection) = store.thread_projection(&thread.id).await? else {
        return Ok(Vec::new());
    };
    let now = clock.now();
    let mut events = Vec::new();
    let mut ended = Vec::new();
    for run in projection.runs.iter().filter(|r| !r.status.is_terminal()) {
        let mut run = run.clone();
        run.status = RunStatus::Interrupted;
        run.completed_at = Some(now);
        run.error = Some(RunError::new("interrupted", message));
        ended.push(run.id.clone());
        events.extend(settle_unfinished(&projection, &run.id, now));
        let node = crate::execution::root_node(&run, NodeStatus::Interrupted, now);
        events.push(DomainEvent::new(now, EventBody::NodeUpdated(node)));
        events.push(DomainEvent::new(now, EventBody::RunUpdated(run)));
    }
    thread.status = ThreadStatus::Idle;
    thread.active_run_id = None;
    thread.updated_at = now;
    events.push(DomainEvent::new(now, EventBody::ThreadUpdated(thread)));
    store.write(events).await?;
    Ok(ended)
}

/// Events that end what `run` left unfinished in `projection`: items still pending,
/// running or waiting (tool calls `failed` with [`TOOL_ABORTED`], others
/// `interrupted`) and provider turns still pending or running (`interrupted`).
/// Empty when everything already finished.
pub(crate) fn settle_unfinished(
    projection: &ThreadProjection,
    run: &RunId,
    now: Timestamp,
) -> Vec<DomainEvent> {
    let mut events = Vec::new();
    let items = projection
        .turn_items
        .iter()
        .filter(|i| i.run_id.as_ref() == Some(run));
    for item in items.filter_map(|i| settle_item(i, now)) {
        events.push(DomainEvent::new(now, EventBody::TurnItemUpdated(item)));
    }
    for turn in projection
        .provider_turns
        .iter()
        .filter(|t| &t.run_id == run)
    {
        if matches!(
            turn.status,
            ProviderTurnStatus::Pending | ProviderTurnStatus::Running
        ) {
            let mut turn = turn.clone();
            turn.status = ProviderTurnStatus::Interrupted;
            turn.completed_at = Some(now);
            events.push(DomainEvent::new(now, EventBody::ProviderTurnUpdated(turn)));
        }
    }
    events
}

/// The settled form of an unfinished item, or `None` when it already finished.
fn settle_item(item: &TurnItem, now: Timestamp) -> Option<TurnItem> {
    if !matches!(
        item.status,
        TurnItemStatus::Pending | TurnItemStatus::Running | TurnItemStatus::Waiting
    ) {
        return None;
    }
    let mut item = item.clone();
    item.completed_at = Some(now);
    item.updated_at = now;
    match &mut item.kind {
        TurnItemKind::ToolCall { error, .. } => {
            item.status = TurnItemStatus::Failed;
            *error = Some(TOOL_ABORTED.to_owned());
        }
        TurnItemKind::AssistantMessage { streaming, .. }
        | TurnItemKind::Reasoning { streaming, .. } => {
            item.status = TurnItemStatus::Interrupted;
            *streaming = false;
        }
        _ => item.status = TurnItemStatus::Interrupted,
    }
    Some(item)
}
