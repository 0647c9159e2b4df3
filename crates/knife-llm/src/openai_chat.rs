//! OpenAI Chat Completions streaming: request body, HTTP client and the stream
//! adapter (bytes → SSE → [`ChatCompletionsMapper`] → [`LlmStream`]).
//!
//! Works with OpenAI and the many servers that speak the same protocol
//! (llama.cpp, vLLM, Ollama, LM Studio, …): `base_url` is everything before
//! `/chat/completions`, e.g. `http://127.0.0.1:8080/v1`.

mod mapper;

use futures::Stream;
use serde_json::{Map, Value, json};

use crate::error::LlmError;
use crate::http::open_event_stream;
use crate::sse::SseEvent;
use crate::stream::map_event_stream;
use crate::types::{ChatMessage, LlmClient, LlmRequest, LlmStream};

pub use crate::http::{HttpTimeouts, parse_retry_after};
pub use mapper::{ChatCompletionsMapper, MappedEvent, TEXT_ID, finish_reason, usage_from_json};

/// Builds the JSON body of a streaming `POST /chat/completions`.
///
/// Shape: `{model, messages, stream: true, stream_options: {include_usage: true}}`
/// plus `tools: [{type: "function", function: {name, description, parameters}}]`
/// when there are tools, `max_tokens` (tokens) and `temperature` when set.
/// Messages: `system`/`user` with `content`; `assistant` with `content`
/// (null when absent) and `tool_calls: [{id, type: "function", function: {name,
/// arguments}}]` when it made calls; `tool` with `tool_call_id` and `content`.
pub fn chat_request_body(request: &LlmRequest) -> Value {
    let messages: Vec<Value> = request.messages.iter().filter_map(message_json).collect();
    let mut body = Map::new();
    body.insert("model".into(), json!(request.model));
    body.insert("messages".into(), Value::Array(messages));
    body.insert("stream".into(), json!(true));
    body.insert("stream_options".into(), json!({"include_usage": true}));
    if !request.tools.is_empty() {
        let tools: Vec<Value> = request
            .tools
            .iter()
            .map(|tool| {
                json!({
                    "type": "function",
                    "function": {
                        "name": tool.name,
                        "description": tool.description,
                        "parameters": tool.parameters,
                    }
                })
            })
            .collect();
        body.insert("tools".into(), Value::Array(tools));
    }
    if let Some(max) = request.max_output_tokens {
        body.insert("max_tokens".into(), json!(max));
    }
    if let Some(temperature) = request.temperature {
        // Go through the f32's shortest decimal form so 0.7 is sent as 0.7,
        // not 0.699999988079071.
        let value = temperature
            .to_string()
            .parse::<f64>()
            .unwrap_or(f64::from(temperature));
        body.insert("temperature".into(), json!(value));
    }
    Value::Object(body)
}

/// One wire message; `None` for messages Chat Completions has no place for
/// ([`ChatMessage::Reasoning`]).
fn message_json(message: &ChatMessage) -> Option<Value> {
    let value = match message {
        ChatMessage::System { text } => json!({"role": "system", "content": text}),
        ChatMessage::User { text } => json!({"role": "user", "content": text}),
        ChatMessage::Assistant { text, tool_calls } => {
            let mut msg = json!({"role": "assistant", "content": text});
            if !tool_calls.is_empty() {
                msg["tool_calls"] = tool_calls
                    .iter()
                    .map(|call| {
                        json!({
                            "id": call.id,
                            "type": "function",
                            "function": {"name": call.name, "arguments": call.arguments},
                        })
                    })
                    .collect();
            }
            msg
        }
        ChatMessage::Tool { call_id, content } => {
            json!({"role": "tool", "tool_call_id": call_id, "content": content})
        }
        ChatMessage::Reasoning { .. } => return None,
    };
    Some(value)
}

