//! knife-agent: the built-in agent. It turns a thread's transcript into model
//! requests, streams the answer into turn items and runs project tools.
//!
//! - [`adapter`]: [`BuiltinAgentAdapter`] (driver `builtin`) and [`BuiltinAgentConfig`].
//! - `agent`: the loop of one turn (model step → tools → model step …).
//! - `processor`: one model step: stream → turn items, retries, `Continue | Stop | Compact`.
//! - [`compaction`]: summarise the history when the context is full.
//! - `llm_failures`: a failed model call's run error and retry wait (below the three above).
//! - `recorder`: turn items of a turn, throttled snapshots, settlement on stop.
//! - [`messages`]: transcript → chat messages, default system prompt.
//! - [`tools`]: `read`, `list`, `glob`, `grep`, `write`, `edit` (confined to the
//!   project root) and `bash` (runs in it, in a process group of its own).
//! - [`permissions`]: allow / ask / deny rules per tool call and the approval hook.
//! - `approvals`: `ask` → runtime request → the user's answer (docs/2026-11-29-approvals.md).

#![deny(missing_docs)]

pub mod adapter;
mod agent;
mod approvals;
pub mod compaction;
mod llm_failures;
pub mod messages;
pub mod permissions;
mod processor;
mod recorder;
pub mod tools;

pub use adapter::{
    BuiltinAgentAdapter, BuiltinAgentConfig, DEFAULT_CONTEXT_LIMIT, DEFAULT_OUTPUT_LIMIT, DRIVER,
    MAX_FLUSH_INTERVAL,
};
pub use llm_failures::run_error;
pub use tools::{Tool, ToolContext, ToolError, ToolPolicy, ToolSet};
