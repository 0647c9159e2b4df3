//! The retry policy: which [`LlmError`]s are worth another try, which mean "the
//! conversation no longer fits" (compaction), which end the turn, and how long to
//! wait before the next try (SPEC.md PROC-03..07, PROC-10, PROC-11).
//!
//! Pure functions of the error and the attempt number: no clock, no I/O. The
//! built-in agent's stream processor asks [`RetryPolicy::decide`] after every
//! failed model call.

use std::time::Duration;

use serde_json::Value;

use crate::error::{LlmError, SseError, error_code};

/// First backoff delay when the server gave no hint (PROC-10).
pub const INITIAL_DELAY: Duration = Duration::from_secs(2);
/// Longest backoff delay when the server gave no hint (PROC-10).
pub const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// Longest wait honoured from a `retry-after` / `retry-after-ms` hint: a larger
/// hint is cut to this (a server asking for hours is better reported than waited on).
pub const MAX_HINTED_DELAY: Duration = Duration::from_secs(15 * 60);
/// Default budget of model calls per step, the first one included (PROC-11).
pub const DEFAULT_MAX_ATTEMPTS: u32 = 8;

/// Name of an error the agent does not recognise (PROC-04).
pub const UNKNOWN_ERROR: &str = "UnknownError";
/// Name of an HTTP, transport or recognised provider failure.
pub const API_ERROR: &str = "APIError";
/// Name of a context overflow (PROC-07) that compaction could not fix.
pub const CONTEXT_OVERFLOW_ERROR: &str = "ContextOverflowError";
/// Name of a rejected credential (HTTP 401 / 403).
pub const PROVIDER_AUTH_ERROR: &str = "ProviderAuthError";

/// What a failed model call means.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ErrorClass {
    /// Transient (rate limit, overload, server error, broken connection): try
    /// again. `message` is what the retry status shows (`Too Many Requests`, …).
    Retryable {
        /// Short reason shown in the `retry` status.
        message: String,
    },
    /// The request does not fit the model's context window: compact the history
    /// and continue (PROC-07). Never retried as is.
    ContextOverflow,
    /// Permanent: the step stops with this error. `name` is [`UNKNOWN_ERROR`],
    /// [`API_ERROR`] or [`PROVIDER_AUTH_ERROR`].
    Fatal {
        /// The error's name as recorded on the assistant message.
        name: &'static str,
    },
}

/// Classifies `error` (PROC-04, PROC-05, PROC-07, PROC-11).
///
/// Rules, first match wins:
/// 1. Context overflow: HTTP 413; codes `context_length_exceeded`,
///    `model_context_window_exceeded`; or a message matching [`is_overflow_message`]
///    (Anthropic "prompt is too long", OpenAI "maximum context length",
///    "context window", …).
/// 2. Deterministic refusals the provider reports (HTTP or in-stream) are fatal
///    even on 429 / 5xx: quota or billing exhausted (`insufficient_quota`, a body
///    saying "exceeded your current quota", "check your plan and billing
///    details", "billing hard limit", quota exhausted, credit), content policy or a refusal (`content_filter`,
///    `content_policy_violation`, `invalid_prompt`, "usage policy", "refused to
///    answer"), unsupported plans (`usage_not_included`). A recognised transient
///    code wins over these phrases (not over the codes): `rate_limit_exceeded`,
///    `rate_limit_error`, `too_many_requests`, and `RESOURCE_EXHAUSTED` for a
///    per-minute quota (OpenAI's TPM/RPM 429 links the billing page; Gemini's
///    per-minute 429 says "Quota exceeded").
/// 3. HTTP: 401 / 403 → [`PROVIDER_AUTH_ERROR`]; 408, 409, 425, 429 and every
///    5xx → retry; a 4xx whose code is a recognised transient kind → retry;
///    other statuses → [`API_ERROR`].
/// 4. Transport, timeout and broken-stream errors → retry (nothing was
///    answered, or the answer was cut).
/// 5. Errors the provider reported in the stream: a code or type meaning rate
///    limit, too many requests, overloaded, server error, exhausted or
///    unavailable → retry; plain text saying "rate limit", "too many requests"
///    or "overloaded" → retry; anything else → [`UNKNOWN_ERROR`] (an unknown
///    JSON error such as `{"error":{"message":"no_kv_space"}}` is not retried).
/// 6. Undecodable events → [`UNKNOWN_ERROR`].
pub fn classify(error: &LlmError) -> ErrorClass {
    let (code, body, message) = parts(error);
    if is_overflow(error, code.as_deref(), &message) {
        return ErrorClass::ContextOverflow;
    }
    let from_provider = matches!(error, LlmError::Http { .. } | LlmError::Provider { .. });
    if from_provider && is_deterministic_refusal(code.as_deref(), body, &message) {
        return ErrorClass::Fatal { name: API_ERROR };
    }
    match error {
        LlmError::Http { status, .. } => match status {
            401 | 403 => ErrorClass::Fatal {
                name: PROVIDER_AUTH_ERROR,
            },
            408 | 409 | 425 | 429 | 500..=599 => ErrorClass::Retryable {
                message: transient_message(code.as_deref(), &message)
                    .unwrap_or_else(|| http_message(*status, &message)),
            },
            _ => match transient_message(code.as_deref(), "") {
                Some(message) => ErrorClass::Retryable { message },
                None => ErrorClass::Fatal { name: API_ERROR },
            },
        },
        LlmError::Transport(_) => ErrorClass::Retryable {
            message: "Could not reach the model endpoint".to_owned(),
        },
        LlmError::Timeout { .. } => ErrorClass::Retryable {
            message: "The model endpoint stopped answering".to_owned(),
        },
        LlmError::Stream(SseError::EventTooLarge { .. }) => ErrorClass::Fatal { name: API_ERROR },
        LlmError::Stream(_) => ErrorClass::Retryable {
            message: "The connection to the model dropped".to_owned(),
        },
        LlmError::Decode { .. } => ErrorClass::Fatal {
            name: UNKNOWN_ERROR,
        },
        LlmError::Provider { .. } => match transient_message(code.as_deref(), &message) {
            Some(message) => ErrorClass::Retryable { message },
            None => ErrorClass::Fatal {
                name: UNKNOWN_ERROR,
            },
        },
    }
}

