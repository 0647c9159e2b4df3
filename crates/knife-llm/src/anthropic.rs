//! Anthropic Messages streaming: request body, HTTP client and the stream
//! adapter (bytes → SSE → [`AnthropicMapper`] → [`LlmStream`]).
//!
//! `base_url` is everything before `/messages`, e.g. `https://api.anthropic.com/v1`.

mod mapper;

use futures::Stream;
use serde_json::{Map, Value, json};

use crate::error::LlmError;
use crate::http::{HttpTimeouts, open_event_stream};
use crate::sse::SseEvent;
use crate::stream::map_event_stream;
use crate::types::{ChatMessage, LlmClient, LlmRequest, LlmStream};

pub use mapper::{AnthropicMapper, stop_reason, usage_from_json};

/// The `anthropic-version` header every request carries.
pub const ANTHROPIC_VERSION: &str = "2023-06-01";

/// `max_tokens` sent when neither the request nor the client sets one (tokens).
/// Anthropic requires the field; 8192 is within every current model's output
/// limit except the Claude 3 (not 3.5+) models, which allow 4096.
pub const DEFAULT_MAX_TOKENS: u32 = 8192;

/// Sent in place of a user message with no non-whitespace text (the API rejects
/// such text blocks: "text content blocks must contain non-whitespace text").
pub const EMPTY_USER_TEXT: &str = "(empty message)";

