//! Shared test support: locating the stream fixtures in /work/shared and
//! running the decoder / Chat Completions mapper over a body split into chunks.
#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]

use std::path::PathBuf;

use knife_llm::openai_chat::ChatCompletionsMapper;
use knife_llm::sse::{DEFAULT_MAX_EVENT_BYTES, SseDecoder, SseEvent};
use knife_llm::{LlmError, LlmEvent, SseError};
use serde_json::Value;

/// The stream fixtures directory (`knife_testkit::fixtures_dir`: `../shared/fixtures/streams`
/// beside the workspace, or `$KNIFE_FIXTURES_DIR`).
pub fn streams_dir() -> PathBuf {
    let dir = knife_testkit::fixtures_dir();
    assert!(
        dir.is_dir(),
        "stream fixtures not found at {}; set KNIFE_FIXTURES_DIR",
        dir.display()
    );
    dir
}

/// Every `.sse` file under `sse/**` and `adversarial/`, as paths relative to
/// [`streams_dir`], sorted.
pub fn all_sse_fixtures() -> Vec<String> {
    let root = streams_dir();
    let mut found = Vec::new();
    let mut dirs = vec![root.join("sse"), root.join("adversarial")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "sse") {
                let rel = path.strip_prefix(&root).unwrap();
                found.push(rel.to_string_lossy().replace('\\', "/"));
            }
        }
    }
    found.sort();
    found
}

/// The fixture's bytes and its parsed `.expected.json`.
pub fn load(rel: &str) -> (Vec<u8>, Value) {
    let path = streams_dir().join(rel);
    let bytes = std::fs::read(&path).unwrap();
    let expected_path = path.with_extension("expected.json");
    let expected = serde_json::from_slice(&std::fs::read(&expected_path).unwrap()).unwrap();
    (bytes, expected)
}

/// Splits `bytes` at the given (sorted, deduplicated, in-range) offsets.
pub fn split_at_offsets<'a>(bytes: &'a [u8], offsets: &[usize]) -> Vec<&'a [u8]> {
    let mut chunks = Vec::new();
    let mut start = 0;
    for &offset in offsets {
        if offset > start && offset < bytes.len() {
            chunks.push(&bytes[start..offset]);
            start = offset;
        }
    }
    chunks.push(&bytes[start..]);
    chunks
}

/// Decodes the chunks in order; returns the events and the EOF result.
pub fn decode_chunks(chunks: &[&[u8]]) -> (Vec<SseEvent>, Result<(), SseError>) {
    let mut decoder = SseDecoder::new(DEFAULT_MAX_EVENT_BYTES);
    let mut events = Vec::new();
    for chunk in chunks {
        if let Err(err) = decoder.push_into(chunk, &mut events) {
            return (events, Err(err));
        }
    }
    (events, decoder.finish())
}

/// Decoder + Chat Completions mapper over the chunks, the way the client does it:
/// the output stops at the first `Err`; a decoder error at EOF becomes
/// `LlmError::Stream`.
pub fn map_chunks(chunks: &[&[u8]]) -> Vec<Result<LlmEvent, LlmError>> {
    let (events, end) = decode_chunks(chunks);
    let mut mapper = ChatCompletionsMapper::new();
    let mut out = Vec::new();
    for event in &events {
        out.extend(mapper.push(event));
    }
    match end {
        Ok(()) => out.extend(mapper.finish()),
        Err(err) => out.push(Err(LlmError::Stream(err))),
    }
    out
}

/// The Chat Completions fixtures: `sse/chat-completions/*` and `adversarial/*`.
pub fn chat_fixtures() -> Vec<String> {
    all_sse_fixtures()
        .into_iter()
        .filter(|p| p.starts_with("sse/chat-completions/") || p.starts_with("adversarial/"))
        .collect()
}

/// Decoder + any mapper over the chunks, as the clients do (output stops at the
/// first `Err`; a decoder error at EOF becomes `LlmError::Stream`).
pub fn map_chunks_with<M: knife_llm::stream::EventMapper>(
    mapper: &mut M,
    chunks: &[&[u8]],
) -> Vec<Result<LlmEvent, LlmError>> {
    let (events, end) = decode_chunks(chunks);
    let mut out = Vec::new();
    for event in &events {
        out.extend(mapper.push(event));
    }
    match end {
        Ok(()) => out.extend(mapper.finish()),
        Err(err) if mapper.answer_complete() && err == SseError::EndedEarly => {
            out.extend(mapper.finish())
        }
        Err(err) => out.push(Err(LlmError::Stream(err))),
    }
    // Like the client's stream: nothing after the first Err.
    if let Some(first_err) = out.iter().position(Result::is_err) {
        out.truncate(first_err + 1);
    }
    out
}

/// Every `.sse` fixture of one protocol folder (`sse/<protocol>/`), sorted.
pub fn protocol_fixtures(protocol: &str) -> Vec<String> {
    let prefix = format!("sse/{protocol}/");
    all_sse_fixtures()
        .into_iter()
        .filter(|p| p.starts_with(&prefix))
        .collect()
}

