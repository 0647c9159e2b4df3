//! OpenAI Responses stream events (SSE) to normalised [`LlmEvent`]s.
//! Pure state machine, no I/O: output text, reasoning summaries, function and
//! custom tool calls, built-in tool items, usage, terminal events, errors.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::error::{LlmError, SseError};
use crate::sse::SseEvent;
use crate::stream::{EventMapper, MappedEvent};
use crate::types::{FinishReason, LlmEvent, Usage};

/// A text or reasoning part: (item id, content / summary index).
type PartKey = (String, u64);

#[derive(Debug)]
struct Part {
    id: String,
    open: bool,
    /// Some text was emitted for the part.
    had_text: bool,
}

/// A function or custom tool call being streamed (by item id).
#[derive(Debug)]
struct ToolState {
    call_id: String,
    name: String,
    /// `custom_tool_call`: free-form input, not JSON.
    custom: bool,
    arguments: String,
    closed: bool,
}

/// Maps one OpenAI Responses streaming response, event by event.
///
/// Feed every [`SseEvent`] to [`ResponsesMapper::push`], then call
/// [`ResponsesMapper::finish`] at a clean EOF. The event type is the data's
/// `type` field (the SSE `event:` name when it has none).
///
/// Output: output text (`response.output_text.delta`, refusals alike) as
/// `TextStart/Delta*/End` with ids `text-0`, `text-1`, … per (message item,
/// content part); text that only arrives whole (`*.done` or
/// `response.output_item.done`) is emitted then, once. Reasoning summaries
/// (`response.reasoning_summary_text.delta`) and raw reasoning text
/// (`response.reasoning_text.delta`, sent by open-weight models) as
/// `ReasoningStart/Delta*/End` with ids `reasoning-0`, … per part (no
/// signature). Function calls
/// (`output_item.added` with `function_call`) and custom tool calls
/// (`custom_tool_call`, free-form input) as `ToolInputStart` (id = the
/// `call_id`), `ToolInputDelta` per arguments/input delta, then at
/// `response.output_item.done` `ToolInputEnd` + `ToolCall` (a function call
/// with empty arguments gets `{}`, sent as one delta first). Built-in tool
/// items (`web_search_call`, …) are not tool calls: they are collected in
/// [`ResponsesMapper::builtin_tool_calls`]. The terminal event ends the step
/// with one `StepFinish`: `response.completed` → raw reason `completed`
/// (normalised to tool calls when the step made any, else stop),
/// `response.incomplete` → raw reason `incomplete` (normalised from
/// `incomplete_details.reason`: `max_output_tokens` → length,
/// `content_filter` → content filter); usage from `response.usage`.
///
/// Errors (each one ends the output, so an `error` event followed by
/// `response.failed` reports one error): an `error` event and
/// `response.failed` → [`LlmError::Provider`] whose `code` is the error's
/// `code` (`insufficient_quota`, `rate_limit_exceeded`, …), else its `type`
/// (`server_error` when the code is null); data that is not JSON →
/// [`LlmError::Decode`]; EOF before a terminal event →
/// [`LlmError::Stream`]`(`[`SseError::Incomplete`]`)`.
#[derive(Debug, Default)]
pub struct ResponsesMapper {
    response_id: Option<String>,
    model: Option<String>,
    texts: BTreeMap<PartKey, Part>,
    text_count: usize,
    reasoning: BTreeMap<PartKey, Part>,
    reasoning_count: usize,
    /// Tool calls by item id, and the order they were opened in.
    tools: BTreeMap<String, ToolState>,
    tool_order: Vec<String>,
    tool_calls_made: bool,
    builtin: Vec<Value>,
    ended: bool,
}

