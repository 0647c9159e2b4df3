//! OpenAI Responses mapper over every `sse/responses` fixture: the normalised
//! events must carry exactly what `.expected.json` says, whole and in 1-byte /
//! 7-byte chunks.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{load, map_chunks_with, protocol_fixtures, split_at_offsets, summarise};
use knife_llm::openai_responses::ResponsesMapper;
use knife_llm::{FinishReason, LlmError, LlmEvent, SseError};
use serde_json::{Value, json};

fn map(bytes: &[u8], chunk: usize) -> (Vec<Result<LlmEvent, LlmError>>, ResponsesMapper) {
    let chunks: Vec<&[u8]> = if chunk == 0 {
        vec![bytes]
    } else {
        let offsets: Vec<usize> = (chunk..bytes.len()).step_by(chunk).collect();
        split_at_offsets(bytes, &offsets)
    };
    let mut mapper = ResponsesMapper::new();
    let items = map_chunks_with(&mut mapper, &chunks);
    (items, mapper)
}

fn check(rel: &str) {
    let (bytes, expected) = load(rel);
    let (items, mapper) = map(&bytes, 0);
    let s = summarise(rel, &items);

    assert_eq!(s.text, expected["text"].as_str().unwrap(), "{rel}: text");
    assert_eq!(
        s.reasoning.as_deref(),
        expected["reasoning"].as_str(),
        "{rel}: reasoning"
    );
    if let Some(parts) = expected.get("reasoning_parts").and_then(Value::as_array) {
        let want: Vec<(String, Option<String>)> = parts
            .iter()
            .map(|p| (p["text"].as_str().unwrap().to_owned(), None))
            .collect();
        assert_eq!(
            s.reasoning_parts, want,
            "{rel}: one reasoning part per summary part"
        );
    }
    let want_calls: Vec<Value> = expected["tool_calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| json!({"id": c["id"], "name": c["name"], "arguments": c["arguments"]}))
        .collect();
    assert_eq!(s.tool_calls, want_calls, "{rel}: tool_calls");
    let builtin = expected
        .get("builtin_tool_calls")
        .cloned()
        .unwrap_or_else(|| json!([]));
    assert_eq!(
        Value::Array(mapper.builtin_tool_calls().to_vec()),
        builtin,
        "{rel}: builtin"
    );

    assert_eq!(
        mapper.response_id(),
        expected["response_id"].as_str(),
        "{rel}"
    );
    assert_eq!(mapper.model(), expected["model"].as_str(), "{rel}");

    match expected["finish_reason"].as_str() {
        Some("failed") | None => {
            assert!(
                s.step_finish.is_none(),
                "{rel}: a failed response has no StepFinish"
            );
            let want = &expected["error"];
            let Some(LlmError::Provider {
                code,
                message,
                body,
            }) = &s.error
            else {
                panic!("{rel}: want a provider error, got {:?}", s.error);
            };
            // The code when there is one, else the error's type.
            let want_code = want["code"].as_str().or(want["type"].as_str());
            assert_eq!(code.as_deref(), want_code, "{rel}: error code");
            assert_eq!(
                Some(message.as_str()),
                want["message"].as_str(),
                "{rel}: message"
            );
            let source = if want["source"] == "error event" {
                "error"
            } else {
                "response.failed"
            };
            assert_eq!(
                body.as_ref().unwrap()["type"],
                source,
                "{rel}: reported once, by {source}"
            );
        }
        Some(terminal) => {
            assert!(s.error.is_none(), "{rel}: {:?}", s.error);
            let Some(LlmEvent::StepFinish {
                reason,
                raw_reason,
                usage,
                response_id,
                model,
            }) = s.step_finish
            else {
                panic!("{rel}: no StepFinish");
            };
            assert_eq!(raw_reason.as_deref(), Some(terminal), "{rel}");
            let want_reason = if s.tool_calls.is_empty() {
                FinishReason::Stop
            } else {
                FinishReason::ToolCalls
            };
            assert_eq!(reason, want_reason, "{rel}");
            assert_eq!(response_id.as_deref(), expected["response_id"].as_str());
            assert_eq!(model.as_deref(), expected["model"].as_str());
            let want = &expected["usage"];
            match usage {
                None => assert!(want.is_null(), "{rel}: usage missing"),
                Some(usage) => {
                    assert_eq!(usage.raw.as_ref(), Some(want), "{rel}: raw usage");
                    let n = |p: &str| want.pointer(p).and_then(Value::as_u64).unwrap_or(0);
                    assert_eq!(usage.input_tokens, n("/input_tokens"));
                    assert_eq!(usage.output_tokens, n("/output_tokens"));
                    assert_eq!(usage.total_tokens, n("/total_tokens"));
                    assert_eq!(
                        usage.reasoning_tokens,
                        n("/output_tokens_details/reasoning_tokens")
                    );
                    assert_eq!(
                        usage.cached_input_tokens,
                        n("/input_tokens_details/cached_tokens")
                    );
                }
            }
        }
    }

    for chunk in [1, 7] {
        assert_eq!(map(&bytes, chunk).0, items, "{rel}: {chunk}-byte chunking");
    }
}

macro_rules! fixture_tests {
    ($($name:ident => $path:literal,)*) => {
        $(
            #[test]
            fn $name() {
                check($path);
            }
        )*

        /// Every Responses fixture on disk has a named test above.
        #[test]
        fn responses_every_fixture_file_has_a_test() {
            let mut covered: Vec<&str> = vec![$($path),*];
            covered.sort();
            assert_eq!(protocol_fixtures("responses"), covered);
        }
    };
}

fixture_tests! {
    responses_text_only_in_output_item_done => "sse/responses/codex-cli-fixture.sse",
    responses_custom_tool_call_freeform_1 => "sse/responses/custom-tool-freeform-1.sse",
    responses_custom_tool_call_freeform_2 => "sse/responses/custom-tool-freeform-2.sse",
    responses_text_after_custom_tool_3 => "sse/responses/custom-tool-freeform-3.sse",
    responses_error_event_keeps_insufficient_quota => "sse/responses/error-insufficient-quota.sse",
    responses_error_with_null_code_uses_type => "sse/responses/error-null-code.sse",
    responses_reasoning_summary_parts => "sse/responses/reasoning-summary.sse",
    responses_failed_without_error_event => "sse/responses/response-failed-only.sse",
    responses_web_search_items_are_not_tool_calls => "sse/responses/web-search.sse",
}

/// A function call: `output_item.added` opens it, argument deltas stream,
/// `output_item.done` closes it with the complete call; completed → tool calls.
#[test]
fn responses_function_call_exact_sequence() {
    let events = [
        r#"{"type":"response.created","response":{"id":"resp_1","model":"gpt-5"}}"#,
        r#"{"type":"response.output_item.added","output_index":0,"item":{"id":"fc_1","type":"function_call","call_id":"call_1","name":"get_capital","arguments":""}}"#,
        r#"{"type":"response.function_call_arguments.delta","item_id":"fc_1","delta":"{\"country\""}"#,
        r#"{"type":"response.function_call_arguments.delta","item_id":"fc_1","delta":":\"UK\"}"}"#,
        r#"{"type":"response.function_call_arguments.done","item_id":"fc_1","arguments":"{\"country\":\"UK\"}"}"#,
        r#"{"type":"response.output_item.done","output_index":0,"item":{"id":"fc_1","type":"function_call","call_id":"call_1","name":"get_capital","arguments":"{\"country\":\"UK\"}"}}"#,
        r#"{"type":"response.output_item.added","output_index":1,"item":{"id":"fc_2","type":"function_call","call_id":"call_2","name":"now","arguments":""}}"#,
        r#"{"type":"response.output_item.done","output_index":1,"item":{"id":"fc_2","type":"function_call","call_id":"call_2","name":"now","arguments":""}}"#,
        r#"{"type":"response.completed","response":{"id":"resp_1","status":"completed","usage":{"input_tokens":5,"output_tokens":7,"total_tokens":12}}}"#,
    ];
    let body: String = events.iter().map(|e| format!("data: {e}\n\n")).collect();
    let items: Vec<LlmEvent> = map(body.as_bytes(), 0)
        .0
        .into_iter()
        .map(Result::unwrap)
        .collect();
    let id = "call_1".to_owned();
    assert_eq!(
        items[..5],
        [
            LlmEvent::ToolInputStart {
                id: id.clone(),
                name: "get_capital".into()
            },
            LlmEvent::ToolInputDelta {
                id: id.clone(),
                delta: "{\"country\"".into()
            },
            LlmEvent::ToolInputDelta {
                id: id.clone(),
                delta: ":\"UK\"}".into()
            },
            LlmEvent::ToolInputEnd { id: id.clone() },
            LlmEvent::ToolCall {
                id,
                name: "get_capital".into(),
                arguments: "{\"country\":\"UK\"}".into()
            },
        ]
    );
    // A call without arguments gets `{}`.
    assert_eq!(
        items[8],
        LlmEvent::ToolCall {
            id: "call_2".into(),
            name: "now".into(),
            arguments: "{}".into()
        }
    );
    assert!(matches!(
        &items[9],
        LlmEvent::StepFinish { reason: FinishReason::ToolCalls, usage: Some(u), .. }
            if u.input_tokens == 5 && u.output_tokens == 7
    ));
}

/// `response.incomplete` for the output cap is a length finish; EOF before any
/// terminal event is an incomplete stream.
#[test]
fn responses_incomplete_and_truncated_streams() {
    let body = concat!(
        "data: {\"type\":\"response.output_text.delta\",\"item_id\":\"m\",\"content_index\":0,\"delta\":\"Hi\"}\n\n",
        "data: {\"type\":\"response.incomplete\",\"response\":{\"id\":\"r\",\"incomplete_details\":{\"reason\":\"max_output_tokens\"}}}\n\n",
    );
    let items = map(body.as_bytes(), 0).0;
    assert!(
        matches!(
            items.last(),
            Some(Ok(LlmEvent::StepFinish { reason: FinishReason::Length, raw_reason: Some(r), .. })) if r == "incomplete"
        ),
        "{items:?}"
    );
    let cut = "data: {\"type\":\"response.output_text.delta\",\"item_id\":\"m\",\"content_index\":0,\"delta\":\"Hi\"}\n\n";
    let items = map(cut.as_bytes(), 0).0;
    assert_eq!(
        items.last(),
        Some(&Err(LlmError::Stream(SseError::Incomplete)))
    );
}

/// Raw reasoning text (`response.reasoning_text.*`) is reasoning too, one part
/// per content index, closed by its `done` (whose text is not repeated).
#[test]
fn responses_reasoning_text_is_reasoning() {
    let events = [
        r#"{"type":"response.output_item.added","output_index":0,"item":{"id":"rs_1","type":"reasoning","summary":[]}}"#,
        r#"{"type":"response.reasoning_text.delta","item_id":"rs_1","content_index":0,"delta":"Think"}"#,
        r#"{"type":"response.reasoning_text.delta","item_id":"rs_1","content_index":0,"delta":"ing."}"#,
        r#"{"type":"response.reasoning_text.done","item_id":"rs_1","content_index":0,"text":"Thinking."}"#,
        r#"{"type":"response.output_item.done","output_index":0,"item":{"id":"rs_1","type":"reasoning","summary":[],"content":[{"type":"reasoning_text","text":"Thinking."}]}}"#,
        r#"{"type":"response.output_text.delta","item_id":"m","content_index":0,"delta":"Done"}"#,
        r#"{"type":"response.completed","response":{"id":"r"}}"#,
    ];
    let body: String = events.iter().map(|e| format!("data: {e}\n\n")).collect();
    let items = map(body.as_bytes(), 0).0;
    let s = summarise("reasoning_text", &items);
    assert_eq!(s.reasoning.as_deref(), Some("Thinking."));
    assert_eq!(s.reasoning_parts.len(), 1);
    assert_eq!(s.text, "Done");
    assert!(s.step_finish.is_some());
}
