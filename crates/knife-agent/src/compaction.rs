//! Compaction: when a step returns `Compact` (PROC-02, PROC-07) the loop asks the
//! model for a summary of the conversation, records it as a `compaction` turn
//! item and continues the turn from the summary plus the pending user message.

use futures::StreamExt;
use knife_llm::retry::{CONTEXT_OVERFLOW_ERROR, RetryDecision, RetryPolicy};
use knife_llm::{ChatMessage, LlmClient, LlmError, LlmEvent, LlmRequest};
use knife_protocol::{AgentError, AgentStatus, RunError};

use crate::agent::run_error;
use crate::processor::wait_for_retry;
use crate::recorder::TurnRecorder;

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
/// status shows as `busy` / `retry`. Errors: the request's own failure as a
/// [`RunError`] (recorded on the turn as `APIError`, `UnknownError`, …), or
/// `ContextOverflowError` when even the summary request does not fit.
pub(crate) async fn compact(
    llm: &dyn LlmClient,
    retry: RetryPolicy,
    model: &str,
    rec: &mut TurnRecorder,
    messages: &[ChatMessage],
    pending: &str,
) -> Result<Vec<ChatMessage>, RunError> {
    let idx = rec.compaction_start();
    let mut request_messages = messages.to_vec();
    request_messages.push(ChatMessage::User {
        text: COMPACTION_PROMPT.to_owned(),
    });
    let request = LlmRequest {
        model: model.to_owned(),
        messages: request_messages,
        tools: Vec::new(),
        max_output_tokens: None,
        temperature: None,
    };
    let mut calls_made = 0;
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
            RetryDecision::Compact => (
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
            ),
            RetryDecision::Stop { name } => (name, run_error(&error)),
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