/// The name recorded on the assistant message when `error` ends a step:
/// [`CONTEXT_OVERFLOW_ERROR`], [`PROVIDER_AUTH_ERROR`], [`UNKNOWN_ERROR`] or
/// [`API_ERROR`] (retryable errors whose budget ran out are `APIError`s).
pub fn error_name(error: &LlmError) -> &'static str {
    match classify(error) {
        ErrorClass::ContextOverflow => CONTEXT_OVERFLOW_ERROR,
        ErrorClass::Fatal { name } => name,
        ErrorClass::Retryable { .. } => API_ERROR,
    }
}

/// What to do after a failed model call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RetryDecision {
    /// Wait `delay`, then call again. `attempt` is the retry number (1 = first retry).
    Retry {
        /// Retry number of this step, starting at 1 (PROC-10).
        attempt: u32,
        /// How long to wait before the next call.
        delay: Duration,
        /// Short reason for the `retry` status.
        message: String,
    },
    /// Compact the history and continue (PROC-07).
    Compact,
    /// Give up: record the error (named `name`) and stop (PROC-04, PROC-11).
    Stop {
        /// The error's name (see [`error_name`]).
        name: &'static str,
    },
}

/// Retry budget and backoff (PROC-10, PROC-11). `Default` gives the SPEC defaults.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Most model calls for one step, the first included (default 8). `1` disables retries.
    pub max_attempts: u32,
    /// First backoff delay (default 2 s); doubles per retry.
    pub initial_delay: Duration,
    /// Cap of the backoff delay (default 30 s).
    pub max_backoff: Duration,
    /// Cap of a delay the server asked for (default 15 min).
    pub max_hinted_delay: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_attempts: DEFAULT_MAX_ATTEMPTS,
            initial_delay: INITIAL_DELAY,
            max_backoff: MAX_BACKOFF,
            max_hinted_delay: MAX_HINTED_DELAY,
        }
    }
}

impl RetryPolicy {
    /// Decides after call number `calls_made` (1 = the first call) of a step failed
    /// with `error`: retry (with the delay of retry number `calls_made`), compact,
    /// or stop. Stops once `calls_made >= max_attempts` (PROC-11).
    pub fn decide(&self, error: &LlmError, calls_made: u32) -> RetryDecision {
        match classify(error) {
            ErrorClass::ContextOverflow => RetryDecision::Compact,
            ErrorClass::Fatal { name } => RetryDecision::Stop { name },
            ErrorClass::Retryable { .. } if calls_made >= self.max_attempts.max(1) => {
                RetryDecision::Stop { name: API_ERROR }
            }
            ErrorClass::Retryable { message } => {
                let attempt = calls_made.max(1);
                RetryDecision::Retry {
                    attempt,
                    delay: self.delay(attempt, retry_after(error)),
                    message,
                }
            }
        }
    }

