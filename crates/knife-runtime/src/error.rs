//! Errors of the runtime layer, named as in SPEC.md. Each message says what
//! happened and what the user can do; the server maps them to HTTP codes.

use knife_protocol::*;

/// Failures of runtime operations (commands, execution, session manager).
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// The named project does not exist (HTTP 404 `not_found`): a wrong or stale id;
    /// the caller lists the projects and picks an existing one.
    #[error("project {0} does not exist; list projects with GET /api/projects")]
    ProjectNotFound(ProjectId),
    /// The named thread does not exist or was deleted (HTTP 404 `not_found`); the
    /// caller lists the threads and picks an existing one.
    #[error(
        "thread {0} does not exist; list threads with `knife threads list` or GET /api/threads"
    )]
    ThreadNotFound(ThreadId),
    #[error(
        "thread {thread} already has run {run} in progress; wait for it to finish or stop it \
         with `knife threads interrupt {thread}` (POST /api/threads/{thread}/interrupt)"
    )]
    /// A message with `mode = reject` (or an operation needing an idle thread) met an
    /// active run (HTTP 409 `run_in_progress`, TURN-01): wait for the run or interrupt it.
    RunInProgress {
        /// The thread.
        thread: ThreadId,
        /// Its active run.
        run: RunId,
    },
    /// A thread names a provider instance `knife.toml` does not configure (HTTP 400
    /// `unknown_provider_instance`): pick a configured one or add it and restart.
    #[error(
        "provider instance `{instance}` is not configured; configured instances: {known}. \
         Use one of them, or add it to knife.toml as [providers.{instance}] and restart knife"
    )]
    ProviderInstanceNotFound {
        /// The instance id asked for.
        instance: ProviderInstanceId,
        /// The configured instance ids, comma-separated, for the message.
        known: String,
    },
    /// The project's root (or the thread's worktree) is gone (HTTP 409
    /// `workspace_missing`, MGR-07): restore the folder, then retry.
    #[error(transparent)]
    WorkspaceMissing(#[from] ProviderWorkspaceMissingError),
    /// The provider session for the run could not be opened (HTTP 502
    /// `provider_session_open`): the message says what the runtime reported; fix
    /// its configuration or installation, then send again.
    #[error(transparent)]
    SessionOpen(#[from] ProviderSessionOpenError),
    /// The request itself is wrong (HTTP 400 `invalid_request`): the text says which
    /// field and why; the caller fixes the request.
    #[error("invalid request: {0}")]
    Invalid(String),
    /// A compare-and-set on the thread row lost to a concurrent write (HTTP 409
    /// `conflict`): nothing was applied; retry the request.
    #[error("the thread changed while this request was applied; retry it")]
    Conflict,
    /// The server is shutting down (HTTP 503 `shutting_down`): nothing was started;
    /// send again once it has restarted.
    #[error(
        "the server is shutting down and takes no new runs; send the message again once it has restarted"
    )]
    ShuttingDown,
    /// An invariant of knife broke (HTTP 500 `internal`): a bug; report it with the text.
    #[error("internal error: {0}; this is a bug in knife, please report it")]
    Internal(String),
    /// A runtime request of a thread does not exist (HTTP 404).
    #[error(
        "runtime request {request} does not exist on thread {thread}; list the thread's \
         pending requests with `knife approve {thread}` (GET /api/threads/{thread}/requests)"
    )]
    RequestNotFound {
        /// The thread asked about.
        thread: ThreadId,
        /// The request id that was not found on it.
        request: RuntimeRequestId,
    },
    /// A runtime request can no longer be answered (HTTP 409): already resolved,
    /// expired or cancelled, or no live session waits for it. `reason` says which.
    #[error("runtime request {request} cannot be answered: {reason}")]
    RequestNotPending {
        /// The request.
        request: RuntimeRequestId,
        /// Why it cannot be answered (answered already, expired, cancelled, no live session).
        reason: String,
    },
    /// A thread has no run with that ordinal (HTTP 404).
    #[error(
        "thread {thread} has no run {ordinal}; its runs are listed by GET /api/threads/{thread}"
    )]
    RunNotFound {
        /// The thread.
        thread: ThreadId,
        /// The run ordinal asked for (1-based).
        ordinal: u32,
    },
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
    RevertConflict {
        /// The changed files, root-relative, sorted.
        files: Vec<String>,
    },
    /// Merging a thread's worktree branch would conflict (HTTP 409, CHG-07): nothing
    /// was changed.
    #[error(
        "merging branch {branch} into the project's branch would conflict in: {}; nothing was changed. \
         Resolve it in git (`git merge {branch}` in the project), or keep the work on its branch",
        files.join(", ")
    )]
    MergeConflict {
        /// The thread's branch (`knife/<short id>`).
        branch: String,
        /// The conflicting files, repository-relative.
        files: Vec<String>,
    },
    /// A revert does not exist on the thread (HTTP 404).
    #[error("thread {thread} has no revert {revert}")]
    RevertNotFound {
        /// The thread.
        thread: ThreadId,
        /// The revert id asked for.
        revert: RevertId,
    },
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
        /// The thread.
        thread: ThreadId,
        /// Its active run.
        run: RunId,
        /// What was refused (`archiving`, `deleting`).
        action: &'static str,
        /// What to do instead (wait, interrupt, `force`).
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
        /// The thread asked to fork.
        thread: ThreadId,
        /// Its provider instance.
        instance: ProviderInstanceId,
        /// The instance's driver (`acp`, …).
        driver: String,
        /// Why that runtime cannot fork.
        reason: String,
    },
    /// A queue entry does not exist on the thread (HTTP 404, TURN-01): it started,
    /// was cancelled, or never existed.
    #[error(
        "thread {thread} has no queued message {entry}; it may have started already. \
         GET /api/threads/{thread}/queue lists the queue"
    )]
    QueuedMessageNotFound {
        /// The thread.
        thread: ThreadId,
        /// The queue entry asked for.
        entry: QueuedMessageId,
    },
    /// The store failed (HTTP 500 `store`; 507 when the disk is full, 409 for a lease
    /// held or fenced elsewhere): the text says what; nothing partial was written.
    #[error(transparent)]
    Store(#[from] knife_store::StoreError),
    /// A session-manager operation (close, release, detach) failed (HTTP 500
    /// `provider_session`); the inner error says what to do.
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
    /// The session's workspace is gone (MGR-07/08): nothing was opened; restore the
    /// folder, then open again.
    #[error(transparent)]
    WorkspaceMissing(#[from] ProviderWorkspaceMissingError),
    /// The adapter failed to open the session, or an exclusive session is taken by
    /// another thread (MGR-06): no entry is left; fix the cause, then open again.
    #[error(transparent)]
    Open(#[from] ProviderSessionOpenError),
    /// A release could not close or record cleanly (MGR-38): cleanup ran anyway and
    /// the status write is retried in the background; nothing for the caller to redo.
    #[error(transparent)]
    Close(#[from] ProviderSessionCloseError),
    /// The instance is not in `knife.toml`: add it and restart.
    #[error(
        "provider instance `{0}` is not configured; add it to knife.toml as [providers.{0}] \
         and restart knife"
    )]
    InstanceNotFound(ProviderInstanceId),
    /// The session was released or replaced while the caller held its handle: open
    /// it again (the next message does this on its own).
    #[error("provider session {0} is no longer live; open it again (the next message does this)")]
    SessionGone(ProviderSessionId),
    /// The runtime refused or failed an operation (start, steer, interrupt, answer):
    /// the adapter's error says why and what to do; the session may still be live.
    #[error(transparent)]
    Runtime(#[from] crate::adapter::AdapterError),
    /// The manager is shutting down and opens nothing: retry after the restart.
    #[error(
        "the server is shutting down and opens no provider sessions; retry once it has restarted"
    )]
    ShuttingDown,
    /// A store read or write of the manager failed; the text says what.
    #[error(transparent)]
    Store(#[from] knife_store::StoreError),
}
