//! Chat Completions stream chunks (SSE events) to normalised [`LlmEvent`]s.
//! Pure state machine, no I/O: text, reasoning, tool-call accumulation, usage, finish.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::error::{LlmError, SseError};
use crate::sse::SseEvent;
use crate::types::{FinishReason, LlmEvent, Usage};

/// Id of the (single) assistant text part of a Chat Completions step.
pub const TEXT_ID: &str = "text-0";

pub use crate::stream::MappedEvent;

/// A tool call being streamed (one `tool_calls[].index`).
#[derive(Debug)]
struct ToolState {
    id: String,
    /// `id` was made up (`call-{index}`): no fragment carried one yet.
    id_synthesized: bool,
    name: String,
    arguments: String,
    /// `ToolInputStart` was emitted (held back until the name is known).
    started: bool,
    closed: bool,
}

impl ToolState {
    /// Emits `ToolInputStart` (and, in one delta, the arguments held back so far).
    fn start(&mut self, out: &mut Vec<MappedEvent>) {
        if self.started {
            return;
        }
        self.started = true;
        out.push(Ok(LlmEvent::ToolInputStart {
            id: self.id.clone(),
            name: self.name.clone(),
        }));
        if !self.arguments.is_empty() {
            out.push(Ok(LlmEvent::ToolInputDelta {
                id: self.id.clone(),
                delta: self.arguments.clone(),
            }));
        }
    }
}

/// Maps one Chat Completions streaming response, event by event.
///
/// Feed every [`SseEvent`] to [`ChatCompletionsMapper::push`], then call
/// [`ChatCompletionsMapper::finish`] at a clean EOF. Output order for a step:
/// `ReasoningStart/Delta*/End` (when the delta carries `reasoning_content` or
/// `reasoning`), `TextStart/Delta*/End` (id [`TEXT_ID`]), per tool-call index
/// `ToolInputStart` (at the first chunk of the index that names the function;
/// arguments that came before it follow as one delta), `ToolInputDelta*`, then at `finish_reason` `ToolInputEnd` + complete
/// `ToolCall`; finally exactly one `StepFinish` after `data: [DONE]` (or at EOF
/// when a `finish_reason` was seen). Only choice index 0 is mapped.
///
/// Errors (each one ends the output; later input is ignored): a chunk
/// `{"error": {...}}` → [`LlmError::Provider`]; data that is not JSON →
/// [`LlmError::Decode`]; EOF without `[DONE]` and without `finish_reason` →
/// [`LlmError::Stream`]`(`[`SseError::Incomplete`]`)`.
#[derive(Debug, Default)]
pub struct ChatCompletionsMapper {
    response_id: Option<String>,
    model: Option<String>,
    text_open: bool,
    /// Number of reasoning parts opened so far (ids `reasoning-0`, `reasoning-1`, …).
    reasoning_parts: usize,
    reasoning_open: bool,
    /// Tool calls by `index` (BTreeMap: closed in index order).
    tools: BTreeMap<u64, ToolState>,
    finish_reason: Option<String>,
    /// Last non-null `usage` object.
    usage: Option<Value>,
    /// `StepFinish` or an error was emitted: nothing more comes out.
    ended: bool,
}

impl ChatCompletionsMapper {
    /// A mapper for one response (one HTTP request).
    pub fn new() -> Self {
        Self::default()
    }

    /// Maps one SSE event (any `event:` name; Chat Completions uses `message`).
    /// Returns the normalised events it produced, possibly none.
    pub fn push(&mut self, event: &SseEvent) -> Vec<MappedEvent> {
        let mut out = Vec::new();
        if self.ended {
            return out;
        }
        if event.data.trim() == "[DONE]" {
            self.finish_step(&mut out);
            return out;
        }
        let chunk: Value = match serde_json::from_str(&event.data) {
            Ok(value) => value,
            Err(err) => {
                return self.fail(LlmError::Decode {
                    message: err.to_string(),
                    data: event.data.clone(),
                });
            }
        };
        if let Some(error) = chunk.get("error").filter(|e| !e.is_null()) {
            let code = crate::error::error_code(&chunk);
            let message = error
                .get("message")
                .and_then(Value::as_str)
                .or_else(|| error.as_str())
                .unwrap_or("unknown error")
                .to_owned();
            return self.fail(LlmError::Provider {
                code,
                message,
                body: Some(chunk),
            });
        }
        if self.response_id.is_none() {
            self.response_id = chunk.get("id").and_then(Value::as_str).map(str::to_owned);
        }
        if self.model.is_none() {
            self.model = chunk
                .get("model")
                .and_then(Value::as_str)
                .map(str::to_owned);
        }
        if let Some(usage) = chunk.get("usage").filter(|u| u.is_object()) {
            self.usage = Some(usage.clone());
        }
        let choice = chunk
            .get("choices")
            .and_then(Value::as_array)
            .and_then(|choices| {
                choices
                    .iter()
                    .find(|c| c.get("index").and_then(Value::as_u64).unwrap_or(0) == 0)
            });
        if let Some(choice) = choice {
            self.map_choice(choice, &mut out);
        }
        out
    }