    /// Delay before retry number `attempt` (1-based): the server's hint when it
    /// gave one (capped at `max_hinted_delay`), else `initial_delay * 2^(attempt-1)`
    /// capped at `max_backoff` (2 s, 4 s, 8 s, 16 s, 30 s, 30 s, …).
    pub fn delay(&self, attempt: u32, hint: Option<Duration>) -> Duration {
        if let Some(hint) = hint {
            return hint.min(self.max_hinted_delay);
        }
        let doublings = attempt.saturating_sub(1).min(31);
        self.initial_delay
            .saturating_mul(1_u32 << doublings)
            .min(self.max_backoff)
    }
}

/// What a final error adds when a step gave up after retrying (TURN-09):
/// `after N attempts over T`, e.g. `after 8 attempts over 2m 0s`. `attempts`
/// counts the first call; `elapsed` is from the first call to the give-up.
pub fn attempts_note(attempts: u32, elapsed: Duration) -> String {
    format!("after {attempts} attempts over {}", human_duration(elapsed))
}

/// `d` for people: `350ms`, `4.5s`, `42s`, `2m 0s`, `1h 5m`.
pub fn human_duration(d: Duration) -> String {
    let secs = d.as_secs();
    if secs >= 3600 {
        format!("{}h {}m", secs / 3600, secs % 3600 / 60)
    } else if secs >= 60 {
        format!("{}m {}s", secs / 60, secs % 60)
    } else if secs >= 10 {
        format!("{secs}s")
    } else if d >= Duration::from_secs(1) {
        format!("{:.1}s", d.as_secs_f64())
    } else {
        format!("{}ms", d.as_millis())
    }
}

/// The server's `retry-after-ms` / `retry-after` hint, when the error carries one.
pub fn retry_after(error: &LlmError) -> Option<Duration> {
    match error {
        LlmError::Http { retry_after, .. } => *retry_after,
        _ => None,
    }
}

/// Phrases of providers' context-overflow messages, lower case (PROC-07).
const OVERFLOW_PHRASES: &[&str] = &[
    "prompt is too long",                    // Anthropic
    "prompt too long",                       // Ollama
    "exceeded max context length",           // Ollama
    "input is too long for requested model", // Bedrock
    "exceeds the context window",            // OpenAI
    "context window",                        // OpenAI-compatible, MiniMax
    "maximum context length",                // OpenAI, OpenRouter, DeepSeek, vLLM, Mistral
    "context length exceeded",
    "context_length_exceeded",
    "context length is only",
    "exceeds the available context size", // llama.cpp
    "greater than the context length",    // LM Studio
    "exceeded model token limit",         // Kimi
    "reduce the length of the messages",  // Groq
    "maximum prompt length",              // xAI
    "request entity too large",
    "tokens in request more than max tokens allowed",
    "model_context_window_exceeded",
];

/// Codes that mean "the request does not fit the context window".
const OVERFLOW_CODES: &[&str] = &["context_length_exceeded", "model_context_window_exceeded"];

/// True when `message` is a provider's way of saying the prompt does not fit the
/// context window (case-insensitive; see the phrase list in the source).
pub fn is_overflow_message(message: &str) -> bool {
    let lower = message.to_lowercase();
    OVERFLOW_PHRASES.iter().any(|p| lower.contains(p))
        || (lower.contains("input token count") && lower.contains("exceeds the maximum"))
        || (lower.contains("input length")
            && lower.contains("exceeds")
            && lower.contains("context length"))
}

fn is_overflow(error: &LlmError, code: Option<&str>, message: &str) -> bool {
    if matches!(error, LlmError::Http { status: 413, .. }) {
        return true;
    }
    if code.is_some_and(|c| OVERFLOW_CODES.contains(&c)) {
        return true;
    }
    matches!(error, LlmError::Http { .. } | LlmError::Provider { .. })
        && is_overflow_message(message)
}

/// Codes a provider repeats whatever we do: retrying cannot help.
const FATAL_CODES: &[&str] = &[
    "insufficient_quota",
    "billing_hard_limit_reached",
    "usage_not_included",
    "invalid_prompt",
    "content_filter",
    "content_policy_violation",
    "invalid_api_key",
];

