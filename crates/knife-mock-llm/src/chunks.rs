// Chat Completions chunk JSON and SSE framing for the mock LLM's generated streams.
// Owns how a scripted stream response becomes `data: {chunk}\n\n` events.

use bytes::Bytes;
use serde_json::{Value, json};

use super::script::{ScriptResponse, UsageSpec};

/// The SSE terminator of a Chat Completions stream.
pub(crate) const DONE: &[u8] = b"data: [DONE]\n\n";

/// What every chunk of one response shares.
#[derive(Debug, Clone)]
pub(crate) struct ChunkCtx {
    /// `chatcmpl-mock-N`, N = the request's 1-based number.
    pub id: String,
    /// Unix seconds.
    pub created: u64,
    /// The request's `model`, or the server's default model.
    pub model: String,
}

impl ChunkCtx {
    /// A `chat.completion.chunk` with one choice.
    pub(crate) fn chunk(&self, delta: Value, finish_reason: Option<&str>) -> Value {
        json!({
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
        })
    }

    /// The final usage chunk (`choices: []`).
    pub(crate) fn usage_chunk(&self, usage: UsageSpec) -> Value {
        json!({
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [],
            "usage": {
                "prompt_tokens": usage.prompt_tokens,
                "completion_tokens": usage.completion_tokens,
                "total_tokens": usage.prompt_tokens + usage.completion_tokens,
            },
        })
    }
}

/// `data: <json>\n\n`.
pub(crate) fn event(value: &Value) -> Bytes {
    Bytes::from(format!("data: {value}\n\n"))
}

/// Rough token count: one token per 4 characters, at least 1 for non-empty text.
pub(crate) fn rough_tokens(chars: usize) -> u64 {
    chars.div_ceil(4) as u64
}

/// Splits text into word pieces, each word keeping its leading whitespace
/// (`"Hello big world"` -> `["Hello", " big", " world"]`); concatenation is the input.
pub(crate) fn split_words(text: &str) -> Vec<String> {
    let mut pieces = Vec::new();
    let mut current = String::new();
    let mut in_word = false;
    for c in text.chars() {
        if c.is_whitespace() {
            if in_word {
                pieces.push(std::mem::take(&mut current));
                in_word = false;
            }
        } else {
            in_word = true;
        }
        current.push(c);
    }
    if !current.is_empty() {
        pieces.push(current);
    }
    pieces
}

/// Splits text into `n` pieces of about equal character counts (fewer when the
/// text has fewer than `n` characters); concatenation is the input.
pub(crate) fn split_even(text: &str, n: usize) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    let n = n.clamp(1, chars.len().max(1));
    let mut pieces = Vec::with_capacity(n);
    let mut start = 0;
    for i in 0..n {
        let end = chars.len() * (i + 1) / n;
        pieces.push(chars[start..end].iter().collect());
        start = end;
    }
    pieces
}

/// The events of a scripted stream response, in order, and the cut tail.
pub(crate) struct StreamEvents {
    /// Complete SSE events, ending with the usage chunk and `[DONE]` unless cut.
    pub events: Vec<Bytes>,
}

/// Builds the events of a stream-kind response: a role chunk, reasoning deltas,
/// text deltas, tool-call deltas (id+name first, then the arguments in up to 3
/// pieces), the finish chunk, the usage chunk and `[DONE]`. With `cut`, the
/// stream stops halfway through the finish chunk's bytes.
pub(crate) fn stream_events(
    ctx: &ChunkCtx,
    response: &ScriptResponse,
    prompt_tokens: u64,
    mut next_call_id: impl FnMut() -> String,
) -> StreamEvents {
    let mut events = vec![event(
        &ctx.chunk(json!({"role": "assistant", "content": ""}), None),
    )];
    let mut completion_chars = 0;
    if let Some(reasoning) = &response.reasoning {
        completion_chars += reasoning.chars().count();
        for piece in split_words(reasoning) {
            events.push(event(
                &ctx.chunk(json!({ "reasoning_content": piece }), None),
            ));
        }
    }
    if let Some(text) = &response.text {
        completion_chars += text.chars().count();
        let pieces = match response.deltas {
            Some(n) => split_even(text, n),
            None => split_words(text),
        };
        for piece in pieces {
            events.push(event(&ctx.chunk(json!({ "content": piece }), None)));
        }
    }
    for (index, call) in response.tool_calls.iter().enumerate() {
        completion_chars += call.name.len() + call.arguments.chars().count();
        let id = call.id.clone().unwrap_or_else(&mut next_call_id);
        events.push(event(&ctx.chunk(
            json!({"tool_calls": [{
                "index": index,
                "id": id,
                "type": "function",
                "function": {"name": call.name, "arguments": ""},
            }]}),
            None,
        )));
        let pieces = if call.arguments.is_empty() {
            Vec::new()
        } else {
            split_even(&call.arguments, 3)
        };
        for piece in pieces {
            events.push(event(&ctx.chunk(
                json!({"tool_calls": [{"index": index, "function": {"arguments": piece}}]}),
                None,
            )));
        }
    }
    let finish = response.finish_reason.clone().unwrap_or_else(|| {
        if response.tool_calls.is_empty() {
            "stop".to_owned()
        } else {
            "tool_calls".to_owned()
        }
    });
    let finish_event = event(&ctx.chunk(json!({}), Some(&finish)));
    if response.cut {
        events.push(finish_event.slice(..finish_event.len() / 2));
        return StreamEvents { events };
    }
    events.push(finish_event);
    let usage = response.usage.unwrap_or(UsageSpec {
        prompt_tokens,
        completion_tokens: rough_tokens(completion_chars),
    });
    events.push(event(&ctx.usage_chunk(usage)));
    events.push(Bytes::from_static(DONE));
    StreamEvents { events }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_words_keeps_every_character() {
        let pieces = split_words("  Hello big\nworld ");
        assert_eq!(pieces, vec!["  Hello", " big", "\nworld", " "]);
        assert_eq!(pieces.concat(), "  Hello big\nworld ");
    }

    #[test]
    fn split_even_is_char_safe() {
        let pieces = split_even("héllo wörld", 3);
        assert_eq!(pieces.len(), 3);
        assert_eq!(pieces.concat(), "héllo wörld");
        assert_eq!(split_even("ab", 5), vec!["a", "b"]);
    }
}
