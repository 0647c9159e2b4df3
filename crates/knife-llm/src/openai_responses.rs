//! OpenAI Responses streaming: request body, HTTP client and the stream adapter
//! (bytes → SSE → [`ResponsesMapper`] → [`LlmStream`]).
//!
//! `base_url` is everything before `/responses`, e.g. `https://api.openai.com/v1`.

mod mapper;

use futures::Stream;
use serde_json::{Map, Value, json};

use crate::error::LlmError;
use crate::http::{HttpTimeouts, open_event_stream};
use crate::sse::SseEvent;
use crate::stream::map_event_stream;
use crate::types::{ChatMessage, LlmClient, LlmRequest, LlmStream};

pub use mapper::{ResponsesMapper, usage_from_json};

/// Builds the JSON body of a streaming `POST /responses`.
///
/// Shape: `{model, input, stream: true, store: false}` plus `instructions` (the
/// leading [`ChatMessage::System`] texts, joined with a blank line) when there
/// are any, `tools: [{type: "function", name, description, parameters, strict:
/// false}]` when there are tools, `max_output_tokens` (tokens) and
/// `temperature` when set.
///
/// Input items: `user` → `{role: "user", content}`; a system message after the
/// first non-system one → `{role: "system", content}`; assistant text →
/// `{role: "assistant", content}` (when non-empty), then one `{type:
/// "function_call", call_id, name, arguments}` per call; a tool result →
/// `{type: "function_call_output", call_id, output}`.
/// [`ChatMessage::Reasoning`] is skipped: with `store: false` reasoning can only
/// be replayed as encrypted content, which knife does not request.
pub fn responses_request_body(request: &LlmRequest) -> Value {
    let mut instructions: Vec<&str> = Vec::new();
    let mut input: Vec<Value> = Vec::new();
    for message in &request.messages {
        match message {
            ChatMessage::System { text } if input.is_empty() => instructions.push(text),
            ChatMessage::System { text } => input.push(json!({"role": "system", "content": text})),
            ChatMessage::User { text } => input.push(json!({"role": "user", "content": text})),
            ChatMessage::Assistant { text, tool_calls } => {
                if let Some(text) = text.as_deref().filter(|t| !t.is_empty()) {
                    input.push(json!({"role": "assistant", "content": text}));
                }
                for call in tool_calls {
                    input.push(json!({
                        "type": "function_call",
                        "call_id": call.id,
                        "name": call.name,
                        "arguments": call.arguments,
                    }));
                }
            }
            ChatMessage::Tool { call_id, content } => input.push(json!({
                "type": "function_call_output",
                "call_id": call_id,
                "output": content,
            })),
            ChatMessage::Reasoning { .. } => {}
        }
    }
    let mut body = Map::new();
    body.insert("model".into(), json!(request.model));
    if !instructions.is_empty() {
        body.insert("instructions".into(), json!(instructions.join("\n\n")));
    }
    body.insert("input".into(), Value::Array(input));
    body.insert("stream".into(), json!(true));
    body.insert("store".into(), json!(false));
    if !request.tools.is_empty() {
        let tools: Vec<Value> = request
            .tools
            .iter()
            .map(|tool| {
                json!({
                    "type": "function",
                    "name": tool.name,
                    "description": tool.description,
                    "parameters": tool.parameters,
                    "strict": false,
                })
            })
            .collect();
        body.insert("tools".into(), Value::Array(tools));
    }
    if let Some(max) = request.max_output_tokens {
        body.insert("max_output_tokens".into(), json!(max));
    }
    if let Some(temperature) = request.temperature {
        // Shortest decimal form of the f32 (0.7, not 0.699999988079071).
        let value = temperature
            .to_string()
            .parse::<f64>()
            .unwrap_or(f64::from(temperature));
        body.insert("temperature".into(), json!(value));
    }
    Value::Object(body)
}

/// Maps a stream of SSE events of one Responses answer to [`crate::LlmEvent`]s
/// with a [`ResponsesMapper`] (see [`crate::stream::map_event_stream`]).
pub fn map_responses_stream<S>(events: S) -> LlmStream
where
    S: Stream<Item = Result<SseEvent, LlmError>> + Send + 'static,
{
    map_event_stream(events, ResponsesMapper::new())
}

/// Client for the OpenAI Responses API (`POST {base_url}/responses`).
#[derive(Clone, Debug)]
pub struct OpenAiResponsesClient {
    /// Base URL up to (not including) `/responses`, e.g. `https://api.openai.com/v1`;
    /// a trailing `/` is ignored.
    pub base_url: String,
    /// Sent as `Authorization: Bearer <key>` when set.
    pub api_key: Option<String>,
    /// Sent as the request's `reasoning` object when set, e.g. `{"effort":
    /// "medium", "summary": "auto"}`: reasoning models stream summaries only when
    /// asked; other models reject the field, so it is off by default.
    pub reasoning: Option<Value>,
    /// The HTTP client (timeouts, proxies, TLS are its configuration).
    pub http: reqwest::Client,
    /// The timeouts `http` was built with (reported in [`LlmError::Timeout`]).
    pub timeouts: HttpTimeouts,
}

