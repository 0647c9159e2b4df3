//! The stream processor: one model step of a turn (SPEC.md PROC-01..13). It sends
//! one request, turns the normalised event stream into turn items through the
//! [`TurnRecorder`], retries transient failures and says what the loop does next.
//!
//! [`Processor::process`] returns [`ProcessResult::Continue`] (the step ended; run
//! its tool calls or finish), [`ProcessResult::Compact`] (the context is full:
//! summarise, then go on) or [`ProcessResult::Stop`] (an error that retrying cannot
//! fix, recorded on the turn's assistant message). Cancellation is dropping the
//! future: the recorder, owned by the turn task, settles what was in flight.

use futures::StreamExt;
use knife_llm::retry::{RetryDecision, RetryPolicy};
use knife_llm::{FinishReason, LlmClient, LlmError, LlmEvent, LlmRequest, Usage};
use knife_protocol::{AgentError, AgentStatus, RunError};
use serde_json::Value;
use tracing::Instrument;

use crate::llm_failures::{gave_up, run_error, wait_for_retry};
use crate::messages::parse_arguments;
use crate::recorder::{PartKind, TurnRecorder};

/// What the agent loop does after a step (PROC-01..07, PROC-11).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ProcessResult {
    /// The step ended normally: run its tool calls, or end the turn without any.
    Continue,
    /// An error that retrying cannot fix (or the retry budget is spent); it is
    /// recorded on the turn's assistant message.
    Stop,
    /// The conversation overflows the model's context: compact, then continue.
    Compact,
}

/// The model's usable context (tokens): a step whose usage reaches
/// `context_limit - output_limit` asks for compaction (PROC-02). A `context_limit`
/// of 0 disables the check.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ContextLimits {
    /// The model's context window (tokens).
    pub context_limit: u64,
    /// Tokens reserved for the model's answer (tokens).
    pub output_limit: u64,
}

impl ContextLimits {
    /// True when `usage` leaves less than `output_limit` tokens of the context.
    /// Counts `total_tokens`, or input + output when the provider gave no total.
    pub(crate) fn overflows(&self, usage: &Usage) -> bool {
        self.context_limit != 0 && used(usage) >= self.usable()
    }

    /// Tokens a step may use before it asks for compaction: `context_limit -
    /// output_limit` (0 when the reserve takes the whole window).
    pub(crate) fn usable(&self) -> u64 {
        self.context_limit.saturating_sub(self.output_limit)
    }

    /// True when the step's prompt alone (`input_tokens`, or the total minus the
    /// output when the provider gave no split) stays under [`Self::usable`]: the
    /// context itself fits and only the answer pushed the usage over (TURN-04).
    pub(crate) fn prompt_fits(&self, usage: &Usage) -> bool {
        let prompt = if usage.input_tokens > 0 {
            usage.input_tokens
        } else {
            usage.total_tokens.saturating_sub(usage.output_tokens)
        };
        self.context_limit == 0 || prompt < self.usable()
    }
}

/// Tokens a step used: `total_tokens`, or input + output when the provider gave no total.
pub(crate) fn used(usage: &Usage) -> u64 {
    if usage.total_tokens > 0 {
        usage.total_tokens
    } else {
        usage.input_tokens.saturating_add(usage.output_tokens)
    }
}

/// One complete tool call of the step, ready to run.
pub(crate) struct Call {
    pub idx: usize,
    pub id: String,
    pub name: String,
    pub arguments: String,
    pub parsed: Result<Value, String>,
}

/// The assistant message of one step, in memory: its text and tool calls, how it
/// finished and, after `Stop`, the error that ended it (as the run records it).
#[derive(Default)]
pub(crate) struct AssistantMessage {
    pub text: String,
    /// Reasoning blocks in the order they opened, with their signatures.
    pub reasoning: Vec<ReasoningBlock>,
    pub calls: Vec<Call>,
    pub finish: Option<FinishReason>,
    /// The step's usage as the provider reported it at its finish.
    pub usage: Option<Usage>,
    pub error: Option<RunError>,
}

/// One reasoning block of a step: its text and, when the provider signs blocks
/// (Anthropic thinking), the signature it must get back in the next request.
pub(crate) struct ReasoningBlock {
    pub id: String,
    pub text: String,
    pub signature: Option<String>,
}

