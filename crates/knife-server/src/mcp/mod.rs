//! The `/mcp` endpoint (SPEC.md MCP-12): the official Rust MCP SDK
//! (`rmcp`, streamable HTTP) behind a bearer middleware resolving per-thread
//! credentials through [`CredentialRegistry`].
//!
//! * Missing, unknown or revoked bearer → 401 `invalid_mcp_credential`
//!   (`cache-control: no-store`, `www-authenticate: Bearer error="invalid_token"`).
//!   Every request is checked, so a token revoked mid-session stops working at once.
//! * Tools by capability: `orchestration` → `threads_list`, `thread_read`,
//!   `thread_create`, `thread_send_message`, `thread_status`; `worktree` →
//!   `worktree_create`, `worktree_list`. `preview`, `device` and `pull-requests` are
//!   carried in credentials but expose no tools yet.
//! * Every tool call is recorded as `mcp.tool_called` on the calling thread.
//! * rmcp accepts loopback `Host` headers only (DNS-rebinding protection); configs
//!   name `http://127.0.0.1:<port>/mcp`.

mod tools;
mod worktree;

use std::sync::Arc;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use knife_runtime::mcp::{CredentialRegistry, McpAccessPolicy};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};

use crate::AppState;

pub use tools::{KnifeMcp, tool_names};

/// What the server needs to serve `/mcp`.
#[derive(Clone)]
pub struct McpState {
    /// Resolves bearer tokens (shared with the session manager).
    pub registry: Arc<CredentialRegistry>,
    /// Decides capabilities of credentials minted through the debug route.
    pub access: Arc<dyn McpAccessPolicy>,
    /// When true, `POST /api/threads/{id}/mcp-token` mints a credential for a thread
    /// (tests and debugging; `KNIFE_DEBUG_MCP_TOKENS=1`). Off: that route is 404.
    pub debug_tokens: bool,
    /// Where `worktree_create` puts worktrees when the call names no `path`
    /// (`<worktrees_dir>/<project id>/<branch>`), and the only place outside the
    /// project it may put one (SEC-06): `<data dir>/worktrees` under `knife serve`.
    pub worktrees_dir: std::path::PathBuf,
}

/// The `/mcp` router: rmcp's streamable HTTP service behind [`require_credential`].
pub(crate) fn router(state: &AppState, mcp: &McpState) -> Router<AppState> {
    let handler_state = state.clone();
    // No SSE priming events (rmcp's default sends `data: ` + `id: 0` + `retry:` first
    // in every response stream, from the service and from the session manager):
    // Gemini CLI 0.61's MCP client chokes on the empty event and drops the server's
    // tools (found by the peer suite, e2e_peers.rs).
    let config = StreamableHttpServerConfig::default()
        .with_sse_retry(None)
        .with_cancellation_token(state.closing.child_token());
    let mut sessions = LocalSessionManager::default();
    sessions.session_config.sse_retry = None;
    let sessions = Arc::new(sessions);
    let service = StreamableHttpService::new(
        move || Ok(KnifeMcp::new(handler_state.clone())),
        Arc::clone(&sessions),
        config,
    );
    Router::new()
        .nest_service("/mcp", service)
        .layer(middleware::from_fn_with_state(
            sessions,
            unknown_session_delete,
        ))
        .layer(middleware::from_fn_with_state(
            mcp.registry.clone(),
            require_credential,
        ))
}

/// `DELETE /mcp` naming a session that does not exist (never opened, already
/// closed, or from before a restart) answers 404, like POST and GET do (SEC-08;
/// rmcp alone answers 202 to any DELETE). Runs after the credential check.
async fn unknown_session_delete(
    State(sessions): State<Arc<LocalSessionManager>>,
    request: Request,
    next: Next,
) -> Response {
    if request.method() == axum::http::Method::DELETE {
        let id = request
            .headers()
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        if let Some(id) = id
            && !sessions.sessions.read().await.contains_key(id.as_str())
        {
            return (
                StatusCode::NOT_FOUND,
                "Not Found: Session not found (it was closed, or belongs to a server that restarted)",
            )
                .into_response();
        }
    }
    next.run(request).await
}

/// Resolves `Authorization: Bearer <token>` and stores the
/// [`knife_runtime::mcp::CredentialScope`] in the request extensions; 401 otherwise.
async fn require_credential(
    State(registry): State<Arc<CredentialRegistry>>,
    mut request: Request,
    next: Next,
) -> Response {
    let token = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim);
    let reason = match token {
        None | Some("") => "missing_bearer_token",
        Some(token) => match registry.resolve(token) {
            Some(scope) => {
                request.extensions_mut().insert(scope);
                return next.run(request).await;
            }
            None => "unknown_or_revoked_token",
        },
    };
    tracing::info!(reason, "rejected MCP request with an unusable credential");
    let body = serde_json::json!({
        "error": "invalid_mcp_credential",
        "message": "A valid knife MCP credential is required: send the Authorization header \
                    of the thread's MCP config (Bearer knife_mcp_...); credentials end when \
                    their session is released and do not survive a server restart.",
    });
    let mut response = (StatusCode::UNAUTHORIZED, axum::Json(body)).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(
        header::WWW_AUTHENTICATE,
        HeaderValue::from_static("Bearer error=\"invalid_token\""),
    );
    response
}

fn debug_state(state: &AppState) -> Result<&McpState, crate::ApiErr> {
    state
        .mcp
        .as_ref()
        .filter(|m| m.debug_tokens)
        .ok_or_else(|| {
            crate::ApiErr::not_found(
                "no such route; minting MCP tokens over the API needs KNIFE_DEBUG_MCP_TOKENS=1 \
             on the server",
            )
        })
}

/// `DELETE /api/threads/{id}/mcp-token` (debug only): revokes every credential of
/// thread `id`, as a terminal detach does (MCP-07); answers `{"revoked": n}`.
pub(crate) async fn revoke_tokens(
    State(state): State<AppState>,
    axum::extract::Path(id): axum::extract::Path<knife_protocol::ThreadId>,
) -> Result<axum::Json<serde_json::Value>, crate::ApiErr> {
    let mcp = debug_state(&state)?;
    let revoked = mcp.registry.revoke_thread(&id);
    Ok(axum::Json(serde_json::json!({ "revoked": revoked })))
}

/// `POST /api/threads/{id}/mcp-token` (debug only, `McpState::debug_tokens`): mints a
/// credential for thread `id` with the capabilities its access settings allow and
/// returns its MCP config (`authorizationHeader` carries the token). 404 when debug
/// tokens are off or the thread does not exist.
pub(crate) async fn mint_token(
    State(state): State<AppState>,
    axum::extract::Path(id): axum::extract::Path<knife_protocol::ThreadId>,
) -> Result<axum::Json<knife_runtime::mcp::McpSessionConfig>, crate::ApiErr> {
    let mcp = debug_state(&state)?;
    let Some(thread) = state.store.get_thread(&id).await? else {
        return Err(crate::ApiErr::not_found(format!(
            "thread {id} does not exist; list threads with GET /api/threads"
        )));
    };
    let access = mcp.access.access(&id).await;
    let config = mcp
        .registry
        .issue_for(knife_runtime::mcp::CredentialRequest {
            thread_id: id,
            provider_instance_id: thread.provider_instance_id,
            provider_session_id: None,
            capabilities: knife_runtime::mcp::capabilities_for(access),
        })
        .map_err(|e| crate::ApiErr {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            code: "internal",
            message: e.to_string(),
            files: Vec::new(),
        })?;
    Ok(axum::Json(config))
}
