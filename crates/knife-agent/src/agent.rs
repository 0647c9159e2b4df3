//! The agent loop of one turn: send the conversation, consume the model's event
//! stream into turn items, run the tools it calls, repeat until a final answer.
//!
//! One turn = one spawned task ([`run_turn`]) that owns its [`TurnRecorder`].
//! Interrupts cancel the turn's token; the loop future is then dropped at its
//! current await point and the recorder settles whatever was in flight.

use std::sync::{Arc, Mutex};

use knife_llm::retry::{CONTEXT_OVERFLOW_ERROR, RetryPolicy};
use knife_llm::{ChatMessage, FinishReason, LlmClient, LlmRequest};
use knife_protocol::{AgentError, RunError};
use tokio_util::sync::CancellationToken;

use crate::approvals::ApprovalBroker;
use crate::compaction::{CompactionMode, compact};
use crate::messages::wire_tool_call;
use crate::permissions::{ApprovalRequest, ApprovalVerdict};
use crate::processor::{AssistantMessage, Call, ContextLimits, ProcessResult, Processor, used};
use crate::recorder::{TurnRecorder, TurnStop};
use crate::tools::{Permission, ToolContext, ToolError, ToolSet};

/// What a turn needs besides its recorder.
pub(crate) struct TurnPlan {
    pub llm: Arc<dyn LlmClient>,
    pub tools: ToolSet,
    pub tool_ctx: ToolContext,
    pub model: String,
    pub max_steps: u32,
    /// System prompt, transcript and the new user message.
    pub messages: Vec<ChatMessage>,
    /// The new user message (kept verbatim when the history is compacted).
    pub pending: String,
    pub retry: RetryPolicy,
    pub limits: ContextLimits,
    /// `auto`: compact when the context is full; `off`: fail the turn (TURN-03).
    pub compaction: CompactionMode,
    /// Most compactions in a row (no step that fits in between) before the turn
    /// fails as irreducible (TURN-04; at least 1).
    pub max_compactions: u32,
    /// The provider instance id, named in errors that point at its settings.
    pub instance: String,
    /// The session's open approvals and `allow_always` grants.
    pub approvals: Arc<ApprovalBroker>,
    /// Steers handed to this turn (TURN-01), taken before each model call.
    pub steers: Steers,
    /// Budgets checked before each model call (TURN-07); `None` = none.
    pub budget: Option<knife_runtime::budget::BudgetGate>,
}

/// The mailbox of a turn's steers: `steer_turn` pushes, the loop drains before
/// each model call. A std mutex: held only to push or take, never across an await.
pub(crate) type Steers = Arc<Mutex<Vec<knife_runtime::SteerInput>>>;

