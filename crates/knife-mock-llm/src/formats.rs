// Anthropic Messages and OpenAI Responses framing of scripted stream responses.
// Owns how one ScriptResponse becomes `event: <type>\ndata: {json}\n\n` events for
// `POST /v1/messages` and `POST /v1/responses` (Chat Completions lives in chunks.rs).

use bytes::Bytes;
use serde_json::{Value, json};

use super::chunks::{ChunkCtx, StreamEvents, rough_tokens, split_even, split_words};
use super::script::{ScriptResponse, UsageSpec};

/// Which wire protocol a model request speaks (by its path).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApiFormat {
    /// `POST /v1/chat/completions` (or `/chat/completions`).
    ChatCompletions,
    /// `POST /v1/messages` (or `/messages`): Anthropic Messages.
    AnthropicMessages,
    /// `POST /v1/responses` (or `/responses`): OpenAI Responses.
    Responses,
    /// `POST /v1beta/models/<model>:streamGenerateContent` (SSE with `?alt=sse`)
    /// or `:generateContent` (one JSON body), also under `/v1/`: Gemini.
    Gemini,
}

impl ApiFormat {
    /// The format of a model request path, `None` for other paths.
    pub fn from_path(path: &str) -> Option<Self> {
        match path {
            "/v1/chat/completions" | "/chat/completions" => Some(Self::ChatCompletions),
            "/v1/messages" | "/messages" => Some(Self::AnthropicMessages),
            "/v1/responses" | "/responses" => Some(Self::Responses),
            p if (p.starts_with("/v1beta/models/") || p.starts_with("/v1/models/"))
                && (p.ends_with(":streamGenerateContent") || p.ends_with(":generateContent")) =>
            {
                Some(Self::Gemini)
            }
            _ => None,
        }
    }

    /// The response id of request number `n` (from 1): `chatcmpl-mock-N`,
    /// `msg_mock_N` or `resp_mock_N`.
    pub(crate) fn response_id(self, n: usize) -> String {
        match self {
            Self::ChatCompletions => format!("chatcmpl-mock-{n}"),
            Self::AnthropicMessages => format!("msg_mock_{n}"),
            Self::Responses => format!("resp_mock_{n}"),
            Self::Gemini => format!("gemini_mock_{n}"),
        }
    }

    /// The request body field that holds the conversation (for rough prompt tokens).
    pub(crate) fn conversation_field(self) -> &'static str {
        match self {
            Self::ChatCompletions | Self::AnthropicMessages => "messages",
            Self::Responses => "input",
            Self::Gemini => "contents",
        }
    }
}

/// `event: <type>\ndata: <json>\n\n`, the type read from the value's `type`.
fn named_event(value: &Value) -> Bytes {
    let kind = value
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("message");
    Bytes::from(format!("event: {kind}\ndata: {value}\n\n"))
}

/// The text pieces of a response: `deltas` even pieces, else one per word.
fn text_pieces(response: &ScriptResponse, text: &str) -> Vec<String> {
    match response.deltas {
        Some(n) => split_even(text, n),
        None => split_words(text),
    }
}

/// Arguments in up to 3 pieces (none when empty).
fn argument_pieces(arguments: &str) -> Vec<String> {
    if arguments.is_empty() {
        Vec::new()
    } else {
        split_even(arguments, 3)
    }
}

fn completion_tokens(response: &ScriptResponse) -> u64 {
    let chars = response
        .reasoning
        .as_deref()
        .map_or(0, |r| r.chars().count())
        + response.text.as_deref().map_or(0, |t| t.chars().count())
        + response
            .tool_calls
            .iter()
            .map(|c| c.name.len() + c.arguments.chars().count())
            .sum::<usize>();
    rough_tokens(chars)
}

/// Keeps the first half of the last event's bytes (a `cut` response).
fn cut_last(events: &mut [Bytes]) {
    if let Some(last) = events.last_mut() {
        *last = last.slice(..last.len() / 2);
    }
}

