// Gemini `generateContent` / `streamGenerateContent?alt=sse` framing of scripted responses.
// Owns how one ScriptResponse becomes Gemini `GenerateContentResponse` chunks
// (SSE `data: {json}\n\n` events, or one merged JSON body when not streaming).

use bytes::Bytes;
use serde_json::{Value, json};

use super::chunks::{ChunkCtx, StreamEvents, event, rough_tokens, split_even, split_words};
use super::script::{ScriptResponse, UsageSpec};

/// The model named in a Gemini path: `/v1beta/models/<model>:streamGenerateContent`
/// → `<model>`.
pub(crate) fn model_from_path(path: &str) -> Option<&str> {
    let rest = path.split_once("/models/")?.1;
    let (model, _) = rest.split_once(':')?;
    (!model.is_empty()).then_some(model)
}

/// Whether a Gemini path asks for the non-streaming `:generateContent`.
pub(crate) fn is_unary(path: &str) -> bool {
    path.ends_with(":generateContent")
}

fn candidate(parts: Value, finish: Option<&str>) -> Value {
    let mut c = json!({"content": {"parts": parts, "role": "model"}, "index": 0});
    if let Some(finish) = finish {
        c["finishReason"] = json!(finish);
    }
    c
}

fn chunk(ctx: &ChunkCtx, parts: Value, finish: Option<&str>) -> Value {
    json!({
        "candidates": [candidate(parts, finish)],
        "modelVersion": ctx.model,
        "responseId": ctx.id,
    })
}

/// The `GenerateContentResponse` chunks of a stream-kind response: one chunk per
/// reasoning word (`{"text", "thought": true}` parts), one per text piece, one
/// with every `functionCall` part (`{"name", "args": {...}}`, the arguments
/// parsed from their JSON text; text that is not JSON is sent as a string), then
/// a final chunk with `finishReason` (`STOP`, `MAX_TOKENS` for a scripted
/// `length`, any other scripted reason upper-cased) and `usageMetadata`.
pub(crate) fn gemini_chunks(
    ctx: &ChunkCtx,
    response: &ScriptResponse,
    prompt_tokens: u64,
) -> Vec<Value> {
    let mut chunks = Vec::new();
    let mut chars = 0;
    if let Some(reasoning) = &response.reasoning {
        chars += reasoning.chars().count();
        for piece in split_words(reasoning) {
            chunks.push(chunk(ctx, json!([{"text": piece, "thought": true}]), None));
        }
    }
    if let Some(text) = &response.text {
        chars += text.chars().count();
        let pieces = match response.deltas {
            Some(n) => split_even(text, n),
            None => split_words(text),
        };
        for piece in pieces {
            chunks.push(chunk(ctx, json!([{ "text": piece }]), None));
        }
    }
    if !response.tool_calls.is_empty() {
        let parts: Vec<Value> = response
            .tool_calls
            .iter()
            .map(|call| {
                chars += call.name.len() + call.arguments.chars().count();
                let args = serde_json::from_str::<Value>(&call.arguments)
                    .unwrap_or_else(|_| json!(call.arguments));
                let mut fc = json!({"name": call.name, "args": args});
                if let Some(id) = &call.id {
                    fc["id"] = json!(id);
                }
                json!({ "functionCall": fc })
            })
            .collect();
        chunks.push(chunk(ctx, json!(parts), None));
    }
    let finish = match response.finish_reason.as_deref() {
        None | Some("stop" | "tool_calls") => "STOP".to_owned(),
        Some("length") => "MAX_TOKENS".to_owned(),
        Some(other) => other.to_ascii_uppercase(),
    };
    let usage = response.usage.unwrap_or(UsageSpec {
        prompt_tokens,
        completion_tokens: rough_tokens(chars),
    });
    let mut last = chunk(ctx, json!([{"text": ""}]), Some(&finish));
    last["usageMetadata"] = json!({
        "promptTokenCount": usage.prompt_tokens,
        "candidatesTokenCount": usage.completion_tokens,
        "totalTokenCount": usage.prompt_tokens + usage.completion_tokens,
    });
    chunks.push(last);
    chunks
}

