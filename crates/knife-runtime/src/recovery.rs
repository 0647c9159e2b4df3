//! Boot reconciliation: settles what the previous process left in flight, before
//! the restart sweep ([`crate::restart`]) resumes the claimed work and before the
//! server accepts requests.

use knife_protocol::*;
use knife_store::Store;

use crate::clock::Clock;
use crate::error::RuntimeError;
use crate::sessions::requests::expire_request_events;

/// Error text of a tool call that was running when its process died (PROC-08 wording).
pub const TOOL_ABORTED: &str = "Tool execution aborted";

/// Error message of a run the previous process left active.
const STALE_AFTER_RESTART: &str =
    "the server stopped while this run was active; send the message again to continue";

/// Why a runtime request of a dead session can no longer be answered.
pub const REQUEST_NOT_RESUMABLE: &str =
    "the agent session that asked ended with the previous server process";

/// What [`reconcile_after_restart`] changed.
#[derive(Debug, Default)]
pub struct ReconcileReport {
    /// Runs of unclaimed threads that were active in the previous process, now
    /// `interrupted`. Claimed top-level threads are left to the restart sweep.
    pub runs_interrupted: Vec<(ThreadId, RunId)>,
    /// Provider sessions that were neither `stopped` nor `error`, now `stopped`.
    pub sessions_stopped: usize,
    /// Runtime requests still `pending`, now `expired` / not resumable.
    pub requests_expired: usize,
}

/// Settles the state a previous process left behind:
///
/// * each thread with an active run and **no** top-level claim (claimed top-level
///   threads are the restart sweep's, EXEC-03..10): the run becomes `interrupted`
///   (error type `interrupted`, saying to send the message again), its unfinished turn
///   items end (`interrupted`; tool calls `failed` with [`TOOL_ABORTED`]), its pending
///   requests expire, its unfinished provider turns become `interrupted`, and the thread
///   goes idle — all in one transaction per thread;
/// * every runtime request still `pending` becomes `expired` with a `not_resumable`
///   capability (the session that asked is gone);
/// * every provider session not `stopped`/`error` is marked `stopped` (its process
///   died with the old server).
///
/// Call once at boot, before the sweep and before serving. Idempotent: a second call
/// changes nothing.
pub async fn reconcile_after_restart(
    store: &Store,
    clock: &dyn Clock,
) -> Result<ReconcileReport, RuntimeError> {
    let mut report = ReconcileReport::default();
    for thread in store.list_threads(None).await? {
        if thread.active_run_id.is_none() && thread.status != ThreadStatus::Running {
            continue;
        }
        if thread.is_claimed() && thread.parent_thread_id.is_none() {
            continue; // the restart sweep resumes it
        }
        let thread_id = thread.id.clone();
        let ended = settle_stale_runs(store, clock, thread, STALE_AFTER_RESTART).await?;
        tracing::info!(thread = %thread_id, runs = ended.len(), "ended the runs the previous process left active");
        report
            .runs_interrupted
            .extend(ended.into_iter().map(|r| (thread_id.clone(), r)));
    }
    for request in store.list_pending_runtime_requests().await? {
        let now = clock.now();
        let events = match store.thread_projection(&request.thread_id).await? {
            Some(projection) => {
                expire_request_events(&request, &projection, REQUEST_NOT_RESUMABLE, now)
            }
            None => vec![DomainEvent::new(
                now,
                EventBody::RuntimeRequestUpdated(expire_request(&request, now)),
            )],
        };
        store.write(events).await?;
        report.requests_expired += 1;
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
    if store.get_thread(&thread.id).await?.is_none() {
        return Ok(Vec::new());
    }
    let now = clock.now();
    let error = RunError::new("interrupted", message);
    let mut events =
        crate::runs::end_unfinished_runs(store, &thread, RunStatus::Interrupted, &error, now)
            .await?;
    let ended = events
        .iter()
        .filter_map(|e| match &e.body {
            EventBody::RunUpdated(r) => Some(r.id.clone()),
            _ => None,
        })
        .collect();
    thread.status = ThreadStatus::Idle;
    thread.active_run_id = None;
    // A status the dead process published (`busy`, `retry`) is no longer true.
    if thread.agent_status.is_some() {
        thread.agent_status = Some(AgentStatus::Idle);
    }
    thread.updated_at = now;
    events.push(DomainEvent::new(now, EventBody::ThreadUpdated(thread)));
    store.write(events).await?;
    Ok(ended)
}

/// Why a runtime request of a run that ended in this server process (execution's
/// finalize: failed, interrupted, its agent process died) can no longer be answered.
pub const REQUEST_RUN_ENDED: &str = "the run ended before this runtime request was answered (its agent session cannot take the answer any more)";

/// Events that end what `run` left unfinished in `projection`: items still pending,
/// running or waiting (tool calls `failed` with [`TOOL_ABORTED`], others
/// `interrupted`), provider turns still pending or running (`interrupted`) and
/// runtime requests still pending (`expired`, not resumable with `request_reason`:
/// [`REQUEST_NOT_RESUMABLE`] for runs of a previous process, [`REQUEST_RUN_ENDED`] for a
/// run this process is finalizing).
/// Empty when everything already finished.
pub(crate) fn settle_unfinished(
    projection: &ThreadProjection,
    run: &RunId,
    now: Timestamp,
    request_reason: &str,
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
    for request in projection
        .runtime_requests
        .iter()
        .filter(|r| r.run_id.as_ref() == Some(run) && r.status == RuntimeRequestStatus::Pending)
    {
        events.extend(expire_request_events(
            request,
            projection,
            request_reason,
            now,
        ));
    }
    events
}

/// `request` expired at `now`, with a `not_resumable` capability.
fn expire_request(request: &RuntimeRequest, now: Timestamp) -> RuntimeRequest {
    let mut request = request.clone();
    request.status = RuntimeRequestStatus::Expired;
    request.resolved_at = Some(now);
    request.response_capability = ResponseCapability::NotResumable {
        reason: REQUEST_NOT_RESUMABLE.to_owned(),
    };
    request
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
