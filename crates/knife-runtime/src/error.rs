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
    /// A thread has no run with that ordinal (HTTP 404).
    #[error(
        "thread {thread} has no run {ordinal}; its runs are listed by GET /api/threads/{thread}"
    )]
    RunNotFound { thread: ThreadId, ordinal: u32 },
    /// A run (or the server) has no checkpoints to diff or revert (HTTP 409); the
    /// text says why ("no checkpoint: …").
    #[error("{0}")]
    NoCheckpoint(String),
    /// A revert would overwrite files changed since the thread's last checkpoint
    /// (HTTP 409, CHG-04); `force` overrides.
    #[error(
        "these files changed since the thread's last checkpoint (another thread or a person \
         edited them): {}; nothing was written. Revert with force to overwrite them",
        files.join(", ")
    )]
    RevertConflict { files: Vec<String> },
    /// Merging a thread's worktree branch would conflict (HTTP 409, CHG-07): nothing
    /// was changed.
    #[error(
        "merging branch {branch} into the project's branch would conflict in: {}; nothing was changed. \
         Resolve it in git (`git merge {branch}` in the project), or keep the work on its branch",
        files.join(", ")
    )]
    MergeConflict { branch: String, files: Vec<String> },
    /// A revert does not exist on the thread (HTTP 404).
    #[error("thread {thread} has no revert {revert}")]
    RevertNotFound { thread: ThreadId, revert: RevertId },
    /// Reading or writing the working tree or knife's checkpoint repository failed.
    #[error(transparent)]
    Workspace(#[from] knife_workspace::WorkspaceError),
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
    /// A queue entry does not exist on the thread (HTTP 404, TURN-01): it started,
    /// was cancelled, or never existed.
    #[error(
        "thread {thread} has no queued message {entry}; it may have started already. \
         GET /api/threads/{thread}/queue lists the queue"
    )]
    QueuedMessageNotFound {
        thread: ThreadId,
        entry: QueuedMessageId,
    },
    #[error(transparent)]
    Store(#[from] knife_store::StoreError),
    /// A session-manager operation (close, release, detach) failed.
    #[error(transparent)]
    Session(#[from] SessionError),
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

/// A release whose close or persistence failed (MGR-38). The credential was revoked
/// and requests settled where possible anyway; the status write is retried.
#[derive(Debug, thiserror::Error)]
#[error(
    "could not close provider session {provider_session_id} cleanly ({reason}): {message}; \
     knife keeps retrying to record it, check the data directory's disk and permissions"
)]
pub struct ProviderSessionCloseError {
    /// The session whose release failed.
    pub provider_session_id: ProviderSessionId,
    /// The release reason (`idle`, `runtime_error`, `manual_shutdown`, `server_shutdown`).
    pub reason: &'static str,
    /// What failed (close, status write, request settlement).
    pub message: String,
}

/// Failures of the session manager.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error(transparent)]
    WorkspaceMissing(#[from] ProviderWorkspaceMissingError),
    #[error(transparent)]
    Open(#[from] ProviderSessionOpenError),
    #[error(transparent)]
    Close(#[from] ProviderSessionCloseError),
    #[error(
        "provider instance `{0}` is not configured; add it to knife.toml as [providers.{0}] \
         and restart knife"
    )]
    InstanceNotFound(ProviderInstanceId),
    #[error("provider session {0} is no longer live; open it again (the next message does this)")]
    SessionGone(ProviderSessionId),
    #[error(transparent)]
    Runtime(#[from] crate::adapter::AdapterError),
    #[error(
        "the server is shutting down and opens no provider sessions; retry once it has restarted"
    )]
    ShuttingDown,
    #[error(transparent)]
    Store(#[from] knife_store::StoreError),
}