impl AssistantMessage {
    fn reasoning_block(&mut self, id: &str) -> &mut ReasoningBlock {
        let at = match self.reasoning.iter().position(|b| b.id == id) {
            Some(at) => at,
            None => {
                self.reasoning.push(ReasoningBlock {
                    id: id.to_owned(),
                    text: String::new(),
                    signature: None,
                });
                self.reasoning.len() - 1
            }
        };
        &mut self.reasoning[at]
    }
}

/// Name of the error of a step the provider's content filter ended.
pub(crate) const CONTENT_FILTER_ERROR: &str = "ContentFilterError";
/// Name of the error of an answer cut at the output token limit.
pub(crate) const OUTPUT_LENGTH_ERROR: &str = "MessageOutputLengthError";

/// The error a finished step's reason means, if any: `content_filter` without
/// tool calls ([`CONTENT_FILTER_ERROR`]) or `length` without tool calls (the
/// answer was cut, [`OUTPUT_LENGTH_ERROR`]). Steps with complete tool calls go on.
fn finish_error(message: &AssistantMessage) -> Option<(&'static str, RunError)> {
    if !message.calls.is_empty() {
        return None;
    }
    match message.finish? {
        FinishReason::ContentFilter => Some((
            CONTENT_FILTER_ERROR,
            RunError::new(
                "provider.content_filter",
                "the provider's content filter blocked the model's answer; rephrase the request",
            ),
        )),
        FinishReason::Length => Some((
            OUTPUT_LENGTH_ERROR,
            RunError::new(
                "provider.output_length",
                "the model's answer was cut at its output token limit; ask for a shorter \
                 answer, or raise the limit on the model server",
            ),
        )),
        _ => None,
    }
}

/// Runs model steps for one turn.
pub(crate) struct Processor<'a> {
    pub llm: &'a dyn LlmClient,
    pub retry: RetryPolicy,
    pub limits: ContextLimits,
}

/// How one model call ended.
enum Attempt {
    /// The step finished (or the stream ended); `overflow` from its usage.
    Finished {
        overflow: bool,
    },
    Failed(LlmError),
}

