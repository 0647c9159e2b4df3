//! How an execution ended (SPEC.md EXEC-01/02): the classification of a finished
//! drain into [`Terminal`], which terminals release the thread's claim, and the
//! settling of what an ended run left unfinished ([`settle_unfinished`]).

use knife_protocol::*;

use crate::adapter::InterruptReason;
use crate::sessions::requests::expire_request_events;

/// Error type of a failure that means "the user interrupted" (the reference's
/// `UserInterruptedError`): classified as `interrupted{user}`, not as a failure (EXEC-02).
pub const USER_INTERRUPTED: &str = "user.interrupted";

/// Error type of a transport failure (EXEC-01).
pub const PROVIDER_TRANSPORT: &str = "provider.transport";

/// How an execution (one drain of a thread: a run) ended.
#[derive(Clone, Debug, PartialEq)]
pub enum Terminal {
    /// It finished on its own.
    Succeeded,
    /// It failed; `error.error_type` is the stable dotted type (`provider.transport`, …).
    Failed {
        /// The typed failure recorded on the run.
        error: RunError,
    },
    /// It was interrupted, for `reason`.
    Interrupted {
        /// Who or what stopped it (EXEC-02).
        reason: InterruptReason,
    },
}

impl Terminal {
    /// Whether the terminal event releases the claim (EXEC-04/05): every terminal
    /// except a shutdown interrupt, whose claim survives for the next start.
    pub fn releases_claim(&self) -> bool {
        !matches!(
            self,
            Terminal::Interrupted {
                reason: InterruptReason::Shutdown
            }
        )
    }

    /// Lower-case label for logs and metrics: `succeeded`, `failed`, `interrupted`.
    pub fn label(&self) -> &'static str {
        match self {
            Terminal::Succeeded => "succeeded",
            Terminal::Failed { .. } => "failed",
            Terminal::Interrupted { .. } => "interrupted",
        }
    }
}

/// The raw exit of an execution, before classification.
#[derive(Clone, Debug, PartialEq)]
pub enum ExecutionExit {
    /// The drain returned normally.
    Success,
    /// The drain failed.
    Failure(ExecutionFailure),
    /// The drain was interrupted from outside (cancelled), with no failure of its own.
    Interrupted,
}

/// Why a drain failed.
#[derive(Clone, Debug, PartialEq)]
pub enum ExecutionFailure {
    /// The provider could not be reached or the connection broke (`provider.transport`).
    Transport {
        /// What broke, for the run's error message.
        message: String,
    },
    /// The failure says the user interrupted the turn.
    UserInterrupted,
    /// Any other typed failure; its type is kept.
    Typed(RunError),
}

impl From<RunError> for ExecutionFailure {
    fn from(error: RunError) -> Self {
        match error.error_type.as_str() {
            USER_INTERRUPTED => ExecutionFailure::UserInterrupted,
            _ => ExecutionFailure::Typed(error),
        }
    }
}

/// Classifies an execution's exit (EXEC-01/02):
///
/// * success → [`Terminal::Succeeded`];
/// * interrupted → `Interrupted{reason}` with the recorded `reason`, or `shutdown`
///   when none was recorded (an interrupt nobody asked for is the process going away);
/// * a user-interrupted failure → `Interrupted{user}`;
/// * a transport failure → `Failed{type: "provider.transport", message}`;
/// * any other typed failure → `Failed` with its own type.
pub fn terminal(exit: ExecutionExit, reason: Option<InterruptReason>) -> Terminal {
    match exit {
        ExecutionExit::Success => Terminal::Succeeded,
        ExecutionExit::Interrupted => Terminal::Interrupted {
            reason: reason.unwrap_or(InterruptReason::Shutdown),
        },
        ExecutionExit::Failure(ExecutionFailure::UserInterrupted) => Terminal::Interrupted {
            reason: InterruptReason::User,
        },
        ExecutionExit::Failure(ExecutionFailure::Transport { message }) => Terminal::Failed {
            error: RunError::new(PROVIDER_TRANSPORT, message),
        },
        ExecutionExit::Failure(ExecutionFailure::Typed(error)) => Terminal::Failed { error },
    }
}

/// Classifies a turn's outcome as the runtime reported it, with the reason this
/// process recorded when it interrupted the turn (if it did). A runtime that
/// reports an interruption nobody recorded names its reason (`user`, `superseded`,
/// `shutdown`); anything else counts as a shutdown (EXEC-02).
pub fn terminal_of_outcome(outcome: TurnOutcome, recorded: Option<InterruptReason>) -> Terminal {
    match outcome {
        TurnOutcome::Completed => terminal(ExecutionExit::Success, recorded),
        TurnOutcome::Failed { error } => terminal(ExecutionExit::Failure(error.into()), recorded),
        TurnOutcome::Interrupted { reason } => terminal(
            ExecutionExit::Interrupted,
            recorded.or_else(|| parse_reason(&reason)),
        ),
    }
}

