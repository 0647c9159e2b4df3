//! Errors of the runtime layer, named as in SPEC.md. Each message says what
//! happened and what the user can do; the server maps them to HTTP codes.

use knife_protocol::*;

/// Failures of runtime operations (commands, execution, session manager).
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error("project {0} does not exist; list projects with GET /api/projects")]
    ProjectNotFound(ProjectId),
    #[error(
        "thread {0} does not exist; list threads with `knife threads list` or GET /api/threads"
    )]
    ThreadNotFound(ThreadId),
    #[error(
        "thread {thread} already has run {run} in progress; wait for it to finish or stop it \
         with `knife threads interrupt {thread}` (POST /api/threads/{thread}/interrupt)"
    )]
    RunInProgress { thread: ThreadId, run: RunId },
    #[error(
        "provider instance `{instance}` is not configured; configured instances: {known}. \
         Use one of them, or add it to knife.toml as [providers.{instance}] and restart knife"
    )]
    ProviderInstanceNotFound {
        instance: ProviderInstanceId,
        known: String,
    },
    #[error(transparent)]
    WorkspaceMissing(#[from] ProviderWorkspaceMissingError),
    #[error(transparent)]
    SessionOpen(#[from] ProviderSessionOpenError),
    #[error("invalid request: {0}")]
    Invalid(String),
    #[error("the thread changed while this request was applied; retry it")]
    Conflict,
    #[error(
        "the server is shutting down and takes no new runs; send the message again once it has restarted"
    )]
    ShuttingDown,
    #[error("internal error: {0}; this is a bug in knife, please report it")]
    Internal(String),
    /// A runtime request of a thread does not exist (HTTP 404).
    #[error(
        "runtime request {request} does not exist on thread {thread}; list the thread's \
         pending requests with `knife approve {thread}` (GET /api/threads/{thread}/requests)"
    )]
    RequestNotFound {
        thread: ThreadId,
        request: RuntimeRequestId,
    },
    /// A runtime request can no longer be answered (HTTP 409): already resolved,
    /// expired or cancelled, or no live session waits for it. `reason` says which.
    #[error("runtime request {request} cannot be answered: {reason}")]
    RequestNotPending {
        request: RuntimeRequestId,
        reason: String,
    },
    /// A lifecycle operation that cannot run beside an active run (HTTP 409
    /// `run_in_progress`; CHG-08): `action` is what was refused (`deleting`, …),
    /// `hint` what to do.
    #[error(
        "thread {thread} has run {run} in progress; {action} it is refused while a run is active: {hint}"
    )]
    ActiveRunRefuses {
        thread: ThreadId,
        run: RunId,
        action: &'static str,
        hint: &'static str,
    },
    /// The thread's worktree refuses a delete (HTTP 409 `workspace_not_clean`;
    /// CHG-08): the message names the work that would be lost and says to pass `force`.
    #[error("{0}")]
    WorkspaceNotClean(String),
    /// The thread's runtime cannot fork (HTTP 409 `fork_unsupported`; CHG-09).
    #[error(
        "thread {thread} runs on provider instance `{instance}` (driver `{driver}`), which cannot fork a conversation: {reason}"
    )]
    ForkUnsupported {
        thread: ThreadId,
        instance: ProviderInstanceId,
        driver: String,
        reason: String,
    },
    #[error(transparent)]
    Store(#[from] knife_store::StoreError),
    /// A session-manager operation (close, release, detach) failed.
    #[error(transparent)]
    Session(#[from] crate::sessions::SessionError),
}

/// The workspace (cwd) of a session is missing or not a directory (MGR-07, MGR-08).
#[derive(Debug, thiserror::Error)]
#[error(
    "the workspace folder {path} is missing or is not a directory. Restore the folder at this path before retrying."
)]
pub struct ProviderWorkspaceMissingError {
    /// The path as configured on the project.
    pub path: String,
}

/// A provider session could not be opened (MGR-06 and adapter open failures).
#[derive(Debug, thiserror::Error)]
#[error("could not open provider session {provider_session_id}: {message}")]
pub struct ProviderSessionOpenError {
    /// The session that failed to open.
    pub provider_session_id: ProviderSessionId,
    /// What failed and what to do, as reported by the adapter.
    pub message: String,
}