impl Processor<'_> {
    /// Runs one model step for `request`, retrying transient failures (PROC-03,
    /// PROC-05, PROC-06, PROC-10, PROC-11).
    ///
    /// Status: `busy` before each call, `retry{attempt, message, next}` before each
    /// wait. A retried call's items are discarded (PROC-03). After `Stop` the
    /// error is on the recorder (named `UnknownError`, `APIError`, …) and in
    /// [`AssistantMessage::error`].
    pub(crate) async fn process(
        &self,
        rec: &mut TurnRecorder,
        request: &LlmRequest,
    ) -> (ProcessResult, AssistantMessage) {
        let mark = rec.mark();
        let started = tokio::time::Instant::now();
        let mut calls_made = 0;
        loop {
            rec.set_status(AgentStatus::Busy);
            calls_made += 1;
            let mut message = AssistantMessage::default();
            let call = model_call_span(request);
            let error = match self
                .attempt(rec, request, &mut message)
                .instrument(call)
                .await
            {
                Attempt::Finished { overflow } => {
                    rec.end_step();
                    if overflow {
                        return (ProcessResult::Compact, message);
                    }
                    if let Some((name, error)) = finish_error(&message) {
                        rec.set_error(AgentError {
                            name: name.to_owned(),
                            message: error.message.clone(),
                        });
                        message.error = Some(error);
                        return (ProcessResult::Stop, message);
                    }
                    return (ProcessResult::Continue, message);
                }
                Attempt::Failed(error) => error,
            };
            match self.retry.decide(&error, calls_made) {
                RetryDecision::Retry {
                    attempt,
                    delay,
                    message: why,
                } => {
                    rec.discard_since(mark);
                    wait_for_retry(rec, attempt, self.retry.max_attempts, delay, why).await;
                }
                // PROC-07: no error on the message; the failed call's parts are
                // dropped and the loop compacts.
                RetryDecision::Compact => {
                    rec.discard_since(mark);
                    return (ProcessResult::Compact, AssistantMessage::default());
                }
                RetryDecision::Stop { name } => {
                    let failure = gave_up(run_error(&error), calls_made, started);
                    rec.set_error(AgentError {
                        name: name.to_owned(),
                        message: failure.message.clone(),
                    });
                    message.error = Some(failure);
                    return (ProcessResult::Stop, message);
                }
            }
        }
    }

    /// One model call: streams its events into `rec` and `message` until the step
    /// finishes, the stream ends or fails. Stops consuming at the step's finish, so
    /// nothing after an overflowing finish is recorded (PROC-02).
    async fn attempt(
        &self,
        rec: &mut TurnRecorder,
        request: &LlmRequest,
        message: &mut AssistantMessage,
    ) -> Attempt {
        let mut stream = match self.llm.stream(request.clone()).await {
            Ok(stream) => stream,
            Err(e) => return Attempt::Failed(e),
        };
        loop {
            // Wait for the next event, or for the moment throttled text is due (PROC-12).
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
                None => return Attempt::Finished { overflow: false },
                Some(Ok(event)) => event,
                Some(Err(e)) => return Attempt::Failed(e),
            };
            match event {
                LlmEvent::TextStart { id } => rec.part_start(PartKind::Text, &id),
                LlmEvent::TextDelta { id, text } => {
                    message.text.push_str(&text);
                    rec.part_delta(PartKind::Text, &id, &text);
                }
                LlmEvent::TextEnd { id } => rec.part_end(PartKind::Text, &id),
                LlmEvent::ReasoningStart { id } => {
                    message.reasoning_block(&id);
                    rec.part_start(PartKind::Reasoning, &id)
                }
                LlmEvent::ReasoningDelta { id, text } => {
                    message.reasoning_block(&id).text.push_str(&text);
                    rec.part_delta(PartKind::Reasoning, &id, &text)
                }
                LlmEvent::ReasoningEnd { id, signature } => {
                    message.reasoning_block(&id).signature = signature;
                    rec.part_end(PartKind::Reasoning, &id)
                }
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
                    // The turn-unique id (a provider id reused across steps is renamed).
                    let id = rec.tool_call_id(idx).unwrap_or(id);
                    message.calls.push(Call {
                        idx,
                        id,
                        name,
                        arguments,
                        parsed,
                    });
                }
                LlmEvent::StepFinish { reason, usage, .. } => {
                    rec.step_finished(usage.as_ref());
                    record_usage(&tracing::Span::current(), reason, usage.as_ref());
                    message.finish = Some(reason);
                    message.usage.clone_from(&usage);
                    // The provider says the context filled up (Anthropic
                    // `model_context_window_exceeded`), or the usage shows it.
                    let overflow = reason == FinishReason::ContextOverflow
                        || usage.as_ref().is_some_and(|u| self.limits.overflows(u));
                    // The stream ends after StepFinish by contract; do not wait for it.
                    return Attempt::Finished { overflow };
                }
            }
        }
    }
}

/// The span of one model call, after the OpenTelemetry GenAI semantic conventions
/// (`chat {model}`; `gen_ai.usage.*` recorded at the step's finish, see [`record_usage`]).
fn model_call_span(request: &LlmRequest) -> tracing::Span {
    tracing::info_span!(
        "model_call",
        otel.name = %format!("chat {}", request.model),
        otel.kind = "client",
        gen_ai.operation.name = "chat",
        gen_ai.request.model = %request.model,
        gen_ai.usage.input_tokens = tracing::field::Empty,
        gen_ai.usage.output_tokens = tracing::field::Empty,
        gen_ai.response.finish_reasons = tracing::field::Empty,
    )
}

/// Records a finished step's tokens (input, output) and finish reason on its span.
fn record_usage(span: &tracing::Span, reason: FinishReason, usage: Option<&Usage>) {
    span.record(
        "gen_ai.response.finish_reasons",
        format!("{reason:?}").to_lowercase(),
    );
    if let Some(u) = usage {
        span.record("gen_ai.usage.input_tokens", u.input_tokens);
        span.record("gen_ai.usage.output_tokens", u.output_tokens);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overflow_counts_total_or_input_plus_output_against_the_usable_context() {
        let limits = ContextLimits {
            context_limit: 1000,
            output_limit: 200,
        };
        let usage = |input, output, total| Usage {
            input_tokens: input,
            output_tokens: output,
            total_tokens: total,
            ..Usage::default()
        };
        assert!(!limits.overflows(&usage(700, 99, 799)));
        assert!(limits.overflows(&usage(700, 100, 800)));
        assert!(limits.overflows(&usage(790, 10, 0)));
        let off = ContextLimits {
            context_limit: 0,
            output_limit: 0,
        };
        assert!(!off.overflows(&usage(u64::MAX / 2, 0, 0)));
    }
}
