//! REST handlers: projects, threads, messages, interrupts, runtime requests
//! (approvals), health and metrics.
//! Handlers validate input and delegate to knife-runtime; they own no state.

use std::sync::Arc;

use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{Path, Query, Request, State};
use axum::http::{Method, StatusCode, Uri, header};
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

/// The full router: `/api/*`, `/healthz`, `/metrics`, the web page (`/` and
/// `/ui/{file}`, public; see [`crate::ui`]); every other path answers a JSON
/// 404 `not_found`, and a known path with an unsupported method a JSON 405
/// `method_not_allowed` (with `Allow`).
///
/// Access (when [`AppState::api_token`] is set): `/api/*` and `/metrics` need
/// `Authorization: Bearer <token>`; `/api/ws` alone also takes `?token=<token>`;
/// `/healthz` is open.
///
/// Every route refuses a foreign `Origin` and, without an API token, a non-loopback
/// `Host` (403 `forbidden`; see `origin.rs`): other web pages cannot use knife
/// through the user's browser.
pub fn router(state: AppState) -> Router {
    let header_only = || middleware::from_fn_with_state(state.clone(), require_token);
    let api = Router::new()
        .route("/projects", post(create_project).get(list_projects))
        .route("/threads", post(create_thread).get(list_threads))
        .route(
            "/threads/{id}",
            get(get_thread)
                .patch(crate::threads::update_thread)
                .delete(crate::threads::delete_thread),
        )
        .route("/threads/{id}/messages", post(post_message))
        .route("/threads/{id}/queue", get(get_queue).delete(clear_queue))
        .route("/threads/{id}/queue/resume", post(resume_queue))
        .route("/threads/{id}/budget", post(raise_budget))
        .route(
            "/threads/{id}/queue/{entry}",
            axum::routing::delete(cancel_queued),
        )
        .route("/threads/{id}/fork", post(crate::threads::fork_thread))
        .route("/threads/{id}/interrupt", post(interrupt))
        .route("/threads/{id}/requests", get(list_requests))
        .route(
            "/threads/{id}/runs/{ordinal}/diff",
            get(crate::changes::run_diff),
        )
        .route(
            "/threads/{id}/runs/{ordinal}/revert",
            post(crate::changes::revert_run),
        )
        .route("/threads/{id}/reverts", get(crate::changes::list_reverts))
        .route("/threads/{id}/merge", post(crate::changes::merge_thread))
        .route(
            "/threads/{id}/reverts/{revert_id}/undo",
            post(crate::changes::undo_revert),
        )
        .route(
            "/threads/{id}/requests/{request_id}",
            post(answer_request).get(get_request),
        )
        .route("/threads/{id}/events", get(crate::events::sse_events))
        .route("/events/latest", get(latest_sequence))
        .route("/providers", get(list_providers))
        .route("/usage", get(crate::usage::usage))
        .route("/search", get(crate::search::search))
        .route(
            "/threads/{id}/mcp-token",
            post(crate::mcp::mint_token).delete(crate::mcp::revoke_tokens),
        )
        .route("/sessions", get(crate::sessions::list_sessions))
        .route("/sessions/{id}/close", post(crate::sessions::close_session))
        .route("/openapi.json", get(crate::openapi::serve))
        .route_layer(header_only());
    // Layered apart from the other routes: a browser cannot set headers on a
    // WebSocket, so only this route also accepts the token in the query string.
    let ws = Router::new()
        .route("/ws", get(crate::events::websocket))
        .route_layer(middleware::from_fn_with_state(
            state.clone(),
            require_token_or_query,
        ));
    let api = api
        .merge(ws)
        .fallback(api_not_found)
        .method_not_allowed_fallback(method_not_allowed);
    let metrics = Router::new()
        .route("/metrics", get(render_metrics))
        .route_layer(header_only());
    let mcp = match &state.mcp {
        Some(mcp) => crate::mcp::router(&state, mcp),
        None => Router::new(),
    };
    Router::new()
        .nest("/api", api)
        .merge(metrics)
        .merge(mcp)
        .route("/healthz", get(|| async { "ok" }))
        .route("/", get(crate::ui::index))
        .route("/ui/{file}", get(crate::ui::asset))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(middleware::from_fn_with_state(
            state.clone(),
            crate::origin::guard,
        ))
        // Outermost: an over-long body is refused before origin, token or handler.
        .layer(axum::extract::DefaultBodyLimit::max(
            knife_protocol::limits::BODY_MAX_BYTES,
        ))
        .layer(middleware::from_fn(crate::limits::body_limit))
        // One span per HTTP request (`http{method=… path=…}`), around everything.
        .layer(
            tower_http::trace::TraceLayer::new_for_http().make_span_with(
                |req: &axum::http::Request<axum::body::Body>| {
                    tracing::info_span!(
                        "http",
                        otel.name = %format!("{} {}", req.method(), req.uri().path()),
                        otel.kind = "server",
                        http.request.method = %req.method(),
                        url.path = %req.uri().path(),
                    )
                },
            ),
        )
        .with_state(state)
}

