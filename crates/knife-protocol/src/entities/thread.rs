//! The app-thread entity: one conversation inside a project, with its claim, queue,
//! budget raise, fork origin and the live agent status the runtime publishes for it.

use super::{MessageQueue, RunError};
use crate::Timestamp;
use crate::ids::*;
use serde::{Deserialize, Serialize};

/// Coarse state of an app thread, for lists and the sidebar.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ThreadStatus {
    /// No run active; the last run (if any) did not fail.
    Idle,
    /// A run is active.
    Running,
    /// The last run failed; `Thread::last_error` says why.
    Failed,
}

/// One conversation a user has with an agent inside a project.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Thread {
    /// Thread id, `thread_<uuid v7>`, as returned by `POST /api/threads`.
    pub id: ThreadId,
    /// The project whose root (or the thread's worktree) its runs work in.
    pub project_id: ProjectId,
    /// Display title, at most [`TITLE_MAX_CHARS`] characters; [`UNTITLED_THREAD_TITLE`]
    /// while `untitled`.
    pub title: String,
    /// The provider instance (from `knife.toml`) whose runtime executes this thread's turns.
    pub provider_instance_id: ProviderInstanceId,
    /// Model override; `None` uses the instance's default model.
    pub model: Option<String>,
    /// Coarse state for lists: idle, running, or failed (last run failed).
    pub status: ThreadStatus,
    /// The run in progress, if any.
    pub active_run_id: Option<RunId>,
    /// Number of runs created so far (the next run gets ordinal `run_count + 1`).
    pub run_count: u32,
    /// Error of the last failed run, cleared when a new run starts.
    pub last_error: Option<RunError>,
    /// When the thread was created.
    pub created_at: Timestamp,
    /// When the thread row last changed (any upsert: run start, rename, queue, claim…).
    pub updated_at: Timestamp,
    /// Live status of the agent working on the thread (`busy`, `retry{…}`, `idle`;
    /// PROC-06), as last published by the runtime (`thread.status` events). `None`
    /// for threads whose runtime publishes no status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_status: Option<AgentStatus>,
    /// The execution claim (EXEC-04): set when a run starts, in the same transaction
    /// as `run.created`; cleared by the run's terminal event unless the run was
    /// interrupted by a shutdown. `None` = unclaimed. A claim with no live run in
    /// this process is what the restart sweep resumes.
    #[serde(default)]
    pub time_suspended: Option<Timestamp>,
    /// How many times the restart sweep resumed the claimed work since the last
    /// releasing terminal (EXEC-08/09); reset to 0 with the claim.
    #[serde(default)]
    pub resume_attempts: u32,
    /// The parent of a child (sub-agent) thread; `None` for top-level threads.
    /// Child claims are never resumed, only released (EXEC-03).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_thread_id: Option<ThreadId>,
    /// When the thread was archived (CHG-08): hidden from default lists, its provider
    /// session released, nothing deleted. `None` = not archived.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub archived_at: Option<Timestamp>,
    /// True while the thread has no title of its own: its first message names it
    /// (first line, at most [`AUTO_TITLE_MAX_CHARS`] characters; CHG-08). Cleared by
    /// that automatic title or by a rename.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub untitled: bool,
    /// The thread and run this thread was forked from (CHG-09); `None` otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forked_from: Option<ThreadFork>,
    /// The thread's own git worktree, when it was created with `worktree: true`
    /// (CHG-07): its runs work there instead of the project root.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worktree: Option<crate::ThreadWorktree>,
    /// Messages sent while a run was active, waiting for it to end, and steers not
    /// yet delivered into it (TURN-01/02). Part of the thread row, so it changes in
    /// the same transaction as the runs it starts.
    #[serde(default, skip_serializing_if = "MessageQueue::is_empty")]
    pub queue: MessageQueue,
    /// What the user added to the budgets for this thread (TURN-07): added to
    /// every limit its runs are checked against. `None` = nothing added.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget_raise: Option<BudgetRaise>,
}

/// Tokens and cost a user added to the budgets of one thread (TURN-07), summed
/// over every raise.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
pub struct BudgetRaise {
    /// Tokens added to every token limit the thread's runs are checked against.
    #[serde(default)]
    pub tokens: u64,
    /// Micro-dollars (1 USD = 1,000,000).
    #[serde(default)]
    pub cost_microdollars: u64,
}

/// Longest title a thread may have, in Unicode characters (CHG-08; longer → HTTP 400).
pub const TITLE_MAX_CHARS: usize = 200;

/// Longest automatic title taken from a thread's first message, in characters (CHG-08).
pub const AUTO_TITLE_MAX_CHARS: usize = 60;

/// The title a thread created without one shows until its first message names it.
pub const UNTITLED_THREAD_TITLE: &str = "New thread";

/// Where a forked thread's history comes from (CHG-09): the source thread's runs
/// `1..=after_run` were copied into it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ThreadFork {
    /// The source thread the history was copied from.
    pub thread_id: ThreadId,
    /// Ordinal of the last source run the fork includes.
    pub after_run: u32,
}

impl Thread {
    /// True while the thread is archived (CHG-08).
    pub fn is_archived(&self) -> bool {
        self.archived_at.is_some()
    }

    /// True while the thread holds an execution claim.
    pub fn is_claimed(&self) -> bool {
        self.time_suspended.is_some()
    }

    /// Takes the claim at `now`; an existing claim keeps its timestamp (EXEC-04).
    pub fn claim(&mut self, now: Timestamp) {
        if self.time_suspended.is_none() {
            self.time_suspended = Some(now);
        }
    }

    /// Releases the claim and resets the resume counter (EXEC-04/05/08).
    pub fn release_claim(&mut self) {
        self.time_suspended = None;
        self.resume_attempts = 0;
    }
}

/// What the agent working on a thread is doing right now (PROC-06, PROC-09).
///
/// JSON: `{"type":"busy"}`, `{"type":"idle"}`,
/// `{"type":"retry","attempt":1,"message":"Too Many Requests","next":"2026-…Z"}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum AgentStatus {
    /// Nothing runs.
    Idle,
    /// A model call or tool is in progress.
    Busy,
    /// The last model call failed transiently; the next try starts at `next`.
    Retry {
        /// Retry number of the current model step, starting at 1 (PROC-10).
        attempt: u32,
        /// Why the call is retried (`Too Many Requests`, `Provider is overloaded`, …).
        message: String,
        /// Wall-clock time of the next try.
        next: Timestamp,
        /// Most model calls of the step, the first included (PROC-11), when the
        /// runtime knows it: the next try is call `attempt + 1` of `max_attempts`
        /// (`knife run` prints "attempt 2 of 8", UX-03).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        max_attempts: Option<u32>,
    },
}

/// A named agent error, as the built-in agent records it on a provider turn and
/// publishes it in `thread.error` events (PROC-04, PROC-09, PROC-11).
///
/// `name` is one of `MessageAbortedError` (the turn was cancelled), `UnknownError`
/// (an error body the agent does not recognise), `APIError` (an HTTP / transport /
/// provider failure), `ContextOverflowError` (the conversation does not fit even
/// after compaction).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct AgentError {
    /// The error's name: `MessageAbortedError`, `UnknownError`, `APIError` or
    /// `ContextOverflowError` (see the type's doc).
    pub name: String,
    /// What happened, for people (the provider's message where there was one).
    pub message: String,
}
