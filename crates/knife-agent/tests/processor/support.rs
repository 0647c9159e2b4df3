//! Helpers of the processor tests: event filters, a paused wall clock, a probe tool.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::common::*;
use futures::StreamExt;
use knife_agent::tools::{Tool, ToolContext, ToolError, ToolSet};
use knife_llm::*;
use knife_protocol::*;
use knife_runtime::Clock;
pub use knife_runtime::recording::DurableStates;
use serde_json::{Value, json};

// ---------------------------------------------------------------- helpers

/// Wall clock that follows tokio's (paused) time from a fixed origin.
pub struct PausedClock {
    pub origin: Timestamp,
    pub start: tokio::time::Instant,
}

impl Clock for PausedClock {
    fn now(&self) -> Timestamp {
        self.origin + chrono::TimeDelta::from_std(self.start.elapsed()).unwrap()
    }
}

pub fn origin() -> Timestamp {
    "2026-01-01T00:00:00Z".parse().unwrap()
}

pub fn statuses(events: &[AdapterEvent]) -> Vec<AgentStatus> {
    events
        .iter()
        .filter_map(|e| match e {
            AdapterEvent::AgentStatusChanged { status, .. } => Some(status.clone()),
            _ => None,
        })
        .collect()
}

pub fn errors(events: &[AdapterEvent]) -> Vec<AgentError> {
    events
        .iter()
        .filter_map(|e| match e {
            AdapterEvent::AgentErrorRaised { error, .. } => Some(error.clone()),
            _ => None,
        })
        .collect()
}

/// The provider turn as last emitted (the persisted assistant message).
pub fn last_turn(events: &[AdapterEvent]) -> ProviderTurn {
    events
        .iter()
        .rev()
        .find_map(|e| match e {
            AdapterEvent::ProviderTurnUpdated(t) => Some(t.clone()),
            _ => None,
        })
        .unwrap()
}

pub fn provider_error(body: Value) -> LlmError {
    LlmError::Provider {
        code: error_code(&body),
        message: body
            .pointer("/error/message")
            .and_then(Value::as_str)
            .unwrap_or("provider error")
            .to_owned(),
        body: Some(body),
    }
}

pub fn reasoning_step(text: &str) -> Vec<Result<LlmEvent, LlmError>> {
    vec![
        Ok(LlmEvent::ReasoningStart { id: "r".into() }),
        Ok(LlmEvent::ReasoningDelta {
            id: "r".into(),
            text: text.into(),
        }),
        Ok(LlmEvent::ReasoningEnd {
            id: "r".into(),
            signature: None,
        }),
        Ok(finish(FinishReason::Stop, 3, 3)),
    ]
}

/// Reads events until `pred` matches one; returns everything read. `pred` sees an
/// appended chunk (LIVE-03) as the whole item state it makes (a `TurnItemUpdated` of
/// the item folded so far), so a predicate on an item's text holds for either shape.
pub async fn until(events: &mut Events, pred: impl Fn(&AdapterEvent) -> bool) -> Vec<AdapterEvent> {
    until_in(events, &mut DurableStates::default(), pred).await
}

/// [`until`] folding chunks into the item states `states` holds from earlier reads.
pub async fn until_in(
    events: &mut Events,
    states: &mut DurableStates,
    pred: impl Fn(&AdapterEvent) -> bool,
) -> Vec<AdapterEvent> {
    let mut seen = Vec::new();
    loop {
        let e = events.next().await.unwrap().unwrap();
        let folded = states.fold(std::slice::from_ref(&e)).pop();
        let done = match (&e, folded) {
            (AdapterEvent::TurnItemAppended(_), Some(item)) => {
                pred(&AdapterEvent::TurnItemUpdated(item))
            }
            _ => pred(&e),
        };
        seen.push(e);
        if done {
            return seen;
        }
    }
}

pub fn is_item(e: &AdapterEvent, pred: impl Fn(&TurnItem) -> bool) -> bool {
    matches!(e, AdapterEvent::TurnItemUpdated(i) if pred(i))
}

/// A tool that counts its runs and, when `hang`, never finishes.
pub struct Probe {
    pub runs: Arc<AtomicUsize>,
    pub hang: bool,
}

#[async_trait::async_trait]
impl Tool for Probe {
    fn name(&self) -> &'static str {
        "probe"
    }
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "probe".into(),
            description: "test probe".into(),
            parameters: json!({"type": "object"}),
        }
    }
    async fn execute(&self, _args: Value, _ctx: &ToolContext) -> Result<String, ToolError> {
        self.runs.fetch_add(1, Ordering::SeqCst);
        if self.hang {
            std::future::pending::<()>().await;
        }
        Ok("probed".into())
    }
}

pub fn probe_tools(hang: bool) -> (ToolSet, Arc<AtomicUsize>) {
    let runs = Arc::new(AtomicUsize::new(0));
    let mut tools = ToolSet::read_only();
    tools.insert(Arc::new(Probe {
        runs: Arc::clone(&runs),
        hang,
    }));
    (tools, runs)
}

pub fn assert_tool_aborted(item: &TurnItem) {
    assert_eq!(item.status, TurnItemStatus::Failed, "{item:?}");
    assert!(item.completed_at.is_some(), "no end time: {item:?}");
    match &item.kind {
        TurnItemKind::ToolCall { error, .. } => {
            assert_eq!(error.as_deref(), Some("Tool execution aborted"))
        }
        other => panic!("{other:?}"),
    }
}
