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
