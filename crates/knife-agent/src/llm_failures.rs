//! What a failed model call does to a turn: the typed run error it records
//! ([`run_error`], [`gave_up`]) and the `retry` status shown while waiting to call again.

use knife_llm::LlmError;
use knife_protocol::{AgentStatus, RunError};

use crate::recorder::TurnRecorder;

/// Maps an LLM failure to the run error recorded on the turn (EXEC-01 types):
/// `provider.http` (with `http_status`, `code` from the body's `error.code` or
/// `error.type`, and the body as `detail`), `provider.transport`, `provider.stream`,
/// `provider.timeout`, `provider.decode` or `provider.error`. `message` is the
/// error's Display text.
pub fn run_error(error: &LlmError) -> RunError {
    let message = error.to_string();
    match error {
        LlmError::Http { status, body, .. } => RunError {
            error_type: "provider.http".to_owned(),
            message,
            http_status: Some(*status),
            code: body.as_ref().and_then(knife_llm::error_code),
            detail: body.clone(),
        },
        LlmError::Transport(_) => RunError::new("provider.transport", message),
        LlmError::Timeout { .. } => RunError::new("provider.timeout", message),
        LlmError::Stream(_) => RunError::new("provider.stream", message),
        LlmError::Decode { .. } => RunError::new("provider.decode", message),
        LlmError::Provider { code, body, .. } => RunError {
            error_type: "provider.error".to_owned(),
            message,
            http_status: None,
            code: code.clone(),
            detail: body.clone(),
        },
    }
}

/// `failure` of a step that made `calls_made` model calls since `started`: after
/// more than one, its message ends with how many over how long (TURN-09), e.g.
/// `… HTTP 503: Service Unavailable (gave up after 8 attempts over 2m 0s)`.
pub(crate) fn gave_up(
    mut failure: RunError,
    calls_made: u32,
    started: tokio::time::Instant,
) -> RunError {
    if calls_made > 1 {
        failure.message = format!(
            "{} (gave up {})",
            failure.message,
            knife_llm::retry::attempts_note(calls_made, started.elapsed())
        );
    }
    failure
}

/// Publishes `retry{attempt, message, next}` (next = now + `delay`, wall clock)
/// and sleeps `delay` (PROC-06, PROC-10). Cancellable: dropping it stops the wait.
pub(crate) async fn wait_for_retry(
    rec: &mut TurnRecorder,
    attempt: u32,
    delay: std::time::Duration,
    message: String,
) {
    let now = rec.now();
    let next = chrono::TimeDelta::from_std(delay)
        .ok()
        .and_then(|d| now.checked_add_signed(d))
        .unwrap_or(now);
    rec.set_status(AgentStatus::Retry {
        attempt,
        message,
        next,
    });
    tokio::time::sleep(delay).await;
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use knife_llm::SseError;
    use serde_json::json;

    #[test]
    fn llm_errors_map_to_typed_run_errors() {
        let transport = run_error(&LlmError::Transport("connection refused".into()));
        assert_eq!(transport.error_type, "provider.transport");
        assert!(transport.message.contains("connection refused"));
        assert_eq!(
            run_error(&LlmError::Stream(SseError::Incomplete)).error_type,
            "provider.stream"
        );
        let decode = run_error(&LlmError::Decode {
            message: "bad".into(),
            data: "{".into(),
        });
        assert_eq!(decode.error_type, "provider.decode");
        let body = json!({"type": "error", "error": {"type": "overloaded_error"}});
        let provider = run_error(&LlmError::Provider {
            code: Some("overloaded_error".into()),
            message: "Overloaded".into(),
            body: Some(body.clone()),
        });
        assert_eq!(provider.error_type, "provider.error");
        assert_eq!(provider.code.as_deref(), Some("overloaded_error"));
        assert_eq!(provider.detail, Some(body));
        let http = run_error(&LlmError::Http {
            status: 500,
            retry_after: None,
            body: Some(json!({"error": {"type": "server_error"}})),
            message: "boom".into(),
        });
        assert_eq!(http.code.as_deref(), Some("server_error"));
        assert_eq!(http.http_status, Some(500));
    }
}
