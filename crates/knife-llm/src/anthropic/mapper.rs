//! Anthropic Messages stream events (SSE) to normalised [`LlmEvent`]s.
//! Pure state machine, no I/O: text, thinking (with signature), tool_use input,
//! usage from `message_start` overlaid with `message_delta`, stop reason, errors.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use crate::error::{LlmError, SseError};
use crate::sse::SseEvent;
use crate::stream::{EventMapper, MappedEvent};
use crate::types::{FinishReason, LlmEvent, Usage};

/// One open content block (by its `index`).
#[derive(Debug)]
enum Block {
    /// `text`: part id `text-{index}`.
    Text { id: String },
    /// `thinking`: part id `reasoning-{index}`; the signature arrives as `signature_delta`s.
    Thinking { id: String, signature: String },
    /// `tool_use`: the provider's id, name, streamed `input_json_delta`s, and the
    /// `input` of `content_block_start` (used when no delta came).
    Tool {
        id: String,
        name: String,
        arguments: String,
        initial_input: Option<Value>,
    },
    /// Anything else (`redacted_thinking`, server tools, non-standard blocks such
    /// as `fallback`): ignored, so a new block type never breaks a stream.
    Other,
}

/// Maps one Anthropic Messages streaming response, event by event.
///
/// Feed every [`SseEvent`] to [`AnthropicMapper::push`], then call
/// [`AnthropicMapper::finish`] at a clean EOF. The event type is read from the
/// data's `type` field (the SSE `event:` name when it has none).
///
/// Output per content block: `text` → `TextStart/Delta*/End` (id `text-{index}`);
/// `thinking` → `ReasoningStart/Delta*/End` (id `reasoning-{index}`, the
/// `ReasoningEnd` carries the concatenated `signature_delta`s); `tool_use` →
/// `ToolInputStart` (provider id and name), `ToolInputDelta` per non-empty
/// `input_json_delta`, then at `content_block_stop` `ToolInputEnd` + `ToolCall`.
/// A tool whose streamed input is empty gets the arguments `{}` (sent as one
/// delta first, so the deltas always add up to the arguments). Other block
/// types are ignored. `message_stop` ends the step with one `StepFinish`:
/// `raw_reason` is `message_delta.delta.stop_reason`, usage is
/// `message_start.message.usage` overlaid key by key with the cumulative
/// `message_delta.usage` (so `input_tokens` given only or again in
/// `message_delta` wins). `ping` is ignored; a second `message_start` is
/// ignored (some proxies repeat it).
///
/// Errors (each one ends the output): an `error` event → [`LlmError::Provider`]
/// with `code` = `error.type` (`overloaded_error`, `api_error`, …) and the
/// whole event as `body`; data that is not JSON → [`LlmError::Decode`]; EOF
/// without `message_stop` and without a `message_delta` stop reason →
/// [`LlmError::Stream`]`(`[`SseError::Incomplete`]`)`.
#[derive(Debug, Default)]
pub struct AnthropicMapper {
    response_id: Option<String>,
    model: Option<String>,
    message_started: bool,
    duplicate_starts: usize,
    blocks: BTreeMap<u64, Block>,
    stop_reason: Option<String>,
    stop_sequence: Option<String>,
    /// `message_start` usage overlaid with every `message_delta` usage.
    usage: Option<Map<String, Value>>,
    ended: bool,
}

impl AnthropicMapper {
    /// A mapper for one response (one HTTP request).
    pub fn new() -> Self {
        Self::default()
    }

    /// Maps one SSE event; returns the normalised events it produced, possibly none.
    pub fn push(&mut self, event: &SseEvent) -> Vec<MappedEvent> {
        let mut out = Vec::new();
        if self.ended {
            return out;
        }
        let data: Value = match serde_json::from_str(&event.data) {
            Ok(value) => value,
            Err(err) => {
                return self.fail(LlmError::Decode {
                    message: err.to_string(),
                    data: event.data.clone(),
                });
            }
        };
        let kind = data
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or(event.event.as_str())
            .to_owned();
        match kind.as_str() {
            "message_start" => self.message_start(&data),
            "content_block_start" => self.block_start(&data, &mut out),
            "content_block_delta" => self.block_delta(&data, &mut out),
            "content_block_stop" => {
                if let Some(index) = data.get("index").and_then(Value::as_u64)
                    && let Some(block) = self.blocks.remove(&index)
                {
                    close_block(block, &mut out);
                }
            }
            "message_delta" => {
                if let Some(delta) = data.get("delta") {
                    if let Some(reason) = delta.get("stop_reason").and_then(Value::as_str) {
                        self.stop_reason = Some(reason.to_owned());
                    }
                    if let Some(seq) = delta.get("stop_sequence").and_then(Value::as_str) {
                        self.stop_sequence = Some(seq.to_owned());
                    }
                }
                if let Some(usage) = data.get("usage").and_then(Value::as_object) {
                    let merged = self.usage.get_or_insert_default();
                    for (key, value) in usage {
                        merged.insert(key.clone(), value.clone());
                    }
                }
            }
            "message_stop" => self.finish_step(&mut out),
            "error" => {
                let error = data.get("error").unwrap_or(&data);
                let code = error.get("type").and_then(Value::as_str).map(str::to_owned);
                let message = error
                    .get("message")
                    .and_then(Value::as_str)
                    .unwrap_or("unknown error")
                    .to_owned();
                return self.fail(LlmError::Provider {
                    code,
                    message,
                    body: Some(data),
                });
            }
            // `ping` and event types this mapper does not know.
            _ => {}
        }
        out
    }