    /// Declares a clean EOF (the SSE decoder's `finish` returned `Ok`).
    ///
    /// Emits the `StepFinish` (closing open parts first) when a `finish_reason`
    /// was seen but `[DONE]` was not; emits
    /// `Err(LlmError::Stream(SseError::Incomplete))` when neither was seen;
    /// emits nothing when the step already ended. A decoder error at EOF is the
    /// caller's to report (as [`LlmError::Stream`]); do not call this then.
    pub fn finish(&mut self) -> Vec<MappedEvent> {
        let mut out = Vec::new();
        if self.ended {
            return out;
        }
        if self.finish_reason.is_some() {
            self.finish_step(&mut out);
            return out;
        }
        self.fail(LlmError::Stream(SseError::Incomplete))
    }

    /// True once a chunk carried a `finish_reason` for choice 0: the answer is
    /// complete, only usage and `[DONE]` may follow.
    pub fn saw_finish_reason(&self) -> bool {
        self.finish_reason.is_some()
    }

    /// The response id (`chatcmpl-…`) from the first chunk that had one.
    pub fn response_id(&self) -> Option<&str> {
        self.response_id.as_deref()
    }

    /// The model name from the first chunk that had one.
    pub fn model(&self) -> Option<&str> {
        self.model.as_deref()
    }

    /// True once `StepFinish` or an error was emitted.
    pub fn is_ended(&self) -> bool {
        self.ended
    }

    fn fail(&mut self, err: LlmError) -> Vec<MappedEvent> {
        self.ended = true;
        vec![Err(err)]
    }

