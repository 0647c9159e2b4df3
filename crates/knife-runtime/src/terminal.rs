//! How an execution ended (SPEC.md EXEC-01/02): the classification of a finished
//! drain into [`Terminal`], and which terminals release the thread's claim.

use knife_protocol::{RunError, TurnOutcome};

use crate::adapter::InterruptReason;

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
    Failed { error: RunError },
    /// It was interrupted, for `reason`.
    Interrupted { reason: InterruptReason },
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
    Transport { message: String },
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
