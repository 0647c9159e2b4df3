//! Chat Completions mapper over every chat-completions and adversarial fixture:
//! the normalised events must carry exactly what `.expected.json` says.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{chat_fixtures, decode_chunks, load, map_chunks};
use knife_llm::openai_chat::ChatCompletionsMapper;
use knife_llm::{LlmError, LlmEvent, SseError};
use serde_json::{Value, json};

/// What a consumer accumulates from the normalised events.
#[derive(Debug, Default)]
struct Summary {
    text: String,
    reasoning: Option<String>,
    tool_calls: Vec<Value>,
    step_finish: Option<LlmEvent>,
    error: Option<LlmError>,
}

/// Folds the events, checking the stream grammar on the way: parts are opened
/// before their deltas and closed once, tool deltas add up to the final
/// arguments, `StepFinish` or an `Err` is the last item and appears once.
fn summarise(rel: &str, items: &[Result<LlmEvent, LlmError>]) -> Summary {
    let mut s = Summary::default();
    let mut open_text = false;
    let mut open_reasoning: Option<String> = None;
    let mut tool_args: std::collections::HashMap<String, (String, bool)> = Default::default();
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
                assert!(!open_text, "{rel}: text reopened");
                assert_eq!(id, "text-0");
                open_text = true;
            }
            LlmEvent::TextDelta { text, .. } => {
                assert!(open_text, "{rel}: text delta outside a part");
                s.text.push_str(text);
            }
            LlmEvent::TextEnd { .. } => {
                assert!(open_text);
                open_text = false;
            }
            LlmEvent::ReasoningStart { id } => {
                assert!(open_reasoning.is_none());
                open_reasoning = Some(id.clone());
            }
            LlmEvent::ReasoningDelta { id, text } => {
                assert_eq!(open_reasoning.as_ref(), Some(id));
                s.reasoning.get_or_insert_default().push_str(text);
            }
            LlmEvent::ReasoningEnd { id, .. } => {
                assert_eq!(open_reasoning.take().as_ref(), Some(id));
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
                    .push(json!({"id": id, "name": name, "arguments": arguments}));
            }
            LlmEvent::StepFinish { .. } => {
                assert!(
                    !open_text && open_reasoning.is_none(),
                    "{rel}: open part at finish"
                );
                assert!(tool_args.values().all(|(_, open)| !open));
                s.step_finish = Some(event.clone());
            }
        }
    }
    s
}

fn check_mapper_against_expected(rel: &str) {
    let (bytes, expected) = load(rel);
    let items = map_chunks(&[&bytes]);
    let s = summarise(rel, &items);

    assert_eq!(s.text, expected["text"].as_str().unwrap(), "{rel}: text");
    assert_eq!(
        s.reasoning.as_deref(),
        expected["reasoning"].as_str(),
        "{rel}: reasoning"
    );
    assert_eq!(
        Value::Array(s.tool_calls.clone()),
        expected["tool_calls"],
        "{rel}: tool_calls"
    );
    assert!(
        expected["error"].is_null(),
        "{rel}: no chat fixture has a provider error"
    );

    // response_id / model are known to the mapper even when the stream fails.
    let (events, _) = decode_chunks(&[&bytes]);
    let mut mapper = ChatCompletionsMapper::new();
    for event in &events {
        mapper.push(event);
    }
    assert_eq!(
        mapper.response_id(),
        expected["response_id"].as_str(),
        "{rel}: response_id"
    );
    assert_eq!(mapper.model(), expected["model"].as_str(), "{rel}: model");

    match expected["finish_reason"].as_str() {
        Some(reason) => {
            assert!(s.error.is_none(), "{rel}: unexpected error {:?}", s.error);
            let Some(LlmEvent::StepFinish {
                raw_reason,
                usage,
                response_id,
                model,
                ..
            }) = s.step_finish
            else {
                panic!("{rel}: no StepFinish");
            };
            assert_eq!(raw_reason.as_deref(), Some(reason), "{rel}: finish_reason");
            assert_eq!(response_id.as_deref(), expected["response_id"].as_str());
            assert_eq!(model.as_deref(), expected["model"].as_str());
            let want_usage = &expected["usage"];
            match usage {
                None => assert!(want_usage.is_null(), "{rel}: usage missing"),
                Some(usage) => {
                    assert_eq!(usage.raw.as_ref(), Some(want_usage), "{rel}: raw usage");
                    let n = |p: &str| want_usage.pointer(p).and_then(Value::as_u64).unwrap_or(0);
                    assert_eq!(usage.input_tokens, n("/prompt_tokens"));
                    assert_eq!(usage.output_tokens, n("/completion_tokens"));
                    assert_eq!(usage.total_tokens, n("/total_tokens"));
                    assert_eq!(
                        usage.reasoning_tokens,
                        n("/completion_tokens_details/reasoning_tokens")
                    );
                    assert_eq!(
                        usage.cached_input_tokens,
                        n("/prompt_tokens_details/cached_tokens")
                    );
                }
            }
        }
        None => {
            assert!(
                s.step_finish.is_none(),
                "{rel}: StepFinish without finish_reason"
            );
            if expected.get("decoder_error").is_some() {
                assert_eq!(
                    s.error,
                    Some(LlmError::Stream(SseError::EndedEarly)),
                    "{rel}"
                );
            } else {
                assert_eq!(
                    s.error,
                    Some(LlmError::Stream(SseError::Incomplete)),
                    "{rel}"
                );
            }
        }
    }

    // Feeding one byte at a time changes nothing.
    let one: Vec<&[u8]> = bytes.chunks(1).collect();
    assert_eq!(map_chunks(&one), items, "{rel}: 1-byte chunking");
}

