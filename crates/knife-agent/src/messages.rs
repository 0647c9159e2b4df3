//! What the built-in agent sends the model: the default system prompt and the
//! mapping of a thread's transcript (turn items) to chat messages.

use std::path::Path;

use knife_llm::{ChatMessage, ToolCallRequest};
use knife_protocol::{TurnItem, TurnItemKind, TurnItemStatus};
use serde_json::Value;

/// The system prompt used when the config gives none: names the project root and the tools.
pub fn default_system_prompt(root: &Path, tool_names: &[&str]) -> String {
    format!(
        "You are knife's built-in coding agent. You work inside the project at {root}. \
         You can inspect it with these read-only tools: {tools}. Paths are relative to the \
         project root and must stay inside it. You cannot modify files or run commands. \
         Look at the code before answering questions about it, cite paths and line numbers, \
         and answer concisely.",
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
/// unanswered). Reasoning and error items are skipped.
pub fn build_messages(system: &str, history: &[TurnItem], text: &str) -> Vec<ChatMessage> {
    let mut messages = vec![ChatMessage::System {
        text: system.to_owned(),
    }];
    let mut pending = PendingAssistant::default();
    for item in history {
        match &item.kind {
            TurnItemKind::UserMessage { text, .. } => {
                pending.flush(&mut messages);
                messages.push(ChatMessage::User { text: text.clone() });
            }
            TurnItemKind::AssistantMessage { text, .. } => {
                if text.is_empty() {
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
                let arguments = match input {
                    Value::String(raw) => raw.clone(),
                    other => other.to_string(),
                };
                pending.calls.push(ToolCallRequest {
                    id: call_id.clone(),
                    name: tool.clone(),
                    arguments,
                });
                let content = match (output, error) {
                    (Some(out), _) => out.clone(),
                    (None, Some(err)) => format!("Error: {err}"),
                    (None, None) if item.status == TurnItemStatus::Completed => String::new(),
                    (None, None) => "Error: the tool call did not complete".to_owned(),
                };
                pending.results.push(ChatMessage::Tool {
                    call_id: call_id.clone(),
                    content,
                });
            }
            TurnItemKind::Reasoning { .. } | TurnItemKind::Error { .. } => {}
        }
    }
    pending.flush(&mut messages);
    messages.push(ChatMessage::User {
        text: text.to_owned(),
    });
    messages
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
