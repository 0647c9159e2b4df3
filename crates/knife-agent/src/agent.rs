//! The agent loop of one turn: send the conversation, consume the model's event
//! stream into turn items, run the tools it calls, repeat until a final answer.
//!
//! One turn = one spawned task ([`run_turn`]) that owns its [`TurnRecorder`].
//! Interrupts cancel the turn's token; the loop future is then dropped at its
//! current await point and the recorder settles whatever was in flight.

use std::sync::{Arc, Mutex};

use futures::StreamExt;
use knife_llm::{ChatMessage, LlmClient, LlmError, LlmEvent, LlmRequest};
use knife_protocol::RunError;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::messages::{parse_arguments, wire_tool_call};
use crate::recorder::{PartKind, TurnRecorder, TurnStop};
use crate::tools::{ToolContext, ToolError, ToolSet};

/// What a turn needs besides its recorder.
pub(crate) struct TurnPlan {
    pub llm: Arc<dyn LlmClient>,
    pub tools: ToolSet,
    pub tool_ctx: ToolContext,
    pub model: String,
    pub max_steps: u32,
    /// System prompt, transcript and the new user message.
    pub messages: Vec<ChatMessage>,
}

/// Runs one turn to its end and emits its terminal event.
///
/// `reason` is read when `cancel` fires: the interrupt reason as stored
/// (`user`, `superseded`, `shutdown`).
pub(crate) async fn run_turn(
    mut recorder: TurnRecorder,
    plan: TurnPlan,
    cancel: CancellationToken,
    reason: Arc<Mutex<Option<String>>>,
) {
    recorder.start();
    // `biased`: an interrupt that is already requested wins over more model output.
    let result = tokio::select! {
        biased;
        () = cancel.cancelled() => {
            let reason = reason
                .lock()
                .map(|r| r.clone())
                .unwrap_or_default()
                .unwrap_or_else(|| "user".to_owned());
            Err(TurnStop::Interrupted(reason))
        }
        r = drive(&mut recorder, plan) => r.map_err(TurnStop::Failed),
    };
    recorder.finish(result);
}

/// One tool call of the current step, complete and ready to run.
struct Call {
    idx: usize,
    id: String,
    name: String,
    arguments: String,
    parsed: Result<Value, String>,
}

/// The loop: model step, tools, model step, … until a step without tool calls.
async fn drive(rec: &mut TurnRecorder, plan: TurnPlan) -> Result<(), RunError> {
    let TurnPlan {
        llm,
        tools,
        tool_ctx,
        model,
        max_steps,
        mut messages,
    } = plan;
    let specs = tools.specs();
    for _ in 0..max_steps {
        let request = LlmRequest {
            model: model.clone(),
            messages: messages.clone(),
            tools: specs.clone(),
            max_output_tokens: None,
            temperature: None,
        };
        let mut stream = llm.stream(request).await.map_err(|e| run_error(&e))?;
        let mut text = String::new();
        let mut calls: Vec<Call> = Vec::new();
        loop {
            // Wait for the next event, or for the moment throttled text is due.
            let next = match rec.next_flush_deadline() {
                Some(deadline) => tokio::select! {
                    biased;
                    () = tokio::time::sleep_until(deadline) => {
                        rec.flush_due();
                        continue;
                    }
                    next = stream.next() => next,
                },
                None => stream.next().await,
            };
            let event = match next {
                None => break,
                Some(Ok(event)) => event,
                Some(Err(e)) => return Err(run_error(&e)),
            };
            match event {
                LlmEvent::TextStart { id } => rec.part_start(PartKind::Text, &id),
                LlmEvent::TextDelta { id, text: delta } => {
                    text.push_str(&delta);
                    rec.part_delta(PartKind::Text, &id, &delta);
                }
                LlmEvent::TextEnd { id } => rec.part_end(PartKind::Text, &id),
                LlmEvent::ReasoningStart { id } => rec.part_start(PartKind::Reasoning, &id),
                LlmEvent::ReasoningDelta { id, text: delta } => {
                    rec.part_delta(PartKind::Reasoning, &id, &delta)
                }
                LlmEvent::ReasoningEnd { id, .. } => rec.part_end(PartKind::Reasoning, &id),
                LlmEvent::ToolInputStart { id, name } => rec.tool_input_start(&id, &name),
                LlmEvent::ToolInputDelta { id, delta } => rec.tool_input_delta(&id, &delta),
                LlmEvent::ToolInputEnd { .. } => {}
                LlmEvent::ToolCall {
                    id,
                    name,
                    arguments,
                } => {
                    let parsed = parse_arguments(&arguments);
                    let input = match &parsed {
                        Ok(value) => value.clone(),
                        Err(_) => Value::String(arguments.clone()),
                    };
                    let idx = rec.tool_call(&id, &name, input);
                    calls.push(Call {
                        idx,
                        id,
                        name,
                        arguments,
                        parsed,
                    });
                }
                LlmEvent::StepFinish { usage, .. } => {
                    if let Some(usage) = &usage {
                        rec.add_usage(usage);
                    }
                    // The stream ends after StepFinish by contract; do not wait for it.
                    break;
                }
            }
        }
        rec.end_step();
        messages.push(ChatMessage::Assistant {
            text: (!text.is_empty()).then_some(text),
            tool_calls: calls
                .iter()
                .map(|c| wire_tool_call(&c.id, &c.name, &c.arguments))
                .collect(),
        });
        if calls.is_empty() {
            return Ok(());
        }
        // Sequentially, in the order the model asked. A tool error is the tool's
        // result (the model reads it and adapts); it never fails the turn.
        for call in calls {
            let result = match call.parsed {
                // Permission hook: rules decide allow / ask / deny; an `ask` waits
                // here on the approval gate (item still pending; the approvals
                // work marks it waiting). A refusal is the call's result.
                Ok(args) => match tools
                    .authorize(&call.id, &call.name, &args, &tool_ctx)
                    .await
                {
                    Ok(()) => {
                        rec.tool_running(call.idx);
                        tools.execute(&call.name, args, &tool_ctx).await
                    }
                    Err(refused) => Err(refused),
                },
                Err(message) => Err(ToolError::InvalidArguments {
                    tool: call.name.clone(),
                    message,
                }),
            };
            rec.tool_finished(call.idx, &result);
            let content = match result {
                Ok(output) => output,
                Err(e) => format!("Error: {e}"),
            };
            messages.push(ChatMessage::Tool {
                call_id: call.id,
                content,
            });
        }
    }
    Err(RunError::new(
        "runtime",
        format!(
            "the agent made {max_steps} model calls without reaching a final answer (max_steps); \
             ask a narrower question or raise max_steps for this provider instance"
        ),
    ))
}