/// The SSE events of [`gemini_chunks`] (`data: {json}\n\n`, no terminator: the
/// stream just ends). With `cut` the stream stops halfway through the last event.
pub(crate) fn gemini_events(
    ctx: &ChunkCtx,
    response: &ScriptResponse,
    prompt_tokens: u64,
) -> StreamEvents {
    let mut events: Vec<Bytes> = gemini_chunks(ctx, response, prompt_tokens)
        .iter()
        .map(event)
        .collect();
    if response.cut
        && let Some(last) = events.last_mut()
    {
        *last = last.slice(..last.len() / 2);
    }
    StreamEvents { events }
}

/// The non-streaming `:generateContent` body: the chunks merged into one
/// candidate (text pieces joined, thought and function-call parts kept), with
/// the final chunk's `finishReason` and `usageMetadata`.
pub(crate) fn gemini_unary(ctx: &ChunkCtx, response: &ScriptResponse, prompt_tokens: u64) -> Value {
    let chunks = gemini_chunks(ctx, response, prompt_tokens);
    let mut thought = String::new();
    let mut text = String::new();
    let mut calls = Vec::new();
    for c in &chunks {
        let parts = c["candidates"][0]["content"]["parts"].as_array();
        for part in parts.into_iter().flatten() {
            match (
                part.get("text").and_then(Value::as_str),
                part.get("thought"),
            ) {
                (Some(t), Some(_)) => thought.push_str(t),
                (Some(t), None) => text.push_str(t),
                (None, _) => calls.push(part.clone()),
            }
        }
    }
    let mut parts = Vec::new();
    if !thought.is_empty() {
        parts.push(json!({"text": thought, "thought": true}));
    }
    if !text.is_empty() || calls.is_empty() {
        parts.push(json!({ "text": text }));
    }
    parts.extend(calls);
    let last = chunks.last().cloned().unwrap_or_else(|| json!({}));
    let finish = last["candidates"][0]["finishReason"]
        .as_str()
        .unwrap_or("STOP")
        .to_owned();
    let mut body = chunk(ctx, json!(parts), Some(&finish));
    body["usageMetadata"] = last["usageMetadata"].clone();
    body
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::ToolCallSpec;

    fn ctx() -> ChunkCtx {
        ChunkCtx {
            id: "gemini_mock_1".into(),
            created: 0,
            model: "gemini-2.5-flash".into(),
        }
    }

    #[test]
    fn paths_name_the_model() {
        assert_eq!(
            model_from_path("/v1beta/models/gemini-2.5-flash:streamGenerateContent"),
            Some("gemini-2.5-flash")
        );
        assert_eq!(model_from_path("/v1beta/models/:x"), None);
        assert!(is_unary("/v1beta/models/m:generateContent"));
        assert!(!is_unary("/v1beta/models/m:streamGenerateContent"));
    }

    #[test]
    fn unary_merges_text_and_keeps_calls() {
        let response = ScriptResponse {
            text: Some("Hello big world".into()),
            reasoning: Some("hmm ok".into()),
            tool_calls: vec![ToolCallSpec {
                name: "whoami".into(),
                arguments: "{\"a\":1}".into(),
                ..ToolCallSpec::default()
            }],
            ..ScriptResponse::default()
        };
        let body = gemini_unary(&ctx(), &response, 3);
        let parts = body["candidates"][0]["content"]["parts"]
            .as_array()
            .unwrap();
        assert_eq!(parts[0], json!({"text": "hmm ok", "thought": true}));
        assert_eq!(parts[1], json!({"text": "Hello big world"}));
        assert_eq!(
            parts[2],
            json!({"functionCall": {"name": "whoami", "args": {"a": 1}}})
        );
        assert_eq!(body["candidates"][0]["finishReason"], "STOP");
        assert_eq!(body["usageMetadata"]["promptTokenCount"], 3);
    }

    #[test]
    fn cut_stops_inside_the_last_event() {
        let mut response = ScriptResponse::text("a b");
        response.cut = true;
        let events = gemini_events(&ctx(), &response, 1).events;
        let last = String::from_utf8_lossy(events.last().unwrap()).into_owned();
        assert!(!last.ends_with("\n\n"), "{last}");
        assert!(serde_json::from_str::<Value>(last.trim_start_matches("data: ")).is_err());
    }
}