/// The [`InterruptReason`] named `name` (`user`, `superseded`, `shutdown`).
pub fn parse_reason(name: &str) -> Option<InterruptReason> {
    match name {
        "user" => Some(InterruptReason::User),
        "superseded" => Some(InterruptReason::Superseded),
        "shutdown" => Some(InterruptReason::Shutdown),
        _ => None,
    }
}

/// Error text of a tool call that was running when its process died (PROC-08 wording).
pub const TOOL_ABORTED: &str = "Tool execution aborted";

/// Why a runtime request of a dead session can no longer be answered.
pub const REQUEST_NOT_RESUMABLE: &str =
    "the agent session that asked ended with the previous server process";

/// Why a runtime request of a run that ended in this server process (execution's
/// finalize: failed, interrupted, its agent process died) can no longer be answered.
pub const REQUEST_RUN_ENDED: &str = "the run ended before this runtime request was answered (its agent session cannot take the answer any more)";

/// Events that end what `run` left unfinished in `projection`: items still pending,
/// running or waiting (tool calls `failed` with [`TOOL_ABORTED`], others
/// `interrupted`), provider turns still pending or running (`interrupted`) and
/// runtime requests still pending (`expired`, not resumable with `request_reason`:
/// [`REQUEST_NOT_RESUMABLE`] for runs of a previous process, [`REQUEST_RUN_ENDED`] for a
/// run this process is finalizing).
/// Empty when everything already finished.
pub(crate) fn settle_unfinished(
    projection: &ThreadProjection,
    run: &RunId,
    now: Timestamp,
    request_reason: &str,
) -> Vec<DomainEvent> {
    let mut events = Vec::new();
    let items = projection
        .turn_items
        .iter()
        .filter(|i| i.run_id.as_ref() == Some(run));
    for item in items.filter_map(|i| settle_item(i, now)) {
        events.push(DomainEvent::new(now, EventBody::TurnItemUpdated(item)));
    }
    for turn in projection
        .provider_turns
        .iter()
        .filter(|t| &t.run_id == run)
    {
        if matches!(
            turn.status,
            ProviderTurnStatus::Pending | ProviderTurnStatus::Running
        ) {
            let mut turn = turn.clone();
            turn.status = ProviderTurnStatus::Interrupted;
            turn.completed_at = Some(now);
            events.push(DomainEvent::new(now, EventBody::ProviderTurnUpdated(turn)));
        }
    }
    for request in projection
        .runtime_requests
        .iter()
        .filter(|r| r.run_id.as_ref() == Some(run) && r.status == RuntimeRequestStatus::Pending)
    {
        events.extend(expire_request_events(
            request,
            projection,
            request_reason,
            now,
        ));
    }
    events
}

/// The settled form of an unfinished item, or `None` when it already finished.
fn settle_item(item: &TurnItem, now: Timestamp) -> Option<TurnItem> {
    if !matches!(
        item.status,
        TurnItemStatus::Pending | TurnItemStatus::Running | TurnItemStatus::Waiting
    ) {
        return None;
    }
    let mut item = item.clone();
    item.completed_at = Some(now);
    item.updated_at = now;
    match &mut item.kind {
        TurnItemKind::ToolCall { error, .. } => {
            item.status = TurnItemStatus::Failed;
            *error = Some(TOOL_ABORTED.to_owned());
        }
        TurnItemKind::AssistantMessage { streaming, .. }
        | TurnItemKind::Reasoning { streaming, .. } => {
            item.status = TurnItemStatus::Interrupted;
            *streaming = false;
        }
        _ => item.status = TurnItemStatus::Interrupted,
    }
    Some(item)
}

/// How the write that ends a run is retried when it fails (SPEC.md SEC-07): the first
/// retry waits `first`, each later one twice as long, at most `max`. A retryable store
/// error (a full disk, a database failure: [`knife_store::StoreError::is_retryable`])
/// is retried until the write commits or the server shuts down, so a run never stays
/// `running` once space returns; any other error gets [`TerminalRetry::OTHER_ATTEMPTS`]
/// attempts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TerminalRetry {
    /// Wait before the first retry (default 50 ms).
    pub first: std::time::Duration,
    /// Longest wait between two attempts (default 5 s).
    pub max: std::time::Duration,
}

impl TerminalRetry {
    /// Attempts given to an error that is not a retryable store error.
    pub const OTHER_ATTEMPTS: u32 = 4;

    /// The wait after `previous` (zero before the first retry).
    pub(crate) fn next(&self, previous: std::time::Duration) -> std::time::Duration {
        if previous.is_zero() {
            self.first
        } else {
            (previous * 2).min(self.max)
        }
    }
}

impl Default for TerminalRetry {
    fn default() -> Self {
        Self {
            first: std::time::Duration::from_millis(50),
            max: std::time::Duration::from_secs(5),
        }
    }
}
