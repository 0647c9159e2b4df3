//! API errors: a stable machine code, a human message, and the HTTP status
//! where it belongs (400 bad input, 401 no token, 403 foreign origin or host, 404 unknown ids or routes,
//! 405 unknown method, 409 conflicts).

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use knife_protocol::{ApiError, ApiErrorBody};
use knife_runtime::RuntimeError;

/// An error answer of the API.
#[derive(Debug)]
pub struct ApiErr {
    /// HTTP status of the answer.
    pub status: StatusCode,
    /// Stable machine code (`not_found`, `invalid_request`, …): `error.code`.
    pub code: &'static str,
    /// What happened and what to do: `error.message`.
    pub message: String,
    /// Files the error is about (`revert_conflict`, CHG-04): `error.files`.
    pub files: Vec<String>,
}

impl ApiErr {
    /// 400 `invalid_request`.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self {
            status: StatusCode::BAD_REQUEST,
            code: "invalid_request",
            message: message.into(),
            files: Vec::new(),
        }
    }

    /// 404 `not_found`.
    pub fn not_found(message: impl Into<String>) -> Self {
        Self {
            status: StatusCode::NOT_FOUND,
            code: "not_found",
            message: message.into(),
            files: Vec::new(),
        }
    }

    /// 405 `method_not_allowed`: the path exists, the method does not (the `Allow`
    /// header of the response lists the methods it has).
    pub fn method_not_allowed(message: impl Into<String>) -> Self {
        Self {
            status: StatusCode::METHOD_NOT_ALLOWED,
            code: "method_not_allowed",
            message: message.into(),
            files: Vec::new(),
        }
    }

    /// 403 `forbidden`: the request may not be answered whatever it carries (a
    /// foreign page's `Origin`, a non-loopback `Host` without a token).
    pub fn forbidden(message: impl Into<String>) -> Self {
        Self {
            status: StatusCode::FORBIDDEN,
            code: "forbidden",
            message: message.into(),
            files: Vec::new(),
        }
    }

    /// 401 `unauthorized`: no API token, or the wrong one. `query_allowed` says whether
    /// the route also takes `?token=` (only the WebSocket route does).
    pub fn unauthorized(query_allowed: bool) -> Self {
        let message = if query_allowed {
            "this server requires an API token: send `Authorization: Bearer <token>`, or \
             `?token=<token>` in the URL where the client cannot set headers (browser WebSocket)"
        } else {
            "this server requires an API token: send `Authorization: Bearer <token>` \
             (the token the server was started with, e.g. $KNIFE_API_TOKEN)"
        };
        Self {
            status: StatusCode::UNAUTHORIZED,
            code: "unauthorized",
            message: message.into(),
            files: Vec::new(),
        }
    }
}

impl IntoResponse for ApiErr {
    fn into_response(self) -> Response {
        let body = ApiErrorBody {
            error: ApiError {
                code: self.code.into(),
                message: self.message,
                files: self.files,
            },
        };
        (self.status, Json(body)).into_response()
    }
}

impl From<RuntimeError> for ApiErr {
    fn from(e: RuntimeError) -> Self {
        let (status, code) = match &e {
            RuntimeError::ProjectNotFound(_) | RuntimeError::ThreadNotFound(_) => {
                (StatusCode::NOT_FOUND, "not_found")
            }
            RuntimeError::RunInProgress { .. } => (StatusCode::CONFLICT, "run_in_progress"),
            RuntimeError::Conflict => (StatusCode::CONFLICT, "conflict"),
            RuntimeError::ActiveRunRefuses { .. } => (StatusCode::CONFLICT, "run_in_progress"),
            RuntimeError::WorkspaceNotClean(_) => (StatusCode::CONFLICT, "workspace_not_clean"),
            RuntimeError::ForkUnsupported { .. } => (StatusCode::CONFLICT, "fork_unsupported"),
            RuntimeError::ProviderInstanceNotFound { .. } => {
                (StatusCode::BAD_REQUEST, "unknown_provider_instance")
            }
            RuntimeError::Invalid(_) => (StatusCode::BAD_REQUEST, "invalid_request"),
            RuntimeError::WorkspaceMissing(_) => (StatusCode::CONFLICT, "workspace_missing"),
            RuntimeError::SessionOpen(_) => (StatusCode::BAD_GATEWAY, "provider_session_open"),
            RuntimeError::Store(knife_store::StoreError::ProjectRootTaken { .. }) => {
                (StatusCode::CONFLICT, "conflict")
            }
            // SEC-07: nothing was written; the message says to free space.
            RuntimeError::Store(knife_store::StoreError::Full { .. }) => {
                (StatusCode::INSUFFICIENT_STORAGE, "disk_full")
            }
            // SCALE-04: another node runs the thread / this node lost its lease.
            RuntimeError::Store(knife_store::StoreError::LeaseHeld { .. }) => {
                (StatusCode::CONFLICT, "thread_held_by_another_node")
            }
            RuntimeError::Store(knife_store::StoreError::Fenced { .. }) => {
                (StatusCode::CONFLICT, "thread_lease_lost")
            }
            RuntimeError::ShuttingDown => (StatusCode::SERVICE_UNAVAILABLE, "shutting_down"),
            RuntimeError::RequestNotFound { .. } => (StatusCode::NOT_FOUND, "not_found"),
            RuntimeError::RequestNotPending { .. } => (StatusCode::CONFLICT, "request_not_pending"),
            RuntimeError::Internal(_) => (StatusCode::INTERNAL_SERVER_ERROR, "internal"),
            RuntimeError::Store(_) => (StatusCode::INTERNAL_SERVER_ERROR, "store"),
            RuntimeError::Session(_) => (StatusCode::INTERNAL_SERVER_ERROR, "provider_session"),
            RuntimeError::RunNotFound { .. }
            | RuntimeError::RevertNotFound { .. }
            | RuntimeError::QueuedMessageNotFound { .. } => (StatusCode::NOT_FOUND, "not_found"),
            RuntimeError::NoCheckpoint(_) => (StatusCode::CONFLICT, "no_checkpoint"),
            RuntimeError::RevertConflict { .. } => (StatusCode::CONFLICT, "revert_conflict"),
            RuntimeError::MergeConflict { .. } => (StatusCode::CONFLICT, "merge_conflict"),
            RuntimeError::Workspace(knife_workspace::WorkspaceError::NotAGitRepository {
                ..
            }) => (StatusCode::BAD_REQUEST, "not_a_git_repository"),
            RuntimeError::Workspace(knife_workspace::WorkspaceError::Git { .. }) => {
                (StatusCode::CONFLICT, "git_refused")
            }
            RuntimeError::Workspace(_) => (StatusCode::INTERNAL_SERVER_ERROR, "workspace"),
        };
        if status == StatusCode::INTERNAL_SERVER_ERROR {
            tracing::error!(error = %e, "internal error");
        }
        let files = match &e {
            RuntimeError::RevertConflict { files } | RuntimeError::MergeConflict { files, .. } => {
                files.clone()
            }
            _ => Vec::new(),
        };
        Self {
            status,
            code,
            message: e.to_string(),
            files,
        }
    }
}

impl From<knife_store::StoreError> for ApiErr {
    fn from(e: knife_store::StoreError) -> Self {
        RuntimeError::from(e).into()
    }
}