/// Builds the JSON body of a streaming `POST /messages`.
///
/// Shape: `{model, max_tokens, stream: true, messages}` plus `system` (every
/// [`ChatMessage::System`] text, joined with a blank line) when there is one,
/// `tools: [{name, description, input_schema}]` when there are tools and
/// `temperature` when set. `max_tokens` is the request's
/// `max_output_tokens`, else `default_max_tokens`.
///
/// Messages: `user` text → `{type: "text"}` block; assistant → its
/// [`ChatMessage::Reasoning`] blocks that carry a signature (as `thinking`
/// blocks with `signature`, first), its text (when not blank: the API rejects
/// whitespace-only text blocks; a blank user text becomes [`EMPTY_USER_TEXT`]), then one
/// `tool_use` block per call (`input` = the arguments parsed as a JSON object;
/// empty arguments → `{}`; anything else is kept under `_raw_arguments` so the
/// model sees what it sent); a tool result → a `tool_result` block in a `user`
/// message. Consecutive messages of the same role are merged into one message
/// (Anthropic wants every `tool_result` of a step in the one user message that
/// follows the `tool_use`s). An assistant message left with no block is dropped.
/// When the request has no tools, calls and results are sent as text blocks
/// instead (`[tool NAME ARGUMENTS]`, `[tool NAME] → OUTPUT`): the API rejects
/// tool blocks in a request that defines no tools.
pub fn messages_request_body(request: &LlmRequest, default_max_tokens: u32) -> Value {
    let mut system: Vec<&str> = Vec::new();
    let mut messages: Vec<(&'static str, Vec<Value>)> = Vec::new();
    let mut pending_thinking: Vec<Value> = Vec::new();
    // Without tools the API rejects `tool_use` / `tool_result` blocks (400
    // "Requests which include tool_use or tool_result blocks must define tools"):
    // such a request (e.g. a compaction summary) carries them as text.
    let text_only = request.tools.is_empty();
    let mut tool_names: std::collections::HashMap<&str, &str> = std::collections::HashMap::new();
    let mut push = |role: &'static str, blocks: Vec<Value>| {
        if blocks.is_empty() {
            return;
        }
        match messages.last_mut() {
            Some((last, content)) if *last == role => content.extend(blocks),
            _ => messages.push((role, blocks)),
        }
    };
    for message in &request.messages {
        match message {
            ChatMessage::System { text } => system.push(text),
            ChatMessage::User { text } => {
                // The API rejects a text block without non-whitespace text.
                let text = if text.trim().is_empty() {
                    EMPTY_USER_TEXT
                } else {
                    text
                };
                push("user", vec![json!({"type": "text", "text": text})])
            }
            ChatMessage::Reasoning { text, signature } => {
                if let Some(signature) = signature {
                    pending_thinking.push(
                        json!({"type": "thinking", "thinking": text, "signature": signature}),
                    );
                }
            }
            ChatMessage::Assistant { text, tool_calls } => {
                let mut blocks = std::mem::take(&mut pending_thinking);
                if let Some(text) = text.as_deref().filter(|t| !t.trim().is_empty()) {
                    blocks.push(json!({"type": "text", "text": text}));
                }
                for call in tool_calls {
                    if text_only {
                        tool_names.insert(call.id.as_str(), call.name.as_str());
                        blocks.push(json!({
                            "type": "text",
                            "text": format!("[tool {} {}]", call.name, call.arguments.trim()),
                        }));
                    } else {
                        blocks.push(json!({
                            "type": "tool_use",
                            "id": call.id,
                            "name": call.name,
                            "input": tool_input(&call.arguments),
                        }));
                    }
                }
                push("assistant", blocks);
            }
            ChatMessage::Tool { call_id, content } if text_only => {
                let name = tool_names.get(call_id.as_str()).copied().unwrap_or("call");
                push(
                    "user",
                    vec![json!({"type": "text", "text": format!("[tool {name}] → {content}")})],
                );
            }
            ChatMessage::Tool { call_id, content } => push(
                "user",
                vec![json!({"type": "tool_result", "tool_use_id": call_id, "content": content})],
            ),
        }
    }
    let mut body = Map::new();
    body.insert("model".into(), json!(request.model));
    body.insert(
        "max_tokens".into(),
        json!(request.max_output_tokens.unwrap_or(default_max_tokens)),
    );
    body.insert("stream".into(), json!(true));
    if !system.is_empty() {
        body.insert("system".into(), json!(system.join("\n\n")));
    }
    body.insert(
        "messages".into(),
        messages
            .into_iter()
            .map(|(role, content)| json!({"role": role, "content": content}))
            .collect(),
    );
    if !request.tools.is_empty() {
        let tools: Vec<Value> = request
            .tools
            .iter()
            .map(|tool| {
                json!({
                    "name": tool.name,
                    "description": tool.description,
                    "input_schema": tool.parameters,
                })
            })
            .collect();
        body.insert("tools".into(), Value::Array(tools));
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

/// A `tool_use.input` object from an arguments string (see [`messages_request_body`]).
fn tool_input(arguments: &str) -> Value {
    if arguments.trim().is_empty() {
        return json!({});
    }
    match serde_json::from_str::<Value>(arguments) {
        Ok(value @ Value::Object(_)) => value,
        _ => json!({ "_raw_arguments": arguments }),
    }
}

/// Maps a stream of SSE events of one Messages response to [`crate::LlmEvent`]s
/// with an [`AnthropicMapper`] (see [`crate::stream::map_event_stream`]; a cut
/// after the `message_delta` stop reason ends as a clean EOF).
pub fn map_messages_stream<S>(events: S) -> LlmStream
where
    S: Stream<Item = Result<SseEvent, LlmError>> + Send + 'static,
{
    map_event_stream(events, AnthropicMapper::new())
}

/// Client for the Anthropic Messages API (`POST {base_url}/messages`).
#[derive(Clone, Debug)]
pub struct AnthropicClient {
    /// Base URL up to (not including) `/messages`, e.g. `https://api.anthropic.com/v1`;
    /// a trailing `/` is ignored.
    pub base_url: String,
    /// Sent as `x-api-key` when set.
    pub api_key: Option<String>,
    /// `max_tokens` for requests that set no `max_output_tokens` (default
    /// [`DEFAULT_MAX_TOKENS`]).
    pub default_max_tokens: u32,
    /// The HTTP client (timeouts, proxies, TLS are its configuration).
    pub http: reqwest::Client,
    /// The timeouts `http` was built with (reported in [`LlmError::Timeout`]).
    pub timeouts: HttpTimeouts,
}

impl AnthropicClient {
    /// A client with the default [`HttpTimeouts`] and [`DEFAULT_MAX_TOKENS`].
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
            default_max_tokens: DEFAULT_MAX_TOKENS,
            http: timeouts.client(),
            timeouts,
        }
    }

    /// The full endpoint URL: `{base_url}/messages`.
    pub fn endpoint(&self) -> String {
        format!("{}/messages", self.base_url.trim_end_matches('/'))
    }
}

