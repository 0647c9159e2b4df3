//! `GET /api/sessions` and `POST /api/sessions/{id}/close`: the live provider sessions
//! of every node (SPEC.md MGR, SCALE-06; operators' view, `knife sessions`).

use std::collections::{HashMap, HashSet};

use axum::Json;
use axum::extract::{Path, State};
use knife_protocol::*;
use knife_runtime::{RemoteClose, RuntimeError};

use crate::AppState;
use crate::error::ApiErr;

/// `GET /api/sessions`: every live session of every node, sorted by id, each naming
/// the node that holds it (SCALE-06). This node's come from its session manager
/// (threads, busy turns, idle deadline, pin, MCP threads); the other live nodes'
/// (membership heartbeat, SCALE-05) from the store: their session rows not `stopped` /
/// `error` with the threads bound to them, marked `remote` (only their node knows
/// their turns, idle timer and pin, and can close them). No side effects (does not
/// touch idle timers).
pub(crate) async fn list_sessions(
    State(s): State<AppState>,
) -> Result<Json<Vec<LiveSession>>, ApiErr> {
    let me = s.store.node().node().to_owned();
    let mut sessions = s.execution.manager().describe();
    for session in &mut sessions {
        session.node = Some(me.clone());
    }
    let live: HashSet<String> = s
        .store
        .live_nodes()
        .await?
        .into_iter()
        .map(|m| m.node)
        .filter(|node| *node != me)
        .collect();
    if !live.is_empty() {
        let mut bound: HashMap<ProviderSessionId, Vec<ThreadId>> = HashMap::new();
        for activity in s.store.list_session_activity().await? {
            bound
                .entry(activity.session.id)
                .or_default()
                .push(activity.thread_id);
        }
        for record in s.store.list_provider_sessions().await? {
            let node = record.id.node().to_owned();
            if !live.contains(&node)
                || matches!(record.status, SessionStatus::Stopped | SessionStatus::Error)
            {
                continue;
            }
            let mut threads = bound.remove(&record.id).unwrap_or_default();
            threads.sort();
            sessions.push(LiveSession {
                provider_session_id: record.id,
                driver: record.driver,
                provider_instance_id: record.provider_instance_id,
                status: record.status,
                model: record.model,
                cwd: record.cwd,
                capabilities: record.capabilities,
                threads,
                busy_turns: Vec::new(),
                idle_deadline: None,
                pinned_since: None,
                mcp_threads: Vec::new(),
                node: Some(node),
                remote: true,
            });
        }
        sessions.sort_by(|a, b| a.provider_session_id.cmp(&b.provider_session_id));
    }
    Ok(Json(sessions))
}

/// `POST /api/sessions/{id}/close`: releases live session `id` (reason
/// `manual_shutdown`; persists `stopped`), on whichever node runs it (SCALE-06): a
/// session of another node is closed by that node through a `session.command` in the
/// log, with the same answer as there. 404 when no such session is live; 409
/// `session_on_another_node` when its node did not answer in time.
pub(crate) async fn close_session(
    State(s): State<AppState>,
    Path(id): Path<ProviderSessionId>,
) -> Result<Json<CloseSessionResponse>, ApiErr> {
    let manager = s.execution.manager();
    let closed = Json(CloseSessionResponse {
        provider_session_id: id.clone(),
        closed: true,
    });
    let not_live = |why: String| {
        ApiErr::not_found(format!(
            "no live provider session {id}{why}; list the live ones with GET /api/sessions \
             or `knife sessions list`"
        ))
    };
    if manager.is_live(&id) {
        manager.close(&id).await.map_err(RuntimeError::from)?;
        return Ok(closed);
    }
    let me = s.store.node().node();
    let record = s.store.get_provider_session(&id).await?;
    let Some(record) = record.filter(|r| {
        r.id.node() != me && !matches!(r.status, SessionStatus::Stopped | SessionStatus::Error)
    }) else {
        return Err(not_live(String::new()));
    };
    let node = record.id.node().to_owned();
    match s.execution.close_remote_session(&id, &node).await? {
        RemoteClose::Answered(SessionCommandOutcome::Closed) => Ok(closed),
        RemoteClose::Answered(SessionCommandOutcome::NotLive) => {
            Err(not_live(format!(" (node {node} runs no such session)")))
        }
        RemoteClose::Answered(SessionCommandOutcome::Failed { reason }) => Err(ApiErr {
            status: axum::http::StatusCode::INTERNAL_SERVER_ERROR,
            code: "provider_session",
            message: format!("node {node} could not close provider session {id}: {reason}"),
            files: Vec::new(),
        }),
        RemoteClose::NoAnswer => Err(ApiErr {
            status: axum::http::StatusCode::CONFLICT,
            code: "session_on_another_node",
            message: format!(
                "provider session {id} runs on node {node}, which did not answer the close \
                 within {} s; check that node (its sessions stop with it), or retry",
                knife_runtime::COMMAND_WAIT.as_secs()
            ),
            files: Vec::new(),
        }),
    }
}
