//! Boot reconciliation: settles what the previous process left in flight, before
//! the server accepts requests. The durable-execution issue extends this with claims
//! and resumption (EXEC-03..10); until then an interrupted run is ended, not resumed.

use knife_protocol::*;
use knife_store::Store;

use crate::clock::Clock;
use crate::error::RuntimeError;

/// Error text of a tool call that was running when its process died (PROC-08 wording).
pub const TOOL_ABORTED: &str = "Tool execution aborted";

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
        let Some(projection) = store.thread_projection(&thread.id).await? else {
            continue;
        };
        let now = clock.now();
        let mut events = Vec::new();
        for run in projection.runs.iter().filter(|r| !r.status.is_terminal()) {
            let mut run = run.clone();
            run.status = RunStatus::Interrupted;
            run.completed_at = Some(now);
            run.error = Some(RunError::new(
                "interrupted",
                "the server stopped while this run was active; send the message again to continue",
            ));
            report
                .runs_interrupted
                .push((thread.id.clone(), run.id.clone()));
            for item in projection
                .turn_items
                .iter()
                .filter(|i| i.run_id.as_ref() == Some(&run.id))
            {
                if let Some(item) = settle_item(item, now) {
                    events.push(DomainEvent::new(now, EventBody::TurnItemUpdated(item)));
                }
            }
            for turn in projection
                .provider_turns
                .iter()
                .filter(|t| t.run_id == run.id)
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
            events.push(DomainEvent::new(
                now,
                EventBody::NodeUpdated(crate::execution::root_node(
                    &run,
                    NodeStatus::Interrupted,
                    now,
                )),
            ));
            events.push(DomainEvent::new(now, EventBody::RunUpdated(run)));
        }
        let mut thread = thread;
        thread.status = ThreadStatus::Idle;
        thread.active_run_id = None;
        thread.updated_at = now;
        tracing::info!(thread = %thread.id, "ended the run the previous process left active");
        events.push(DomainEvent::new(now, EventBody::ThreadUpdated(thread)));
        store.write(events).await?;
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