impl ResponsesMapper {
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
        let str_of = |key: &str| data.get(key).and_then(Value::as_str).unwrap_or("");
        let index_of = |key: &str| data.get(key).and_then(Value::as_u64).unwrap_or(0);
        match kind.as_str() {
            "response.created" | "response.in_progress" | "response.queued" => {
                self.note_response(data.get("response"));
            }
            "response.output_item.added" => {
                if let Some(item) = data.get("item") {
                    self.item_added(item, &mut out);
                }
            }
            "response.output_item.done" => {
                if let Some(item) = data.get("item") {
                    self.item_done(item, &mut out);
                }
            }
            "response.content_part.added" => {
                let key = (str_of("item_id").to_owned(), index_of("content_index"));
                self.open_text(&key, &mut out);
            }
            "response.output_text.delta" | "response.refusal.delta" => {
                let key = (str_of("item_id").to_owned(), index_of("content_index"));
                self.text_delta(&key, str_of("delta"), &mut out);
            }
            "response.output_text.done" | "response.refusal.done" => {
                let key = (str_of("item_id").to_owned(), index_of("content_index"));
                let text = data
                    .get("text")
                    .or_else(|| data.get("refusal"))
                    .and_then(Value::as_str)
                    .unwrap_or("");
                self.close_text(&key, text, &mut out);
            }
            "response.content_part.done" => {
                let key = (str_of("item_id").to_owned(), index_of("content_index"));
                let text = part_text(data.get("part").unwrap_or(&Value::Null));
                self.close_text(&key, text, &mut out);
            }
            "response.reasoning_summary_part.added" => {
                let key = (str_of("item_id").to_owned(), index_of("summary_index"));
                self.open_reasoning(&key, &mut out);
            }
            "response.reasoning_summary_text.delta" => {
                let key = (str_of("item_id").to_owned(), index_of("summary_index"));
                self.reasoning_delta(&key, str_of("delta"), &mut out);
            }
            "response.reasoning_summary_text.done" => {
                let key = (str_of("item_id").to_owned(), index_of("summary_index"));
                self.close_reasoning(&key, str_of("text"), &mut out);
            }
            "response.reasoning_summary_part.done" => {
                let key = (str_of("item_id").to_owned(), index_of("summary_index"));
                let text = part_text(data.get("part").unwrap_or(&Value::Null));
                self.close_reasoning(&key, text, &mut out);
            }
            "response.reasoning_text.delta" => {
                let key = (content_key(str_of("item_id")), index_of("content_index"));
                self.reasoning_delta(&key, str_of("delta"), &mut out);
            }
            "response.reasoning_text.done" => {
                let key = (content_key(str_of("item_id")), index_of("content_index"));
                self.close_reasoning(&key, str_of("text"), &mut out);
            }
            "response.function_call_arguments.delta" | "response.custom_tool_call_input.delta" => {
                self.tool_delta(str_of("item_id"), str_of("delta"), &mut out);
            }
            "response.function_call_arguments.done" | "response.custom_tool_call_input.done" => {
                let full = data
                    .get("arguments")
                    .or_else(|| data.get("input"))
                    .and_then(Value::as_str)
                    .unwrap_or("");
                self.tool_complete_text(str_of("item_id"), full, &mut out);
            }
            "response.completed" | "response.incomplete" => {
                self.note_response(data.get("response"));
                self.finish_step(&kind, data.get("response"), &mut out);
            }
            "response.failed" => {
                self.note_response(data.get("response"));
                let error = data
                    .pointer("/response/error")
                    .filter(|e| e.is_object())
                    .unwrap_or(&Value::Null);
                let code = string_field(error, "code").or_else(|| string_field(error, "type"));
                let message = string_field(error, "message")
                    .unwrap_or_else(|| "the response failed (no error details)".to_owned());
                return self.fail(LlmError::Provider {
                    code,
                    message,
                    body: Some(data),
                });
            }
            "error" => {
                // `{"error": {type, code, message}}` or the fields at the top level.
                let (error, nested) = match data.get("error").filter(|e| e.is_object()) {
                    Some(error) => (error, true),
                    None => (&data, false),
                };
                let code = string_field(error, "code")
                    .or_else(|| nested.then(|| string_field(error, "type")).flatten());
                let message =
                    string_field(error, "message").unwrap_or_else(|| "unknown error".to_owned());
                return self.fail(LlmError::Provider {
                    code,
                    message,
                    body: Some(data),
                });
            }
            // Annotations, web search progress, audio, … carry nothing to map.
            _ => {}
        }
        out
    }

    /// Declares a clean EOF: `Err(LlmError::Stream(SseError::Incomplete))`
    /// unless the step already ended (a Responses stream always ends with a
    /// terminal event).
    pub fn finish(&mut self) -> Vec<MappedEvent> {
        if self.ended {
            return Vec::new();
        }
        self.fail(LlmError::Stream(SseError::Incomplete))
    }

    /// The response id (`resp_…`), from the first event that carried it.
    pub fn response_id(&self) -> Option<&str> {
        self.response_id.as_deref()
    }

    /// The model, from the first event that carried it.
    pub fn model(&self) -> Option<&str> {
        self.model.as_deref()
    }

    /// The completed built-in tool items (`web_search_call`, `file_search_call`,
    /// …) in stream order, each the `response.output_item.done` item as sent.
    /// They ran on the provider's side; nothing needs executing.
    pub fn builtin_tool_calls(&self) -> &[Value] {
        &self.builtin
    }

    fn fail(&mut self, err: LlmError) -> Vec<MappedEvent> {
        self.ended = true;
        vec![Err(err)]
    }

    fn note_response(&mut self, response: Option<&Value>) {
        let Some(response) = response else { return };
        if self.response_id.is_none() {
            self.response_id = string_field(response, "id");
        }
        if self.model.is_none() {
            self.model = string_field(response, "model");
        }
    }

    fn item_added(&mut self, item: &Value, out: &mut Vec<MappedEvent>) {
        let kind = item.get("type").and_then(Value::as_str).unwrap_or("");
        if matches!(kind, "function_call" | "custom_tool_call") {
            let item_id = string_field(item, "id").unwrap_or_default();
            self.ensure_tool(&item_id, item, out);
            let initial = item
                .get("arguments")
                .or_else(|| item.get("input"))
                .and_then(Value::as_str)
                .unwrap_or("");
            self.tool_delta(&item_id, initial, out);
        }
    }

    fn item_done(&mut self, item: &Value, out: &mut Vec<MappedEvent>) {
        let kind = item.get("type").and_then(Value::as_str).unwrap_or("");
        let item_id = string_field(item, "id").unwrap_or_default();
        match kind {
            "message" => {
                let parts = item.get("content").and_then(Value::as_array);
                for (index, part) in parts.into_iter().flatten().enumerate() {
                    let key = (item_id.clone(), index as u64);
                    self.close_text(&key, part_text(part), out);
                }
                self.close_texts_of(&item_id, out);
            }
            "reasoning" => {
                let summary = item.get("summary").and_then(Value::as_array);
                for (index, part) in summary.into_iter().flatten().enumerate() {
                    let key = (item_id.clone(), index as u64);
                    self.close_reasoning(&key, part_text(part), out);
                }
                let content = item.get("content").and_then(Value::as_array);
                for (index, part) in content.into_iter().flatten().enumerate() {
                    let key = (content_key(&item_id), index as u64);
                    self.close_reasoning(&key, part_text(part), out);
                }
                let content_id = content_key(&item_id);
                let open: Vec<PartKey> = self
                    .reasoning
                    .iter()
                    .filter(|((id, _), p)| (*id == item_id || *id == content_id) && p.open)
                    .map(|(k, _)| k.clone())
                    .collect();
                for key in open {
                    self.close_reasoning(&key, "", out);
                }
            }
            "function_call" | "custom_tool_call" => {
                self.ensure_tool(&item_id, item, out);
                let full = item
                    .get("arguments")
                    .or_else(|| item.get("input"))
                    .and_then(Value::as_str)
                    .unwrap_or("");
                self.tool_complete_text(&item_id, full, out);
                self.close_tool(&item_id, out);
            }
            _ if kind.ends_with("_call") => self.builtin.push(item.clone()),
            _ => {}
        }
    }

    /// Opens the text part `key` (emitting `TextStart`) unless it exists; returns
    /// its id when it is open (a closed part takes no more text).
    fn open_text(&mut self, key: &PartKey, out: &mut Vec<MappedEvent>) -> Option<String> {
        if !self.texts.contains_key(key) {
            let id = format!("text-{}", self.text_count);
            self.text_count += 1;
            out.push(Ok(LlmEvent::TextStart { id: id.clone() }));
            self.texts.insert(
                key.clone(),
                Part {
                    id,
                    open: true,
                    had_text: false,
                },
            );
        }
        self.texts.get(key).filter(|p| p.open).map(|p| p.id.clone())
    }

    fn text_delta(&mut self, key: &PartKey, text: &str, out: &mut Vec<MappedEvent>) {
        if text.is_empty() {
            return;
        }
        if let Some(id) = self.open_text(key, out)
            && let Some(part) = self.texts.get_mut(key)
        {
            part.had_text = true;
            out.push(Ok(LlmEvent::TextDelta {
                id,
                text: text.to_owned(),
            }));
        }
    }

    /// Closes a text part; `full` is the part's whole text, emitted when no
    /// delta carried any (a part seen only whole). A closed part stays closed.
    fn close_text(&mut self, key: &PartKey, full: &str, out: &mut Vec<MappedEvent>) {
        if self.texts.get(key).is_some_and(|p| !p.open) {
            return;
        }
        if !full.is_empty() && !self.texts.get(key).is_some_and(|p| p.had_text) {
            self.text_delta(key, full, out);
        }
        if let Some(part) = self.texts.get_mut(key)
            && part.open
        {
            part.open = false;
            out.push(Ok(LlmEvent::TextEnd {
                id: part.id.clone(),
            }));
        }
    }

    fn close_texts_of(&mut self, item_id: &str, out: &mut Vec<MappedEvent>) {
        let open: Vec<PartKey> = self
            .texts
            .iter()
            .filter(|((id, _), p)| id == item_id && p.open)
            .map(|(k, _)| k.clone())
            .collect();
        for key in open {
            self.close_text(&key, "", out);
        }
    }

    fn open_reasoning(&mut self, key: &PartKey, out: &mut Vec<MappedEvent>) -> Option<String> {
        if !self.reasoning.contains_key(key) {
            let id = format!("reasoning-{}", self.reasoning_count);
            self.reasoning_count += 1;
            out.push(Ok(LlmEvent::ReasoningStart { id: id.clone() }));
            self.reasoning.insert(
                key.clone(),
                Part {
                    id,
                    open: true,
                    had_text: false,
                },
            );
        }
        self.reasoning
            .get(key)
            .filter(|p| p.open)
            .map(|p| p.id.clone())
    }

    fn reasoning_delta(&mut self, key: &PartKey, text: &str, out: &mut Vec<MappedEvent>) {
        if text.is_empty() {
            return;
        }
        if let Some(id) = self.open_reasoning(key, out)
            && let Some(part) = self.reasoning.get_mut(key)
        {
            part.had_text = true;
            out.push(Ok(LlmEvent::ReasoningDelta {
                id,
                text: text.to_owned(),
            }));
        }
    }

    /// Closes a reasoning part; `full` is emitted when no delta carried text.
    fn close_reasoning(&mut self, key: &PartKey, full: &str, out: &mut Vec<MappedEvent>) {
        let closed_before = self.reasoning.get(key).is_some_and(|p| !p.open);
        if closed_before {
            return;
        }
        if !full.is_empty() && !self.reasoning.get(key).is_some_and(|p| p.had_text) {
            self.reasoning_delta(key, full, out);
        }
        if let Some(part) = self.reasoning.get_mut(key)
            && part.open
        {
            part.open = false;
            out.push(Ok(LlmEvent::ReasoningEnd {
                id: part.id.clone(),
                signature: None,
            }));
        }
    }

    /// Registers the call of `item` (emitting `ToolInputStart`) unless known.
    fn ensure_tool(&mut self, item_id: &str, item: &Value, out: &mut Vec<MappedEvent>) {
        if self.tools.contains_key(item_id) {
            return;
        }
        let call_id = string_field(item, "call_id")
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| item_id.to_owned());
        let name = string_field(item, "name").unwrap_or_default();
        out.push(Ok(LlmEvent::ToolInputStart {
            id: call_id.clone(),
            name: name.clone(),
        }));
        self.tool_calls_made = true;
        self.tool_order.push(item_id.to_owned());
        self.tools.insert(
            item_id.to_owned(),
            ToolState {
                call_id,
                name,
                custom: item.get("type").and_then(Value::as_str) == Some("custom_tool_call"),
                arguments: String::new(),
                closed: false,
            },
        );
    }

    fn tool_delta(&mut self, item_id: &str, delta: &str, out: &mut Vec<MappedEvent>) {
        if delta.is_empty() {
            return;
        }
        if let Some(tool) = self.tools.get_mut(item_id).filter(|t| !t.closed) {
            tool.arguments.push_str(delta);
            out.push(Ok(LlmEvent::ToolInputDelta {
                id: tool.call_id.clone(),
                delta: delta.to_owned(),
            }));
        }
    }

    /// The whole arguments text arrived: emit it when no delta did.
    fn tool_complete_text(&mut self, item_id: &str, full: &str, out: &mut Vec<MappedEvent>) {
        if self
            .tools
            .get(item_id)
            .is_some_and(|t| t.arguments.is_empty())
        {
            self.tool_delta(item_id, full, out);
        }
    }

    fn close_tool(&mut self, item_id: &str, out: &mut Vec<MappedEvent>) {
        let Some(tool) = self.tools.get_mut(item_id).filter(|t| !t.closed) else {
            return;
        };
        tool.closed = true;
        if tool.arguments.is_empty() && !tool.custom {
            tool.arguments = "{}".to_owned();
            out.push(Ok(LlmEvent::ToolInputDelta {
                id: tool.call_id.clone(),
                delta: tool.arguments.clone(),
            }));
        }
        out.push(Ok(LlmEvent::ToolInputEnd {
            id: tool.call_id.clone(),
        }));
        out.push(Ok(LlmEvent::ToolCall {
            id: tool.call_id.clone(),
            name: tool.name.clone(),
            arguments: tool.arguments.clone(),
        }));
    }

    fn finish_step(&mut self, kind: &str, response: Option<&Value>, out: &mut Vec<MappedEvent>) {
        let texts: Vec<PartKey> = self.texts.keys().cloned().collect();
        for key in texts {
            self.close_text(&key, "", out);
        }
        let reasoning: Vec<PartKey> = self.reasoning.keys().cloned().collect();
        for key in reasoning {
            self.close_reasoning(&key, "", out);
        }
        for item_id in self.tool_order.clone() {
            self.close_tool(&item_id, out);
        }
        self.ended = true;
        let (raw, reason) = if kind == "response.incomplete" {
            let why = response
                .and_then(|r| r.pointer("/incomplete_details/reason"))
                .and_then(Value::as_str);
            let reason = match why {
                Some("max_output_tokens") => FinishReason::Length,
                Some("content_filter") => FinishReason::ContentFilter,
                _ => FinishReason::Other,
            };
            ("incomplete", reason)
        } else if self.tool_calls_made {
            ("completed", FinishReason::ToolCalls)
        } else {
            ("completed", FinishReason::Stop)
        };
        out.push(Ok(LlmEvent::StepFinish {
            reason,
            raw_reason: Some(raw.to_owned()),
            usage: response
                .and_then(|r| r.get("usage"))
                .filter(|u| u.is_object())
                .map(usage_from_json),
            response_id: self.response_id.clone(),
            model: self.model.clone(),
        }));
    }
}

