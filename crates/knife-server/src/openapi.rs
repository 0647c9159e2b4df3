//! The API document: OpenAPI 3.1 for every `/api` route (`GET /api/openapi.json`) and the
//! JSON schema of the event log's payloads, generated from the API types' `JsonSchema`.
//!
//! Why aide (on schemars) and not utoipa: docs/2026-12-01-api-document.md. The route table
//! below is the one place a route is described; `routes.rs` stays the one place it is
//! served. The checked-in copies under `docs/api/` are compared with what this file
//! generates by `tests/openapi.rs` (regenerate: see [`REGENERATE`]).

use aide::openapi::{Info, OpenApi, Operation, PathItem, ReferenceOr, SchemaObject};
use aide::transform::TransformOperation;
use axum::extract::{Path, Query};
use axum::{Json, response::IntoResponse};
use knife_protocol::*;
use schemars::JsonSchema;

/// The command that rewrites `docs/api/openapi.json` and `docs/api/events.schema.json`
/// from the code (the drift test prints it).
pub const REGENERATE: &str = "KNIFE_UPDATE_API_DOCS=1 cargo test -p knife-server --test openapi";

/// `{id}` of a thread route.
#[derive(JsonSchema)]
#[allow(dead_code)] // the path's shape for the document; the handler extracts it itself
struct ThreadPath {
    /// The thread id.
    id: ThreadId,
}

/// `{id}` and `{ordinal}` of a run route.
#[derive(JsonSchema)]
#[allow(dead_code)] // the path's shape for the document; the handler extracts it itself
struct RunPath {
    /// The thread id.
    id: ThreadId,
    /// The run's ordinal on the thread (1-based).
    ordinal: u32,
}

/// `{id}` and `{request_id}` of a runtime request route.
#[derive(JsonSchema)]
#[allow(dead_code)] // the path's shape for the document; the handler extracts it itself
struct RequestPath {
    /// The thread id.
    id: ThreadId,
    /// The runtime request id.
    request_id: RuntimeRequestId,
}

/// `{id}` and `{revert_id}` of a revert route.
#[derive(JsonSchema)]
#[allow(dead_code)] // the path's shape for the document; the handler extracts it itself
struct RevertPath {
    /// The thread id.
    id: ThreadId,
    /// The revert id.
    revert_id: RevertId,
}

/// `{id}` and `{entry}` of a queued message route (TURN-01).
#[derive(JsonSchema)]
#[allow(dead_code)] // the path's shape for the document; the handler extracts it itself
struct QueueEntryPath {
    /// The thread id.
    id: ThreadId,
    /// The queued message id (`queued_…`).
    entry: QueuedMessageId,
}

/// `{id}` of a provider session route.
#[derive(JsonSchema)]
#[allow(dead_code)] // the path's shape for the document; the handler extracts it itself
struct SessionPath {
    /// The provider session id.
    id: ProviderSessionId,
}

/// A JSON object whose shape this document does not pin (the MCP credential).
type AnyJson = Json<serde_json::Value>;

