//! Typed LLM failures. Later layers (retry policy, PROC-03..11) decide from these
//! fields; messages say what happened and what the user can do.

use serde_json::Value;
use std::time::Duration;

/// Everything that can go wrong talking to an LLM endpoint.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum LlmError {
    /// The endpoint answered with a non-2xx status.
    #[error("the model endpoint answered HTTP {status}: {message}")]
    Http {
        /// HTTP status code.
        status: u16,
        /// From `retry-after-ms` (milliseconds) or `retry-after` (seconds or HTTP date).
        retry_after: Option<Duration>,
        /// The response body parsed as JSON, when it was JSON.
        body: Option<Value>,
        /// Human summary: the body's `error.message` when present, else the raw body (truncated).
        message: String,
    },
    /// The endpoint could not be reached or the connection broke.
    #[error(
        "could not reach the model endpoint: {0}. Check the base_url in knife.toml and that the server is running"
    )]
    Transport(String),
    /// The endpoint sent nothing for `after` (while connecting, waiting for the
    /// answer, or between two chunks of a streaming answer).
    #[error(
        "the model endpoint sent nothing for {:.1} s; check that the model is loaded and the server is not stuck (or raise idle_timeout_secs for this provider in knife.toml)",
        after.as_secs_f64()
    )]
    Timeout {
        /// How long knife waited (the configured connect or idle timeout).
        after: std::time::Duration,
    },
    /// The byte stream was not valid SSE, or ended in the middle of an event.
    #[error("the model's event stream is malformed: {0}")]
    Stream(#[from] SseError),
    /// An SSE event carried data that is not the JSON the protocol promises.
    /// The message shows at most [`DECODE_PREVIEW_CHARS`] characters of the data.
    #[error(
        "the model sent an event that could not be parsed ({message}): {}. Check that base_url points at an endpoint that speaks the provider's driver protocol (openai-chat, anthropic or openai-responses in knife.toml)",
        preview(data)
    )]
    Decode {
        /// What the JSON parser said.
        message: String,
        /// The event's data, as received.
        data: String,
    },
    /// The provider reported an error inside the stream (an `error` event or chunk).
    #[error("the model provider reported an error: {message}")]
    Provider {
        /// Error type/code from the body (`server_error`, `overloaded_error`, …).
        code: Option<String>,
        /// The provider's error message.
        message: String,
        /// The whole error event/chunk as JSON.
        body: Option<Value>,
    },
}

/// Failures of the SSE decoder ([`crate::sse`]).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SseError {
    /// EOF arrived inside an event (no blank line after its last field).
    #[error("stream ended early, in the middle of an event")]
    EndedEarly,
    /// One event grew beyond the configured cap (bytes).
    #[error("an event exceeded the size limit of {limit} bytes")]
    EventTooLarge {
        /// The cap that was exceeded (bytes).
        limit: usize,
    },
    /// The connection broke while the response body was streaming (after a 2xx
    /// answer): the endpoint was reached, the answer is incomplete. Usually transient.
    #[error("the connection to the model dropped mid-answer ({0}); send the message again")]
    ConnectionLost(String),
    /// The stream ended without the protocol's terminator (`[DONE]`, `message_stop`, …).
    #[error("stream ended before the model finished its response")]
    Incomplete,
}

/// The provider's error code in a JSON error body: `error.code`, else `error.type`
/// (or the same keys at the top level when there is no `error` object), as a
/// string. OpenAI-style bodies put a machine code in `code` and a class in `type`;
/// the code is the more specific of the two.
pub fn error_code(body: &serde_json::Value) -> Option<String> {
    let error = body.get("error").filter(|e| e.is_object()).unwrap_or(body);
    ["code", "type"]
        .iter()
        .filter_map(|key| error.get(*key))
        .find_map(|v| match v {
            serde_json::Value::String(s) => Some(s.clone()),
            serde_json::Value::Number(n) => Some(n.to_string()),
            _ => None,
        })
}

/// Characters of undecodable event data quoted in [`LlmError::Decode`]'s message.
pub const DECODE_PREVIEW_CHARS: usize = 200;

/// `data` cut to [`DECODE_PREVIEW_CHARS`] characters, with the total size when cut.
fn preview(data: &str) -> String {
    if data.chars().count() <= DECODE_PREVIEW_CHARS {
        return format!("{data:?}");
    }
    let head: String = data.chars().take(DECODE_PREVIEW_CHARS).collect();
    format!("{head:?}… ({} bytes in all)", data.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decode_errors_quote_a_bounded_preview_of_the_data() {
        let short = LlmError::Decode {
            message: "expected value".into(),
            data: "garbage".into(),
        };
        assert!(short.to_string().contains("\"garbage\""), "{short}");
        let long = LlmError::Decode {
            message: "x".into(),
            data: "a".repeat(10_000),
        };
        let text = long.to_string();
        assert!(text.len() < 600, "{}", text.len());
        assert!(text.contains("10000 bytes in all"), "{text}");
    }
}