    /// Declares a clean EOF. Emits the `StepFinish` (closing open blocks) when a
    /// `message_delta` stop reason was seen but `message_stop` was not; else
    /// `Err(LlmError::Stream(SseError::Incomplete))`; nothing when the step ended.
    pub fn finish(&mut self) -> Vec<MappedEvent> {
        let mut out = Vec::new();
        if self.ended {
            return out;
        }
        if self.stop_reason.is_some() {
            self.finish_step(&mut out);
            return out;
        }
        self.fail(LlmError::Stream(SseError::Incomplete))
    }

    /// The message id (`msg_…`) of the first `message_start`.
    pub fn response_id(&self) -> Option<&str> {
        self.response_id.as_deref()
    }

    /// The model of the first `message_start`.
    pub fn model(&self) -> Option<&str> {
        self.model.as_deref()
    }

    /// How many repeated `message_start` events were ignored.
    pub fn duplicate_message_starts(&self) -> usize {
        self.duplicate_starts
    }

    /// `message_delta.delta.stop_sequence`, when the model stopped at one.
    pub fn stop_sequence(&self) -> Option<&str> {
        self.stop_sequence.as_deref()
    }

    fn fail(&mut self, err: LlmError) -> Vec<MappedEvent> {
        self.ended = true;
        vec![Err(err)]
    }

    fn message_start(&mut self, data: &Value) {
        if self.message_started {
            self.duplicate_starts += 1;
            tracing::debug!("ignoring a repeated message_start");
            return;
        }
        self.message_started = true;
        let message = data.get("message");
        let field = |key: &str| {
            message
                .and_then(|m| m.get(key))
                .and_then(Value::as_str)
                .map(str::to_owned)
        };
        self.response_id = field("id");
        self.model = field("model");
        if let Some(usage) = message
            .and_then(|m| m.get("usage"))
            .and_then(Value::as_object)
        {
            self.usage = Some(usage.clone());
        }
    }

    fn block_start(&mut self, data: &Value, out: &mut Vec<MappedEvent>) {
        let Some(index) = data.get("index").and_then(Value::as_u64) else {
            return;
        };
        let block = data.get("content_block").unwrap_or(&Value::Null);
        let text_of = |key: &str| {
            block
                .get(key)
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
        };
        // A block index reused without a stop: close the old block first.
        if let Some(old) = self.blocks.remove(&index) {
            close_block(old, out);
        }
        let state = match block.get("type").and_then(Value::as_str) {
            Some("text") => {
                let id = format!("text-{index}");
                out.push(Ok(LlmEvent::TextStart { id: id.clone() }));
                if let Some(text) = text_of("text") {
                    out.push(Ok(LlmEvent::TextDelta {
                        id: id.clone(),
                        text,
                    }));
                }
                Block::Text { id }
            }
            Some("thinking") => {
                let id = format!("reasoning-{index}");
                out.push(Ok(LlmEvent::ReasoningStart { id: id.clone() }));
                if let Some(text) = text_of("thinking") {
                    out.push(Ok(LlmEvent::ReasoningDelta {
                        id: id.clone(),
                        text,
                    }));
                }
                Block::Thinking {
                    id,
                    signature: text_of("signature").unwrap_or_default(),
                }
            }
            Some("tool_use") => {
                let id = text_of("id").unwrap_or_else(|| format!("toolu-{index}"));
                let name = text_of("name").unwrap_or_default();
                out.push(Ok(LlmEvent::ToolInputStart {
                    id: id.clone(),
                    name: name.clone(),
                }));
                Block::Tool {
                    id,
                    name,
                    arguments: String::new(),
                    initial_input: block
                        .get("input")
                        .filter(|v| v.as_object().is_some_and(|o| !o.is_empty()))
                        .cloned(),
                }
            }
            other => {
                tracing::debug!(block_type = ?other, index, "ignoring a content block");
                Block::Other
            }
        };
        self.blocks.insert(index, state);
    }

