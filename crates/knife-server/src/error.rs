//! API errors: a stable machine code, a human message, and the HTTP status
//! where it belongs (400 bad input, 404 unknown ids, 409 conflicts).

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use knife_protocol::{ApiError, ApiErrorBody};
use knife_runtime::RuntimeError;

/// An error answer of the API.
#[derive(Debug)]
pub struct ApiErr {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
}

impl ApiErr {
    /// 400 `invalid_request`.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self {
            status: StatusCode::BAD_REQUEST,
            code: "invalid_request",
            message: message.into(),
        }
    }

    /// 404 `not_found`.
    pub fn not_found(message: impl Into<String>) -> Self {
        Self {
            status: StatusCode::NOT_FOUND,
            code: "not_found",
            message: message.into(),
        }
    }

    /// 401 `unauthorized`.
    pub fn unauthorized() -> Self {
        Self {
            status: StatusCode::UNAUTHORIZED,
            code: "unauthorized",
            message: "this server requires an API token: send `Authorization: Bearer <token>`"
                .into(),
        }
    }
}

impl IntoResponse for ApiErr {
    fn into_response(self) -> Response {
        let body = ApiErrorBody {
            error: ApiError {
                code: self.code.into(),
                message: self.message,
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
            RuntimeError::ProviderInstanceNotFound { .. } => {
                (StatusCode::BAD_REQUEST, "unknown_provider_instance")
            }
            RuntimeError::Invalid(_) => (StatusCode::BAD_REQUEST, "invalid_request"),
            RuntimeError::WorkspaceMissing(_) => (StatusCode::CONFLICT, "workspace_missing"),
            RuntimeError::SessionOpen(_) => (StatusCode::BAD_GATEWAY, "provider_session_open"),
            RuntimeError::Store(_) => (StatusCode::INTERNAL_SERVER_ERROR, "store"),
        };
        if status == StatusCode::INTERNAL_SERVER_ERROR {
            tracing::error!(error = %e, "internal error");
        }
        Self {
            status,
            code,
            message: e.to_string(),
        }
    }
}

impl From<knife_store::StoreError> for ApiErr {
    fn from(e: knife_store::StoreError) -> Self {
        RuntimeError::from(e).into()
    }
}
