//! What the built-in agent sends the model: the default system prompt and the
//! mapping of a thread's transcript (turn items) to chat messages.

use std::path::Path;

use knife_llm::{ChatMessage, ToolCallRequest};
use knife_protocol::{TurnItem, TurnItemKind, TurnItemStatus};
use serde_json::Value;

use crate::tools::ToolError;

/// The function name sent for a tool call whose name the model left empty (an
/// empty name is rejected by servers that template the conversation).
pub const UNKNOWN_TOOL_NAME: &str = "unknown_tool";

/// The system prompt used when the config gives none: names the project root and the tools.
pub fn default_system_prompt(root: &Path, tool_names: &[&str]) -> String {
    let can_change = tool_names
        .iter()
        .any(|t| matches!(*t, "write" | "edit" | "bash"));
    let (verb, limits) = if can_change {
        (
            "inspect and change it with these tools",
            "Read a file before you edit it, make focused changes, and say what you changed.",
        )
    } else {
        (
            "inspect it with these read-only tools",
            "You cannot modify files or run commands.",
        )
    };
    format!(
        "You are knife's built-in coding agent. You work inside the project at {root}. \
         You can {verb}: {tools}. Paths are relative to the project root and must stay \
         inside it. {limits} Look at the code before answering questions about it, cite \
         paths and line numbers, and answer concisely.",
        root = root.display(),
        tools = tool_names.join(", ")
    )
}

/// The conversation for a new turn: `system`, the transcript `history` (ordered by
/// ordinal), then the new user `text`.
///
/// Mapping: user messages as they are; assistant text and the tool calls that
/// follow it in the same model step become ONE assistant message, followed by one
/// `Tool` message per call (output, or the error text, so no call is left
/// unanswered). Reasoning, error and `cancelled` items (a retried call's
/// discarded parts) are skipped. With a completed compaction item in `history`,
/// the replay starts from it: its summary, the user message of its run, then
/// the items after it (PROC-02).
///
/// A tool call is replayed as [`wire_tool_call`] sends it: arguments that are not
/// a JSON object (an interrupted call's partial input, invalid JSON) become `{}`
/// and an empty name becomes [`UNKNOWN_TOOL_NAME`], because servers that parse
/// arguments while templating reject the whole request otherwise. Its result then
/// says why it did not run, in the words the turn used.
pub fn build_messages(system: &str, history: &[TurnItem], text: &str) -> Vec<ChatMessage> {
    let mut messages = vec![ChatMessage::System {
        text: system.to_owned(),
    }];
    let history = from_latest_compaction(history, &mut messages);
    let mut pending = PendingAssistant::default();
    for item in history {
        if item.status == TurnItemStatus::Cancelled {
            // Parts of a model call that failed and was retried (PROC-03).
            continue;
        }
        match &item.kind {
            TurnItemKind::UserMessage { text, .. } => {
                pending.flush(&mut messages);
                messages.push(ChatMessage::User { text: text.clone() });
            }
            TurnItemKind::AssistantMessage { text, .. } => {
                // A blank text is no message (Anthropic rejects whitespace-only text).
                if text.trim().is_empty() {
                    continue;
                }
                // Text after tool calls belongs to the next model step.
                if !pending.calls.is_empty() {
                    pending.flush(&mut messages);
                }
                pending.text.push_str(text);
            }
            TurnItemKind::ToolCall {
                call_id,
                tool,
                input,
                output,
                error,
            } => {
                let raw = match input {
                    Value::String(raw) => raw.clone(),
                    other => other.to_string(),
                };
                pending.calls.push(wire_tool_call(call_id, tool, &raw));
                let content = match (output, error) {
                    // A failed call's result is its error, as the model saw it live
                    // (its output, e.g. what `bash` printed before it was stopped, is
                    // kept on the item for the user).
                    (_, Some(err)) if item.status == TurnItemStatus::Failed => {
                        format!("Error: {err}")
                    }
                    (Some(out), _) => out.clone(),
                    (None, Some(err)) => format!("Error: {err}"),
                    (None, None) => match parse_arguments(&raw) {
                        Err(message) => invalid_arguments_result(tool, message),
                        Ok(_) if item.status == TurnItemStatus::Completed => String::new(),
                        Ok(_) => "Error: the tool call did not complete".to_owned(),
                    },
                };
                pending.results.push(ChatMessage::Tool {
                    call_id: call_id.clone(),
                    content,
                });
            }
            TurnItemKind::Reasoning { .. }
            | TurnItemKind::Error { .. }
            | TurnItemKind::Compaction { .. }
            // The tool item carries the approval's outcome (its output or the denial).
            | TurnItemKind::Approval { .. } => {}
        }
    }
    pending.flush(&mut messages);
    messages.push(ChatMessage::User {
        text: text.to_owned(),
    });
    messages
}

