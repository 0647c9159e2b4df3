//! REST handlers: projects, threads, messages, interrupts, health and metrics.
//! Handlers validate input and delegate to knife-runtime; they own no state.

use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{Path, Query, Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use knife_protocol::*;
use knife_runtime::{InterruptReason, commands};
use serde::Deserialize;
use subtle::ConstantTimeEq;

use crate::AppState;
use crate::error::ApiErr;

/// The full router: `/api/*`, `/healthz`, `/metrics`.
pub fn router(state: AppState) -> Router {
    let api = Router::new()
        .route("/projects", post(create_project).get(list_projects))
        .route("/threads", post(create_thread).get(list_threads))
        .route("/threads/{id}", get(get_thread))
        .route("/threads/{id}/messages", post(post_message))
        .route("/threads/{id}/interrupt", post(interrupt))
        .route("/threads/{id}/events", get(crate::events::sse_events))
        .route("/ws", get(crate::events::websocket))
        .fallback(api_not_found)
        .route_layer(middleware::from_fn_with_state(state.clone(), require_token));
    Router::new()
        .nest("/api", api)
        .route("/healthz", get(|| async { "ok" }))
        .route("/metrics", get(render_metrics))
        .with_state(state)
}

async fn api_not_found() -> ApiErr {
    ApiErr::not_found("no such API route; see the README for the list of routes")
}

/// Bearer-token check, active only when the server has an API token (non-loopback binds).
async fn require_token(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let Some(expected) = state.api_token.as_deref() else {
        return next.run(request).await;
    };
    let from_header = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::to_owned);
    let from_query = request
        .uri()
        .query()
        .and_then(|q| q.split('&').find_map(|kv| kv.strip_prefix("token=")))
        .map(str::to_owned);
    match from_header.or(from_query) {
        Some(given) if bool::from(given.as_bytes().ct_eq(expected.as_bytes())) => {
            next.run(request).await
        }
        _ => ApiErr::unauthorized().into_response(),
    }
}

/// Turns a JSON body rejection into a 400 that says what is wrong.
fn body<T>(payload: Result<Json<T>, JsonRejection>) -> Result<T, ApiErr> {
    payload
        .map(|Json(v)| v)
        .map_err(|e| ApiErr::bad_request(format!("invalid request body: {}", e.body_text())))
}

async fn create_project(
    State(s): State<AppState>,
    payload: Result<Json<CreateProjectRequest>, JsonRejection>,
) -> Result<(StatusCode, Json<Project>), ApiErr> {
    let project = commands::create_project(&s.store, s.clock.as_ref(), body(payload)?).await?;
    Ok((StatusCode::CREATED, Json(project)))
}

async fn list_projects(State(s): State<AppState>) -> Result<Json<Vec<Project>>, ApiErr> {
    Ok(Json(s.store.list_projects().await?))
}

async fn create_thread(
    State(s): State<AppState>,
    payload: Result<Json<CreateThreadRequest>, JsonRejection>,
) -> Result<(StatusCode, Json<Thread>), ApiErr> {
    let known = s.execution.manager().instances();
    let thread = commands::create_thread(
        &s.store,
        s.clock.as_ref(),
        body(payload)?,
        &s.default_instance,
        &known,
    )
    .await?;
    Ok((StatusCode::CREATED, Json(thread)))
}

#[derive(Deserialize)]
struct ThreadListQuery {
    project_id: Option<ProjectId>,
}

async fn list_threads(
    State(s): State<AppState>,
    query: Result<Query<ThreadListQuery>, QueryRejection>,
) -> Result<Json<Vec<Thread>>, ApiErr> {
    let Query(q) = query.map_err(|e| ApiErr::bad_request(e.body_text()))?;
    Ok(Json(s.store.list_threads(q.project_id.as_ref()).await?))
}

async fn get_thread(
    State(s): State<AppState>,
    Path(id): Path<ThreadId>,
) -> Result<Json<ThreadProjection>, ApiErr> {
    match s.store.thread_projection(&id).await? {
        Some(p) => Ok(Json(p)),
        None => Err(ApiErr::not_found(format!("thread {id} does not exist"))),
    }
}

async fn post_message(
    State(s): State<AppState>,
    Path(id): Path<ThreadId>,
    payload: Result<Json<PostMessageRequest>, JsonRejection>,
) -> Result<(StatusCode, Json<PostMessageResponse>), ApiErr> {
    let request = body(payload)?;
    let run = s.execution.start_run(&id, request.text).await?;
    Ok((
        StatusCode::ACCEPTED,
        Json(PostMessageResponse {
            thread_id: id,
            run_id: run.id,
        }),
    ))
}

async fn interrupt(
    State(s): State<AppState>,
    Path(id): Path<ThreadId>,
) -> Result<Json<InterruptResponse>, ApiErr> {
    let run_id = s.execution.interrupt(&id, InterruptReason::User).await?;
    Ok(Json(InterruptResponse {
        thread_id: id,
        run_id,
    }))
}

async fn render_metrics(State(s): State<AppState>) -> impl IntoResponse {
    let text = s.metrics.as_ref().map(|h| h.render()).unwrap_or_default();
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text)
}
