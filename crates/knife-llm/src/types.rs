//! The normalised request and event vocabulary every provider maps to.

use futures::stream::BoxStream;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::LlmError;

/// One normalised streaming event. A stream is a sequence of these that ends
/// after a [`LlmEvent::StepFinish`], or with an `Err(LlmError)` item.
///
/// Ids: `id` of text/reasoning parts is provider-given or synthesised (`text-0`,
/// `reasoning-0`); tool ids are the provider's call id.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum LlmEvent {
    TextStart {
        id: String,
    },
    TextDelta {
        id: String,
        text: String,
    },
    TextEnd {
        id: String,
    },
    ReasoningStart {
        id: String,
    },
    ReasoningDelta {
        id: String,
        text: String,
    },
    /// `signature` is the provider's opaque proof for the block (Anthropic thinking).
    ReasoningEnd {
        id: String,
        signature: Option<String>,
    },
    ToolInputStart {
        id: String,
        name: String,
    },
    ToolInputDelta {
        id: String,
        delta: String,
    },
    ToolInputEnd {
        id: String,
    },
    /// The complete call: `arguments` is the full arguments string exactly as streamed.
    ToolCall {
        id: String,
        name: String,
        arguments: String,
    },
    /// The model finished one step (one HTTP response).
    StepFinish {
        reason: FinishReason,
        /// The provider's own finish-reason string (`stop`, `tool_calls`, `end_turn`, …).
        raw_reason: Option<String>,
        usage: Option<Usage>,
        /// Provider response id (`chatcmpl-…`, `resp_…`, `msg_…`), when seen.
        response_id: Option<String>,
        model: Option<String>,
    },
}

/// Why a step ended, normalised.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FinishReason {
    Stop,
    Length,
    ToolCalls,
    ContentFilter,
    Error,
    Other,
    Unknown,
}

/// Token usage of one step (tokens). `raw` is the provider's usage object as sent.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub reasoning_tokens: u64,
    pub cached_input_tokens: u64,
    pub total_tokens: u64,
    pub raw: Option<Value>,
}

/// A tool the model may call: name, description and JSON-schema parameters.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    /// JSON Schema of the arguments object.
    pub parameters: Value,
}

/// A tool call the assistant made, as sent back in history.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolCallRequest {
    pub id: String,
    pub name: String,
    /// Arguments string exactly as the model produced it.
    pub arguments: String,
}

/// One message of the conversation sent to the model.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "snake_case")]
pub enum ChatMessage {
    System {
        text: String,
    },
    User {
        text: String,
    },
    Assistant {
        text: Option<String>,
        tool_calls: Vec<ToolCallRequest>,
    },
    /// The result of tool call `call_id` (output or error text the model sees).
    Tool {
        call_id: String,
        content: String,
    },
}

/// One streaming request.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LlmRequest {
    pub model: String,
    pub messages: Vec<ChatMessage>,
    pub tools: Vec<ToolSpec>,
    /// Output token cap, when set.
    pub max_output_tokens: Option<u32>,
    pub temperature: Option<f32>,
}

/// A stream of normalised events; the first `Err` ends it.
pub type LlmStream = BoxStream<'static, Result<LlmEvent, LlmError>>;

/// A streaming LLM client (one per provider instance).
#[async_trait::async_trait]
pub trait LlmClient: Send + Sync + 'static {
    /// Sends `request` and returns the event stream once the response headers
    /// arrived with a 2xx status.
    ///
    /// Errors: [`LlmError::Http`] for non-2xx answers (status, retry-after, parsed
    /// JSON body), [`LlmError::Transport`] when the endpoint cannot be reached.
    async fn stream(&self, request: LlmRequest) -> Result<LlmStream, LlmError>;
}
