//! Thread lifecycle routes (CHG-08, CHG-09): `PATCH /api/threads/{id}` (rename,
//! archive / unarchive), `DELETE /api/threads/{id}` and `POST /api/threads/{id}/fork`.

use axum::Json;
use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use knife_protocol::*;
use serde::Deserialize;

use crate::AppState;
use crate::error::ApiErr;

/// `PATCH /api/threads/{id}` with `{"title"?: string, "archived"?: bool}`: 200 with the
/// thread. 400 for a bad title (empty, over 200 characters, control characters) or an
/// empty body; 404 unknown thread; 409 `run_in_progress` when archiving during a run.
pub(crate) async fn update_thread(
    State(s): State<AppState>,
    Path(id): Path<ThreadId>,
    payload: Result<Json<UpdateThreadRequest>, JsonRejection>,
) -> Result<Json<Thread>, ApiErr> {
    let request = crate::routes::body(payload)?;
    if request.title.is_none() && request.archived.is_none() {
        return Err(ApiErr::bad_request(
            "nothing to change: send `title` (a new name) and/or `archived` (true or false)",
        ));
    }
    let mut thread = None;
    if let Some(title) = &request.title {
        thread = Some(s.execution.rename_thread(&id, title).await?);
    }
    match request.archived {
        Some(true) => thread = Some(s.execution.archive_thread(&id).await?),
        Some(false) => thread = Some(s.execution.unarchive_thread(&id).await?),
        None => {}
    }
    thread
        .map(Json)
        .ok_or_else(|| ApiErr::bad_request("nothing to change"))
}

/// Query of `DELETE /api/threads/{id}`.
#[derive(Deserialize, schemars::JsonSchema)]
pub(crate) struct DeleteQuery {
    /// Stop a running run and drop a worktree that holds work.
    #[serde(default)]
    force: bool,
}

/// `DELETE /api/threads/{id}[?force=true]`: 200 with [`DeleteThreadResponse`]. 404
/// unknown thread; 409 `run_in_progress` while a run is active (unless `force`, which
/// stops it first) and `workspace_not_clean` when the worktree holds work (unless `force`).
pub(crate) async fn delete_thread(
    State(s): State<AppState>,
    Path(id): Path<ThreadId>,
    query: Result<Query<DeleteQuery>, QueryRejection>,
) -> Result<Json<DeleteThreadResponse>, ApiErr> {
    let Query(q) = query
        .map_err(|e| ApiErr::bad_request(format!("invalid query string: {}", e.body_text())))?;
    Ok(Json(s.execution.delete_thread(&id, q.force).await?))
}

/// `POST /api/threads/{id}/fork` with `{"after_run"?: n, "title"?: string}`: 201 with
/// the new thread (CHG-09). 400 no such run / run still active / bad title; 404
/// unknown thread; 409 `fork_unsupported` for runtimes that cannot fork (ACP).
pub(crate) async fn fork_thread(
    State(s): State<AppState>,
    Path(id): Path<ThreadId>,
    payload: Result<Json<ForkThreadRequest>, JsonRejection>,
) -> Result<(StatusCode, Json<Thread>), ApiErr> {
    let request = crate::routes::body(payload)?;
    let thread = s.execution.fork_thread(&id, request).await?;
    Ok((StatusCode::CREATED, Json(thread)))
}
