//! Change routes (SPEC.md CHG-03/04): a run's diff between its checkpoints, reverting
//! runs' files, undoing a revert, listing a thread's reverts. Handlers delegate to knife-runtime.

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use knife_protocol::*;
use serde::Deserialize;

use crate::AppState;
use crate::error::ApiErr;

/// `?force=true` (also accepted in the JSON body).
#[derive(Debug, Default, Deserialize, schemars::JsonSchema)]
pub(crate) struct ForceQuery {
    /// Overwrite files changed since (`revert_conflict` otherwise).
    #[serde(default)]
    force: bool,
}

/// `GET /api/threads/{id}/runs/{ordinal}/diff`: the run's unified diff and per-file
/// stats ([`RunDiff`]); 404 unknown thread or run; 409 `no_checkpoint` with the reason
/// (checkpoints off, run still running, checkpoint failed).
pub(crate) async fn run_diff(
    State(s): State<AppState>,
    Path((id, ordinal)): Path<(ThreadId, u32)>,
) -> Result<Json<RunDiff>, ApiErr> {
    Ok(Json(s.execution.run_diff(&id, ordinal).await?))
}

/// `POST /api/threads/{id}/runs/{ordinal}/revert` (`{"force": bool}` or `?force=true`,
/// body optional): 200 with the applied [`Revert`]; 409 `run_in_progress`,
/// `revert_conflict` (with `error.files`), `no_checkpoint`; 404 unknown thread or run.
pub(crate) async fn revert_run(
    State(s): State<AppState>,
    Path((id, ordinal)): Path<(ThreadId, u32)>,
    Query(q): Query<ForceQuery>,
    raw: Bytes,
) -> Result<Json<Revert>, ApiErr> {
    let force = q.force || request(&raw)?.force;
    Ok(Json(s.execution.revert(&id, ordinal, force).await?))
}

/// `POST /api/threads/{id}/reverts/{revert_id}/undo` (`force` as for revert): 200 with
/// the [`Revert`] now `undone`; 404 unknown revert; 400 when it is not applied.
pub(crate) async fn undo_revert(
    State(s): State<AppState>,
    Path((id, revert)): Path<(ThreadId, RevertId)>,
    Query(q): Query<ForceQuery>,
    raw: Bytes,
) -> Result<Json<Revert>, ApiErr> {
    let force = q.force || request(&raw)?.force;
    Ok(Json(s.execution.undo_revert(&id, &revert, force).await?))
}

/// `GET /api/threads/{id}/reverts`: the thread's reverts, oldest first.
pub(crate) async fn list_reverts(
    State(s): State<AppState>,
    Path(id): Path<ThreadId>,
) -> Result<Json<Vec<Revert>>, ApiErr> {
    if s.store.get_thread(&id).await?.is_none() {
        return Err(knife_runtime::RuntimeError::ThreadNotFound(id).into());
    }
    Ok(Json(s.execution.reverts_of(&id).await?))
}

/// `POST /api/threads/{id}/merge` (CHG-07): merges the thread's worktree branch
/// into the project's current branch; 409 `merge_conflict` with `error.files`
/// (nothing changed), `git_refused` (e.g. local changes would be overwritten),
/// `run_in_progress`; 400 when the thread has no worktree.
pub(crate) async fn merge_thread(
    State(s): State<AppState>,
    Path(id): Path<ThreadId>,
) -> Result<Json<MergeResponse>, ApiErr> {
    Ok(Json(s.execution.merge_thread(&id).await?))
}

/// An optional JSON [`RevertRequest`] body (empty = defaults).
fn request(raw: &[u8]) -> Result<RevertRequest, ApiErr> {
    if raw.iter().all(u8::is_ascii_whitespace) {
        return Ok(RevertRequest::default());
    }
    serde_json::from_slice(raw).map_err(|e| {
        ApiErr::bad_request(format!(
            "invalid request body: {e}; send {{\"force\": true}} or nothing"
        ))
    })
}