impl EventMapper for ResponsesMapper {
    fn push(&mut self, event: &SseEvent) -> Vec<MappedEvent> {
        ResponsesMapper::push(self, event)
    }

    fn finish(&mut self) -> Vec<MappedEvent> {
        ResponsesMapper::finish(self)
    }

    fn is_ended(&self) -> bool {
        self.ended
    }

    fn answer_complete(&self) -> bool {
        false
    }
}

/// The part key of a reasoning item's raw `content` (vs its `summary`, keyed by the item id).
fn content_key(item_id: &str) -> String {
    format!("{item_id}#content")
}

/// `value[key]` when it is a string.
fn string_field(value: &Value, key: &str) -> Option<String> {
    value.get(key).and_then(Value::as_str).map(str::to_owned)
}

/// The text of a content / summary part (`text`, or `refusal`).
fn part_text(part: &Value) -> &str {
    part.get("text")
        .or_else(|| part.get("refusal"))
        .and_then(Value::as_str)
        .unwrap_or("")
}

/// Reads a Responses `usage` object (tokens): `input_tokens` (cached included),
/// `output_tokens` (reasoning included), `output_tokens_details.reasoning_tokens`,
/// `input_tokens_details.cached_tokens`, `total_tokens` (input + output when
/// absent). Missing numbers are 0; `raw` keeps the object.
pub fn usage_from_json(usage: &Value) -> Usage {
    let n = |pointer: &str| usage.pointer(pointer).and_then(Value::as_u64);
    let input_tokens = n("/input_tokens").unwrap_or(0);
    let output_tokens = n("/output_tokens").unwrap_or(0);
    Usage {
        input_tokens,
        output_tokens,
        reasoning_tokens: n("/output_tokens_details/reasoning_tokens").unwrap_or(0),
        cached_input_tokens: n("/input_tokens_details/cached_tokens").unwrap_or(0),
        total_tokens: n("/total_tokens").unwrap_or(input_tokens.saturating_add(output_tokens)),
        raw: Some(usage.clone()),
    }
}