#[async_trait::async_trait]
impl LlmClient for AnthropicClient {
    /// POSTs [`messages_request_body`] to [`AnthropicClient::endpoint`] with
    /// `x-api-key` and `anthropic-version: 2023-06-01`, and streams the answer.
    ///
    /// Errors before the stream: [`LlmError::Transport`], [`LlmError::Timeout`],
    /// [`LlmError::Http`] (status, retry-after, JSON body such as
    /// `{"type":"error","error":{"type":"overloaded_error",…}}`). Inside the
    /// stream: `Stream`, `Timeout`, `Decode`, and `Provider` for an `error` event
    /// (code = the error's type).
    async fn stream(&self, request: LlmRequest) -> Result<LlmStream, LlmError> {
        let mut builder = self
            .http
            .post(self.endpoint())
            .header("anthropic-version", ANTHROPIC_VERSION)
            .json(&messages_request_body(&request, self.default_max_tokens));
        if let Some(key) = &self.api_key {
            builder = builder.header("x-api-key", key);
        }
        let events = open_event_stream(builder, self.timeouts).await?;
        Ok(map_messages_stream(events))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::types::{ToolCallRequest, ToolSpec};

    fn call(id: &str, arguments: &str) -> ToolCallRequest {
        ToolCallRequest {
            id: id.into(),
            name: "read".into(),
            arguments: arguments.into(),
        }
    }

    #[test]
    fn request_body_maps_system_tools_results_and_signed_thinking() {
        let request = LlmRequest {
            model: "claude-sonnet-4-5".into(),
            messages: vec![
                ChatMessage::System {
                    text: "be brief".into(),
                },
                ChatMessage::User {
                    text: "read a and b".into(),
                },
                ChatMessage::Reasoning {
                    text: "unsigned".into(),
                    signature: None,
                },
                ChatMessage::Reasoning {
                    text: "I should read".into(),
                    signature: Some("SIG".into()),
                },
                ChatMessage::Assistant {
                    text: Some("Reading.".into()),
                    tool_calls: vec![call("toolu_a", r#"{"path":"a"}"#), call("toolu_b", "")],
                },
                ChatMessage::Tool {
                    call_id: "toolu_a".into(),
                    content: "A".into(),
                },
                ChatMessage::Tool {
                    call_id: "toolu_b".into(),
                    content: "B".into(),
                },
                ChatMessage::Assistant {
                    text: None,
                    tool_calls: vec![call("toolu_c", "not json")],
                },
            ],
            tools: vec![ToolSpec {
                name: "read".into(),
                description: "Read a file".into(),
                parameters: json!({"type": "object"}),
            }],
            max_output_tokens: None,
            temperature: Some(0.7),
        };
        assert_eq!(
            messages_request_body(&request, 1234),
            json!({
                "model": "claude-sonnet-4-5",
                "max_tokens": 1234,
                "stream": true,
                "temperature": 0.7,
                "system": "be brief",
                "messages": [
                    {"role": "user", "content": [{"type": "text", "text": "read a and b"}]},
                    {"role": "assistant", "content": [
                        {"type": "thinking", "thinking": "I should read", "signature": "SIG"},
                        {"type": "text", "text": "Reading."},
                        {"type": "tool_use", "id": "toolu_a", "name": "read", "input": {"path": "a"}},
                        {"type": "tool_use", "id": "toolu_b", "name": "read", "input": {}},
                    ]},
                    {"role": "user", "content": [
                        {"type": "tool_result", "tool_use_id": "toolu_a", "content": "A"},
                        {"type": "tool_result", "tool_use_id": "toolu_b", "content": "B"},
                    ]},
                    {"role": "assistant", "content": [
                        {"type": "tool_use", "id": "toolu_c", "name": "read",
                         "input": {"_raw_arguments": "not json"}},
                    ]},
                ],
                "tools": [{"name": "read", "description": "Read a file",
                           "input_schema": {"type": "object"}}],
            })
        );
    }

    #[test]
    fn request_max_output_tokens_wins_and_optional_fields_are_omitted() {
        let body = messages_request_body(
            &LlmRequest {
                model: "m".into(),
                messages: vec![
                    ChatMessage::User { text: "hi".into() },
                    ChatMessage::Assistant {
                        text: Some(String::new()),
                        tool_calls: vec![],
                    },
                ],
                tools: vec![],
                max_output_tokens: Some(99),
                temperature: None,
            },
            DEFAULT_MAX_TOKENS,
        );
        assert_eq!(body["max_tokens"], 99);
        for key in ["tools", "temperature", "system"] {
            assert!(body.get(key).is_none(), "{key}");
        }
        // The empty assistant message is dropped.
        assert_eq!(body["messages"].as_array().unwrap().len(), 1);
    }

    #[test]
    fn without_tools_tool_calls_and_results_are_sent_as_text() {
        let request = LlmRequest {
            model: "m".into(),
            messages: vec![
                ChatMessage::User {
                    text: "read a".into(),
                },
                ChatMessage::Assistant {
                    text: Some("Reading.".into()),
                    tool_calls: vec![ToolCallRequest {
                        id: "toolu_a".into(),
                        name: "read".into(),
                        arguments: r#"{"path":"a"}"#.into(),
                    }],
                },
                ChatMessage::Tool {
                    call_id: "toolu_a".into(),
                    content: "A".into(),
                },
                ChatMessage::User {
                    text: "summarise".into(),
                },
            ],
            tools: vec![],
            max_output_tokens: None,
            temperature: None,
        };
        let body = messages_request_body(&request, 10);
        assert_eq!(
            body["messages"],
            json!([
                {"role": "user", "content": [{"type": "text", "text": "read a"}]},
                {"role": "assistant", "content": [
                    {"type": "text", "text": "Reading."},
                    {"type": "text", "text": "[tool read {\"path\":\"a\"}]"},
                ]},
                {"role": "user", "content": [
                    {"type": "text", "text": "[tool read] → A"},
                    {"type": "text", "text": "summarise"},
                ]},
            ])
        );
        assert!(!body.to_string().contains("tool_use"), "{body}");
    }

    #[test]
    fn whitespace_only_text_is_never_sent_as_a_text_block() {
        let body = messages_request_body(
            &LlmRequest {
                model: "m".into(),
                messages: vec![
                    ChatMessage::User { text: " \n".into() },
                    ChatMessage::Assistant {
                        text: Some("\n\n".into()),
                        tool_calls: vec![call("toolu_a", "{}")],
                    },
                    ChatMessage::Tool {
                        call_id: "toolu_a".into(),
                        content: "A".into(),
                    },
                    ChatMessage::Assistant {
                        text: Some("  ".into()),
                        tool_calls: vec![],
                    },
                ],
                tools: vec![ToolSpec {
                    name: "read".into(),
                    description: "Read".into(),
                    parameters: json!({"type": "object"}),
                }],
                max_output_tokens: None,
                temperature: None,
            },
            10,
        );
        assert_eq!(
            body["messages"],
            json!([
                {"role": "user", "content": [{"type": "text", "text": EMPTY_USER_TEXT}]},
                {"role": "assistant", "content": [
                    {"type": "tool_use", "id": "toolu_a", "name": "read", "input": {}},
                ]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_a", "content": "A"},
                ]},
            ])
        );
    }

    #[test]
    fn endpoint_ignores_trailing_slash() {
        let client = AnthropicClient::new("https://api.anthropic.com/v1/", None);
        assert_eq!(client.endpoint(), "https://api.anthropic.com/v1/messages");
        assert_eq!(client.default_max_tokens, DEFAULT_MAX_TOKENS);
    }
}