    fn map_choice(&mut self, choice: &Value, out: &mut Vec<MappedEvent>) {
        if let Some(delta) = choice.get("delta").filter(|d| d.is_object()) {
            let reasoning = ["reasoning_content", "reasoning"]
                .iter()
                .find_map(|key| delta.get(*key).and_then(Value::as_str))
                .filter(|s| !s.is_empty());
            if let Some(text) = reasoning {
                let id = self.open_reasoning(out);
                out.push(Ok(LlmEvent::ReasoningDelta {
                    id,
                    text: text.to_owned(),
                }));
            }
            let content = delta
                .get("content")
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty());
            if let Some(text) = content {
                self.close_reasoning(out);
                if !self.text_open {
                    self.text_open = true;
                    out.push(Ok(LlmEvent::TextStart { id: TEXT_ID.into() }));
                }
                out.push(Ok(LlmEvent::TextDelta {
                    id: TEXT_ID.into(),
                    text: text.to_owned(),
                }));
            }
            if let Some(calls) = delta.get("tool_calls").and_then(Value::as_array) {
                self.close_reasoning(out);
                for (position, call) in calls.iter().enumerate() {
                    self.map_tool_call_delta(position as u64, call, out);
                }
            }
        }
        if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
            self.finish_reason = Some(reason.to_owned());
            // The choice is complete: close its parts now so tool calls are
            // delivered before the trailing usage chunk and `[DONE]`.
            self.close_parts(out);
        }
    }

    fn map_tool_call_delta(&mut self, position: u64, call: &Value, out: &mut Vec<MappedEvent>) {
        // Some servers omit `index` when each chunk carries whole calls.
        let mut index = call
            .get("index")
            .and_then(Value::as_u64)
            .unwrap_or(position);
        let new_id = call
            .get("id")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty());
        if let Some(new_id) = new_id {
            // Some servers (Gemini's OpenAI layer) send each complete call at index
            // 0, and some repeat the id on every fragment: a known id continues its
            // call wherever it was keyed; an unseen id at an index whose call has
            // another (real) id is a new call, keyed after the rest.
            if let Some((&known, _)) = self.tools.iter().find(|(_, t)| t.id == new_id) {
                index = known;
            } else if self
                .tools
                .get(&index)
                .is_some_and(|existing| !existing.id_synthesized)
            {
                index = self.tools.keys().next_back().map_or(0, |k| k + 1);
            }
        }
        let function = call.get("function");
        let name = function
            .and_then(|f| f.get("name"))
            .and_then(Value::as_str)
            .unwrap_or("");
        let arguments = function
            .and_then(|f| f.get("arguments"))
            .and_then(Value::as_str)
            .unwrap_or("");
        let state = self.tools.entry(index).or_insert_with(|| ToolState {
            id: new_id.map_or_else(|| format!("call-{index}"), str::to_owned),
            id_synthesized: new_id.is_none(),
            name: String::new(),
            arguments: String::new(),
            started: false,
            closed: false,
        });
        // A fragment for an index already closed by finish_reason: ignore.
        if state.closed {
            return;
        }
        // The id and the name may arrive after the first fragment: fill them
        // while they are missing (the id only before any event used it).
        if let Some(new_id) = new_id
            && state.id_synthesized
            && !state.started
        {
            state.id = new_id.to_owned();
            state.id_synthesized = false;
        }
        if state.name.is_empty() && !name.is_empty() {
            state.name = name.to_owned();
        }
        if !state.started {
            state.arguments.push_str(arguments);
            if !state.name.is_empty() {
                state.start(out);
            }
            return;
        }
        if !arguments.is_empty() {
            state.arguments.push_str(arguments);
            out.push(Ok(LlmEvent::ToolInputDelta {
                id: state.id.clone(),
                delta: arguments.to_owned(),
            }));
        }
    }

    fn open_reasoning(&mut self, out: &mut Vec<MappedEvent>) -> String {
        if !self.reasoning_open {
            self.reasoning_open = true;
            self.reasoning_parts += 1;
            out.push(Ok(LlmEvent::ReasoningStart {
                id: self.reasoning_id(),
            }));
        }
        self.reasoning_id()
    }

    fn reasoning_id(&self) -> String {
        format!("reasoning-{}", self.reasoning_parts.saturating_sub(1))
    }

    fn close_reasoning(&mut self, out: &mut Vec<MappedEvent>) {
        if self.reasoning_open {
            self.reasoning_open = false;
            out.push(Ok(LlmEvent::ReasoningEnd {
                id: self.reasoning_id(),
                signature: None,
            }));
        }
    }

    /// Closes reasoning, text and every open tool call (emitting `ToolCall`s).
    fn close_parts(&mut self, out: &mut Vec<MappedEvent>) {
        self.close_reasoning(out);
        if self.text_open {
            self.text_open = false;
            out.push(Ok(LlmEvent::TextEnd { id: TEXT_ID.into() }));
        }
        for tool in self.tools.values_mut().filter(|t| !t.closed) {
            // A call whose name never came is still delivered (with an empty name).
            tool.start(out);
            tool.closed = true;
            out.push(Ok(LlmEvent::ToolInputEnd {
                id: tool.id.clone(),
            }));
            out.push(Ok(LlmEvent::ToolCall {
                id: tool.id.clone(),
                name: tool.name.clone(),
                arguments: tool.arguments.clone(),
            }));
        }
    }

    fn finish_step(&mut self, out: &mut Vec<MappedEvent>) {
        self.close_parts(out);
        self.ended = true;
        let raw_reason = self.finish_reason.clone();
        out.push(Ok(LlmEvent::StepFinish {
            reason: raw_reason
                .as_deref()
                .map_or(FinishReason::Unknown, finish_reason),
            raw_reason,
            usage: self.usage.as_ref().map(usage_from_json),
            response_id: self.response_id.clone(),
            model: self.model.clone(),
        }));
    }
}

impl crate::stream::EventMapper for ChatCompletionsMapper {
    fn push(&mut self, event: &SseEvent) -> Vec<MappedEvent> {
        ChatCompletionsMapper::push(self, event)
    }

    fn finish(&mut self) -> Vec<MappedEvent> {
        ChatCompletionsMapper::finish(self)
    }

    fn is_ended(&self) -> bool {
        self.ended
    }

    fn answer_complete(&self) -> bool {
        self.saw_finish_reason()
    }
}