/// Maps a stream of SSE events of one Chat Completions response to
/// [`crate::LlmEvent`]s with a [`ChatCompletionsMapper`] (see
/// [`crate::stream::map_event_stream`]).
///
/// One input error is forgiven: [`crate::SseError::EndedEarly`] after a chunk
/// carried a `finish_reason`. The answer is complete by then; only the last event
/// (usually `data: [DONE]` sent without its closing blank line) was cut, and per
/// the SSE spec that unterminated event is discarded, not dispatched. The stream
/// then ends as at a clean EOF, with the `StepFinish`.
pub fn map_chat_stream<S>(events: S) -> LlmStream
where
    S: Stream<Item = Result<SseEvent, LlmError>> + Send + 'static,
{
    map_event_stream(events, ChatCompletionsMapper::new())
}

/// Client for an OpenAI-compatible Chat Completions endpoint.
#[derive(Clone, Debug)]
pub struct OpenAiChatClient {
    /// Base URL up to (not including) `/chat/completions`, e.g.
    /// `https://api.openai.com/v1` or `http://127.0.0.1:8080/v1`; a trailing
    /// `/` is ignored.
    pub base_url: String,
    /// Sent as `Authorization: Bearer <key>` when set (local servers need none).
    pub api_key: Option<String>,
    /// The HTTP client (timeouts, proxies, TLS are its configuration).
    pub http: reqwest::Client,
    /// The timeouts `http` was built with (reported in [`LlmError::Timeout`]).
    pub timeouts: HttpTimeouts,
}

impl OpenAiChatClient {
    /// A client with the default [`HttpTimeouts`] (10 s to connect, 300 s of
    /// silence at most; no overall limit: a long answer may stream for minutes).
    pub fn new(base_url: impl Into<String>, api_key: Option<String>) -> Self {
        Self::with_timeouts(base_url, api_key, HttpTimeouts::default())
    }

    /// A client whose HTTP connection uses `timeouts`.
    pub fn with_timeouts(
        base_url: impl Into<String>,
        api_key: Option<String>,
        timeouts: HttpTimeouts,
    ) -> Self {
        Self {
            base_url: base_url.into(),
            api_key,
            http: timeouts.client(),
            timeouts,
        }
    }

    /// The full endpoint URL: `{base_url}/chat/completions`.
    pub fn endpoint(&self) -> String {
        format!("{}/chat/completions", self.base_url.trim_end_matches('/'))
    }
}

