//! Boot reconciliation: settles what the previous process left in flight, before
//! the restart sweep ([`crate::boot::restart`]) resumes the claimed work and before the
//! server accepts requests.

use knife_protocol::*;
use knife_store::Store;

use crate::clock::Clock;
use crate::error::RuntimeError;
use crate::execution::terminal::REQUEST_NOT_RESUMABLE;
use crate::sessions::requests::expire_request_events;

/// Error message of a run the previous process left active.
const STALE_AFTER_RESTART: &str =
    "the server stopped while this run was active; send the message again to continue";

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
///   items end (`interrupted`; tool calls `failed` with [`TOOL_ABORTED`](crate::execution::terminal::TOOL_ABORTED)), its pending
///   requests expire, its unfinished provider turns become `interrupted`, and the thread
///   goes idle — all in one transaction per thread;
/// * every runtime request still `pending` becomes `expired` with a `not_resumable`
///   capability (the session that asked is gone);
/// * every provider session of this node (the node in its id, SCALE-07) not
///   `stopped`/`error` is marked `stopped` (its process died with the old server);
///   other nodes' sessions are left alone.
///
/// Call once at boot, before the sweep and before serving. Idempotent: a second call
/// changes nothing.
pub async fn reconcile_after_restart(
    store: &Store,
    clock: &dyn Clock,
) -> Result<ReconcileReport, RuntimeError> {
    let mut report = ReconcileReport::default();
    // Work another node runs now (a live lease, SCALE-04) is not the previous
    // process's: leave its runs, requests and sessions alone.
    let me = store.node().node().to_owned();
    let elsewhere: std::collections::HashSet<ThreadId> = store
        .live_leases()
        .await?
        .into_iter()
        .filter(|l| l.node != me)
        .map(|l| l.thread_id)
        .collect();
    for thread in store.list_threads(None).await? {
        if thread.active_run_id.is_none() && thread.status != ThreadStatus::Running {
            continue;
        }
        if elsewhere.contains(&thread.id) {
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
        if elsewhere.contains(&request.thread_id) {
            continue;
        }
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
    let busy_elsewhere: std::collections::HashSet<ProviderSessionId> = store
        .list_session_activity()
        .await?
        .into_iter()
        .filter(|a| elsewhere.contains(&a.thread_id))
        .map(|a| a.session.id)
        .collect();
    for mut session in store.list_provider_sessions().await? {
        // Another node's session (its id names the node) lives or died with that node,
        // never with this node's previous process (SCALE-07): its node, a takeover or
        // the cluster reaper settles it.
        if busy_elsewhere.contains(&session.id) || session.id.node() != me {
            continue;
        }
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
/// unfinished items end (tool calls `failed` with [`TOOL_ABORTED`](crate::execution::terminal::TOOL_ABORTED)), its unfinished
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
    let mut events = crate::execution::runs::end_unfinished_runs(
        store,
        &thread,
        RunStatus::Interrupted,
        &error,
        now,
    )
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
