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
    /// An assistant text part opens.
    TextStart {
        /// Part id (`text-0` when synthesised).
        id: String,
    },
    /// More assistant text for part `id`.
    TextDelta {
        /// Part id, as in the `TextStart`.
        id: String,
        /// The new text (append to what came before).
        text: String,
    },
    /// The text part `id` is complete.
    TextEnd {
        /// Part id, as in the `TextStart`.
        id: String,
    },
    /// A reasoning ("thinking") part opens.
    ReasoningStart {
        /// Part id (`reasoning-N` when synthesised).
        id: String,
    },
    /// More reasoning text for part `id`.
    ReasoningDelta {
        /// Part id, as in the `ReasoningStart`.
        id: String,
        /// The new reasoning text (append to what came before).
        text: String,
    },
    /// `signature` is the provider's opaque proof for the block (Anthropic thinking).
    ReasoningEnd {
        /// Part id, as in the `ReasoningStart`.
        id: String,
        /// Opaque signature to send back with the block, when the provider gives one.
        signature: Option<String>,
    },
    /// The model started a tool call (arguments follow as deltas).
    ToolInputStart {
        /// The provider's tool-call id.
        id: String,
        /// Tool name.
        name: String,
    },
    /// More of the arguments string of tool call `id`.
    ToolInputDelta {
        /// The provider's tool-call id.
        id: String,
        /// Raw fragment of the arguments string (not necessarily valid JSON alone).
        delta: String,
    },
    /// The arguments of tool call `id` are complete.
    ToolInputEnd {
        /// The provider's tool-call id.
        id: String,
    },
    /// The complete call: `arguments` is the full arguments string exactly as streamed.
    ToolCall {
        /// The provider's tool-call id.
        id: String,
        /// Tool name.
        name: String,
        /// Full arguments string (normally a JSON object; not validated here).
        arguments: String,
    },
    /// The model finished one step (one HTTP response).
    StepFinish {
        /// Normalised reason.
        reason: FinishReason,
        /// The provider's own finish-reason string (`stop`, `tool_calls`, `end_turn`, …).
        raw_reason: Option<String>,
        /// Token usage of the step, when the provider reported it.
        usage: Option<Usage>,
        /// Provider response id (`chatcmpl-…`, `resp_…`, `msg_…`), when seen.
        response_id: Option<String>,
        /// Model name the provider reports, when seen.
        model: Option<String>,
    },
}

/// Why a step ended, normalised.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FinishReason {
    /// Natural end of the answer (`stop`, `end_turn`, …).
    Stop,
    /// The output token cap was reached.
    Length,
    /// The model's context window filled up mid-answer (Anthropic
    /// `model_context_window_exceeded`): compact the history and continue, as for
    /// a context-overflow error, not an output limit.
    ContextOverflow,
    /// The model wants tool results before continuing.
    ToolCalls,
    /// Output was withheld by the provider's filter.
    ContentFilter,
    /// The provider ended the step with an error.
    Error,
    /// A reason the mapper does not know (see `raw_reason`).
    Other,
    /// The provider gave no reason.
    Unknown,
}

/// Token usage of one step (tokens). `raw` is the provider's usage object as sent.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Usage {
    /// Prompt tokens (including cached ones).
    pub input_tokens: u64,
    /// Generated tokens (including reasoning tokens).
    pub output_tokens: u64,
    /// Of `output_tokens`, how many were reasoning.
    pub reasoning_tokens: u64,
    /// Of `input_tokens`, how many were served from the provider's cache.
    pub cached_input_tokens: u64,
    /// Total tokens as reported (or input + output).
    pub total_tokens: u64,
    /// The provider's usage object, unchanged.
    pub raw: Option<Value>,
}

/// A tool the model may call: name, description and JSON-schema parameters.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    /// Tool name the model calls it by.
    pub name: String,
    /// What the tool does, for the model.
    pub description: String,
    /// JSON Schema of the arguments object.
    pub parameters: Value,
}

/// A tool call the assistant made, as sent back in history.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolCallRequest {
    /// The provider's tool-call id (answered by a [`ChatMessage::Tool`] with the same id).
    pub id: String,
    /// Tool name.
    pub name: String,
    /// Arguments string exactly as the model produced it.
    pub arguments: String,
}

/// One message of the conversation sent to the model.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "snake_case")]
pub enum ChatMessage {
    /// Instructions for the model.
    System {
        /// Message text.
        text: String,
    },
    /// What the user said.
    User {
        /// Message text.
        text: String,
    },
    /// An earlier assistant turn: its text and the tool calls it made.
    Assistant {
        /// Assistant text, if it wrote any.
        text: Option<String>,
        /// Tool calls it made (each needs a later [`ChatMessage::Tool`] answer).
        tool_calls: Vec<ToolCallRequest>,
    },
    /// The result of tool call `call_id` (output or error text the model sees).
    Tool {
        /// Id of the [`ToolCallRequest`] this answers.
        call_id: String,
        /// What the model sees as the tool's result.
        content: String,
    },
    /// A reasoning block of the assistant message that follows it, as the model
    /// streamed it ([`LlmEvent::ReasoningDelta`] text and the
    /// [`LlmEvent::ReasoningEnd`] signature).
    ///
    /// Only Anthropic needs it back: a `thinking` block with its signature,
    /// placed first in the next [`ChatMessage::Assistant`]'s content (required
    /// when thinking is on and that assistant message made tool calls). Blocks
    /// without a signature, and this message for every other protocol, are
    /// skipped when the request is built.
    Reasoning {
        /// The reasoning text.
        text: String,
        /// The provider's opaque signature of the block (Anthropic), if any.
        signature: Option<String>,
    },
}

/// One streaming request.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LlmRequest {
    /// Provider model name (`gpt-4o-mini`, `qwen3:8b`, …).
    pub model: String,
    /// The conversation, oldest first.
    pub messages: Vec<ChatMessage>,
    /// Tools the model may call (empty: none).
    pub tools: Vec<ToolSpec>,
    /// Output token cap, when set.
    pub max_output_tokens: Option<u32>,
    /// Sampling temperature, when set (provider default otherwise).
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
