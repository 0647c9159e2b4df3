//! Compaction: when a step returns `Compact` (PROC-02, PROC-07) the loop asks the
//! model for a summary of the conversation, records it as a `compaction` turn
//! item and continues the turn from the summary plus the pending user message.

use futures::StreamExt;
use knife_llm::retry::{CONTEXT_OVERFLOW_ERROR, RetryDecision, RetryPolicy};
use knife_llm::{ChatMessage, LlmClient, LlmError, LlmEvent, LlmRequest};
use knife_protocol::{AgentError, AgentStatus, RunError};

use crate::llm_failures::{gave_up, run_error, wait_for_retry};
use crate::recorder::TurnRecorder;

/// Whether the built-in agent compacts the history when the context is full
/// (`compaction = "auto" | "off"` of a provider instance, TURN-03).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CompactionMode {
    /// Summarise the history and continue (PROC-02, PROC-07). The default.
    #[default]
    Auto,
    /// Never send a summary request: a context overflow ends the run with a
    /// `provider.context_overflow` error.
    Off,
}

/// Default bound of compactions in a row (TURN-04): a third compaction without a
/// step in between that fits the context is not tried; the run fails instead.
pub const DEFAULT_MAX_COMPACTIONS: u32 = 2;

/// The instruction appended to the conversation to get its summary.
pub const COMPACTION_PROMPT: &str = "The conversation above no longer fits the model's context. \
Write a summary that lets another agent continue the work without it: the user's goal and \
instructions, what was found and done so far (files read or changed, commands run, results), \
what remains to do, and the files that matter. Be concrete and concise. Do not call tools.";

/// Opens the user message that carries a summary in place of the history it replaces.
pub const SUMMARY_PREFIX: &str = "Summary of the conversation so far (older messages were compacted to fit the model's context):";

/// The user message that carries `summary` in the conversation sent to the model.
pub fn summary_message(summary: &str) -> ChatMessage {
    ChatMessage::User {
        text: format!("{SUMMARY_PREFIX}\n\n{summary}"),
    }
}

/// Summarises `messages` and returns the conversation to continue with: the
/// system message (when the first message is one), the summary, then
/// `pending` (the user message of the turn, PROC-02).
///
/// The summary request has no tools and the same retry policy as a step; its
/// status shows as `busy` / `retry`. When the summary request itself overflows
/// (likely after an overflow error: it carries the same history), the history
/// is shrunk and summarised again ([`shrink`]): long tool outputs and texts are
/// cut first, then the oldest half of the conversation is dropped, until
/// nothing is left to drop. Errors: the request's own failure as a
/// [`RunError`] (recorded on the turn as `APIError`, `UnknownError`, …), or
/// `ContextOverflowError` when even the smallest summary request does not fit.
pub(crate) async fn compact(
    llm: &dyn LlmClient,
    retry: RetryPolicy,
    model: &str,
    rec: &mut TurnRecorder,
    messages: &[ChatMessage],
    pending: &str,
) -> Result<Vec<ChatMessage>, RunError> {
    let idx = rec.compaction_start();
    let mut history = messages.to_vec();
    let mut truncated = false;
    let mut request = summary_request(model, &history);
    let mut calls_made = 0;
    let mut started = tokio::time::Instant::now();
    let summary = loop {
        rec.set_status(AgentStatus::Busy);
        calls_made += 1;
        let error = match summarise(llm, &request).await {
            Ok(summary) => break summary,
            Err(e) => e,
        };
        let (name, failure) = match retry.decide(&error, calls_made) {
            RetryDecision::Retry {
                attempt,
                delay,
                message,
            } => {
                wait_for_retry(rec, attempt, delay, message).await;
                continue;
            }
            RetryDecision::Compact => {
                if let Some(smaller) = shrink(&history, &mut truncated) {
                    history = smaller;
                    request = summary_request(model, &history);
                    calls_made = 0;
                    started = tokio::time::Instant::now();
                    continue;
                }
                (
                    CONTEXT_OVERFLOW_ERROR,
                    RunError {
                        code: Some("context_overflow".to_owned()),
                        ..RunError::new(
                            "provider.context_overflow",
                            "the conversation is too large to compact: even the summary request \
                         exceeds the model's context window; start a new thread or raise \
                         context_limit only if the model really has a larger window",
                        )
                    },
                )
            }
            RetryDecision::Stop { name } => (name, gave_up(run_error(&error), calls_made, started)),
        };
        rec.compaction_finished(idx, None);
        rec.set_error(AgentError {
            name: name.to_owned(),
            message: failure.message.clone(),
        });
        return Err(failure);
    };
    rec.compaction_finished(idx, Some(summary.clone()));
    let mut next = Vec::with_capacity(3);
    if let Some(system @ ChatMessage::System { .. }) = messages.first() {
        next.push(system.clone());
    }
    next.push(summary_message(&summary));
    next.push(ChatMessage::User {
        text: pending.to_owned(),
    });
    Ok(next)
}