async fn api_not_found() -> ApiErr {
    ApiErr::not_found("no such API route; the README's HTTP API table lists the routes")
}

async fn not_found() -> ApiErr {
    ApiErr::not_found(
        "no such page; the web page is at /, the API under /api (see the README), plus /healthz and /metrics",
    )
}

async fn method_not_allowed(method: Method, uri: Uri) -> ApiErr {
    ApiErr::method_not_allowed(format!(
        "{method} is not supported on {}; the Allow header lists the methods it takes",
        uri.path()
    ))
}

/// Bearer-token check for every protected route but `/api/ws`: only the
/// `Authorization` header counts. Active only when the server has an API token.
async fn require_token(State(state): State<AppState>, request: Request, next: Next) -> Response {
    check_token(state.api_token, request, next, false).await
}

/// Token check of `/api/ws`: the `Authorization` header, or `?token=` (browsers
/// cannot set headers on a WebSocket; the value is percent-decoded).
async fn require_token_or_query(
    State(state): State<AppState>,
    request: Request,
    next: Next,
) -> Response {
    check_token(state.api_token, request, next, true).await
}

async fn check_token(
    token: Option<Arc<str>>,
    request: Request,
    next: Next,
    query_ok: bool,
) -> Response {
    let Some(expected) = token.as_deref() else {
        return next.run(request).await;
    };
    let given = token_from(&request, query_ok);
    match given {
        // Constant-time compare: the answer time does not leak how much of a guess matched.
        Some(given) if bool::from(given.as_bytes().ct_eq(expected.as_bytes())) => {
            next.run(request).await
        }
        _ => ApiErr::unauthorized(query_ok).into_response(),
    }
}

/// The token a request presents: the `Authorization: Bearer` header, else (when
/// `query_ok`) the `token=` query parameter. A plain function, so no borrow of the
/// request (whose body is not `Sync`) lives across the middleware's `.await`.
fn token_from(request: &Request, query_ok: bool) -> Option<String> {
    let from_header = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    // The query is form-urlencoded: a browser sends `encodeURIComponent(token)`, so
    // tokens with `+`, `/` or `=` (base64) arrive percent-encoded and are decoded here.
    let from_query = || {
        Query::<std::collections::HashMap<String, String>>::try_from_uri(request.uri())
            .ok()
            .and_then(|Query(mut q)| q.remove("token"))
    };
    match from_header {
        Some(t) => Some(t.to_owned()),
        None if query_ok => from_query(),
        None => None,
    }
}

/// Turns a JSON body rejection into a 400 that says what is wrong, or a 413 when
/// the body outgrew [`knife_protocol::limits::BODY_MAX_BYTES`] while it was read.
pub(crate) fn body<T>(payload: Result<Json<T>, JsonRejection>) -> Result<T, ApiErr> {
    payload.map(|Json(v)| v).map_err(|e| {
        if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
            crate::limits::too_large(None)
        } else {
            ApiErr::bad_request(format!("invalid request body: {}", e.body_text()))
        }
    })
}

/// 201 with the new project, or 200 with the existing one when the folder is
/// already a project (one project per folder).
async fn create_project(
    State(s): State<AppState>,
    payload: Result<Json<CreateProjectRequest>, JsonRejection>,
) -> Result<(StatusCode, Json<Project>), ApiErr> {
    let (project, created) =
        commands::create_project(&s.store, s.clock.as_ref(), body(payload)?).await?;
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(project)))
}

async fn list_projects(State(s): State<AppState>) -> Result<Json<Vec<Project>>, ApiErr> {
    Ok(Json(s.store.list_projects().await?))
}

async fn create_thread(
    State(s): State<AppState>,
    payload: Result<Json<CreateThreadRequest>, JsonRejection>,
) -> Result<(StatusCode, Json<Thread>), ApiErr> {
    let known = s.execution.manager().instances();
    let request = body(payload)?;
    // Checked before the thread exists: a folder that is not a git repository is a
    // clear 400, not a thread without its worktree (CHG-07).
    let worktree = s.execution.wants_worktree(&request).await?;
    let thread = commands::create_thread(
        &s.store,
        s.clock.as_ref(),
        request,
        &s.default_instance,
        &known,
    )
    .await?;
    let thread = if worktree {
        s.execution.attach_worktree(thread).await?
    } else {
        thread
    };
    Ok((StatusCode::CREATED, Json(thread)))
}

