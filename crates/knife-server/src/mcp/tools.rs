//! The MCP tools of `/mcp` and their capability gate (SPEC.md MCP-12, docs/2026-11-29-mcp.md).

use std::borrow::Cow;
use std::sync::Arc;

use knife_protocol::*;
use knife_runtime::commands;
use knife_runtime::mcp::CredentialScope;
use rmcp::ErrorData as McpError;
use rmcp::handler::server::ServerHandler;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    InitializeResult, JsonObject, ListToolsResult, PaginatedRequestParams, ServerCapabilities,
    Tool,
};
use rmcp::service::{RequestContext, RoleServer};
use serde_json::{Value, json};

use crate::AppState;

/// One tool: name, capability, description, input schema.
struct ToolSpec {
    name: &'static str,
    capability: McpCapability,
    description: &'static str,
    schema: fn() -> Value,
}

const TOOLS: &[ToolSpec] = &[
    ToolSpec {
        name: "threads_list",
        capability: McpCapability::Orchestration,
        description: "List the threads of the calling thread's project (id, title, status).",
        schema: || json!({"type": "object", "properties": {}}),
    },
    ToolSpec {
        name: "thread_read",
        capability: McpCapability::Orchestration,
        description: "Read a thread of the same project: its status and messages \
                      (the last `limit` user/assistant messages, default 20).",
        schema: || {
            json!({"type": "object", "required": ["thread_id"], "properties": {
                "thread_id": {"type": "string"},
                "limit": {"type": "integer", "minimum": 1, "maximum": 200}}})
        },
    },
    ToolSpec {
        name: "threads_search",
        capability: McpCapability::Orchestration,
        description: "Full-text search over the threads of the calling thread's project: \
                      titles, user and assistant messages, tool calls. Every word of \
                      `query` must match; ranked hits with thread, run and item ids and a \
                      snippet (default 10 hits, at most 50).",
        schema: || {
            json!({"type": "object", "required": ["query"], "properties": {
                "query": {"type": "string"},
                "limit": {"type": "integer", "minimum": 1, "maximum": 50}}})
        },
    },
    ToolSpec {
        name: "thread_create",
        capability: McpCapability::Orchestration,
        description: "Create a thread in the calling thread's project (a child of the \
                      caller); with `message`, start its first run.",
        schema: || {
            json!({"type": "object", "properties": {
                "title": {"type": "string"}, "message": {"type": "string"}}})
        },
    },
    ToolSpec {
        name: "thread_send_message",
        capability: McpCapability::Orchestration,
        description: "Send a user message to a thread of the same project; starts a run \
                      and returns its id. Fails while the thread has a run in progress.",
        schema: || {
            json!({"type": "object", "required": ["thread_id", "text"], "properties": {
                "thread_id": {"type": "string"}, "text": {"type": "string"}}})
        },
    },
    ToolSpec {
        name: "thread_status",
        capability: McpCapability::Orchestration,
        description: "Status of a thread of the same project (default: the caller): \
                      status, active run, agent status, last error.",
        schema: || json!({"type": "object", "properties": {"thread_id": {"type": "string"}}}),
    },
    ToolSpec {
        name: "worktree_list",
        capability: McpCapability::Worktree,
        description: "List the git worktrees of the calling thread's project; `current` \
                      marks the one the thread works in (its own worktree, or the project).",
        schema: || json!({"type": "object", "properties": {}}),
    },
    ToolSpec {
        name: "worktree_create",
        capability: McpCapability::Worktree,
        description: "Create a git worktree of the calling thread's project on a new \
                      branch `branch` (from `base`, default the HEAD of the thread's \
                      working tree: its own worktree's branch, or the project's) at \
                      `path`, which must be inside the project (default: a folder of \
                      knife's data dir).",
        schema: || {
            json!({"type": "object", "required": ["branch"], "properties": {
                "branch": {"type": "string"}, "base": {"type": "string"},
                "path": {"type": "string"}}})
        },
    },
];

/// The tool names a credential with `scope`'s capabilities may list and call, in
/// listing order (MCP-12).
pub fn tool_names(scope: &CredentialScope) -> Vec<&'static str> {
    TOOLS
        .iter()
        .filter(|t| scope.allows(t.capability))
        .map(|t| t.name)
        .collect()
}

/// The rmcp server handler of `/mcp`: one per MCP session; the caller is taken from
/// each request's resolved [`CredentialScope`], never from the session.
#[derive(Clone)]
pub struct KnifeMcp {
    state: AppState,
}

impl KnifeMcp {
    /// A handler over the server's state.
    pub fn new(state: AppState) -> Self {
        Self { state }
    }
}

/// A tool failure the caller sees (tool-level error, not a protocol error).
pub(super) struct ToolFailure(pub String);

impl<E: std::fmt::Display> From<E> for ToolFailure {
    fn from(e: E) -> Self {
        Self(e.to_string())
    }
}

/// What a tool returns: its JSON result and the thread it acted on.
pub(super) struct ToolOutput {
    pub value: Value,
    pub target: Option<ThreadId>,
}

