//! Anthropic Messages mapper over every `sse/anthropic-messages` fixture: the
//! normalised events must carry exactly what `.expected.json` says, whole and
//! in 1-byte / 7-byte chunks.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{load, map_chunks_with, protocol_fixtures, split_at_offsets, summarise};
use knife_llm::anthropic::AnthropicMapper;
use knife_llm::{FinishReason, LlmEvent, Usage};
use serde_json::{Value, json};

fn map(
    bytes: &[u8],
    chunk: usize,
) -> (Vec<Result<LlmEvent, knife_llm::LlmError>>, AnthropicMapper) {
    let chunks: Vec<&[u8]> = if chunk == 0 {
        vec![bytes]
    } else {
        let offsets: Vec<usize> = (chunk..bytes.len()).step_by(chunk).collect();
        split_at_offsets(bytes, &offsets)
    };
    let mut mapper = AnthropicMapper::new();
    let items = map_chunks_with(&mut mapper, &chunks);
    (items, mapper)
}

fn check(rel: &str) {
    let (bytes, expected) = load(rel);
    let (items, mapper) = map(&bytes, 0);
    let s = summarise(rel, &items);
    assert!(
        expected["error"].is_null(),
        "{rel}: no Anthropic fixture has an error"
    );
    assert!(s.error.is_none(), "{rel}: {:?}", s.error);

    assert_eq!(s.text, expected["text"].as_str().unwrap(), "{rel}: text");
    assert_eq!(
        s.reasoning.as_deref(),
        expected["reasoning"].as_str(),
        "{rel}: reasoning"
    );
    if let Some(parts) = expected.get("reasoning_parts").and_then(Value::as_array) {
        let want: Vec<(String, Option<String>)> = parts
            .iter()
            .map(|p| {
                (
                    p["thinking"].as_str().unwrap().to_owned(),
                    p["signature"].as_str().map(str::to_owned),
                )
            })
            .collect();
        assert_eq!(
            s.reasoning_parts, want,
            "{rel}: thinking blocks with signatures"
        );
    }
    // Streamed arguments exactly, except that a tool with no input gets `{}`.
    let want_calls: Vec<Value> = expected["tool_calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            let args = c["arguments"].as_str().unwrap();
            json!({"id": c["id"], "name": c["name"],
                   "arguments": if args.is_empty() { "{}" } else { args }})
        })
        .collect();
    assert_eq!(s.tool_calls, want_calls, "{rel}: tool_calls");

    assert_eq!(
        mapper.response_id(),
        expected["response_id"].as_str(),
        "{rel}"
    );
    assert_eq!(mapper.model(), expected["model"].as_str(), "{rel}");
    assert_eq!(
        mapper.stop_sequence(),
        expected["stop_sequence"].as_str(),
        "{rel}"
    );
    assert_eq!(
        mapper.duplicate_message_starts() as u64,
        expected["duplicate_message_start_ignored"]
            .as_u64()
            .unwrap(),
        "{rel}: duplicate message_start"
    );

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
    assert_eq!(
        raw_reason.as_deref(),
        expected["finish_reason"].as_str(),
        "{rel}"
    );
    let want_reason = match expected["finish_reason"].as_str().unwrap() {
        "end_turn" => FinishReason::Stop,
        "tool_use" => FinishReason::ToolCalls,
        other => panic!("{rel}: unexpected stop reason {other}"),
    };
    assert_eq!(reason, want_reason, "{rel}");
    assert_eq!(response_id.as_deref(), expected["response_id"].as_str());
    assert_eq!(model.as_deref(), expected["model"].as_str());
    let usage: Usage = usage.expect("usage");
    let want = &expected["usage"];
    assert_eq!(usage.raw.as_ref(), Some(want), "{rel}: merged raw usage");
    let n = |k: &str| want.get(k).and_then(Value::as_u64).unwrap_or(0);
    let input = n("input_tokens") + n("cache_read_input_tokens") + n("cache_creation_input_tokens");
    assert_eq!(usage.input_tokens, input, "{rel}: input tokens");
    assert_eq!(usage.output_tokens, n("output_tokens"), "{rel}");
    assert_eq!(
        usage.cached_input_tokens,
        n("cache_read_input_tokens"),
        "{rel}"
    );
    assert_eq!(usage.total_tokens, input + n("output_tokens"), "{rel}");

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

        /// Every Anthropic fixture on disk has a named test above.
        #[test]
        fn anthropic_every_fixture_file_has_a_test() {
            let mut covered: Vec<&str> = vec![$($path),*];
            covered.sort();
            assert_eq!(protocol_fixtures("anthropic-messages"), covered);
        }
    };
}

fixture_tests! {
    anthropic_text_with_ping_and_cache_usage => "sse/anthropic-messages/text.sse",
    anthropic_duplicate_message_start_is_ignored => "sse/anthropic-messages/duplicate-message-start.sse",
    anthropic_fallback_block_between_signed_thinking_blocks => "sse/anthropic-messages/fallback-mid-output.sse",
    anthropic_tool_with_no_args_is_empty_object => "sse/anthropic-messages/tool-no-args.sse",
    anthropic_input_tokens_from_message_delta_win => "sse/anthropic-messages/message-delta-input-tokens.sse",
    anthropic_thinking_with_padded_json_and_signature => "sse/anthropic-messages/thinking-whitespace-padding.sse",
}

/// The no-args tool maps to exactly this sequence: text part, then the tool
/// with a single `{}` delta, end, call, and a tool-calls finish.
#[test]
fn anthropic_tool_no_args_exact_sequence() {
    let (bytes, _) = load("sse/anthropic-messages/tool-no-args.sse");
    let items: Vec<LlmEvent> = map(&bytes, 0).0.into_iter().map(Result::unwrap).collect();
    let id = "toolu_01QE1WLsSVp5hy5Q3GmGTmjP".to_owned();
    let n = items.len();
    assert_eq!(
        items[0],
        LlmEvent::TextStart {
            id: "text-0".into()
        }
    );
    assert_eq!(
        items[n - 5..n - 1],
        [
            LlmEvent::ToolInputStart {
                id: id.clone(),
                name: "updateIssueList".into()
            },
            LlmEvent::ToolInputDelta {
                id: id.clone(),
                delta: "{}".into()
            },
            LlmEvent::ToolInputEnd { id: id.clone() },
            LlmEvent::ToolCall {
                id,
                name: "updateIssueList".into(),
                arguments: "{}".into()
            },
        ]
    );
    assert!(matches!(
        items[n - 1],
        LlmEvent::StepFinish {
            reason: FinishReason::ToolCalls,
            ..
        }
    ));
}

/// The second thinking block of the fallback fixture ends with its own signature.
#[test]
fn anthropic_thinking_block_ends_with_its_signature() {
    let (bytes, _) = load("sse/anthropic-messages/fallback-mid-output.sse");
    let ends: Vec<LlmEvent> = map(&bytes, 0)
        .0
        .into_iter()
        .map(Result::unwrap)
        .filter(|e| matches!(e, LlmEvent::ReasoningEnd { .. }))
        .collect();
    assert_eq!(
        ends,
        vec![
            LlmEvent::ReasoningEnd {
                id: "reasoning-0".into(),
                signature: Some("SIG_FROM_OPUS_5_5".into())
            },
            LlmEvent::ReasoningEnd {
                id: "reasoning-2".into(),
                signature: Some("SIG_FROM_OPUS_4_8".into())
            },
        ]
    );
}