/// The part of `history` to replay after the latest completed compaction item,
/// with the compaction's summary and the user message of its run (the turn went
/// on from those two, PROC-02) pushed onto `messages`. Without a compaction:
/// the whole history, `messages` unchanged.
fn from_latest_compaction<'a>(
    history: &'a [TurnItem],
    messages: &mut Vec<ChatMessage>,
) -> &'a [TurnItem] {
    let latest = history.iter().rposition(|item| {
        item.status == TurnItemStatus::Completed
            && matches!(item.kind, TurnItemKind::Compaction { .. })
    });
    let Some(at) = latest else {
        return history;
    };
    if let TurnItemKind::Compaction { summary } = &history[at].kind {
        messages.push(crate::compaction::summary_message(summary));
    }
    let run_user = history[..at].iter().rev().find(|item| {
        item.run_id == history[at].run_id && matches!(item.kind, TurnItemKind::UserMessage { .. })
    });
    if let Some(TurnItem {
        kind: TurnItemKind::UserMessage { text, .. },
        ..
    }) = run_user
    {
        messages.push(ChatMessage::User { text: text.clone() });
    }
    &history[at + 1..]
}

/// A tool call as sent back to the model (in the assistant message that made it).
///
/// `arguments` is the model's raw argument text: kept only when it parses to a
/// JSON object, else sent as `{}`. An empty `name` is sent as [`UNKNOWN_TOOL_NAME`].
pub fn wire_tool_call(id: &str, name: &str, arguments: &str) -> ToolCallRequest {
    let arguments = match serde_json::from_str::<Value>(arguments) {
        Ok(Value::Object(_)) => arguments.to_owned(),
        _ => "{}".to_owned(),
    };
    let name = if name.is_empty() {
        UNKNOWN_TOOL_NAME
    } else {
        name
    };
    ToolCallRequest {
        id: id.to_owned(),
        name: name.to_owned(),
        arguments,
    }
}

/// Tool arguments as JSON; an empty string is an empty object (models send it
/// for tools without parameters). Errors: the JSON parse error text, or a note
/// that the arguments are not an object.
pub(crate) fn parse_arguments(arguments: &str) -> Result<Value, String> {
    if arguments.trim().is_empty() {
        return Ok(Value::Object(Default::default()));
    }
    match serde_json::from_str(arguments) {
        Ok(value @ Value::Object(_)) => Ok(value),
        Ok(_) => Err("arguments are not a JSON object".to_owned()),
        Err(e) => Err(format!("arguments are not valid JSON ({e})")),
    }
}

/// The tool result of a call that did not run because its arguments were
/// invalid: the text the turn itself sends (`Error: ` + [`ToolError::InvalidArguments`]).
pub(crate) fn invalid_arguments_result(tool: &str, message: String) -> String {
    let error = ToolError::InvalidArguments {
        tool: tool.to_owned(),
        message,
    };
    format!("Error: {error}")
}

/// An assistant message being assembled from consecutive transcript items.
#[derive(Default)]
struct PendingAssistant {
    text: String,
    calls: Vec<ToolCallRequest>,
    results: Vec<ChatMessage>,
}

impl PendingAssistant {
    fn flush(&mut self, messages: &mut Vec<ChatMessage>) {
        if self.text.is_empty() && self.calls.is_empty() {
            return;
        }
        let text = std::mem::take(&mut self.text);
        messages.push(ChatMessage::Assistant {
            text: (!text.is_empty()).then_some(text),
            tool_calls: std::mem::take(&mut self.calls),
        });
        messages.append(&mut self.results);
    }
}