impl OpenAiResponsesClient {
    /// A client with the default [`HttpTimeouts`].
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
            reasoning: None,
            http: timeouts.client(),
            timeouts,
        }
    }

    /// The request body: [`responses_request_body`] plus `reasoning` when set.
    pub fn request_body(&self, request: &LlmRequest) -> Value {
        let mut body = responses_request_body(request);
        if let (Some(reasoning), Some(map)) = (&self.reasoning, body.as_object_mut()) {
            map.insert("reasoning".into(), reasoning.clone());
        }
        body
    }

    /// The full endpoint URL: `{base_url}/responses`.
    pub fn endpoint(&self) -> String {
        format!("{}/responses", self.base_url.trim_end_matches('/'))
    }
}

#[async_trait::async_trait]
impl LlmClient for OpenAiResponsesClient {
    /// POSTs [`OpenAiResponsesClient::request_body`] to
    /// [`OpenAiResponsesClient::endpoint`] and streams the answer.
    ///
    /// Errors before the stream: [`LlmError::Transport`], [`LlmError::Timeout`],
    /// [`LlmError::Http`]. Inside the stream: `Stream`, `Timeout`, `Decode`, and
    /// `Provider` for an `error` event or `response.failed` (code kept, e.g.
    /// `insufficient_quota`).
    async fn stream(&self, request: LlmRequest) -> Result<LlmStream, LlmError> {
        let mut builder = self
            .http
            .post(self.endpoint())
            .json(&self.request_body(&request));
        if let Some(key) = &self.api_key {
            builder = builder.bearer_auth(key);
        }
        let events = open_event_stream(builder, self.timeouts).await?;
        Ok(map_responses_stream(events))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::types::{ToolCallRequest, ToolSpec};

    #[test]
    fn request_body_maps_instructions_items_and_tools() {
        let request = LlmRequest {
            model: "gpt-5".into(),
            messages: vec![
                ChatMessage::System {
                    text: "be brief".into(),
                },
                ChatMessage::User {
                    text: "capital of the UK?".into(),
                },
                ChatMessage::Reasoning {
                    text: "think".into(),
                    signature: None,
                },
                ChatMessage::Assistant {
                    text: Some("Checking.".into()),
                    tool_calls: vec![ToolCallRequest {
                        id: "call_1".into(),
                        name: "get_capital".into(),
                        arguments: r#"{"country":"UK"}"#.into(),
                    }],
                },
                ChatMessage::Tool {
                    call_id: "call_1".into(),
                    content: "London".into(),
                },
                ChatMessage::System {
                    text: "answer now".into(),
                },
            ],
            tools: vec![ToolSpec {
                name: "get_capital".into(),
                description: "d".into(),
                parameters: json!({"type": "object"}),
            }],
            max_output_tokens: Some(300),
            temperature: Some(0.7),
        };
        assert_eq!(
            responses_request_body(&request),
            json!({
                "model": "gpt-5",
                "instructions": "be brief",
                "stream": true,
                "store": false,
                "max_output_tokens": 300,
                "temperature": 0.7,
                "input": [
                    {"role": "user", "content": "capital of the UK?"},
                    {"role": "assistant", "content": "Checking."},
                    {"type": "function_call", "call_id": "call_1", "name": "get_capital",
                     "arguments": "{\"country\":\"UK\"}"},
                    {"type": "function_call_output", "call_id": "call_1", "output": "London"},
                    {"role": "system", "content": "answer now"},
                ],
                "tools": [{"type": "function", "name": "get_capital", "description": "d",
                           "parameters": {"type": "object"}, "strict": false}],
            })
        );
    }

    #[test]
    fn minimal_body_omits_optional_fields() {
        let body = responses_request_body(&LlmRequest {
            model: "m".into(),
            messages: vec![ChatMessage::User { text: "hi".into() }],
            tools: vec![],
            max_output_tokens: None,
            temperature: None,
        });
        for key in ["tools", "max_output_tokens", "temperature", "instructions"] {
            assert!(body.get(key).is_none(), "{key}");
        }
    }

    #[test]
    fn endpoint_ignores_trailing_slash() {
        let client = OpenAiResponsesClient::new("https://api.openai.com/v1/", None);
        assert_eq!(client.endpoint(), "https://api.openai.com/v1/responses");
    }

    #[test]
    fn reasoning_is_sent_only_when_configured() {
        let request = LlmRequest {
            model: "gpt-5".into(),
            messages: vec![ChatMessage::User { text: "hi".into() }],
            tools: vec![],
            max_output_tokens: None,
            temperature: None,
        };
        let mut client = OpenAiResponsesClient::new("http://x/v1", None);
        assert!(client.request_body(&request).get("reasoning").is_none());
        client.reasoning = Some(json!({"summary": "auto"}));
        assert_eq!(
            client.request_body(&request)["reasoning"],
            json!({"summary": "auto"})
        );
    }
}
