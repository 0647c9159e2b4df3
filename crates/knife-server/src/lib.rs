//! knife-server: the HTTP + WebSocket API (axum) over the store and the runtime.
//!
//! Routes (JSON under `/api`, errors as `{"error":{"code","message"}}`):
//! `POST/GET /api/projects` (POST: 201 new, 200 when the folder is already a project), `POST/GET /api/threads`
//! (`?archived=true` includes archived threads), `GET|PATCH|DELETE /api/threads/{id}` (rename, archive, delete: CHG-08),
//! `POST /api/threads/{id}/fork` (CHG-09),
//! `POST /api/threads/{id}/messages` (202, starts a run), `POST /api/threads/{id}/interrupt`,
//! `GET /api/threads/{id}/events?after=N` (SSE: replay, then live), `GET /api/ws`,
//! `GET /api/events/latest` (the log's highest sequence), `GET /api/providers` (configured provider instances),
//! `GET /api/sessions` (live provider sessions), `POST /api/sessions/{id}/close`,
//! `GET /api/threads/{id}/runs/{ordinal}/diff` (the run's diff between its checkpoints),
//! `POST /api/threads/{id}/runs/{ordinal}/revert`, `GET /api/threads/{id}/reverts`,
//! `POST /api/threads/{id}/reverts/{revert_id}/undo` (changes.rs),
//! `GET /healthz`, `GET /metrics` (Prometheus text), the web page at `/` (assets
//! under `/ui/`, embedded; see [`ui`]), `/mcp` (MCP streamable HTTP, see
//! [`mcp`]; with debug tokens on, `POST|DELETE /api/threads/{id}/mcp-token`). Every error is JSON, including
//! 404 for unknown paths (inside or outside `/api`), 405 for an unsupported method on a
//! known path, and 400 for a malformed query string.
//!
//! Access: when [`AppState::api_token`] is set, `/api/*` and `/metrics` require
//! `Authorization: Bearer <token>` (401 `unauthorized` otherwise). The token in the
//! query string (`?token=<token>`) is accepted on `GET /api/ws` only, because a
//! browser cannot set headers on a WebSocket; tokens in URLs end up in logs and
//! history, so no other route takes them. `/healthz` is always open.

#![deny(missing_docs)]

mod changes;
mod error;
mod events;
mod limits;
pub mod listen;
mod live;
pub mod mcp;
pub mod openapi;
mod origin;
mod routes;
mod search;
mod sessions;
pub mod subscribers;
mod threads;
pub mod ui;
mod usage;
mod ws;

pub use error::ApiErr;
pub use listen::{ApiListener, ConnectionInfo, ServerLimits, serve, serve_with};
pub use routes::router;
pub use subscribers::{SubscriberLimits, Subscribers};

use std::sync::Arc;

use knife_protocol::{ProviderInstanceId, ProviderInstanceInfo};
use knife_runtime::{ExecutionService, SharedClock};
use knife_store::Store;
use metrics_exporter_prometheus::PrometheusHandle;
use tokio_util::sync::CancellationToken;

/// Everything the handlers need. Cheap to clone.
#[derive(Clone)]
pub struct AppState {
    /// The event log and projections.
    pub store: Store,
    /// Starts and interrupts runs.
    pub execution: ExecutionService,
    /// Wall-clock timestamps of new entities.
    pub clock: SharedClock,
    /// Provider instance used when a new thread names none.
    pub default_instance: ProviderInstanceId,
    /// The configured provider instances, sorted by id, as `GET /api/providers`
    /// lists them (its `default` flag is worked out from `default_instance`).
    pub providers: Arc<[ProviderInstanceInfo]>,
    /// Renders `/metrics`; `None` serves an empty page.
    pub metrics: Option<PrometheusHandle>,
    /// When set, every `/api` and `/metrics` request must carry
    /// `Authorization: Bearer <token>`; `GET /api/ws` may send `?token=` instead.
    pub api_token: Option<Arc<str>>,
    /// Cancelled during shutdown once active runs have ended: event streams (SSE and
    /// WebSocket) then finish so the HTTP server can drain instead of waiting on
    /// clients that never disconnect.
    pub closing: CancellationToken,
    /// The `/mcp` endpoint's credentials and settings; `None` serves no `/mcp`.
    pub mcp: Option<mcp::McpState>,
    /// Prices of `GET /api/usage` (TURN-06): knife's defaults and the config's `[prices]`.
    pub prices: Arc<knife_protocol::PriceTable>,
    /// Bounds of event-stream subscribers (LIVE-06): queued bytes per subscriber and in
    /// total, the stall before a slow one is closed, replays at once, shared frames.
    pub subscribers: Subscribers,
}