macro_rules! mapper_fixture_tests {
    ($($name:ident => $path:literal,)*) => {
        $(
            #[test]
            fn $name() {
                check_mapper_against_expected($path);
            }
        )*

        /// Every Chat Completions fixture on disk has a named test above.
        #[test]
        fn chat_mapper_every_fixture_file_has_a_test() {
            let mut covered: Vec<&str> = vec![$($path),*];
            covered.sort();
            assert_eq!(chat_fixtures(), covered);
        }
    };
}

mapper_fixture_tests! {
    chat_mapper_adversarial_bom_at_start => "adversarial/bom-at-start.sse",
    chat_mapper_adversarial_crlf_line_endings => "adversarial/crlf-line-endings.sse",
    chat_mapper_adversarial_data_no_space => "adversarial/data-no-space.sse",
    chat_mapper_adversarial_multiline_data => "adversarial/multiline-data.sse",
    chat_mapper_adversarial_truncated_mid_event => "adversarial/truncated-mid-event.sse",
    chat_mapper_adversarial_utf8_multibyte => "adversarial/utf8-multibyte.sse",
    chat_mapper_text_markdown => "sse/chat-completions/text-markdown.sse",
    chat_mapper_tool_call_then_answer_1 => "sse/chat-completions/tool-call-then-answer-1.sse",
    chat_mapper_tool_call_then_answer_2 => "sse/chat-completions/tool-call-then-answer-2.sse",
}

/// The truncated stream: two text deltas, then the decoder's EndedEarly, no
/// finish, and the partial JSON is never parsed (no Decode error).
#[test]
fn chat_mapper_truncated_stream_exact_output() {
    let (bytes, _) = load("adversarial/truncated-mid-event.sse");
    let items = map_chunks(&[&bytes]);
    let id = "text-0".to_owned();
    assert_eq!(
        items,
        vec![
            Ok(LlmEvent::TextStart { id: id.clone() }),
            Ok(LlmEvent::TextDelta {
                id: id.clone(),
                text: "Partial".into()
            }),
            Ok(LlmEvent::TextDelta {
                id,
                text: " answer".into()
            }),
            Err(LlmError::Stream(SseError::EndedEarly)),
        ]
    );
}

/// The tool-call fixture maps to exactly this event sequence.
#[test]
fn chat_mapper_tool_call_exact_sequence() {
    let (bytes, _) = load("sse/chat-completions/tool-call-then-answer-1.sse");
    let items: Vec<LlmEvent> = map_chunks(&[&bytes])
        .into_iter()
        .map(Result::unwrap)
        .collect();
    let id = "call_ZR5UUuTt3pf61kjwAJIYdVMj".to_owned();
    assert_eq!(
        items[0],
        LlmEvent::ToolInputStart {
            id: id.clone(),
            name: "get_capital".into()
        }
    );
    let n = items.len();
    assert_eq!(items[n - 3], LlmEvent::ToolInputEnd { id: id.clone() });
    assert_eq!(
        items[n - 2],
        LlmEvent::ToolCall {
            id,
            name: "get_capital".into(),
            arguments: "{\"country\":\"UK\"}".into()
        }
    );
    assert!(matches!(
        items[n - 1],
        LlmEvent::StepFinish {
            reason: knife_llm::FinishReason::ToolCalls,
            ..
        }
    ));
}
