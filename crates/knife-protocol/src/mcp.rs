//! MCP capability vocabulary and the public view of a thread's MCP credential
//! (SPEC.md MCP-01..05). The bearer token itself never appears here.

use serde::{Deserialize, Serialize};

/// A capability an MCP credential may carry; it decides which `/mcp` tools the
/// credential's caller sees (SPEC.md MCP-02, MCP-05, MCP-12). Wire form: kebab-case
/// (`pull-requests`).
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum McpCapability {
    /// Browser/preview tools; withheld when agent browser access is off. No tools yet.
    Preview,
    /// Thread tools: `threads_list`, `thread_read`, `thread_create`,
    /// `thread_send_message`, `thread_status`.
    Orchestration,
    /// Git worktree tools of the thread's project: `worktree_create`, `worktree_list`.
    Worktree,
    /// Pull-request tools. No tools yet.
    PullRequests,
    /// Device tools; granted only with agent device access. No tools yet.
    Device,
}

impl McpCapability {
    /// The wire name (`pull-requests`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Preview => "preview",
            Self::Orchestration => "orchestration",
            Self::Worktree => "worktree",
            Self::PullRequests => "pull-requests",
            Self::Device => "device",
        }
    }
}

impl std::fmt::Display for McpCapability {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The public state of a thread's MCP credential, as the API and `knife threads show`
/// print it (`knife threads show`, `GET /api/threads/{id}`). Never carries the token.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct McpCredentialInfo {
    /// True while a live (unrevoked) credential exists for the thread.
    pub active: bool,
    /// Its capabilities, sorted; empty when not active.
    #[serde(default)]
    pub capabilities: Vec<McpCapability>,
}

/// Payload of `mcp.tool_called`: one `/mcp` tool call, attributed to the thread whose
/// credential made it (the `mcp.tool_called` audit event). Arguments are summarised, never stored whole.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct McpToolCall {
    /// The calling thread (the credential's thread).
    pub thread_id: crate::ThreadId,
    /// The tool name (`thread_send_message`).
    pub tool: String,
    /// The arguments as compact JSON, cut to at most 500 characters.
    pub arguments: String,
    /// The thread the call acted on, when it names one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_thread_id: Option<crate::ThreadId>,
    /// True when the tool succeeded.
    pub ok: bool,
    /// The error message when it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}