/// Normalises a Chat Completions `finish_reason` string.
pub fn finish_reason(raw: &str) -> FinishReason {
    match raw {
        "stop" => FinishReason::Stop,
        "length" => FinishReason::Length,
        "tool_calls" | "function_call" => FinishReason::ToolCalls,
        "content_filter" => FinishReason::ContentFilter,
        "error" => FinishReason::Error,
        _ => FinishReason::Other,
    }
}

/// Reads a Chat Completions `usage` object (tokens): `prompt_tokens` → input,
/// `completion_tokens` → output, `completion_tokens_details.reasoning_tokens`,
/// `prompt_tokens_details.cached_tokens`, `total_tokens` (input + output when
/// absent). Missing numbers are 0; `raw` keeps the object as sent.
pub fn usage_from_json(usage: &Value) -> Usage {
    let n = |pointer: &str| usage.pointer(pointer).and_then(Value::as_u64);
    let input_tokens = n("/prompt_tokens").unwrap_or(0);
    let output_tokens = n("/completion_tokens").unwrap_or(0);
    Usage {
        input_tokens,
        output_tokens,
        reasoning_tokens: n("/completion_tokens_details/reasoning_tokens").unwrap_or(0),
        cached_input_tokens: n("/prompt_tokens_details/cached_tokens").unwrap_or(0),
        total_tokens: n("/total_tokens").unwrap_or(input_tokens.saturating_add(output_tokens)),
        raw: Some(usage.clone()),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn msg(data: &str) -> SseEvent {
        SseEvent {
            event: "message".into(),
            data: data.into(),
            id: None,
        }
    }

    fn run(chunks: &[&str]) -> Vec<MappedEvent> {
        let mut mapper = ChatCompletionsMapper::new();
        let mut out: Vec<MappedEvent> = chunks.iter().flat_map(|c| mapper.push(&msg(c))).collect();
        out.extend(mapper.finish());
        out
    }

    #[test]
    fn reasoning_then_text_then_finish() {
        let out = run(&[
            r#"{"id":"r1","model":"qwen","choices":[{"index":0,"delta":{"role":"assistant","reasoning_content":"think"}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"reasoning":" more"}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":null}]}"#,
            r#"{"choices":[{"index":0,"delta":{},"finish_reason":"length"}]}"#,
            "[DONE]",
        ]);
        let out: Vec<LlmEvent> = out.into_iter().map(Result::unwrap).collect();
        let r = "reasoning-0".to_owned();
        assert_eq!(
            out,
            vec![
                LlmEvent::ReasoningStart { id: r.clone() },
                LlmEvent::ReasoningDelta {
                    id: r.clone(),
                    text: "think".into()
                },
                LlmEvent::ReasoningDelta {
                    id: r.clone(),
                    text: " more".into()
                },
                LlmEvent::ReasoningEnd {
                    id: r,
                    signature: None
                },
                LlmEvent::TextStart { id: TEXT_ID.into() },
                LlmEvent::TextDelta {
                    id: TEXT_ID.into(),
                    text: "Hi".into()
                },
                LlmEvent::TextEnd { id: TEXT_ID.into() },
                LlmEvent::StepFinish {
                    reason: FinishReason::Length,
                    raw_reason: Some("length".into()),
                    usage: None,
                    response_id: Some("r1".into()),
                    model: Some("qwen".into()),
                },
            ]
        );
    }

    #[test]
    fn two_parallel_tool_calls_close_in_index_order() {
        let out = run(&[
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"a","function":{"name":"f","arguments":"{\"x\""}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"b","function":{"name":"g","arguments":""}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":":1}"}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}"#,
        ]);
        let calls: Vec<_> = out
            .iter()
            .filter_map(|e| match e {
                Ok(LlmEvent::ToolCall {
                    id,
                    name,
                    arguments,
                }) => Some((id.as_str(), name.as_str(), arguments.as_str())),
                _ => None,
            })
            .collect();
        assert_eq!(calls, vec![("a", "f", "{\"x\":1}"), ("b", "g", "")]);
        // No [DONE], but finish_reason was seen: StepFinish at EOF.
        assert!(matches!(
            out.last(),
            Some(Ok(LlmEvent::StepFinish {
                reason: FinishReason::ToolCalls,
                ..
            }))
        ));
    }

    #[test]
    fn complete_calls_reusing_index_zero_are_separate_calls() {
        let out = run(&[
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"a","function":{"name":"f","arguments":"{}"}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"b","function":{"name":"g","arguments":"{\"y\":2}"}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}"#,
            "[DONE]",
        ]);
        let calls: Vec<_> = out
            .iter()
            .filter_map(|e| match e {
                Ok(LlmEvent::ToolCall { id, arguments, .. }) => {
                    Some((id.as_str(), arguments.as_str()))
                }
                _ => None,
            })
            .collect();
        assert_eq!(calls, vec![("a", "{}"), ("b", "{\"y\":2}")]);
    }

    fn tool_calls(out: &[MappedEvent]) -> Vec<(String, String, String)> {
        out.iter()
            .filter_map(|e| match e {
                Ok(LlmEvent::ToolCall {
                    id,
                    name,
                    arguments,
                }) => Some((id.clone(), name.clone(), arguments.clone())),
                _ => None,
            })
            .collect()
    }

    /// Every `ToolInputDelta` of a call comes after its `ToolInputStart`, and the
    /// deltas add up to the final arguments.
    fn assert_input_events_consistent(out: &[MappedEvent]) {
        let mut started: BTreeMap<String, (String, String)> = BTreeMap::new();
        for e in out {
            match e {
                Ok(LlmEvent::ToolInputStart { id, name }) => {
                    assert!(
                        started
                            .insert(id.clone(), (name.clone(), String::new()))
                            .is_none()
                    );
                }
                Ok(LlmEvent::ToolInputDelta { id, delta }) => {
                    started
                        .get_mut(id)
                        .expect("delta before start")
                        .1
                        .push_str(delta);
                }
                Ok(LlmEvent::ToolCall {
                    id,
                    name,
                    arguments,
                }) => {
                    assert_eq!(started.get(id), Some(&(name.clone(), arguments.clone())));
                }
                _ => {}
            }
        }
    }

    #[test]
    fn tool_name_from_a_later_fragment_is_filled() {
        let out = run(&[
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"a","type":"function","function":{"arguments":"{\"x\""}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"name":"f","arguments":":1}"}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}"#,
            "[DONE]",
        ]);
        assert_input_events_consistent(&out);
        assert_eq!(
            tool_calls(&out),
            vec![("a".into(), "f".into(), "{\"x\":1}".into())]
        );
    }

    #[test]
    fn repeated_id_on_every_fragment_of_a_reused_index_is_one_call() {
        let out = run(&[
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"a","function":{"name":"f","arguments":"{}"}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"b","function":{"name":"g","arguments":"{\"y\""}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"b","function":{"arguments":":2}"}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"b","function":{"arguments":""}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}"#,
            "[DONE]",
        ]);
        assert_input_events_consistent(&out);
        assert_eq!(
            tool_calls(&out),
            vec![
                ("a".into(), "f".into(), "{}".into()),
                ("b".into(), "g".into(), "{\"y\":2}".into())
            ]
        );
    }

    #[test]
    fn error_chunk_is_provider_error_and_ends_output() {
        let mut mapper = ChatCompletionsMapper::new();
        let out = mapper.push(&msg(
            r#"{"error":{"message":"overloaded","type":"server_error","code":null}}"#,
        ));
        assert!(matches!(
            &out[..],
            [Err(LlmError::Provider { code: Some(c), message, body: Some(_) })]
                if c == "server_error" && message == "overloaded"
        ));
        assert!(mapper.push(&msg("[DONE]")).is_empty());
        assert!(mapper.finish().is_empty());
    }

    #[test]
    fn non_json_is_decode_error_and_eof_without_finish_is_incomplete() {
        let out = run(&["not json"]);
        assert!(matches!(&out[..], [Err(LlmError::Decode { data, .. })] if data == "not json"));
        let out = run(&[r#"{"choices":[{"index":0,"delta":{"content":"x"}}]}"#]);
        assert!(matches!(
            out.last(),
            Some(Err(LlmError::Stream(SseError::Incomplete)))
        ));
        assert!(
            !out.iter()
                .any(|e| matches!(e, Ok(LlmEvent::StepFinish { .. })))
        );
    }

    #[test]
    fn usage_mapping() {
        let usage = usage_from_json(&serde_json::json!({
            "prompt_tokens": 10, "completion_tokens": 5,
            "prompt_tokens_details": {"cached_tokens": 4},
            "completion_tokens_details": {"reasoning_tokens": 2}
        }));
        assert_eq!(
            (
                usage.input_tokens,
                usage.output_tokens,
                usage.cached_input_tokens
            ),
            (10, 5, 4)
        );
        assert_eq!((usage.reasoning_tokens, usage.total_tokens), (2, 15));
    }
}