    fn block_delta(&mut self, data: &Value, out: &mut Vec<MappedEvent>) {
        let Some(index) = data.get("index").and_then(Value::as_u64) else {
            return;
        };
        let Some(block) = self.blocks.get_mut(&index) else {
            return;
        };
        let delta = data.get("delta").unwrap_or(&Value::Null);
        let text_of = |key: &str| {
            delta
                .get(key)
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
        };
        match (block, delta.get("type").and_then(Value::as_str)) {
            (Block::Text { id }, Some("text_delta")) => {
                if let Some(text) = text_of("text") {
                    out.push(Ok(LlmEvent::TextDelta {
                        id: id.clone(),
                        text,
                    }));
                }
            }
            (Block::Thinking { id, .. }, Some("thinking_delta")) => {
                if let Some(text) = text_of("thinking") {
                    out.push(Ok(LlmEvent::ReasoningDelta {
                        id: id.clone(),
                        text,
                    }));
                }
            }
            (Block::Thinking { signature, .. }, Some("signature_delta")) => {
                if let Some(part) = text_of("signature") {
                    signature.push_str(&part);
                }
            }
            (Block::Tool { id, arguments, .. }, Some("input_json_delta")) => {
                if let Some(part) = text_of("partial_json") {
                    arguments.push_str(&part);
                    out.push(Ok(LlmEvent::ToolInputDelta {
                        id: id.clone(),
                        delta: part,
                    }));
                }
            }
            // citations_delta and deltas of ignored blocks.
            _ => {}
        }
    }

    fn finish_step(&mut self, out: &mut Vec<MappedEvent>) {
        for (_, block) in std::mem::take(&mut self.blocks) {
            close_block(block, out);
        }
        self.ended = true;
        let raw_reason = self.stop_reason.clone();
        out.push(Ok(LlmEvent::StepFinish {
            reason: raw_reason
                .as_deref()
                .map_or(FinishReason::Unknown, stop_reason),
            raw_reason,
            usage: self
                .usage
                .as_ref()
                .map(|u| usage_from_json(&Value::Object(u.clone()))),
            response_id: self.response_id.clone(),
            model: self.model.clone(),
        }));
    }
}

/// Emits the end events of a block (see [`AnthropicMapper`]).
fn close_block(block: Block, out: &mut Vec<MappedEvent>) {
    match block {
        Block::Text { id } => out.push(Ok(LlmEvent::TextEnd { id })),
        Block::Thinking { id, signature } => out.push(Ok(LlmEvent::ReasoningEnd {
            id,
            signature: (!signature.is_empty()).then_some(signature),
        })),
        Block::Tool {
            id,
            name,
            mut arguments,
            initial_input,
        } => {
            if arguments.is_empty() {
                // No streamed input: the block's own `input`, else no arguments.
                arguments = initial_input.map_or_else(|| "{}".to_owned(), |v| v.to_string());
                out.push(Ok(LlmEvent::ToolInputDelta {
                    id: id.clone(),
                    delta: arguments.clone(),
                }));
            }
            out.push(Ok(LlmEvent::ToolInputEnd { id: id.clone() }));
            out.push(Ok(LlmEvent::ToolCall {
                id,
                name,
                arguments,
            }));
        }
        Block::Other => {}
    }
}

impl EventMapper for AnthropicMapper {
    fn push(&mut self, event: &SseEvent) -> Vec<MappedEvent> {
        AnthropicMapper::push(self, event)
    }

    fn finish(&mut self) -> Vec<MappedEvent> {
        AnthropicMapper::finish(self)
    }

    fn is_ended(&self) -> bool {
        self.ended
    }

    fn answer_complete(&self) -> bool {
        self.stop_reason.is_some()
    }
}

/// Normalises an Anthropic `stop_reason`: `end_turn` / `stop_sequence` → stop,
/// `max_tokens` → length, `model_context_window_exceeded` → context overflow
/// (the agent compacts), `tool_use` → tool calls, `refusal` → content filter,
/// anything else (`pause_turn`, …) → other.
pub fn stop_reason(raw: &str) -> FinishReason {
    match raw {
        "end_turn" | "stop_sequence" => FinishReason::Stop,
        "max_tokens" => FinishReason::Length,
        "model_context_window_exceeded" => FinishReason::ContextOverflow,
        "tool_use" => FinishReason::ToolCalls,
        "refusal" => FinishReason::ContentFilter,
        _ => FinishReason::Other,
    }
}