fn scope_of(ctx: &RequestContext<RoleServer>) -> Result<CredentialScope, McpError> {
    ctx.extensions
        .get::<axum::http::request::Parts>()
        .and_then(|p| p.extensions.get::<CredentialScope>())
        .cloned()
        .ok_or_else(|| McpError::invalid_request("no MCP credential on this request", None))
}

impl ServerHandler for KnifeMcp {
    fn get_info(&self) -> InitializeResult {
        InitializeResult::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("knife", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "knife's MCP endpoint: tools act for the thread whose credential you hold.",
            )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let scope = scope_of(&ctx)?;
        let tools = TOOLS
            .iter()
            .filter(|t| scope.allows(t.capability))
            .map(|t| {
                let schema = match (t.schema)() {
                    Value::Object(map) => map,
                    _ => JsonObject::new(),
                };
                Tool::new(t.name, t.description, Arc::new(schema))
            })
            .collect();
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let scope = scope_of(&ctx)?;
        let name: Cow<'static, str> = request.name.clone();
        let Some(spec) = TOOLS
            .iter()
            .find(|t| t.name == name && scope.allows(t.capability))
        else {
            return Err(McpError::invalid_params(
                format!(
                    "unknown tool `{name}`; call tools/list for the tools this credential may use"
                ),
                None,
            ));
        };
        let args = request.arguments.unwrap_or_default();
        let outcome = self.run(spec.name, &scope, &args).await;
        let (ok, error, target) = match &outcome {
            Ok(out) => (true, None, out.target.clone()),
            Err(ToolFailure(message)) => (false, Some(message.clone()), None),
        };
        self.record(&scope, spec.name, &args, ok, error, target)
            .await;
        let result = match outcome {
            Ok(out) => CallToolResult::success(vec![ContentBlock::text(out.value.to_string())]),
            Err(ToolFailure(message)) => CallToolResult::error(vec![ContentBlock::text(message)]),
        };
        Ok(result.into())
    }
}

impl KnifeMcp {
    async fn run(
        &self,
        tool: &str,
        scope: &CredentialScope,
        args: &JsonObject,
    ) -> Result<ToolOutput, ToolFailure> {
        let caller = self.thread(&scope.thread_id).await?;
        match tool {
            "threads_list" => {
                let threads = self
                    .state
                    .store
                    .list_threads(Some(&caller.project_id))
                    .await?;
                let list: Vec<Value> = threads.iter().map(thread_summary).collect();
                Ok(ToolOutput {
                    value: json!({"threads": list}),
                    target: None,
                })
            }
            // TURN-08: limited to the caller's project.
            "threads_search" => {
                let text = required(args, "query")?;
                let limit = args
                    .get("limit")
                    .and_then(Value::as_u64)
                    .unwrap_or(10)
                    .clamp(1, 50) as usize;
                let hits = self
                    .state
                    .store
                    .search(&knife_store::SearchQuery {
                        text: text.to_owned(),
                        project: Some(caller.project_id.clone()),
                        limit,
                    })
                    .await?;
                Ok(ToolOutput {
                    value: json!({"hits": hits}),
                    target: None,
                })
            }
            "thread_status" => {
                let target = match str_arg(args, "thread_id") {
                    Some(id) => self.same_project(&caller, id).await?,
                    None => caller,
                };
                Ok(ToolOutput {
                    value: thread_summary(&target),
                    target: Some(target.id),
                })
            }
            "thread_read" => {
                let id = required(args, "thread_id")?;
                let target = self.same_project(&caller, id).await?;
                let limit = args
                    .get("limit")
                    .and_then(Value::as_u64)
                    .unwrap_or(20)
                    .clamp(1, 200) as usize;
                let projection = self
                    .state
                    .store
                    .thread_projection(&target.id)
                    .await?
                    .ok_or_else(|| ToolFailure(format!("thread {} does not exist", target.id)))?;
                let messages: Vec<Value> = projection
                    .turn_items
                    .iter()
                    .filter_map(|item| match &item.kind {
                        TurnItemKind::UserMessage { text, .. } => {
                            Some(json!({"role": "user", "text": text}))
                        }
                        TurnItemKind::AssistantMessage { text, .. } => {
                            Some(json!({"role": "assistant", "text": text}))
                        }
                        _ => None,
                    })
                    .collect();
                let skip = messages.len().saturating_sub(limit);
                let mut value = thread_summary(&target);
                value["messages"] = Value::Array(messages.into_iter().skip(skip).collect());
                Ok(ToolOutput {
                    value,
                    target: Some(target.id),
                })
            }
            "thread_create" => {
                let known = self.state.execution.manager().instances();
                let thread = commands::create_thread(
                    &self.state.store,
                    self.state.clock.as_ref(),
                    CreateThreadRequest {
                        project_id: caller.project_id.clone(),
                        title: str_arg(args, "title").map(str::to_owned),
                        provider_instance_id: Some(caller.provider_instance_id.clone()),
                        model: caller.model.clone(),
                        parent_thread_id: Some(caller.id.clone()),
                        worktree: None,
                    },
                    &self.state.default_instance,
                    &known,
                )
                .await?;
                let mut value = thread_summary(&thread);
                if let Some(message) = str_arg(args, "message") {
                    let run = self
                        .state
                        .execution
                        .start_run(&thread.id, message.to_owned())
                        .await?;
                    value["run_id"] = json!(run.id);
                }
                Ok(ToolOutput {
                    value,
                    target: Some(thread.id),
                })
            }
            "thread_send_message" => {
                let id = required(args, "thread_id")?;
                let text = required(args, "text")?;
                let target = self.same_project(&caller, id).await?;
                let run = self
                    .state
                    .execution
                    .start_run(&target.id, text.to_owned())
                    .await?;
                Ok(ToolOutput {
                    value: json!({"thread_id": target.id, "run_id": run.id}),
                    target: Some(target.id),
                })
            }
            "worktree_list" => {
                let root = self.work_root(&caller).await?;
                let worktrees = super::worktree::list(&root).await?;
                Ok(ToolOutput {
                    value: json!({"worktrees": worktrees}),
                    target: None,
                })
            }
            "worktree_create" => {
                let root = self.work_root(&caller).await?;
                let branch = required(args, "branch")?;
                let worktrees = self
                    .state
                    .mcp
                    .as_ref()
                    .map(|m| m.worktrees_dir.join(caller.project_id.as_str()))
                    .ok_or_else(|| ToolFailure("this server has no MCP settings".into()))?;
                let created = super::worktree::create(
                    &root,
                    &worktrees,
                    branch,
                    str_arg(args, "base"),
                    str_arg(args, "path"),
                )
                .await?;
                Ok(ToolOutput {
                    value: created,
                    target: None,
                })
            }
            other => Err(ToolFailure(format!("unknown tool `{other}`"))),
        }
    }