/// The summary request for `history`: no tools, tool calls and results as plain
/// text ([`as_plain_text`]), [`COMPACTION_PROMPT`] last.
fn summary_request(model: &str, history: &[ChatMessage]) -> LlmRequest {
    let mut messages = as_plain_text(history);
    messages.push(ChatMessage::User {
        text: COMPACTION_PROMPT.to_owned(),
    });
    LlmRequest {
        model: model.to_owned(),
        messages,
        tools: Vec::new(),
        max_output_tokens: None,
        temperature: None,
    }
}

/// Longest tool output or assistant text (characters) kept when a summary
/// request has to shrink.
pub const SHRUNK_TEXT_CHARS: usize = 2_000;
/// Stands in for the part of the conversation dropped to fit a summary request.
pub const OMITTED_NOTE: &str = "[Earlier messages were omitted to fit the model's context.]";

/// A smaller `history` for a summary request that overflowed, or `None` when it
/// cannot shrink further (so the summary loop always ends). First (once, tracked by `truncated`): tool outputs and
/// assistant texts cut to [`SHRUNK_TEXT_CHARS`]. Then: the oldest half of the
/// messages after the leading system messages dropped, cut where a user or
/// assistant message starts (so no tool result loses its call), with
/// [`OMITTED_NOTE`] first when the kept part does not start with a user message.
pub(crate) fn shrink(history: &[ChatMessage], truncated: &mut bool) -> Option<Vec<ChatMessage>> {
    if !*truncated {
        *truncated = true;
        let cut: Vec<ChatMessage> = history.iter().map(truncate_message).collect();
        if cut != history {
            return Some(cut);
        }
    }
    let system = history
        .iter()
        .take_while(|m| matches!(m, ChatMessage::System { .. }))
        .count();
    let rest = &history[system..];
    if rest.len() < 2 {
        return None;
    }
    // A cut point: a user message, or an assistant message (with the reasoning
    // that precedes it). Never a tool result, which needs its call before it.
    let is_cut = |i: usize| match &rest[i] {
        ChatMessage::User { .. } | ChatMessage::Reasoning { .. } => true,
        ChatMessage::Assistant { .. } => {
            i == 0 || !matches!(rest[i - 1], ChatMessage::Reasoning { .. })
        }
        _ => false,
    };
    let start = (rest.len() / 2..rest.len()).find(|&i| is_cut(i))?;
    if start == 0 {
        return None;
    }
    let mut smaller = history[..system].to_vec();
    if !matches!(rest[start], ChatMessage::User { .. }) {
        smaller.push(ChatMessage::User {
            text: OMITTED_NOTE.to_owned(),
        });
    }
    smaller.extend_from_slice(&rest[start..]);
    // Dropping one message to add the note is no progress: stop there.
    (smaller.len() < history.len()).then_some(smaller)
}

/// `text` cut to [`SHRUNK_TEXT_CHARS`] characters, saying how much was cut.
fn cut(text: &str) -> String {
    let total = text.chars().count();
    if total <= SHRUNK_TEXT_CHARS {
        return text.to_owned();
    }
    let head: String = text.chars().take(SHRUNK_TEXT_CHARS).collect();
    format!(
        "{head}… [{} more characters cut]",
        total - SHRUNK_TEXT_CHARS
    )
}

/// `history` without tool calls or tool results: a request without tools may
/// not carry them (Anthropic rejects `tool_use` / `tool_result` blocks when the
/// request defines no tools; OpenAI rejects `tool` messages without their
/// call). Each call becomes a line `[tool NAME ARGUMENTS]` of its assistant
/// message, each result a user message `[tool NAME] → OUTPUT` (output cut to
/// [`SHRUNK_TEXT_CHARS`]). Reasoning is dropped (its signature is only valid
/// next to the original blocks).
pub(crate) fn as_plain_text(history: &[ChatMessage]) -> Vec<ChatMessage> {
    let mut names: std::collections::HashMap<&str, &str> = std::collections::HashMap::new();
    let mut out = Vec::with_capacity(history.len());
    for message in history {
        match message {
            ChatMessage::Assistant { text, tool_calls } => {
                let mut lines: Vec<String> = text
                    .iter()
                    .filter(|t| !t.trim().is_empty())
                    .cloned()
                    .collect();
                for call in tool_calls {
                    names.insert(&call.id, &call.name);
                    lines.push(format!("[tool {} {}]", call.name, call.arguments.trim()));
                }
                if !lines.is_empty() {
                    out.push(ChatMessage::Assistant {
                        text: Some(lines.join("\n")),
                        tool_calls: Vec::new(),
                    });
                }
            }
            ChatMessage::Tool { call_id, content } => {
                let name = names.get(call_id.as_str()).copied().unwrap_or("call");
                out.push(ChatMessage::User {
                    text: format!("[tool {name}] → {}", cut(content)),
                });
            }
            ChatMessage::Reasoning { .. } => {}
            other => out.push(other.clone()),
        }
    }
    out
}