/// Reads an Anthropic `usage` object (tokens). Anthropic's `input_tokens`
/// excludes cached tokens, so input is the sum of `input_tokens`,
/// `cache_read_input_tokens` and `cache_creation_input_tokens`; cached input is
/// `cache_read_input_tokens`; output is `output_tokens` (thinking included; no
/// separate reasoning count, so reasoning is 0); total is input plus output.
/// Missing numbers are 0; `raw` keeps the object.
pub fn usage_from_json(usage: &Value) -> Usage {
    let n = |key: &str| usage.get(key).and_then(Value::as_u64).unwrap_or(0);
    let cached = n("cache_read_input_tokens");
    let input_tokens = n("input_tokens")
        .saturating_add(cached)
        .saturating_add(n("cache_creation_input_tokens"));
    let output_tokens = n("output_tokens");
    Usage {
        input_tokens,
        output_tokens,
        reasoning_tokens: 0,
        cached_input_tokens: cached,
        total_tokens: input_tokens.saturating_add(output_tokens),
        raw: Some(usage.clone()),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn ev(data: &str) -> SseEvent {
        let kind = serde_json::from_str::<Value>(data)
            .ok()
            .and_then(|v| v.get("type").and_then(Value::as_str).map(str::to_owned))
            .unwrap_or_else(|| "message".into());
        SseEvent {
            event: kind,
            data: data.into(),
            id: None,
        }
    }

    fn run(events: &[&str]) -> Vec<MappedEvent> {
        let mut mapper = AnthropicMapper::new();
        let mut out: Vec<MappedEvent> = events.iter().flat_map(|e| mapper.push(&ev(e))).collect();
        out.extend(mapper.finish());
        out
    }

    const START: &str = r#"{"type":"message_start","message":{"id":"msg_1","model":"claude","usage":{"input_tokens":5,"cache_read_input_tokens":3,"output_tokens":1}}}"#;

    #[test]
    fn error_event_is_a_typed_provider_error_and_ends_output() {
        let out = run(&[
            START,
            r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi"}}"#,
            r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
            r#"{"type":"message_stop"}"#,
        ]);
        assert!(
            matches!(
                out.last(),
                Some(Err(LlmError::Provider { code: Some(c), message, body: Some(_) }))
                    if c == "overloaded_error" && message == "Overloaded"
            ),
            "{out:?}"
        );
        assert_eq!(out.iter().filter(|e| e.is_err()).count(), 1);
        assert!(
            !out.iter()
                .any(|e| matches!(e, Ok(LlmEvent::StepFinish { .. })))
        );
    }

    #[test]
    fn eof_without_message_stop_is_incomplete_unless_the_stop_reason_came() {
        let out = run(&[START]);
        assert_eq!(
            out,
            vec![Err(LlmError::Stream(SseError::Incomplete))],
            "{out:?}"
        );
        let out = run(&[
            START,
            r#"{"type":"message_delta","delta":{"stop_reason":"max_tokens"},"usage":{"output_tokens":9}}"#,
        ]);
        let Some(Ok(LlmEvent::StepFinish { reason, usage, .. })) = out.last() else {
            panic!("{out:?}")
        };
        assert_eq!(*reason, FinishReason::Length);
        let usage = usage.as_ref().unwrap();
        assert_eq!(
            (
                usage.input_tokens,
                usage.cached_input_tokens,
                usage.output_tokens,
                usage.total_tokens
            ),
            (8, 3, 9, 17)
        );
    }

    #[test]
    fn non_json_data_is_a_decode_error() {
        let out = run(&["{not json"]);
        assert!(matches!(&out[..], [Err(LlmError::Decode { data, .. })] if data == "{not json"));
    }

    #[test]
    fn stop_reasons_normalise() {
        assert_eq!(stop_reason("end_turn"), FinishReason::Stop);
        assert_eq!(stop_reason("stop_sequence"), FinishReason::Stop);
        assert_eq!(stop_reason("tool_use"), FinishReason::ToolCalls);
        assert_eq!(stop_reason("max_tokens"), FinishReason::Length);
        assert_eq!(
            stop_reason("model_context_window_exceeded"),
            FinishReason::ContextOverflow
        );
        assert_eq!(stop_reason("refusal"), FinishReason::ContentFilter);
        assert_eq!(stop_reason("pause_turn"), FinishReason::Other);
    }
}

#[cfg(test)]
mod usage_tests {
    use super::usage_from_json;
    use serde_json::json;

    #[test]
    fn huge_server_supplied_token_counts_saturate() {
        let usage = usage_from_json(&json!({
            "input_tokens": u64::MAX,
            "cache_read_input_tokens": 10,
            "cache_creation_input_tokens": u64::MAX,
            "output_tokens": 7,
        }));
        assert_eq!(usage.input_tokens, u64::MAX);
        assert_eq!(usage.total_tokens, u64::MAX);
        assert_eq!(usage.output_tokens, 7);
    }
}
