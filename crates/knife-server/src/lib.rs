//! knife-server: the HTTP + WebSocket API (axum) over the store and the runtime.
//!
//! Routes (JSON under `/api`, errors as `{"error":{"code","message"}}`):
//! `POST/GET /api/projects`, `POST/GET /api/threads`, `GET /api/threads/{id}`,
//! `POST /api/threads/{id}/messages` (202, starts a run), `POST /api/threads/{id}/interrupt`,
//! `GET /api/threads/{id}/events?after=N` (SSE: replay, then live), `GET /api/ws`,
//! `GET /healthz`, `GET /metrics` (Prometheus text).

mod error;
mod events;
mod routes;

pub use error::ApiErr;
pub use routes::router;

use std::sync::Arc;

use knife_protocol::ProviderInstanceId;
use knife_runtime::{ExecutionService, SharedClock};
use knife_store::Store;
use metrics_exporter_prometheus::PrometheusHandle;

/// Everything the handlers need. Cheap to clone.
#[derive(Clone)]
pub struct AppState {
    pub store: Store,
    pub execution: ExecutionService,
    pub clock: SharedClock,
    /// Provider instance used when a new thread names none.
    pub default_instance: ProviderInstanceId,
    /// Renders `/metrics`; `None` serves an empty page.
    pub metrics: Option<PrometheusHandle>,
    /// When set, every `/api` request must carry `Authorization: Bearer <token>`
    /// (or `?token=` for EventSource / WebSocket clients).
    pub api_token: Option<Arc<str>>,
}
