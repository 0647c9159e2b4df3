//! `GET /api/sessions` and `POST /api/sessions/{id}/close`: the live provider sessions
//! of the session manager (SPEC.md MGR; operators' view, `knife sessions`).

use axum::Json;
use axum::extract::{Path, State};
use knife_protocol::*;
use knife_runtime::RuntimeError;

use crate::AppState;
use crate::error::ApiErr;

/// `GET /api/sessions`: every live session of this node, sorted by id (threads, busy
/// turns, idle deadline, pin, MCP threads), each naming the node that holds it
/// (SCALE-06). No side effects (does not touch idle timers).
pub(crate) async fn list_sessions(State(s): State<AppState>) -> Json<Vec<LiveSession>> {
    let node = s.store.node().node().to_owned();
    let mut sessions = s.execution.manager().describe();
    for session in &mut sessions {
        session.node = Some(node.clone());
    }
    Json(sessions)
}

/// `POST /api/sessions/{id}/close`: releases live session `id` (reason
/// `manual_shutdown`; persists `stopped`). 404 when no such session is live.
pub(crate) async fn close_session(
    State(s): State<AppState>,
    Path(id): Path<ProviderSessionId>,
) -> Result<Json<CloseSessionResponse>, ApiErr> {
    let manager = s.execution.manager();
    if !manager.is_live(&id) {
        return Err(ApiErr::not_found(format!(
            "no live provider session {id}; list the live ones with GET /api/sessions or \
             `knife sessions list`"
        )));
    }
    manager.close(&id).await.map_err(RuntimeError::from)?;
    Ok(Json(CloseSessionResponse {
        provider_session_id: id,
        closed: true,
    }))
}