/// Query of `GET /api/threads`.
#[derive(Deserialize, schemars::JsonSchema)]
pub(crate) struct ThreadListQuery {
    /// Only the threads of this project.
    project_id: Option<ProjectId>,
    /// `true` also lists archived threads (CHG-08); default: hidden.
    #[serde(default)]
    archived: bool,
}

async fn list_threads(
    State(s): State<AppState>,
    query: Result<Query<ThreadListQuery>, QueryRejection>,
) -> Result<Json<Vec<Thread>>, ApiErr> {
    let Query(q) = query
        .map_err(|e| ApiErr::bad_request(format!("invalid query string: {}", e.body_text())))?;
    let mut threads = s.store.list_threads(q.project_id.as_ref()).await?;
    if !q.archived {
        threads.retain(|t| !t.is_archived());
    }
    Ok(Json(threads))
}

async fn get_thread(
    State(s): State<AppState>,
    Path(id): Path<ThreadId>,
) -> Result<Json<ThreadProjection>, ApiErr> {
    match s.store.thread_projection(&id).await? {
        Some(mut p) => {
            p.mcp = s.mcp.as_ref().map(|m| m.registry.info(&id));
            // Which node runs the thread (SCALE-06).
            p.lease = s.store.get_lease(&id).await?.map(|l| ThreadLease {
                node: l.node,
                epoch: l.epoch,
                expires_at: l.expires_at,
            });
            Ok(Json(p))
        }
        None => Err(ApiErr::not_found(format!(
            "thread {id} does not exist; list threads with `knife threads list` or GET /api/threads"
        ))),
    }
}

/// `POST /api/threads/{id}/messages` with `{"text", "model"?, "mode"?}`: 202 with
/// what became of it (TURN-01): `started` (a run), `queued` (position) or
/// `steering`; `mode: "reject"` on a busy thread answers 409 `run_in_progress`, an
/// unknown mode 400 naming the allowed ones.
async fn post_message(
    State(s): State<AppState>,
    Path(id): Path<ThreadId>,
    payload: Result<Json<PostMessageRequest>, JsonRejection>,
) -> Result<(StatusCode, Json<PostMessageResponse>), ApiErr> {
    let request = body(payload)?;
    let posted = s
        .execution
        .post_message(&id, request.text, request.model, request.mode)
        .await?;
    Ok((StatusCode::ACCEPTED, Json(posted)))
}

/// `GET /api/threads/{id}/queue`: the thread's queued messages (in order), pending
/// steers and pause (TURN-01/02).
async fn get_queue(
    State(s): State<AppState>,
    Path(id): Path<ThreadId>,
) -> Result<Json<QueueResponse>, ApiErr> {
    Ok(Json(s.execution.queue(&id).await?))
}

/// `DELETE /api/threads/{id}/queue`: drops every queued message and the pause (TURN-02).
async fn clear_queue(
    State(s): State<AppState>,
    Path(id): Path<ThreadId>,
) -> Result<Json<QueueResponse>, ApiErr> {
    Ok(Json(s.execution.clear_queue(&id).await?))
}

/// `POST /api/threads/{id}/queue/resume`: lifts the pause; an idle thread starts
/// its first queued message at once (TURN-02).
async fn resume_queue(
    State(s): State<AppState>,
    Path(id): Path<ThreadId>,
) -> Result<Json<QueueResponse>, ApiErr> {
    Ok(Json(s.execution.resume_queue(&id).await?))
}

/// `POST /api/threads/{id}/budget` with `{"tokens"?, "cost_usd"?, "continue"?}`:
/// adds to the thread's budgets and, with `continue`, starts a continuation run
/// (TURN-07). 400 for a negative cost or an empty raise, 409 `run_in_progress`
/// when continuing a busy thread (the raise is kept).
async fn raise_budget(
    State(s): State<AppState>,
    Path(id): Path<ThreadId>,
    payload: Result<Json<RaiseBudgetRequest>, JsonRejection>,
) -> Result<Json<RaiseBudgetResponse>, ApiErr> {
    let request = body(payload)?;
    let cost = match request.cost_usd {
        Some(usd) if !usd.is_finite() || usd < 0.0 => {
            return Err(ApiErr::bad_request(format!(
                "cost_usd = {usd} is not an amount; give USD, 0 or more (e.g. 2.5)"
            )));
        }
        Some(usd) => (usd * 1_000_000.0).round() as u64,
        None => 0,
    };
    let (raise, run) = s
        .execution
        .raise_budget(&id, request.tokens.unwrap_or(0), cost, request.continue_run)
        .await?;
    Ok(Json(RaiseBudgetResponse {
        thread_id: id,
        budget_raise: raise,
        run_id: run.map(|r| r.id),
    }))
}