fn truncate_message(message: &ChatMessage) -> ChatMessage {
    match message {
        ChatMessage::Tool { call_id, content } => ChatMessage::Tool {
            call_id: call_id.clone(),
            content: cut(content),
        },
        ChatMessage::Assistant {
            text: Some(text),
            tool_calls,
        } => ChatMessage::Assistant {
            text: Some(cut(text)),
            tool_calls: tool_calls.clone(),
        },
        other => other.clone(),
    }
}

/// One summary call: the streamed text, or the failure. An empty summary is a
/// failure too (nothing to continue from).
async fn summarise(llm: &dyn LlmClient, request: &LlmRequest) -> Result<String, LlmError> {
    let mut stream = llm.stream(request.clone()).await?;
    let mut text = String::new();
    while let Some(event) = stream.next().await {
        match event? {
            LlmEvent::TextDelta { text: delta, .. } => text.push_str(&delta),
            LlmEvent::StepFinish { .. } => break,
            _ => {}
        }
    }
    if text.trim().is_empty() {
        return Err(LlmError::Provider {
            code: None,
            message: "the model returned an empty summary".to_owned(),
            body: None,
        });
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use knife_llm::ToolCallRequest;

    fn user(t: &str) -> ChatMessage {
        ChatMessage::User { text: t.into() }
    }
    fn assistant(t: &str, calls: &[&str]) -> ChatMessage {
        ChatMessage::Assistant {
            text: Some(t.into()),
            tool_calls: calls
                .iter()
                .map(|id| ToolCallRequest {
                    id: (*id).into(),
                    name: "read".into(),
                    arguments: "{}".into(),
                })
                .collect(),
        }
    }
    fn tool(id: &str, content: &str) -> ChatMessage {
        ChatMessage::Tool {
            call_id: id.into(),
            content: content.into(),
        }
    }

    #[test]
    fn summary_request_renders_tool_calls_and_results_as_text() {
        let history = vec![
            ChatMessage::System { text: "sys".into() },
            user("q1"),
            ChatMessage::Reasoning {
                text: "think".into(),
                signature: Some("SIG".into()),
            },
            assistant("a1", &["c1"]),
            tool("c1", &"x".repeat(5000)),
            assistant("", &["c2"]),
            tool("c2", "short"),
        ];
        let request = summary_request("m", &history);
        assert!(request.tools.is_empty());
        assert_eq!(
            &request.messages[..6],
            &[
                ChatMessage::System { text: "sys".into() },
                user("q1"),
                ChatMessage::Assistant {
                    text: Some("a1\n[tool read {}]".into()),
                    tool_calls: vec![],
                },
                user(&format!(
                    "[tool read] → {}… [3000 more characters cut]",
                    "x".repeat(2000)
                )),
                ChatMessage::Assistant {
                    text: Some("[tool read {}]".into()),
                    tool_calls: vec![],
                },
                user("[tool read] → short"),
            ]
        );
        assert_eq!(request.messages[6], user(COMPACTION_PROMPT));
        assert_eq!(request.messages.len(), 7);
    }

    #[test]
    fn shrink_cuts_long_texts_first_then_drops_the_oldest_half_at_a_safe_point() {
        let system = ChatMessage::System { text: "sys".into() };
        let history = vec![
            system.clone(),
            user("q1"),
            assistant("a1", &["c1"]),
            tool("c1", &"x".repeat(5000)),
            assistant("a2", &["c2"]),
            tool("c2", "short"),
            assistant("a3", &[]),
        ];
        let mut truncated = false;
        let cut = shrink(&history, &mut truncated).unwrap();
        let ChatMessage::Tool { content, .. } = &cut[3] else {
            panic!("{cut:?}")
        };
        assert!(content.len() < 2100 && content.contains("3000 more characters cut"));
        assert_eq!(cut.len(), history.len());

        // Then halves, never starting at a tool result, the system message kept.
        let half = shrink(&cut, &mut truncated).unwrap();
        assert_eq!(
            half,
            vec![
                system.clone(),
                user(OMITTED_NOTE),
                assistant("a2", &["c2"]),
                tool("c2", "short"),
                assistant("a3", &[]),
            ]
        );
        let quarter = shrink(&half, &mut truncated).unwrap();
        assert_eq!(
            quarter,
            vec![system.clone(), user(OMITTED_NOTE), assistant("a3", &[])]
        );
        // The note and one message: nothing left to drop.
        assert_eq!(shrink(&quarter, &mut truncated), None);
        assert_eq!(shrink(&[system, user("only")], &mut truncated), None);
    }
}
