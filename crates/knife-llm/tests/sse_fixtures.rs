//! Decoder-level facts for every stream fixture (all three protocols plus the
//! adversarial files): event count, names, `[DONE]`, EOF state, exact data.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeMap;

use common::{all_sse_fixtures, decode_chunks, load};
use knife_llm::SseError;
use serde_json::Value;

/// Checks the `.expected.json` `sse` object (and `decoder_error`) of one fixture,
/// decoding it whole, in 1-byte chunks and in 7-byte chunks.
fn check_decoder_facts(rel: &str) {
    let (bytes, expected) = load(rel);
    let sse = &expected["sse"];
    let whole = decode_chunks(&[&bytes]);
    let one: Vec<&[u8]> = bytes.chunks(1).collect();
    let seven: Vec<&[u8]> = bytes.chunks(7).collect();
    assert_eq!(decode_chunks(&one), whole, "{rel}: 1-byte chunking differs");
    assert_eq!(
        decode_chunks(&seven),
        whole,
        "{rel}: 7-byte chunking differs"
    );
    let (events, end) = whole;

    assert_eq!(
        events.len() as u64,
        sse["event_count"].as_u64().unwrap(),
        "{rel}: event_count"
    );
    let mut names: BTreeMap<String, u64> = BTreeMap::new();
    for e in &events {
        *names.entry(e.event.clone()).or_default() += 1;
    }
    let expected_names: BTreeMap<String, u64> =
        serde_json::from_value(sse["event_names"].clone()).unwrap();
    assert_eq!(names, expected_names, "{rel}: event_names");

    let done_seen = events.iter().any(|e| e.data == "[DONE]");
    assert_eq!(
        done_seen,
        sse["done_sentinel"].as_bool().unwrap(),
        "{rel}: done_sentinel"
    );

    let ended_early = sse["ended_early"].as_bool().unwrap();
    if ended_early {
        assert_eq!(end, Err(SseError::EndedEarly), "{rel}: ended_early");
    } else {
        assert_eq!(end, Ok(()), "{rel}: clean EOF");
    }
    match expected.get("decoder_error").and_then(Value::as_str) {
        Some(text) => {
            let err = end.as_ref().expect_err("decoder_error expected");
            assert!(
                err.to_string().starts_with(text),
                "{rel}: decoder_error {err}"
            );
        }
        None => assert!(end.is_ok() || ended_early),
    }

    if let Some(list) = sse.get("events").and_then(Value::as_array) {
        assert_eq!(list.len(), events.len(), "{rel}: events[] length");
        for (i, (want, got)) in list.iter().zip(&events).enumerate() {
            assert_eq!(
                got.event,
                want["event"].as_str().unwrap(),
                "{rel}: events[{i}].event"
            );
            assert_eq!(
                got.data,
                want["data"].as_str().unwrap(),
                "{rel}: events[{i}].data"
            );
        }
    }
    if sse.get("leading_bom_stripped").and_then(Value::as_bool) == Some(true) {
        assert!(
            bytes.starts_with(&[0xEF, 0xBB, 0xBF]),
            "{rel}: file starts with a BOM"
        );
        assert!(events[0].data.starts_with('{'), "{rel}: first event kept");
    }
    if let Some(lines) = sse.get("ignored_non_field_lines").and_then(Value::as_array) {
        for line in lines {
            let line = line.as_str().unwrap();
            assert!(
                !events.iter().any(|e| e.data.contains(line)),
                "{rel}: {line} leaked"
            );
        }
    }
}

macro_rules! decoder_fixture_tests {
    ($($name:ident => $path:literal,)*) => {
        $(
            #[test]
            fn $name() {
                check_decoder_facts($path);
            }
        )*

        /// Every fixture on disk has a named test above (no silent gaps).
        #[test]
        fn decoder_every_fixture_file_has_a_test() {
            let mut covered: Vec<&str> = vec![$($path),*];
            covered.sort();
            assert_eq!(all_sse_fixtures(), covered);
        }
    };
}

decoder_fixture_tests! {
    decoder_adversarial_bom_at_start => "adversarial/bom-at-start.sse",
    decoder_adversarial_crlf_line_endings => "adversarial/crlf-line-endings.sse",
    decoder_adversarial_data_no_space => "adversarial/data-no-space.sse",
    decoder_adversarial_multiline_data => "adversarial/multiline-data.sse",
    decoder_adversarial_truncated_mid_event => "adversarial/truncated-mid-event.sse",
    decoder_adversarial_utf8_multibyte => "adversarial/utf8-multibyte.sse",
    decoder_anthropic_duplicate_message_start => "sse/anthropic-messages/duplicate-message-start.sse",
    decoder_anthropic_fallback_mid_output => "sse/anthropic-messages/fallback-mid-output.sse",
    decoder_anthropic_message_delta_input_tokens => "sse/anthropic-messages/message-delta-input-tokens.sse",
    decoder_anthropic_text => "sse/anthropic-messages/text.sse",
    decoder_anthropic_thinking_whitespace_padding => "sse/anthropic-messages/thinking-whitespace-padding.sse",
    decoder_anthropic_tool_no_args => "sse/anthropic-messages/tool-no-args.sse",
    decoder_chat_text_markdown => "sse/chat-completions/text-markdown.sse",
    decoder_chat_tool_call_then_answer_1 => "sse/chat-completions/tool-call-then-answer-1.sse",
    decoder_chat_tool_call_then_answer_2 => "sse/chat-completions/tool-call-then-answer-2.sse",
    decoder_responses_codex_cli_fixture => "sse/responses/codex-cli-fixture.sse",
    decoder_responses_custom_tool_freeform_1 => "sse/responses/custom-tool-freeform-1.sse",
    decoder_responses_custom_tool_freeform_2 => "sse/responses/custom-tool-freeform-2.sse",
    decoder_responses_custom_tool_freeform_3 => "sse/responses/custom-tool-freeform-3.sse",
    decoder_responses_error_insufficient_quota => "sse/responses/error-insufficient-quota.sse",
    decoder_responses_error_null_code => "sse/responses/error-null-code.sse",
    decoder_responses_reasoning_summary => "sse/responses/reasoning-summary.sse",
    decoder_responses_response_failed_only => "sse/responses/response-failed-only.sse",
    decoder_responses_web_search => "sse/responses/web-search.sse",
}

/// The utf8 fixture split at each listed offset (and at all of them at once)
/// decodes to exactly the same events.
#[test]
fn decoder_utf8_multibyte_split_offsets() {
    let (bytes, expected) = load("adversarial/utf8-multibyte.sse");
    let offsets: Vec<usize> = expected["sse"]["multibyte_split_offsets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap() as usize)
        .collect();
    let whole = decode_chunks(&[&bytes]);
    for &offset in &offsets {
        let chunks = common::split_at_offsets(&bytes, &[offset]);
        assert_eq!(decode_chunks(&chunks), whole, "split at {offset}");
    }
    assert_eq!(
        decode_chunks(&common::split_at_offsets(&bytes, &offsets)),
        whole
    );
}