/// Phrases of deterministic refusals, lower case.
const FATAL_PHRASES: &[&str] = &[
    "exceeded your current quota",
    "quota exceeded",
    "quota has been exceeded",
    "quota is exhausted",
    "quota exhausted",
    "out of quota",
    "check your plan and billing details",
    "billing hard limit",
    "insufficient credit",
    "credit balance",
    "content policy",
    "content management policy",
    "content filter",
    "usage policy",
    "safety system",
    "refused to answer",
    "refused to respond",
    "content refusal",
];

/// Codes of a transient rate limit, lower case: they win over [`FATAL_PHRASES`]
/// (OpenAI's TPM/RPM 429 `rate_limit_exceeded` ends its message with a link to
/// the billing page, and is still only a per-minute limit).
const TRANSIENT_LIMIT_CODES: &[&str] = &[
    "rate_limit_exceeded",
    "rate_limit_error",
    "too_many_requests",
];

/// True when the error names a transient rate limit: a [`TRANSIENT_LIMIT_CODES`]
/// code, or Gemini's `RESOURCE_EXHAUSTED` for a per-minute quota (its body says
/// "per minute" or names a `…PerMinute…` quota id; a daily quota stays fatal).
fn is_transient_limit(code: Option<&str>, body: Option<&Value>, message: &str) -> bool {
    let code = code.map(str::to_lowercase).unwrap_or_default();
    if TRANSIENT_LIMIT_CODES.contains(&code.as_str()) {
        return true;
    }
    let status = body
        .and_then(|b| b.pointer("/error/status"))
        .and_then(Value::as_str)
        .unwrap_or_default();
    if code != "resource_exhausted" && !status.eq_ignore_ascii_case("resource_exhausted") {
        return false;
    }
    let text = format!(
        "{} {}",
        message,
        body.map(Value::to_string).unwrap_or_default()
    )
    .to_lowercase();
    ["per minute", "perminute", "per_minute"]
        .iter()
        .any(|p| text.contains(p))
}

fn is_deterministic_refusal(code: Option<&str>, body: Option<&Value>, message: &str) -> bool {
    if code.is_some_and(|c| FATAL_CODES.contains(&c)) {
        return true;
    }
    // A recognised transient code wins over the phrases below.
    if is_transient_limit(code, body, message) {
        return false;
    }
    let lower = message.to_lowercase();
    if FATAL_PHRASES.iter().any(|p| lower.contains(p)) {
        return true;
    }
    // A structured body may say it where the summary does not (nested messages).
    body.and_then(|b| b.pointer("/error/message"))
        .and_then(Value::as_str)
        .is_some_and(|m| {
            let m = m.to_lowercase();
            FATAL_PHRASES.iter().any(|p| m.contains(p))
        })
}

/// The status message for a transient code or text, when it is one (PROC-05).
fn transient_message(code: Option<&str>, text: &str) -> Option<String> {
    let code = code.map(str::to_lowercase).unwrap_or_default();
    let text = text.to_lowercase();
    let any = |needle: &str| code.contains(needle) || text.contains(needle);
    if any("too_many_requests") || any("too many requests") {
        Some("Too Many Requests".to_owned())
    } else if any("rate_limit") || any("rate limit") || text.contains("rate increased too quickly")
    {
        Some("Rate Limited".to_owned())
    } else if any("overloaded") || code.contains("exhausted") || code.contains("unavailable") {
        Some("Provider is overloaded".to_owned())
    } else if code.contains("server_error")
        || code.contains("internal_error")
        || code == "api_error"
    {
        Some("Provider Server Error".to_owned())
    } else {
        None
    }
}

fn http_message(status: u16, message: &str) -> String {
    if message.is_empty() {
        format!("HTTP {status}")
    } else {
        format!("HTTP {status}: {message}")
    }
}

/// Code, body and message of the error, where it has them.
fn parts(error: &LlmError) -> (Option<String>, Option<&Value>, String) {
    match error {
        LlmError::Http { body, message, .. } => (
            body.as_ref().and_then(error_code),
            body.as_ref(),
            message.clone(),
        ),
        LlmError::Provider {
            code,
            message,
            body,
        } => (
            code.clone().or_else(|| body.as_ref().and_then(error_code)),
            body.as_ref(),
            message.clone(),
        ),
        other => (None, None, other.to_string()),
    }
}

#[cfg(test)]
#[path = "retry_tests.rs"]
mod tests;