/// Runs one turn to its end and emits its terminal event.
///
/// `reason` is read when `cancel` fires: the interrupt reason as stored
/// (`user`, `superseded`, `shutdown`). Cancelling `cancel` or aborting the task
/// drops `drive` at its current await point; the recorder then settles what was
/// in flight (PROC-08, PROC-09).
pub(crate) async fn run_turn(
    mut recorder: TurnRecorder,
    plan: TurnPlan,
    cancel: CancellationToken,
    reason: Arc<Mutex<Option<String>>>,
) {
    // `biased`: an interrupt that is already requested wins over more model output,
    // so a tool call that arrives after the abort is never executed (PROC-13).
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

/// The loop: model step, tools, model step, … until a step without tool calls.
/// A step that returns `Compact` has its tool calls run first, then the history
/// is summarised and the turn continues from the summary (PROC-02, PROC-07).
///
/// Compaction is bounded (TURN-03, TURN-04): with `compaction = off` an overflow
/// fails the turn at once; an overflow *error* right after a compaction fails
/// it too (the provider refused the compacted request); otherwise at most
/// `max_compactions` compactions run in a row (a step that fits resets the count)
/// before the turn fails saying the context cannot be reduced.
async fn drive(rec: &mut TurnRecorder, plan: TurnPlan) -> Result<(), RunError> {
    let TurnPlan {
        llm,
        tools,
        tool_ctx,
        model,
        max_steps,
        mut messages,
        pending,
        retry,
        limits,
        compaction,
        max_compactions,
        instance,
        approvals,
        steers,
        budget,
    } = plan;
    let specs = tools.specs();
    let processor = Processor {
        llm: llm.as_ref(),
        retry,
        limits,
    };
    // True right after a compaction; `in_a_row` counts the compactions since the
    // last step that fit after which the context was still over the threshold.
    let mut just_compacted = false;
    let mut in_a_row: u32 = 0;
    for _ in 0..max_steps {
        // TURN-01: steers sent meanwhile join the conversation before the call.
        let taken = steers
            .lock()
            .map(|mut s| std::mem::take(&mut *s))
            .unwrap_or_default();
        for steer in taken {
            rec.steer_delivered(steer.item_id, &steer.text);
            messages.push(ChatMessage::User { text: steer.text });
        }
        // TURN-07: a spent budget ends the turn before the call is paid for.
        if let Some(gate) = &budget {
            gate.0.check(rec.usage()).await?;
        }
        let request = LlmRequest {
            model: model.clone(),
            messages: messages.clone(),
            tools: specs.clone(),
            max_output_tokens: None,
            temperature: None,
        };
        let (result, message) = processor.process(rec, &request).await;
        if result == ProcessResult::Stop {
            return Err(message
                .error
                .unwrap_or_else(|| RunError::new("runtime", "the model step stopped")));
        }
        let has_output = !message.text.is_empty() || !message.calls.is_empty();
        if result == ProcessResult::Compact {
            let detail = overflow_detail(&limits, &message);
            if compaction == CompactionMode::Off {
                return Err(overflow_failure(
                    rec,
                    "context_overflow",
                    format!(
                        "the conversation no longer fits the model's context ({detail}) and \
                         compaction is off for provider instance `{instance}`; start a new \
                         thread, or set compaction = \"auto\" in [providers.{instance}] of \
                         knife.toml to let knife summarise the history"
                    ),
                ));
            }
            if just_compacted && !has_output {
                return Err(overflow_failure(
                    rec,
                    "context_overflow",
                    format!(
                        "the conversation does not fit the model's context even after \
                         compaction ({detail}); shorten the message, start a new thread, or \
                         check context_limit / output_limit in [providers.{instance}] of \
                         knife.toml"
                    ),
                ));
            }
            let prompt_fits = message
                .usage
                .as_ref()
                .is_some_and(|u| limits.prompt_fits(u));
            if just_compacted && message.calls.is_empty() && prompt_fits {
                // The answer given right after a compaction overflows by itself
                // (its prompt fits): compacting and asking again would only buy
                // the same answer again (each one paid). The turn ends with it;
                // the next message's first step compacts if the history still
                // does not fit.
                return Ok(());
            }
            in_a_row = if just_compacted && !prompt_fits {
                in_a_row + 1
            } else {
                0
            };
            if in_a_row >= max_compactions.max(1) {
                return Err(overflow_failure(
                    rec,
                    "context_not_reduced",
                    format!(
                        "the context cannot be reduced: after {in_a_row} compaction{s} in a row \
                         {detail}. Start a new thread or send a shorter message; if the model's \
                         window is really larger, raise context_limit (or lower output_limit) \
                         in [providers.{instance}] of knife.toml; max_compactions there sets \
                         how many compactions in a row are tried (default {default})",
                        s = if in_a_row == 1 { "" } else { "s" },
                        default = crate::compaction::DEFAULT_MAX_COMPACTIONS,
                    ),
                ));
            }
            push_step(&mut messages, &message);
            let calls = cut_calls(message);
            run_tools(rec, &tools, &tool_ctx, &approvals, calls, &mut messages).await;
            messages = compact(llm.as_ref(), retry, &model, rec, &messages, &pending).await?;
            just_compacted = true;
            continue;
        }
        just_compacted = false;
        push_step(&mut messages, &message);
        let calls = cut_calls(message);
        if calls.is_empty() {
            return Ok(());
        }
        run_tools(rec, &tools, &tool_ctx, &approvals, calls, &mut messages).await;
    }
    Err(RunError::new(
        "runtime",
        format!(
            "the agent made {max_steps} model calls without reaching a final answer; ask a \
             narrower question, or raise max_steps in [providers.{instance}] of knife.toml"
        ),
    ))
}

/// Appends the step's reasoning and assistant message to `messages` (nothing for
/// a step without text or tool calls). The reasoning goes back first, with its
/// signatures: Anthropic requires signed thinking blocks during a tool loop
/// (other protocols skip these messages when they build the request).
fn push_step(messages: &mut Vec<ChatMessage>, message: &AssistantMessage) {
    if message.text.is_empty() && message.calls.is_empty() {
        return;
    }
    for block in &message.reasoning {
        messages.push(ChatMessage::Reasoning {
            text: block.text.clone(),
            signature: block.signature.clone(),
        });
    }
    messages.push(ChatMessage::Assistant {
        text: (!message.text.is_empty()).then(|| message.text.clone()),
        tool_calls: message
            .calls
            .iter()
            .map(|c| wire_tool_call(&c.id, &c.name, &c.arguments))
            .collect(),
    });
}

/// The step's tool calls, with arguments that do not parse after a length finish
/// explained: they were cut by the output limit, not malformed, so the model can
/// split the work.
fn cut_calls(message: AssistantMessage) -> Vec<Call> {
    let mut calls = message.calls;
    if message.finish == Some(FinishReason::Length) {
        for call in &mut calls {
            if let Err(reason) = &call.parsed {
                call.parsed = Err(format!(
                    "{reason}; the response reached the model's output token limit while \
                     writing these arguments, so they were cut off: call the tool again \
                     with shorter arguments (e.g. write a large file in parts, then \
                     append with edit)"
                ));
            }
        }
    }
    calls
}

/// What the overflowing step shows: its usage against the usable context, or
/// that the provider refused the request as too long.
fn overflow_detail(limits: &ContextLimits, message: &AssistantMessage) -> String {
    match &message.usage {
        Some(usage) if limits.context_limit > 0 && limits.overflows(usage) => format!(
            "the last step used {} tokens of the {} usable: context_limit {} minus \
             output_limit {}",
            used(usage),
            limits.usable(),
            limits.context_limit,
            limits.output_limit
        ),
        _ => "the provider said the request exceeds the model's context window".to_owned(),
    }
}

/// The turn's context-overflow failure (`provider.context_overflow` with `code`),
/// recorded on the turn as `ContextOverflowError`.
fn overflow_failure(rec: &mut TurnRecorder, code: &str, message: String) -> RunError {
    let error = RunError {
        code: Some(code.to_owned()),
        ..RunError::new("provider.context_overflow", message)
    };
    rec.set_error(AgentError {
        name: CONTEXT_OVERFLOW_ERROR.to_owned(),
        message: error.message.clone(),
    });
    error
}

/// Runs the step's tool calls sequentially, in the order the model asked, and
/// appends their results to `messages`. A tool error is the tool's result (the
/// model reads it and adapts); it never fails the turn.
async fn run_tools(
    rec: &mut TurnRecorder,
    tools: &ToolSet,
    tool_ctx: &ToolContext,
    approvals: &Arc<ApprovalBroker>,
    calls: Vec<Call>,
    messages: &mut Vec<ChatMessage>,
) {
    for call in calls {
        // Belt and braces for PROC-13: the turn's select drops this future once
        // the token fires, but a call is never started after it fired.
        if tool_ctx.is_cancelled() {
            return;
        }
        let result = match call.parsed {
            // Permission hook: rules decide allow / ask / deny; an `ask` waits here
            // for the user's answer. A refusal is the call's result (the model reads it).
            Ok(args) => {
                let (verdict, subject) =
                    tools.permission_for(&call.id, &call.name, &args, tool_ctx);
                // The tool checks the file it really opens against this subject (SEC-03).
                let call_ctx = match subject {
                    Some(subject) => tool_ctx.with_checked_subject(subject),
                    None => tool_ctx.clone(),
                };
                let verdict = match verdict {
                    Permission::Allowed => Ok(()),
                    Permission::Denied(e) => Err(e),
                    Permission::Ask(ask) => {
                        let mutating = tools.is_mutating(&call.name);
                        approve(rec, tool_ctx, approvals, call.idx, ask, mutating).await
                    }
                };
                match verdict {
                    Ok(()) => {
                        rec.tool_running(call.idx);
                        execute_streaming(rec, tools, &call.name, call.idx, args, &call_ctx).await
                    }
                    Err(refused) => Err(refused),
                }
            }
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

/// Executes tool call `idx` while recording the output it streams as it runs
/// (LIVE-02: live `output` deltas at once, durable chunks per persistence window).
async fn execute_streaming(
    rec: &mut TurnRecorder,
    tools: &ToolSet,
    name: &str,
    idx: usize,
    args: serde_json::Value,
    ctx: &ToolContext,
) -> Result<String, ToolError> {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let ctx = ctx.with_output(tx);
    let exec = tools.execute(name, args, &ctx);
    tokio::pin!(exec);
    let result = loop {
        let deadline = rec.next_flush_deadline();
        tokio::select! {
            biased;
            result = &mut exec => break result,
            Some(text) = rx.recv() => rec.tool_output(idx, &text),
            () = sleep_until_deadline(deadline), if deadline.is_some() => rec.flush_due(),
        }
    };
    while let Ok(text) = rx.try_recv() {
        rec.tool_output(idx, &text);
    }
    result
}

async fn sleep_until_deadline(deadline: Option<tokio::time::Instant>) {
    if let Some(deadline) = deadline {
        tokio::time::sleep_until(deadline).await;
    }
}

/// Settles an `ask` verdict: an earlier `allow_always` of this session on the same
/// tool and subject allows at once; an automatic gate of the policy answers if set;
/// otherwise the user is asked with a runtime request and the turn waits
/// (`crate::approvals`). An interrupt drops this future at the wait; the recorder
/// then cancels the request.
///
/// Errors: [`ToolError::Rejected`] (with the user's message) on `deny`;
/// [`ToolError::Aborted`] when the session went away without an answer.
async fn approve(
    rec: &mut TurnRecorder,
    tool_ctx: &ToolContext,
    approvals: &Arc<ApprovalBroker>,
    tool_idx: usize,
    mut ask: ApprovalRequest,
    mutating: bool,
) -> Result<(), ToolError> {
    if approvals.always_allows(&ask.tool, &ask.subject) {
        return Ok(());
    }
    let tool = ask.tool.clone();
    if let Some(gate) = tool_ctx.policy().approvals.as_ref() {
        return match gate.request(ask).await {
            ApprovalVerdict::Allow => Ok(()),
            ApprovalVerdict::Deny { message } => Err(ToolError::Rejected { tool, message }),
        };
    }
    // The user sees the change a `write` / `edit` would make, not its JSON (CHG-05).
    ask.diff = crate::tools::diff::proposed_diff(&ask.tool, &ask.input, tool_ctx).await;
    let id = knife_protocol::RuntimeRequestId::new();
    let (answer, _guard) = approvals.register(id.clone());
    rec.approval_requested(tool_idx, &ask, &id, mutating);
    let Ok(answer) = answer.await else {
        return Err(ToolError::Aborted);
    };
    rec.approval_answered(&answer);
    match answer.decision {
        knife_protocol::ApprovalDecision::AllowOnce => Ok(()),
        knife_protocol::ApprovalDecision::AllowAlways => {
            approvals.grant_always(&ask.tool, &ask.subject);
            Ok(())
        }
        knife_protocol::ApprovalDecision::Deny => Err(ToolError::Rejected {
            tool,
            message: answer.message,
        }),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use knife_llm::LlmError;
    use serde_json::json;

    #[test]
    fn empty_arguments_are_an_empty_object() {
        use crate::messages::parse_arguments;
        assert_eq!(parse_arguments(" "), Ok(json!({})));
        assert_eq!(parse_arguments(r#"{"a":1}"#), Ok(json!({"a": 1})));
        assert!(parse_arguments("{").is_err());
    }

    /// A model that accepts the request and then never says anything.
    struct Silent;

    #[async_trait::async_trait]
    impl LlmClient for Silent {
        async fn stream(&self, _request: LlmRequest) -> Result<knife_llm::LlmStream, LlmError> {
            Ok(Box::pin(futures::stream::pending()))
        }
    }

    #[tokio::test(start_paused = true)]
    async fn proc_09_aborting_the_turn_task_records_message_aborted_error() {
        use crate::recorder::TurnIdentity;
        use knife_protocol::*;

        let project = tempfile::tempdir().unwrap();
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let run_id = RunId::from("run:t:1");
        let recorder = TurnRecorder::new(
            tx,
            Arc::new(knife_runtime::SystemClock),
            TurnIdentity {
                thread_id: ThreadId::from("t"),
                provider_turn_id: ProviderTurnId::for_run(&run_id, 1),
                run_id,
                run_ordinal: 1,
                provider_session_id: ProviderSessionId::from("s"),
                attempt: 1,
                provider_instance_id: ProviderInstanceId::from("mock"),
                model: Some("m".into()),
            },
            std::time::Duration::from_millis(50),
            4096,
            Box::new(|| {}),
        );
        let plan = TurnPlan {
            llm: Arc::new(Silent),
            tools: ToolSet::read_only(),
            tool_ctx: ToolContext::new(project.path()).unwrap(),
            model: "m".into(),
            max_steps: 5,
            messages: vec![ChatMessage::User { text: "hi".into() }],
            pending: "hi".into(),
            retry: RetryPolicy::default(),
            limits: ContextLimits {
                context_limit: 0,
                output_limit: 0,
            },
            compaction: CompactionMode::Auto,
            max_compactions: 2,
            instance: "test".into(),
            approvals: Arc::default(),
            steers: Arc::default(),
            budget: None,
        };
        let cancel = CancellationToken::new();
        let handle = tokio::spawn(run_turn(
            recorder,
            plan,
            cancel.clone(),
            Arc::new(Mutex::new(None)),
        ));
        // The turn is busy waiting for the model.
        let mut events = Vec::new();
        while !events.iter().any(|e| {
            matches!(
                e,
                AdapterEvent::AgentStatusChanged {
                    status: AgentStatus::Busy,
                    ..
                }
            )
        }) {
            events.push(rx.recv().await.unwrap().unwrap());
        }
        // Plain task cancellation: no token, no interrupt call.
        handle.abort();
        assert!(handle.await.unwrap_err().is_cancelled());
        assert!(!cancel.is_cancelled());
        while let Ok(e) = rx.try_recv() {
            events.push(e.unwrap());
        }
        let turn = events
            .iter()
            .rev()
            .find_map(|e| match e {
                AdapterEvent::ProviderTurnUpdated(t) => Some(t.clone()),
                _ => None,
            })
            .unwrap();
        assert_eq!(turn.status, ProviderTurnStatus::Interrupted);
        assert_eq!(turn.error.unwrap().name, "MessageAbortedError");
        assert!(events.iter().any(|e| matches!(e,
            AdapterEvent::AgentErrorRaised { error, .. } if error.name == "MessageAbortedError")));
        let last_status = events.iter().rev().find_map(|e| match e {
            AdapterEvent::AgentStatusChanged { status, .. } => Some(status.clone()),
            _ => None,
        });
        assert_eq!(last_status, Some(AgentStatus::Idle));
        assert!(matches!(
            events.last(),
            Some(AdapterEvent::TurnTerminal { .. })
        ));
    }
}