/// `DELETE /api/threads/{id}/queue/{entry}`: cancels one queued message (404 when
/// it started already or does not exist).
async fn cancel_queued(
    State(s): State<AppState>,
    Path((id, entry)): Path<(ThreadId, QueuedMessageId)>,
) -> Result<Json<QueueResponse>, ApiErr> {
    Ok(Json(s.execution.cancel_queued(&id, &entry).await?))
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

/// `GET /api/threads/{id}/requests`: the thread's runtime requests (approvals),
/// oldest first, every status (pending ones are those still waiting for an answer).
async fn list_requests(
    State(s): State<AppState>,
    Path(id): Path<ThreadId>,
) -> Result<Json<Vec<RuntimeRequest>>, ApiErr> {
    let Some(p) = s.store.thread_projection(&id).await? else {
        return Err(thread_not_found(&id));
    };
    let mut requests = p.runtime_requests;
    requests.sort_by(|a, b| a.created_at.cmp(&b.created_at).then(a.id.cmp(&b.id)));
    Ok(Json(requests))
}

/// `GET /api/threads/{id}/requests/{request_id}`: one runtime request.
async fn get_request(
    State(s): State<AppState>,
    Path((id, request_id)): Path<(ThreadId, RuntimeRequestId)>,
) -> Result<Json<RuntimeRequest>, ApiErr> {
    match s.store.get_runtime_request(&request_id).await? {
        Some(r) if r.thread_id == id => Ok(Json(r)),
        _ if s.store.get_thread(&id).await?.is_none() => Err(thread_not_found(&id)),
        _ => Err(knife_runtime::RuntimeError::RequestNotFound {
            thread: id,
            request: request_id,
        }
        .into()),
    }
}

/// `POST /api/threads/{id}/requests/{request_id}` with `{"decision": "allow_once" |
/// "allow_always" | "deny", "message"?: string}`: 200 with the resolved request;
/// 404 unknown thread or request; 409 `request_not_pending` when it was already
/// answered, expired or cancelled, or no running turn waits for it.
async fn answer_request(
    State(s): State<AppState>,
    Path((id, request_id)): Path<(ThreadId, RuntimeRequestId)>,
    payload: Result<Json<RequestAnswer>, JsonRejection>,
) -> Result<Json<RuntimeRequest>, ApiErr> {
    let answer = body(payload)?;
    let request = s
        .execution
        .respond_to_request(&id, &request_id, answer)
        .await?;
    Ok(Json(request))
}

/// `GET /api/events/latest`: the log's highest sequence (see [`LatestSequenceResponse`]).
async fn latest_sequence(
    State(s): State<AppState>,
) -> Result<Json<LatestSequenceResponse>, ApiErr> {
    Ok(Json(LatestSequenceResponse {
        sequence: s.store.latest_sequence(None).await?,
    }))
}

/// `GET /api/providers`: the configured provider instances, sorted by id, with the
/// default one marked (what `POST /api/threads` takes as `provider_instance_id`).
async fn list_providers(State(s): State<AppState>) -> Json<Vec<ProviderInstanceInfo>> {
    let mut out: Vec<_> = s
        .providers
        .iter()
        .map(|p| ProviderInstanceInfo {
            default: p.id == s.default_instance,
            ..p.clone()
        })
        .collect();
    out.sort_by(|a, b| a.id.cmp(&b.id));
    Json(out)
}

/// 404 for an unknown thread.
fn thread_not_found(id: &ThreadId) -> ApiErr {
    knife_runtime::RuntimeError::ThreadNotFound(id.clone()).into()
}

async fn render_metrics(State(s): State<AppState>) -> impl IntoResponse {
    // CHG-11: sets the `knife_checkpoint_bytes` gauge before the page is rendered.
    s.execution.checkpoint_bytes().await;
    let text = s
        .metrics
        .as_ref()
        .map(metrics_exporter_prometheus::PrometheusHandle::render)
        .unwrap_or_default();
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text)
}