/// Maps an LLM failure to the run error recorded on the turn (EXEC-01 types):
/// `provider.http` (with `http_status`, `code` from the body's `error.code` or
/// `error.type`, and the body as `detail`), `provider.transport`, `provider.stream`,
/// `provider.timeout`, `provider.decode` or `provider.error`. `message` is the
/// error's Display text.
pub fn run_error(error: &LlmError) -> RunError {
    let message = error.to_string();
    match error {
        LlmError::Http { status, body, .. } => RunError {
            error_type: "provider.http".to_owned(),
            message,
            http_status: Some(*status),
            code: body.as_ref().and_then(knife_llm::error_code),
            detail: body.clone(),
        },
        LlmError::Transport(_) => RunError::new("provider.transport", message),
        LlmError::Timeout { .. } => RunError::new("provider.timeout", message),
        LlmError::Stream(_) => RunError::new("provider.stream", message),
        LlmError::Decode { .. } => RunError::new("provider.decode", message),
        LlmError::Provider { code, body, .. } => RunError {
            error_type: "provider.error".to_owned(),
            message,
            http_status: None,
            code: code.clone(),
            detail: body.clone(),
        },
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use knife_llm::SseError;
    use serde_json::json;

    #[test]
    fn llm_errors_map_to_typed_run_errors() {
        let transport = run_error(&LlmError::Transport("connection refused".into()));
        assert_eq!(transport.error_type, "provider.transport");
        assert!(transport.message.contains("connection refused"));
        assert_eq!(
            run_error(&LlmError::Stream(SseError::Incomplete)).error_type,
            "provider.stream"
        );
        let decode = run_error(&LlmError::Decode {
            message: "bad".into(),
            data: "{".into(),
        });
        assert_eq!(decode.error_type, "provider.decode");
        let body = json!({"type": "error", "error": {"type": "overloaded_error"}});
        let provider = run_error(&LlmError::Provider {
            code: Some("overloaded_error".into()),
            message: "Overloaded".into(),
            body: Some(body.clone()),
        });
        assert_eq!(provider.error_type, "provider.error");
        assert_eq!(provider.code.as_deref(), Some("overloaded_error"));
        assert_eq!(provider.detail, Some(body));
        let http = run_error(&LlmError::Http {
            status: 500,
            retry_after: None,
            body: Some(json!({"error": {"type": "server_error"}})),
            message: "boom".into(),
        });
        assert_eq!(http.code.as_deref(), Some("server_error"));
        assert_eq!(http.http_status, Some(500));
    }

    #[test]
    fn empty_arguments_are_an_empty_object() {
        assert_eq!(parse_arguments(" "), Ok(json!({})));
        assert_eq!(parse_arguments(r#"{"a":1}"#), Ok(json!({"a": 1})));
        assert!(parse_arguments("{").is_err());
    }
}