/// The Anthropic Messages events of a stream-kind response: `message_start`,
/// a `thinking` block (one `thinking_delta` per word, then a `signature_delta`
/// `mock-signature-N`), a `ping`, a `text` block, one `tool_use` block per call
/// (`input_json_delta`s, the arguments in up to 3 pieces), `message_delta`
/// (stop reason `end_turn`, `tool_use` with calls, `max_tokens` for a scripted
/// `length`, any other scripted reason as it is) and `message_stop`. With `cut`
/// the stream stops halfway through `message_delta`.
pub(crate) fn anthropic_events(
    ctx: &ChunkCtx,
    response: &ScriptResponse,
    prompt_tokens: u64,
    mut next_call_id: impl FnMut() -> String,
) -> StreamEvents {
    let usage = response.usage.unwrap_or(UsageSpec {
        prompt_tokens,
        completion_tokens: completion_tokens(response),
    });
    let mut events = vec![named_event(&json!({
        "type": "message_start",
        "message": {
            "id": ctx.id, "type": "message", "role": "assistant", "model": ctx.model,
            "content": [], "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": usage.prompt_tokens, "output_tokens": 1},
        },
    }))];
    let mut index = 0;
    let mut block = |events: &mut Vec<Bytes>, start: Value, deltas: Vec<Value>| {
        events.push(named_event(&json!({
            "type": "content_block_start", "index": index, "content_block": start,
        })));
        for delta in deltas {
            events.push(named_event(&json!({
                "type": "content_block_delta", "index": index, "delta": delta,
            })));
        }
        events.push(named_event(
            &json!({"type": "content_block_stop", "index": index}),
        ));
        index += 1;
    };
    if let Some(reasoning) = &response.reasoning {
        let mut deltas: Vec<Value> = split_words(reasoning)
            .into_iter()
            .map(|piece| json!({"type": "thinking_delta", "thinking": piece}))
            .collect();
        deltas.push(
            json!({"type": "signature_delta", "signature": format!("mock-signature-{}", ctx.id)}),
        );
        block(
            &mut events,
            json!({"type": "thinking", "thinking": "", "signature": ""}),
            deltas,
        );
    }
    events.push(named_event(&json!({"type": "ping"})));
    if let Some(text) = &response.text {
        let deltas = text_pieces(response, text)
            .into_iter()
            .map(|piece| json!({"type": "text_delta", "text": piece}))
            .collect();
        block(&mut events, json!({"type": "text", "text": ""}), deltas);
    }
    for call in &response.tool_calls {
        let id = call.id.clone().unwrap_or_else(&mut next_call_id);
        let mut deltas: Vec<Value> = argument_pieces(&call.arguments)
            .into_iter()
            .map(|piece| json!({"type": "input_json_delta", "partial_json": piece}))
            .collect();
        if deltas.is_empty() {
            // What the real API sends for a tool with no input.
            deltas.push(json!({"type": "input_json_delta", "partial_json": ""}));
        }
        block(
            &mut events,
            json!({"type": "tool_use", "id": id, "name": call.name, "input": {}}),
            deltas,
        );
    }
    let stop_reason = match response.finish_reason.as_deref() {
        None if response.tool_calls.is_empty() => "end_turn".to_owned(),
        None => "tool_use".to_owned(),
        Some("stop") => "end_turn".to_owned(),
        Some("tool_calls") => "tool_use".to_owned(),
        Some("length") => "max_tokens".to_owned(),
        Some(other) => other.to_owned(),
    };
    events.push(named_event(&json!({
        "type": "message_delta",
        "delta": {"stop_reason": stop_reason, "stop_sequence": null},
        "usage": {"input_tokens": usage.prompt_tokens, "output_tokens": usage.completion_tokens},
    })));
    if response.cut {
        cut_last(&mut events);
        return StreamEvents { events };
    }
    events.push(named_event(&json!({"type": "message_stop"})));
    StreamEvents { events }
}