/// `(method, path, description)` of every documented route, in the router's order.
type Doc = fn(TransformOperation<'_>) -> TransformOperation<'_>;

fn routes() -> Vec<(&'static str, &'static str, Doc)> {
    vec![
        ("post", "/api/projects", |o| {
            o.summary("Create a project (201), or return the existing one of the folder (200)")
                .input::<Json<CreateProjectRequest>>()
                .response::<201, Json<Project>>()
                .response::<200, Json<Project>>()
        }),
        ("get", "/api/projects", |o| {
            o.summary("List projects")
                .response::<200, Json<Vec<Project>>>()
        }),
        ("post", "/api/threads", |o| {
            o.summary("Create a thread")
                .input::<Json<CreateThreadRequest>>()
                .response::<201, Json<Thread>>()
        }),
        ("get", "/api/threads", |o| {
            o.summary("List threads (archived ones with ?archived=true)")
                .input::<Query<crate::routes::ThreadListQuery>>()
                .response::<200, Json<Vec<Thread>>>()
        }),
        ("get", "/api/threads/{id}", |o| {
            o.summary("A thread's projection: runs, items, nodes, sessions, requests")
                .input::<Path<ThreadPath>>()
                .response::<200, Json<ThreadProjection>>()
        }),
        ("patch", "/api/threads/{id}", |o| {
            o.summary("Rename, archive or unarchive a thread")
                .input::<Path<ThreadPath>>()
                .input::<Json<UpdateThreadRequest>>()
                .response::<200, Json<Thread>>()
        }),
        ("delete", "/api/threads/{id}", |o| {
            o.summary("Delete a thread (409 while a run is active or the worktree holds work, unless ?force=true)")
                .input::<Path<ThreadPath>>()
                .input::<Query<crate::threads::DeleteQuery>>()
                .response::<200, Json<DeleteThreadResponse>>()
        }),
        ("post", "/api/threads/{id}/messages", |o| {
            o.summary("Send a message: starts a run, or queues / steers it while one is active (202; TURN-01)")
                .input::<Path<ThreadPath>>()
                .input::<Json<PostMessageRequest>>()
                .response::<202, Json<PostMessageResponse>>()
        }),
        ("get", "/api/threads/{id}/queue", |o| {
            o.summary("The thread's queued messages, in order, and its pause (TURN-01/02)")
                .input::<Path<ThreadPath>>()
                .response::<200, Json<QueueResponse>>()
        }),
        ("delete", "/api/threads/{id}/queue", |o| {
            o.summary("Drop every queued message and the pause (TURN-02)")
                .input::<Path<ThreadPath>>()
                .response::<200, Json<QueueResponse>>()
        }),
        ("post", "/api/threads/{id}/queue/resume", |o| {
            o.summary(
                "Lift the queue's pause; an idle thread starts its first queued message (TURN-02)",
            )
            .input::<Path<ThreadPath>>()
            .response::<200, Json<QueueResponse>>()
        }),
        ("delete", "/api/threads/{id}/queue/{entry}", |o| {
            o.summary("Cancel one queued message (404 when it started or does not exist)")
                .input::<Path<QueueEntryPath>>()
                .response::<200, Json<QueueResponse>>()
        }),
        ("post", "/api/threads/{id}/budget", |o| {
            o.summary(
                "Raise the thread's budgets and, with continue, start a continuation run (TURN-07)",
            )
            .input::<Path<ThreadPath>>()
            .input::<Json<RaiseBudgetRequest>>()
            .response::<200, Json<RaiseBudgetResponse>>()
        }),
        ("post", "/api/threads/{id}/fork", |o| {
            o.summary("Fork a thread")
                .input::<Path<ThreadPath>>()
                .input::<Json<ForkThreadRequest>>()
                .response::<201, Json<Thread>>()
        }),
        ("post", "/api/threads/{id}/interrupt", |o| {
            o.summary("Interrupt the thread's running run")
                .input::<Path<ThreadPath>>()
                .response::<200, Json<InterruptResponse>>()
        }),
        ("get", "/api/threads/{id}/requests", |o| {
            o.summary("The thread's runtime requests (approvals), oldest first")
                .input::<Path<ThreadPath>>()
                .response::<200, Json<Vec<RuntimeRequest>>>()
        }),
        ("get", "/api/threads/{id}/runs/{ordinal}/diff", |o| {
            o.summary("A run's unified diff and per-file stats")
                .input::<Path<RunPath>>()
                .response::<200, Json<RunDiff>>()
        }),
        ("post", "/api/threads/{id}/runs/{ordinal}/revert", |o| {
            o.summary("Revert the thread's files to before the run (409 revert_conflict unless ?force=true)")
                .input::<Path<RunPath>>()
                .input::<Query<crate::changes::ForceQuery>>()
                .response::<200, Json<Revert>>()
        }),
        ("get", "/api/threads/{id}/reverts", |o| {
            o.summary("The thread's revert journal")
                .input::<Path<ThreadPath>>()
                .response::<200, Json<Vec<Revert>>>()
        }),
        ("post", "/api/threads/{id}/merge", |o| {
            o.summary("Merge the thread's worktree branch into the project")
                .input::<Path<ThreadPath>>()
                .response::<200, Json<MergeResponse>>()
        }),
        ("post", "/api/threads/{id}/reverts/{revert_id}/undo", |o| {
            o.summary("Undo a revert")
                .input::<Path<RevertPath>>()
                .input::<Query<crate::changes::ForceQuery>>()
                .response::<200, Json<Revert>>()
        }),
        ("post", "/api/threads/{id}/requests/{request_id}", |o| {
            o.summary("Answer a runtime request (409 request_not_pending when it is settled)")
                .input::<Path<RequestPath>>()
                .input::<Json<RequestAnswer>>()
                .response::<200, Json<RuntimeRequest>>()
        }),
        ("get", "/api/threads/{id}/requests/{request_id}", |o| {
            o.summary("One runtime request")
                .input::<Path<RequestPath>>()
                .response::<200, Json<RuntimeRequest>>()
        }),
        ("get", "/api/threads/{id}/events", |o| {
            o.summary("The thread's events as SSE: `id: <sequence>`, `event: <type>`, `data: <StoredEvent>` (docs/api/events.schema.json); live `delta`/`reset` events between them")
                .input::<Path<ThreadPath>>()
                .input::<Query<crate::events::EventsQuery>>()
                .response_with::<200, String, _>(|r| {
                    r.description("text/event-stream of StoredEvent JSON")
                })
        }),
        ("get", "/api/events/latest", |o| {
            o.summary("The event log's highest sequence")
                .response::<200, Json<LatestSequenceResponse>>()
        }),
        ("get", "/api/providers", |o| {
            o.summary("The configured provider instances")
                .response::<200, Json<Vec<ProviderInstanceInfo>>>()
        }),
        ("get", "/api/usage", |o| {
            o.summary("Token usage and cost of the runs the query selects")
                .input::<Query<crate::usage::UsageQuery>>()
                .response::<200, Json<UsageReport>>()
        }),
        ("get", "/api/search", |o| {
            o.summary(
                "Full-text search over thread titles and settled turn items, ranked (TURN-08)",
            )
            .input::<Query<crate::search::SearchParams>>()
            .response::<200, Json<SearchResponse>>()
        }),
        ("post", "/api/threads/{id}/mcp-token", |o| {
            o.summary("Mint an MCP credential for the thread")
                .input::<Path<ThreadPath>>()
                .response::<200, AnyJson>()
        }),
        ("delete", "/api/threads/{id}/mcp-token", |o| {
            o.summary("Revoke the thread's MCP credentials")
                .input::<Path<ThreadPath>>()
                .response::<200, AnyJson>()
        }),
        ("get", "/api/sessions", |o| {
            o.summary("Live provider sessions")
                .response::<200, Json<Vec<LiveSession>>>()
        }),
        ("post", "/api/sessions/{id}/close", |o| {
            o.summary("Close a live provider session")
                .input::<Path<SessionPath>>()
                .response::<200, Json<CloseSessionResponse>>()
        }),
        ("get", "/api/ws", |o| {
            o.summary("WebSocket: subscribe to threads' events (WsClientMessage in, WsServerMessage out); also takes ?token=")
                .response_with::<101, (), _>(|r| r.description("switching protocols"))
        }),
        ("get", "/api/openapi.json", |o| {
            o.summary("This document").response::<200, AnyJson>()
        }),
    ]
}

/// The OpenAPI 3.1 document of the `/api` routes, with the schemas of their bodies under
/// `components.schemas` (plus the WebSocket messages and `StoredEvent`).
pub fn document() -> OpenApi {
    let mut api = OpenApi {
        openapi: "3.1.0".into(),
        info: Info {
            title: "knife".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            description: Some(
                "knife's HTTP API. With an API token configured every route needs \
                 `Authorization: Bearer <token>`. Errors answer `ApiErrorBody` \
                 (`error.code`, `error.message`)."
                    .into(),
            ),
            ..Info::default()
        },
        ..OpenApi::default()
    };
    let mut paths = aide::openapi::Paths::default();
    for (method, path, doc) in routes() {
        let mut operation = Operation::default();
        let _ = doc(TransformOperation::new(&mut operation))
            .default_response_with::<Json<ApiErrorBody>, _>(|r| {
                r.description("an error: `error.code` says which, `error.message` what to do")
            });
        let item = paths
            .paths
            .entry(path.to_owned())
            .or_insert_with(|| ReferenceOr::Item(PathItem::default()));
        if let ReferenceOr::Item(item) = item {
            let slot = match method {
                "get" => &mut item.get,
                "post" => &mut item.post,
                "patch" => &mut item.patch,
                "delete" => &mut item.delete,
                _ => &mut item.put,
            };
            *slot = Some(operation);
        }
    }
    api.paths = Some(paths);
    aide::generate::in_context(|ctx| {
        // Message types of routes that have no JSON body to name them.
        let _ = ctx.schema.subschema_for::<WsClientMessage>();
        let _ = ctx.schema.subschema_for::<WsServerMessage>();
        let _ = ctx.schema.subschema_for::<StoredEvent>();
        let components = api.components.get_or_insert_with(Default::default);
        for (name, schema) in ctx.schema.take_definitions(true) {
            if let Ok(json_schema) = schema.try_into() {
                components.schemas.insert(
                    name,
                    SchemaObject {
                        json_schema,
                        example: None,
                        external_docs: None,
                    },
                );
            }
        }
    });
    aide::generate::reset_context();
    api
}

/// The JSON schema (2020-12) of one stored event: `sequence`, `id`, `thread_id`, `run_id`,
/// `occurred_at`, and `type` + `payload` (one variant per entry of [`EVENT_TYPES`]).
pub fn events_schema() -> serde_json::Value {
    serde_json::to_value(schemars::schema_for!(StoredEvent)).unwrap_or_default()
}

/// `GET /api/openapi.json`.
pub(crate) async fn serve() -> impl IntoResponse {
    Json(document())
}