/// What a consumer accumulates from a normalised event stream with several
/// text / reasoning parts (Anthropic, Responses).
#[derive(Debug, Default)]
pub struct Summary {
    /// All text deltas concatenated.
    pub text: String,
    /// All reasoning deltas concatenated (`None` when there were none).
    pub reasoning: Option<String>,
    /// Each reasoning part: its text and its `ReasoningEnd` signature.
    pub reasoning_parts: Vec<(String, Option<String>)>,
    /// `{id, name, arguments}` per `ToolCall`, in order.
    pub tool_calls: Vec<Value>,
    /// The `StepFinish`, when the stream had one.
    pub step_finish: Option<LlmEvent>,
    /// The error that ended the stream, if one did.
    pub error: Option<LlmError>,
}

/// Folds the events, checking the stream grammar on the way: every part is
/// opened once before its deltas and closed once; tool deltas add up to the
/// final arguments and `ToolCall` follows `ToolInputEnd`; `StepFinish` or an
/// `Err` is the last item, appears once, and finds nothing open.
pub fn summarise(rel: &str, items: &[Result<LlmEvent, LlmError>]) -> Summary {
    use std::collections::HashMap;
    let mut s = Summary::default();
    // id -> open?
    let mut text_parts: HashMap<String, bool> = HashMap::new();
    let mut reasoning_parts: HashMap<String, (bool, usize)> = HashMap::new();
    let mut tool_args: HashMap<String, (String, bool)> = HashMap::new();
    for (i, item) in items.iter().enumerate() {
        assert!(
            s.step_finish.is_none() && s.error.is_none(),
            "{rel}: item {i} after the end"
        );
        let event = match item {
            Ok(event) => event,
            Err(err) => {
                s.error = Some(err.clone());
                continue;
            }
        };
        match event {
            LlmEvent::TextStart { id } => {
                assert!(
                    text_parts.insert(id.clone(), true).is_none(),
                    "{rel}: text {id} reopened"
                );
            }
            LlmEvent::TextDelta { id, text } => {
                assert_eq!(
                    text_parts.get(id),
                    Some(&true),
                    "{rel}: text delta outside {id}"
                );
                s.text.push_str(text);
            }
            LlmEvent::TextEnd { id } => {
                assert_eq!(
                    text_parts.insert(id.clone(), false),
                    Some(true),
                    "{rel}: {id}"
                );
            }
            LlmEvent::ReasoningStart { id } => {
                s.reasoning_parts.push((String::new(), None));
                let at = s.reasoning_parts.len() - 1;
                assert!(
                    reasoning_parts.insert(id.clone(), (true, at)).is_none(),
                    "{rel}: {id}"
                );
            }
            LlmEvent::ReasoningDelta { id, text } => {
                let (open, at) = reasoning_parts[id];
                assert!(open, "{rel}: reasoning delta outside {id}");
                s.reasoning_parts[at].0.push_str(text);
                s.reasoning.get_or_insert_default().push_str(text);
            }
            LlmEvent::ReasoningEnd { id, signature } => {
                let entry = reasoning_parts.get_mut(id).expect("end before start");
                assert!(
                    std::mem::replace(&mut entry.0, false),
                    "{rel}: {id} closed twice"
                );
                s.reasoning_parts[entry.1].1 = signature.clone();
            }
            LlmEvent::ToolInputStart { id, name } => {
                assert!(!name.is_empty(), "{rel}: tool name");
                assert!(
                    tool_args
                        .insert(id.clone(), (String::new(), true))
                        .is_none()
                );
            }
            LlmEvent::ToolInputDelta { id, delta } => {
                let (args, open) = tool_args.get_mut(id).expect("delta before start");
                assert!(*open);
                args.push_str(delta);
            }
            LlmEvent::ToolInputEnd { id } => {
                let (_, open) = tool_args.get_mut(id).expect("end before start");
                assert!(std::mem::replace(open, false), "{rel}: tool closed twice");
            }
            LlmEvent::ToolCall {
                id,
                name,
                arguments,
            } => {
                let (args, open) = &tool_args[id];
                assert!(!open, "{rel}: ToolCall before ToolInputEnd");
                assert_eq!(args, arguments, "{rel}: deltas add up to the arguments");
                s.tool_calls
                    .push(serde_json::json!({"id": id, "name": name, "arguments": arguments}));
            }
            LlmEvent::StepFinish { .. } => {
                assert!(
                    text_parts.values().all(|open| !open),
                    "{rel}: open text at finish"
                );
                assert!(
                    reasoning_parts.values().all(|(open, _)| !open),
                    "{rel}: open reasoning"
                );
                assert!(
                    tool_args.values().all(|(_, open)| !open),
                    "{rel}: open tool"
                );
                s.step_finish = Some(event.clone());
            }
        }
    }
    s
}