    async fn thread(&self, id: &ThreadId) -> Result<Thread, ToolFailure> {
        self.state
            .store
            .get_thread(id)
            .await?
            .ok_or_else(|| ToolFailure(format!("thread {id} does not exist")))
    }

    /// Thread `id`, which must belong to the caller's project.
    async fn same_project(&self, caller: &Thread, id: &str) -> Result<Thread, ToolFailure> {
        let thread = self.thread(&ThreadId::from(id)).await?;
        if thread.project_id != caller.project_id {
            return Err(ToolFailure(format!(
                "thread {id} belongs to another project; this credential reaches only the \
                 threads of project {}",
                caller.project_id
            )));
        }
        Ok(thread)
    }

    /// Where `caller` works: its own worktree (CHG-07), else its project's root.
    async fn work_root(&self, caller: &Thread) -> Result<std::path::PathBuf, ToolFailure> {
        if let Some(wt) = &caller.worktree {
            return Ok(wt.path.clone().into());
        }
        self.project_root(caller).await
    }

    async fn project_root(&self, caller: &Thread) -> Result<std::path::PathBuf, ToolFailure> {
        let project = self
            .state
            .store
            .get_project(&caller.project_id)
            .await?
            .ok_or_else(|| ToolFailure(format!("project {} does not exist", caller.project_id)))?;
        Ok(project.root.into())
    }

    /// Appends `mcp.tool_called` to the calling thread; a failed write is logged, the
    /// call's answer is not changed by it.
    async fn record(
        &self,
        scope: &CredentialScope,
        tool: &str,
        args: &JsonObject,
        ok: bool,
        error: Option<String>,
        target: Option<ThreadId>,
    ) {
        let mut arguments = Value::Object(args.clone()).to_string();
        if arguments.chars().count() > 500 {
            arguments = arguments.chars().take(499).collect::<String>() + "…";
        }
        let call = McpToolCall {
            thread_id: scope.thread_id.clone(),
            tool: tool.to_owned(),
            arguments,
            target_thread_id: target,
            ok,
            error,
        };
        let event = DomainEvent::new(self.state.clock.now(), EventBody::McpToolCalled(call));
        if let Err(e) = self.state.store.write(vec![event]).await {
            tracing::warn!(thread = %scope.thread_id, tool, error = %e, "could not record an MCP tool call");
        }
    }
}

fn thread_summary(t: &Thread) -> Value {
    json!({
        "id": t.id,
        "title": t.title,
        "status": t.status,
        "active_run_id": t.active_run_id,
        "run_count": t.run_count,
        "agent_status": t.agent_status,
        "last_error": t.last_error,
        "parent_thread_id": t.parent_thread_id,
    })
}

fn str_arg<'a>(args: &'a JsonObject, key: &str) -> Option<&'a str> {
    args.get(key).and_then(Value::as_str)
}

fn required<'a>(args: &'a JsonObject, key: &str) -> Result<&'a str, ToolFailure> {
    str_arg(args, key)
        .filter(|s| !s.trim().is_empty())
        .ok_or_else(|| ToolFailure(format!("argument `{key}` (a non-empty string) is required")))
}
