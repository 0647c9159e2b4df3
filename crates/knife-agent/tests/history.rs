//! Tests of turning a thread's transcript into chat messages: tool calls grouped with
//! their results, reasoning and errors skipped, invalid arguments never replayed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;

use knife_llm::*;
use knife_protocol::*;
use serde_json::{Value, json};
// ---------------------------------------------------------------- history items

#[test]
fn history_groups_tool_calls_and_skips_reasoning_and_errors() {
    let history = vec![
        user_item(1, "q1"),
        item(
            1,
            1,
            TurnItemStatus::Completed,
            TurnItemKind::Reasoning {
                text: "think".into(),
                streaming: false,
            },
        ),
        assistant_item(1, 2, "Let me look."),
        tool_item(1, 3, "c1", Some("A"), None),
        tool_item(1, 4, "c2", None, Some("boom")),
        assistant_item(1, 5, "Done."),
        item(
            1,
            6,
            TurnItemStatus::Completed,
            TurnItemKind::Error {
                error: RunError::new("runtime", "x"),
            },
        ),
        user_item(2, "q2"),
    ];
    let messages = knife_agent::messages::build_messages("sys", &history, "q3");
    let call = |id: &str| ToolCallRequest {
        id: id.into(),
        name: "read".into(),
        arguments: r#"{"path":"a"}"#.into(),
    };
    assert_eq!(
        messages,
        [
            ChatMessage::System { text: "sys".into() },
            ChatMessage::User { text: "q1".into() },
            ChatMessage::Assistant {
                text: Some("Let me look.".into()),
                tool_calls: vec![call("c1"), call("c2")]
            },
            ChatMessage::Tool {
                call_id: "c1".into(),
                content: "A".into()
            },
            ChatMessage::Tool {
                call_id: "c2".into(),
                content: "Error: boom".into()
            },
            ChatMessage::Assistant {
                text: Some("Done.".into()),
                tool_calls: vec![]
            },
            ChatMessage::User { text: "q2".into() },
            ChatMessage::User { text: "q3".into() },
        ]
    );
}

/// Every tool call in `messages` has a non-empty name and arguments that parse
/// to a JSON object, and every call is answered by exactly one tool result.

#[test]
fn history_replays_invalid_tool_arguments_as_an_empty_object() {
    let history = vec![
        user_item(1, "q1"),
        raw_tool_item(1, "c1", "read", Value::String(String::new()), None),
        raw_tool_item(
            2,
            "c2",
            "read",
            Value::String(r#"{"path":"src/ma"#.into()),
            Some("the model's response ended before this tool call's input was complete"),
        ),
        raw_tool_item(3, "c3", "grep", Value::String("{not json".into()), None),
        raw_tool_item(4, "c4", "read", json!([1, 2]), None),
        raw_tool_item(
            5,
            "c5",
            "read",
            Value::String(r#"{"path":"a"}"#.into()),
            None,
        ),
        raw_tool_item(6, "c6", "", json!({}), Some("unknown tool")),
    ];
    let messages = knife_agent::messages::build_messages("sys", &history, "q2");
    assert_replayable(&messages);
    let ChatMessage::Assistant { tool_calls, .. } = &messages[2] else {
        panic!("{:?}", messages[2]);
    };
    let args: Vec<&str> = tool_calls.iter().map(|c| c.arguments.as_str()).collect();
    assert_eq!(args, ["{}", "{}", "{}", "{}", r#"{"path":"a"}"#, "{}"]);
    assert_eq!(tool_calls[5].name, "unknown_tool");
    let results: Vec<&str> = messages[3..9]
        .iter()
        .map(|m| match m {
            ChatMessage::Tool { content, .. } => content.as_str(),
            other => panic!("{other:?}"),
        })
        .collect();
    assert!(results[1].contains("input was complete"), "{}", results[1]);
    // The same wording as a call whose arguments were invalid within its turn.
    assert!(
        results[2]
            .starts_with("Error: invalid arguments for tool grep: arguments are not valid JSON"),
        "{}",
        results[2]
    );
    assert!(
        results[3].starts_with("Error: invalid arguments for tool read"),
        "{}",
        results[3]
    );
}

#[test]
fn blank_assistant_text_is_not_replayed() {
    let history = vec![
        user_item(1, "q1"),
        assistant_item(1, 1, " \n"),
        tool_item(1, 2, "c1", Some("A"), None),
        assistant_item(1, 3, "\n\n"),
    ];
    let messages = knife_agent::messages::build_messages("sys", &history, "q2");
    for m in &messages {
        if let ChatMessage::Assistant {
            text: Some(text), ..
        } = m
        {
            assert!(!text.trim().is_empty(), "blank text replayed: {messages:?}");
        }
    }
    assert_replayable(&messages);
}