#[async_trait::async_trait]
impl LlmClient for OpenAiChatClient {
    /// POSTs [`chat_request_body`] to [`OpenAiChatClient::endpoint`] and streams
    /// the answer.
    ///
    /// Errors before the stream: [`LlmError::Transport`] when the request cannot
    /// be sent; [`LlmError::Http`] for non-2xx (status, retry-after from
    /// `retry-after-ms` / `retry-after`, JSON body, message). Errors inside the
    /// stream: `Transport` (body read failed), `Stream` (`EndedEarly`,
    /// `EventTooLarge`, `Incomplete`), `Decode` (non-JSON data), `Provider`
    /// (`{"error": …}` chunk).
    async fn stream(&self, request: LlmRequest) -> Result<LlmStream, LlmError> {
        let mut builder = self
            .http
            .post(self.endpoint())
            .json(&chat_request_body(&request));
        if let Some(key) = &self.api_key {
            builder = builder.bearer_auth(key);
        }
        let events = open_event_stream(builder, self.timeouts).await?;
        Ok(map_chat_stream(events))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::types::{ToolCallRequest, ToolSpec};
    use futures::StreamExt;

    #[test]
    fn request_body_matches_recorded_openai_request() {
        let request = LlmRequest {
            model: "gpt-4o-mini".into(),
            messages: vec![
                ChatMessage::System {
                    text: "be brief".into(),
                },
                ChatMessage::User {
                    text: "What is the capital of the UK? Use the tool, then answer.".into(),
                },
                ChatMessage::Assistant {
                    text: None,
                    tool_calls: vec![ToolCallRequest {
                        id: "call_ZR5UUuTt3pf61kjwAJIYdVMj".into(),
                        name: "get_capital".into(),
                        arguments: "{\"country\":\"UK\"}".into(),
                    }],
                },
                ChatMessage::Tool {
                    call_id: "call_ZR5UUuTt3pf61kjwAJIYdVMj".into(),
                    content: "London".into(),
                },
                ChatMessage::Assistant {
                    text: Some("The capital is London.".into()),
                    tool_calls: vec![],
                },
            ],
            tools: vec![ToolSpec {
                name: "get_capital".into(),
                description: "".into(),
                parameters: json!({"type": "object", "properties": {"country": {"type": "string"}}}),
            }],
            max_output_tokens: Some(256),
            temperature: Some(0.7),
        };
        let body = chat_request_body(&request);
        assert_eq!(
            body,
            json!({
                "model": "gpt-4o-mini",
                "stream": true,
                "stream_options": {"include_usage": true},
                "max_tokens": 256,
                "temperature": 0.7,
                "messages": [
                    {"role": "system", "content": "be brief"},
                    {"role": "user", "content": "What is the capital of the UK? Use the tool, then answer."},
                    {"role": "assistant", "content": null, "tool_calls": [{
                        "id": "call_ZR5UUuTt3pf61kjwAJIYdVMj", "type": "function",
                        "function": {"name": "get_capital", "arguments": "{\"country\":\"UK\"}"}
                    }]},
                    {"role": "tool", "tool_call_id": "call_ZR5UUuTt3pf61kjwAJIYdVMj", "content": "London"},
                    {"role": "assistant", "content": "The capital is London."}
                ],
                "tools": [{"type": "function", "function": {
                    "name": "get_capital", "description": "",
                    "parameters": {"type": "object", "properties": {"country": {"type": "string"}}}
                }}]
            })
        );
    }

    #[test]
    fn minimal_body_omits_optional_fields() {
        let body = chat_request_body(&LlmRequest {
            model: "m".into(),
            messages: vec![ChatMessage::User { text: "hi".into() }],
            tools: vec![],
            max_output_tokens: None,
            temperature: None,
        });
        for key in ["tools", "max_tokens", "temperature"] {
            assert!(body.get(key).is_none(), "{key}");
        }
    }

    /// Decodes `body` (one chunk) and maps it, as the client does.
    async fn map_body(body: &'static str) -> Vec<MappedEvent> {
        let bytes = futures::stream::iter([Ok::<_, std::io::Error>(bytes::Bytes::from_static(
            body.as_bytes(),
        ))]);
        map_chat_stream(crate::sse::decode_stream(bytes))
            .collect()
            .await
    }

    const ANSWER: &str = concat!(
        "data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"}}]}\n\n",
        "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n",
    );

    #[tokio::test]
    async fn final_done_without_its_blank_line_after_a_finish_reason_completes() {
        for tail in [
            "data: [DONE]\n",
            "data: [DONE]",
            "data: {\"usage\":{\"prompt",
        ] {
            let body: &'static str = format!("{ANSWER}{tail}").leak();
            let out = map_body(body).await;
            assert!(out.iter().all(Result::is_ok), "{tail:?}: {:?}", out.last());
            assert!(
                matches!(
                    out.last(),
                    Some(Ok(crate::LlmEvent::StepFinish {
                        reason: crate::FinishReason::Stop,
                        ..
                    }))
                ),
                "{tail:?}: {out:?}"
            );
        }
    }

    #[tokio::test]
    async fn stream_cut_mid_event_without_a_finish_reason_still_fails() {
        let out = map_body(
            "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"}}]}\n\ndata: [DONE]",
        )
        .await;
        assert!(
            matches!(
                out.last(),
                Some(Err(LlmError::Stream(crate::SseError::EndedEarly)))
            ),
            "{out:?}"
        );
    }

    #[test]
    fn endpoint_ignores_trailing_slash() {
        let client = OpenAiChatClient::new("http://127.0.0.1:8080/v1/", None);
        assert_eq!(
            client.endpoint(),
            "http://127.0.0.1:8080/v1/chat/completions"
        );
    }
}