/// The OpenAI Responses events of a stream-kind response: `response.created`,
/// a `reasoning` item with one summary part (one delta per word), a `message`
/// item with one `output_text` part, one `function_call` item per call
/// (argument deltas in up to 3 pieces; with a `namespace` field when the call
/// has one, which is how codex addresses MCP tools), then `response.completed` with the
/// output and usage (`response.incomplete` with `max_output_tokens` for a
/// scripted `length`). Every event carries a `sequence_number`. With `cut` the
/// stream stops halfway through the terminal event.
pub(crate) fn responses_events(
    ctx: &ChunkCtx,
    response: &ScriptResponse,
    prompt_tokens: u64,
    mut next_call_id: impl FnMut() -> String,
) -> StreamEvents {
    let usage = response.usage.unwrap_or(UsageSpec {
        prompt_tokens,
        completion_tokens: completion_tokens(response),
    });
    let mut seq = 0u64;
    let mut events = Vec::new();
    let mut push = |events: &mut Vec<Bytes>, mut value: Value| {
        value["sequence_number"] = json!(seq);
        seq += 1;
        events.push(named_event(&value));
    };
    let resp = |status: &str, output: &[Value]| {
        json!({
            "id": ctx.id, "object": "response", "created_at": ctx.created,
            "status": status, "model": ctx.model, "output": output,
        })
    };
    push(
        &mut events,
        json!({"type": "response.created", "response": resp("in_progress", &[])}),
    );
    let mut output: Vec<Value> = Vec::new();
    if let Some(reasoning) = &response.reasoning {
        let index = output.len();
        let item_id = format!("rs_{}_{index}", ctx.id);
        push(
            &mut events,
            json!({"type": "response.output_item.added", "output_index": index,
                   "item": {"id": item_id, "type": "reasoning", "summary": []}}),
        );
        let part = |text: &str| json!({"type": "summary_text", "text": text});
        let at = |kind: &str| json!({"type": kind, "item_id": item_id, "output_index": index, "summary_index": 0});
        let mut added = at("response.reasoning_summary_part.added");
        added["part"] = part("");
        push(&mut events, added);
        for piece in split_words(reasoning) {
            let mut delta = at("response.reasoning_summary_text.delta");
            delta["delta"] = json!(piece);
            push(&mut events, delta);
        }
        let mut done = at("response.reasoning_summary_text.done");
        done["text"] = json!(reasoning);
        push(&mut events, done);
        let mut part_done = at("response.reasoning_summary_part.done");
        part_done["part"] = part(reasoning);
        push(&mut events, part_done);
        let item = json!({"id": item_id, "type": "reasoning", "summary": [part(reasoning)]});
        push(
            &mut events,
            json!({"type": "response.output_item.done", "output_index": index, "item": item}),
        );
        output.push(item);
    }
    if let Some(text) = &response.text {
        let index = output.len();
        let item_id = format!("msg_{}_{index}", ctx.id);
        let message = |status: &str, content: Value| {
            json!({"id": item_id, "type": "message", "status": status,
                   "role": "assistant", "content": content})
        };
        let part = |text: &str| json!({"type": "output_text", "text": text, "annotations": []});
        let at = |kind: &str| json!({"type": kind, "item_id": item_id, "output_index": index, "content_index": 0});
        push(
            &mut events,
            json!({"type": "response.output_item.added", "output_index": index,
                   "item": message("in_progress", json!([]))}),
        );
        let mut added = at("response.content_part.added");
        added["part"] = part("");
        push(&mut events, added);
        for piece in text_pieces(response, text) {
            let mut delta = at("response.output_text.delta");
            delta["delta"] = json!(piece);
            push(&mut events, delta);
        }
        let mut done = at("response.output_text.done");
        done["text"] = json!(text);
        push(&mut events, done);
        let mut part_done = at("response.content_part.done");
        part_done["part"] = part(text);
        push(&mut events, part_done);
        let item = message("completed", json!([part(text)]));
        push(
            &mut events,
            json!({"type": "response.output_item.done", "output_index": index, "item": item}),
        );
        output.push(item);
    }
    for call in &response.tool_calls {
        let index = output.len();
        let call_id = call.id.clone().unwrap_or_else(&mut next_call_id);
        let item_id = format!("fc_{}_{index}", ctx.id);
        let item = |status: &str, arguments: &str| {
            let mut item = json!({"id": item_id, "type": "function_call", "status": status,
                   "call_id": call_id, "name": call.name, "arguments": arguments});
            if let Some(namespace) = &call.namespace {
                item["namespace"] = json!(namespace);
            }
            item
        };
        push(
            &mut events,
            json!({"type": "response.output_item.added", "output_index": index,
                   "item": item("in_progress", "")}),
        );
        for piece in argument_pieces(&call.arguments) {
            push(
                &mut events,
                json!({"type": "response.function_call_arguments.delta", "item_id": item_id,
                       "output_index": index, "delta": piece}),
            );
        }
        push(
            &mut events,
            json!({"type": "response.function_call_arguments.done", "item_id": item_id,
                   "output_index": index, "arguments": call.arguments}),
        );
        let done = item("completed", &call.arguments);
        push(
            &mut events,
            json!({"type": "response.output_item.done", "output_index": index, "item": done}),
        );
        output.push(done);
    }
    let usage_json = json!({
        "input_tokens": usage.prompt_tokens,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": usage.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": usage.prompt_tokens + usage.completion_tokens,
    });
    let terminal = if response.finish_reason.as_deref() == Some("length") {
        let mut r = resp("incomplete", &output);
        r["incomplete_details"] = json!({"reason": "max_output_tokens"});
        r["usage"] = usage_json;
        json!({"type": "response.incomplete", "response": r})
    } else {
        let mut r = resp("completed", &output);
        r["usage"] = usage_json;
        json!({"type": "response.completed", "response": r})
    };
    push(&mut events, terminal);
    if response.cut {
        cut_last(&mut events);
    }
    StreamEvents { events }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::ToolCallSpec;

    #[test]
    fn paths_pick_the_format() {
        assert_eq!(
            ApiFormat::from_path("/v1/messages"),
            Some(ApiFormat::AnthropicMessages)
        );
        assert_eq!(
            ApiFormat::from_path("/responses"),
            Some(ApiFormat::Responses)
        );
        assert_eq!(
            ApiFormat::from_path("/v1/chat/completions"),
            Some(ApiFormat::ChatCompletions)
        );
        assert_eq!(ApiFormat::from_path("/v1/models"), None);
        assert_eq!(
            ApiFormat::from_path("/v1beta/models/gemini-2.5-flash:streamGenerateContent"),
            Some(ApiFormat::Gemini)
        );
        assert_eq!(
            ApiFormat::from_path("/v1/models/g:generateContent"),
            Some(ApiFormat::Gemini)
        );
        assert_eq!(ApiFormat::from_path("/v1beta/models/g"), None);
    }

    #[test]
    fn anthropic_cut_stops_inside_message_delta() {
        let ctx = ChunkCtx {
            id: "msg_mock_1".into(),
            created: 0,
            model: "m".into(),
        };
        let response = ScriptResponse {
            tool_calls: vec![ToolCallSpec {
                id: Some("toolu_1".into()),
                name: "list".into(),
                arguments: String::new(),
                ..ToolCallSpec::default()
            }],
            cut: true,
            ..ScriptResponse::default()
        };
        let events = anthropic_events(&ctx, &response, 1, || "unused".into()).events;
        let body: String = events
            .iter()
            .map(|b| String::from_utf8_lossy(b).into_owned())
            .collect();
        assert!(body.contains("\"partial_json\":\"\""), "{body}");
        assert!(body.ends_with(&body[body.rfind("event: message_delta").unwrap()..]));
        assert!(!body.contains("message_stop"));
        assert!(!body.ends_with("\n\n"));
    }
}
