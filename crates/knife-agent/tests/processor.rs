//! The stream processor's behaviours (SPEC.md PROC-01..13), one test per ID at
//! least, through the built-in agent's session under paused time.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::*;
use futures::StreamExt;
use knife_agent::compaction::{COMPACTION_PROMPT, SUMMARY_PREFIX};
use knife_agent::tools::{Tool, ToolContext, ToolError, ToolSet};
use knife_llm::*;
use knife_protocol::*;
use knife_runtime::{Clock, InterruptReason};
use serde_json::{Value, json};
use tokio::sync::mpsc;

// ---------------------------------------------------------------- helpers

/// Wall clock that follows tokio's (paused) time from a fixed origin.
struct PausedClock {
    origin: Timestamp,
    start: tokio::time::Instant,
}

impl Clock for PausedClock {
    fn now(&self) -> Timestamp {
        self.origin + chrono::TimeDelta::from_std(self.start.elapsed()).unwrap()
    }
}

fn origin() -> Timestamp {
    "2026-01-01T00:00:00Z".parse().unwrap()
}

fn statuses(events: &[AdapterEvent]) -> Vec<AgentStatus> {
    events
        .iter()
        .filter_map(|e| match e {
            AdapterEvent::AgentStatusChanged { status, .. } => Some(status.clone()),
            _ => None,
        })
        .collect()
}

fn errors(events: &[AdapterEvent]) -> Vec<AgentError> {
    events
        .iter()
        .filter_map(|e| match e {
            AdapterEvent::AgentErrorRaised { error, .. } => Some(error.clone()),
            _ => None,
        })
        .collect()
}

/// The provider turn as last emitted (the persisted assistant message).
fn last_turn(events: &[AdapterEvent]) -> ProviderTurn {
    events
        .iter()
        .rev()
        .find_map(|e| match e {
            AdapterEvent::ProviderTurnUpdated(t) => Some(t.clone()),
            _ => None,
        })
        .unwrap()
}

fn provider_error(body: Value) -> LlmError {
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

fn reasoning_step(text: &str) -> Vec<Result<LlmEvent, LlmError>> {
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

/// Reads events until `pred` matches one; returns everything read.
async fn until(events: &mut Events, pred: impl Fn(&AdapterEvent) -> bool) -> Vec<AdapterEvent> {
    let mut seen = Vec::new();
    loop {
        let e = events.next().await.unwrap().unwrap();
        let done = pred(&e);
        seen.push(e);
        if done {
            return seen;
        }
    }
}

fn is_item(e: &AdapterEvent, pred: impl Fn(&TurnItem) -> bool) -> bool {
    matches!(e, AdapterEvent::TurnItemUpdated(i) if pred(i))
}

/// A tool that counts its runs and, when `hang`, never finishes.
struct Probe {
    runs: Arc<AtomicUsize>,
    hang: bool,
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

fn probe_tools(hang: bool) -> (ToolSet, Arc<AtomicUsize>) {
    let runs = Arc::new(AtomicUsize::new(0));
    let mut tools = ToolSet::read_only();
    tools.insert(Arc::new(Probe {
        runs: Arc::clone(&runs),
        hang,
    }));
    (tools, runs)
}

fn assert_tool_aborted(item: &TurnItem) {
    assert_eq!(item.status, TurnItemStatus::Failed, "{item:?}");
    assert!(item.completed_at.is_some(), "no end time: {item:?}");
    match &item.kind {
        TurnItemKind::ToolCall { error, .. } => {
            assert_eq!(error.as_deref(), Some("Tool execution aborted"))
        }
        other => panic!("{other:?}"),
    }
}

// ---------------------------------------------------------------- PROC-01

#[tokio::test(start_paused = true)]
async fn proc_01_plain_reply_is_one_text_part_from_one_call_with_the_given_messages() {
    let llm = FakeLlm::new(vec![text_step(&["Hello", ", ", "world"])]);
    let mut h = open(llm.clone(), |_| {}, None).await;
    let history = vec![user_item(1, "before"), assistant_item(1, 1, "earlier")];
    h.session
        .start_turn(turn(2, "hi", history.clone()))
        .await
        .unwrap();
    let events = collect_turn(&mut h.events).await;

    assert_eq!(outcome(&events).0, TurnOutcome::Completed);
    let items = final_items(&events);
    assert_eq!(items.len(), 1);
    assert_eq!(text_of(&items[0]), "Hello, world");
    assert_eq!(items[0].status, TurnItemStatus::Completed);
    let requests = llm.requests();
    assert_eq!(requests.len(), 1);
    let ChatMessage::System { text: system } = &requests[0].messages[0] else {
        panic!("no system message");
    };
    assert_eq!(
        requests[0].messages,
        knife_agent::messages::build_messages(system, &history, "hi")
    );
    assert_eq!(last_turn(&events).error, None);
    assert!(errors(&events).is_empty());
}

// ---------------------------------------------------------------- PROC-02

#[tokio::test(start_paused = true)]
async fn proc_02_usage_overflow_stops_the_stream_and_compacts() {
    let mut first = vec![
        Ok(LlmEvent::TextStart { id: "t".into() }),
        Ok(LlmEvent::TextDelta {
            id: "t".into(),
            text: "first".into(),
        }),
        Ok(LlmEvent::TextEnd { id: "t".into() }),
        // 800 tokens of a 1000-token context with 200 reserved: overflow.
        Ok(finish(FinishReason::Stop, 700, 100)),
    ];
    // Events after the overflowing finish must never be read.
    first.push(Ok(LlmEvent::TextStart { id: "t2".into() }));
    first.push(Ok(LlmEvent::TextDelta {
        id: "t2".into(),
        text: "after".into(),
    }));
    let llm = FakeLlm::new(vec![
        first,
        text_step(&["the summary"]),
        text_step(&["final answer"]),
    ]);
    let mut h = open(
        llm.clone(),
        |c| {
            c.context_limit = 1000;
            c.output_limit = 200;
        },
        None,
    )
    .await;
    h.session.start_turn(turn(1, "hi", vec![])).await.unwrap();
    let events = collect_turn(&mut h.events).await;

    assert_eq!(outcome(&events).0, TurnOutcome::Completed);
    assert_nothing_pending(&events);
    for item in snapshots(&events) {
        if let TurnItemKind::AssistantMessage { text, .. } = &item.kind {
            assert!(!text.contains("after"), "read past the finish: {item:?}");
        }
    }
    // The step's finish (its usage) was persisted before the compaction started.
    let usage_at = events
        .iter()
        .position(|e| {
            matches!(e, AdapterEvent::ProviderTurnUpdated(t)
                if t.usage.as_ref().is_some_and(|u| u.total_tokens == 800))
        })
        .expect("step usage not persisted");
    let compaction_at = events
        .iter()
        .position(|e| is_item(e, |i| matches!(i.kind, TurnItemKind::Compaction { .. })))
        .unwrap();
    assert!(usage_at < compaction_at);

    let items = final_items(&events);
    let kinds: Vec<_> = items.iter().map(|i| &i.kind).collect();
    assert_eq!(
        kinds,
        [
            &TurnItemKind::AssistantMessage {
                text: "first".into(),
                streaming: false
            },
            &TurnItemKind::Compaction {
                summary: "the summary".into()
            },
            &TurnItemKind::AssistantMessage {
                text: "final answer".into(),
                streaming: false
            },
        ]
    );

    let requests = llm.requests();
    assert_eq!(requests.len(), 3);
    assert!(requests[1].tools.is_empty());
    assert_eq!(
        requests[1].messages.last(),
        Some(&ChatMessage::User {
            text: COMPACTION_PROMPT.into()
        })
    );
    assert!(matches!(
        requests[2].messages[0],
        ChatMessage::System { .. }
    ));
    assert_eq!(
        requests[2].messages[1..],
        [
            ChatMessage::User {
                text: format!("{SUMMARY_PREFIX}\n\nthe summary")
            },
            ChatMessage::User { text: "hi".into() },
        ]
    );

    // The next run's history starts from the compaction.
    let history = final_items(&events);
    let mut all = vec![user_item(1, "hi")];
    all.extend(history);
    let replay = knife_agent::messages::build_messages("sys", &all, "next");
    assert_eq!(
        replay,
        [
            ChatMessage::System { text: "sys".into() },
            ChatMessage::User {
                text: format!("{SUMMARY_PREFIX}\n\nthe summary")
            },
            ChatMessage::User { text: "hi".into() },
            ChatMessage::Assistant {
                text: Some("final answer".into()),
                tool_calls: vec![]
            },
            ChatMessage::User {
                text: "next".into()
            },
        ]
    );
}

// ---------------------------------------------------------------- PROC-03

#[tokio::test(start_paused = true)]
async fn proc_03_retry_discards_the_failed_attempts_partial_parts() {
    let failing = vec![
        Ok(LlmEvent::ReasoningStart { id: "r".into() }),
        Ok(LlmEvent::ReasoningDelta {
            id: "r".into(),
            text: "one".into(),
        }),
        Err(LlmError::Http {
            status: 503,
            retry_after: Some(Duration::ZERO),
            body: None,
            message: "Service Unavailable".into(),
        }),
    ];
    // Slow events, so the failed attempt's text is persisted before it fails.
    let llm = FakeLlm::with(
        vec![
            Script::Events(failing),
            Script::Events(reasoning_step("two")),
        ],
        Some(Duration::from_millis(100)),
    );
    let mut h = open(llm.clone(), |_| {}, None).await;
    h.session.start_turn(turn(1, "hi", vec![])).await.unwrap();
    let events = collect_turn(&mut h.events).await;

    assert_eq!(llm.requests().len(), 2);
    assert_eq!(outcome(&events).0, TurnOutcome::Completed);
    // The failed attempt's text was persisted while streaming, then discarded.
    assert!(
        snapshots(&events)
            .iter()
            .any(|i| matches!(&i.kind, TurnItemKind::Reasoning { text, .. } if text == "one"))
    );
    for item in snapshots(&events) {
        if let TurnItemKind::Reasoning { text, .. } = &item.kind {
            assert!(!text.contains("onetwo"), "concatenated: {item:?}");
        }
    }
    let items = final_items(&events);
    assert_eq!(items.len(), 1);
    assert_eq!(text_of(&items[0]), "two");
    assert_eq!(items[0].status, TurnItemStatus::Completed);
    assert_eq!(last_turn(&events).error, None);
}

// ---------------------------------------------------------------- PROC-04

#[tokio::test(start_paused = true)]
async fn proc_04_unknown_json_error_is_not_retried() {
    let llm = FakeLlm::new(vec![vec![
        Ok(LlmEvent::TextStart { id: "t".into() }),
        Ok(LlmEvent::TextDelta {
            id: "t".into(),
            text: "partial".into(),
        }),
        Err(provider_error(json!({"error": {"message": "no_kv_space"}}))),
    ]]);
    let mut h = open(llm.clone(), |_| {}, None).await;
    h.session.start_turn(turn(1, "hi", vec![])).await.unwrap();
    let events = collect_turn(&mut h.events).await;

    assert_eq!(llm.requests().len(), 1);
    assert!(matches!(outcome(&events).0, TurnOutcome::Failed { .. }));
    assert_eq!(last_turn(&events).error.unwrap().name, "UnknownError");
    let raised = errors(&events);
    assert_eq!(raised.len(), 1);
    assert_eq!(raised[0].name, "UnknownError");
    assert!(raised[0].message.contains("no_kv_space"), "{raised:?}");
    assert_nothing_pending(&events);
}

// ---------------------------------------------------------------- PROC-05

#[tokio::test(start_paused = true)]
async fn proc_05_recognised_structured_errors_are_retried() {
    let bodies = [
        json!({"type": "error", "error": {"type": "too_many_requests"}}),
        json!({"type": "error", "error": {"code": "rate_limit_exceeded"}}),
        json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
        json!({"type": "error", "error": {"type": "server_error"}}),
    ];
    for body in bodies {
        let llm = FakeLlm::new(vec![
            vec![Err(provider_error(body.clone()))],
            text_step(&["recovered"]),
        ]);
        let mut h = open(llm.clone(), |_| {}, None).await;
        h.session.start_turn(turn(1, "hi", vec![])).await.unwrap();
        let events = collect_turn(&mut h.events).await;

        assert_eq!(llm.requests().len(), 2, "{body}");
        assert_eq!(outcome(&events).0, TurnOutcome::Completed, "{body}");
        let items = final_items(&events);
        assert_eq!(text_of(&items[0]), "recovered");
        assert_eq!(last_turn(&events).error, None, "{body}");
        assert!(errors(&events).is_empty(), "{body}");
    }
}

// ---------------------------------------------------------------- PROC-06

#[tokio::test(start_paused = true)]
async fn proc_06_a_retry_publishes_busy_retry_busy_idle() {
    let llm = FakeLlm::new(vec![
        vec![Err(provider_error(
            json!({"type": "error", "error": {"type": "too_many_requests"}}),
        ))],
        text_step(&["ok"]),
    ]);
    let clock = Arc::new(PausedClock {
        origin: origin(),
        start: tokio::time::Instant::now(),
    });
    let mut h = open(llm, |c| c.clock = clock, None).await;
    h.session.start_turn(turn(1, "hi", vec![])).await.unwrap();
    let events = collect_turn(&mut h.events).await;

    assert_eq!(
        statuses(&events),
        [
            AgentStatus::Busy,
            AgentStatus::Retry {
                attempt: 1,
                message: "Too Many Requests".into(),
                next: origin() + chrono::TimeDelta::seconds(2),
            },
            AgentStatus::Busy,
            AgentStatus::Idle,
        ]
    );
    // Idle comes before the terminal, so a client that sees the end sees idle.
    let idle_at = events
        .iter()
        .rposition(|e| matches!(e, AdapterEvent::AgentStatusChanged { .. }))
        .unwrap();
    assert!(idle_at < events.len() - 1);
}

// ---------------------------------------------------------------- PROC-07

#[tokio::test(start_paused = true)]
async fn proc_07_context_overflow_error_compacts_without_an_error() {
    let overflows = [
        provider_error(json!({"type": "error", "error": {"code": "context_length_exceeded"}})),
        knife_llm::http::http_error(
            400,
            &Default::default(),
            r#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 201000 tokens > 200000 maximum"}}"#,
        ),
    ];
    for overflow in overflows {
        let llm = FakeLlm::new(vec![
            vec![Err(overflow.clone())],
            text_step(&["short summary"]),
            text_step(&["answer"]),
        ]);
        let mut h = open(llm.clone(), |_| {}, None).await;
        h.session.start_turn(turn(1, "hi", vec![])).await.unwrap();
        let events = collect_turn(&mut h.events).await;

        let requests = llm.requests();
        assert_eq!(requests.len(), 3, "{overflow:?}");
        assert_eq!(
            requests[1].messages.last(),
            Some(&ChatMessage::User {
                text: COMPACTION_PROMPT.into()
            })
        );
        assert_eq!(outcome(&events).0, TurnOutcome::Completed);
        assert_eq!(last_turn(&events).error, None);
        assert!(errors(&events).is_empty());
        let items = final_items(&events);
        assert!(matches!(&items[0].kind,
            TurnItemKind::Compaction { summary } if summary == "short summary"));
        assert_eq!(text_of(&items[1]), "answer");
    }
}

#[tokio::test(start_paused = true)]
async fn proc_07_overflow_again_right_after_compaction_fails_the_turn() {
    let overflow =
        || provider_error(json!({"type": "error", "error": {"code": "context_length_exceeded"}}));
    let llm = FakeLlm::new(vec![
        vec![Err(overflow())],
        text_step(&["summary"]),
        vec![Err(overflow())],
    ]);
    let mut h = open(llm.clone(), |_| {}, None).await;
    h.session.start_turn(turn(1, "hi", vec![])).await.unwrap();
    let events = collect_turn(&mut h.events).await;
    assert_eq!(llm.requests().len(), 3);
    let TurnOutcome::Failed { error } = outcome(&events).0 else {
        panic!("expected a failure");
    };
    assert_eq!(error.error_type, "provider.context_overflow");
    assert_eq!(
        last_turn(&events).error.unwrap().name,
        "ContextOverflowError"
    );
}

// ---------------------------------------------------------------- PROC-08

#[tokio::test(start_paused = true)]
async fn proc_08_cancel_marks_pending_and_running_tools_aborted_with_an_end_time() {
    // Pending: the tool input started, no call yet.
    let (tx, rx) = mpsc::unbounded_channel();
    let (tools, _) = probe_tools(false);
    let mut h = open(
        FakeLlm::with(vec![Script::Gate(rx)], None),
        |_| {},
        Some(tools),
    )
    .await;
    h.session.start_turn(turn(1, "hi", vec![])).await.unwrap();
    tx.send(Ok(LlmEvent::ToolInputStart {
        id: "c1".into(),
        name: "probe".into(),
    }))
    .unwrap();
    let mut seen = until(&mut h.events, |e| {
        is_item(e, |i| i.status == TurnItemStatus::Pending)
    })
    .await;
    h.session
        .interrupt_turn(&ThreadId::from("thread_1"), InterruptReason::User)
        .await
        .unwrap();
    seen.extend(collect_turn(&mut h.events).await);
    assert_nothing_pending(&seen);
    assert_tool_aborted(&final_items(&seen)[0]);

    // Running: the tool executes and never returns.
    let (tools, runs) = probe_tools(true);
    let llm = FakeLlm::new(vec![tool_step("c2", "probe", "{}")]);
    let mut h = open(llm, |_| {}, Some(tools)).await;
    h.session.start_turn(turn(1, "hi", vec![])).await.unwrap();
    let mut seen = until(&mut h.events, |e| {
        is_item(e, |i| i.status == TurnItemStatus::Running)
    })
    .await;
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    h.session
        .interrupt_turn(&ThreadId::from("thread_1"), InterruptReason::User)
        .await
        .unwrap();
    seen.extend(collect_turn(&mut h.events).await);
    assert_nothing_pending(&seen);
    assert_tool_aborted(&final_items(&seen)[0]);
}

// ---------------------------------------------------------------- PROC-09

async fn assert_aborted_outcome(events: &[AdapterEvent]) {
    assert!(matches!(outcome(events).0, TurnOutcome::Interrupted { .. }));
    let turn = last_turn(events);
    assert_eq!(turn.status, ProviderTurnStatus::Interrupted);
    assert_eq!(turn.error.unwrap().name, "MessageAbortedError");
    let raised = errors(events);
    assert_eq!(raised.len(), 1);
    assert_eq!(raised[0].name, "MessageAbortedError");
    assert_eq!(statuses(events).last(), Some(&AgentStatus::Idle));
    assert_nothing_pending(events);
}

#[tokio::test(start_paused = true)]
async fn proc_09_plain_cancellation_mid_stream_records_message_aborted_error() {
    let (tx, rx) = mpsc::unbounded_channel();
    let mut h = open(FakeLlm::with(vec![Script::Gate(rx)], None), |_| {}, None).await;
    h.session.start_turn(turn(1, "hi", vec![])).await.unwrap();
    tx.send(Ok(LlmEvent::TextStart { id: "t".into() })).unwrap();
    tx.send(Ok(LlmEvent::TextDelta {
        id: "t".into(),
        text: "Working".into(),
    }))
    .unwrap();
    let mut seen = until(&mut h.events, |e| {
        is_item(
            e,
            |i| matches!(&i.kind, TurnItemKind::AssistantMessage { text, .. } if text == "Working"),
        )
    })
    .await;
    // No interrupt or close call: the session (and with it the turn task's
    // token) is simply dropped.
    let common::Harness {
        session,
        mut events,
        _project,
    } = h;
    drop(session);
    seen.extend(collect_turn(&mut events).await);
    assert_aborted_outcome(&seen).await;
    drop(tx);
}

#[tokio::test(start_paused = true)]
async fn proc_09_explicit_interrupt_records_message_aborted_error() {
    let (tx, rx) = mpsc::unbounded_channel();
    let mut h = open(FakeLlm::with(vec![Script::Gate(rx)], None), |_| {}, None).await;
    h.session.start_turn(turn(1, "hi", vec![])).await.unwrap();
    tx.send(Ok(LlmEvent::ReasoningStart { id: "r".into() }))
        .unwrap();
    let mut seen = until(&mut h.events, |e| is_item(e, |_| true)).await;
    h.session
        .interrupt_turn(&ThreadId::from("thread_1"), InterruptReason::User)
        .await
        .unwrap();
    seen.extend(collect_turn(&mut h.events).await);
    assert_aborted_outcome(&seen).await;
}

// ---------------------------------------------------------------- PROC-10

#[tokio::test(start_paused = true)]
async fn proc_10_retry_delays_follow_headers_then_backoff_attempts_from_1() {
    let unavailable = |retry_after| LlmError::Http {
        status: 503,
        retry_after,
        body: None,
        message: "Service Unavailable".into(),
    };
    let llm = FakeLlm::new(vec![
        vec![Err(unavailable(None))],
        vec![Err(unavailable(None))],
        vec![Err(unavailable(Some(Duration::from_millis(1500))))],
        text_step(&["ok"]),
    ]);
    let clock = Arc::new(PausedClock {
        origin: origin(),
        start: tokio::time::Instant::now(),
    });
    let mut h = open(llm.clone(), |c| c.clock = clock, None).await;
    h.session.start_turn(turn(1, "hi", vec![])).await.unwrap();
    let events = collect_turn(&mut h.events).await;

    let retries: Vec<(u32, i64)> = statuses(&events)
        .into_iter()
        .filter_map(|s| match s {
            AgentStatus::Retry { attempt, next, .. } => {
                Some((attempt, (next - origin()).num_milliseconds()))
            }
            _ => None,
        })
        .collect();
    // 2 s backoff, then 4 s (from t = 2 s), then the 1.5 s hint (from t = 6 s).
    assert_eq!(retries, [(1, 2_000), (2, 6_000), (3, 7_500)]);
    assert_eq!(llm.requests().len(), 4);
    assert_eq!(outcome(&events).0, TurnOutcome::Completed);
}

// ---------------------------------------------------------------- PROC-11

#[tokio::test(start_paused = true)]
async fn proc_11_retries_stop_when_the_budget_is_spent() {
    let same = || {
        knife_llm::http::http_error(
            500,
            &Default::default(),
            r#"{"error":{"message":"The model refused to answer this request"}}"#,
        )
    };
    // Default budget: 8 calls, then the last error is recorded.
    let llm = FakeLlm::new((0..20).map(|_| vec![Err(same())]).collect());
    let mut h = open(llm.clone(), |_| {}, None).await;
    h.session.start_turn(turn(1, "hi", vec![])).await.unwrap();
    let events = collect_turn(&mut h.events).await;
    assert_eq!(llm.requests().len(), 8);
    let TurnOutcome::Failed { error } = outcome(&events).0 else {
        panic!("expected a failure");
    };
    assert_eq!(error.http_status, Some(500));
    let recorded = last_turn(&events).error.unwrap();
    assert_eq!(recorded.name, "APIError");
    assert!(recorded.message.contains("refused"), "{recorded:?}");

    // The budget is an option.
    let llm = FakeLlm::new((0..20).map(|_| vec![Err(same())]).collect());
    let mut h = open(llm.clone(), |c| c.retry.max_attempts = 3, None).await;
    h.session.start_turn(turn(1, "hi", vec![])).await.unwrap();
    collect_turn(&mut h.events).await;
    assert_eq!(llm.requests().len(), 3);
}

#[tokio::test(start_paused = true)]
async fn proc_11_exhausted_quota_is_not_retried() {
    let quota = knife_llm::http::http_error(
        429,
        &Default::default(),
        r#"{"error":{"code":"insufficient_quota","message":"You exceeded your current quota, please check your plan and billing details."}}"#,
    );
    let llm = FakeLlm::new(vec![vec![Err(quota)], text_step(&["never"])]);
    let mut h = open(llm.clone(), |_| {}, None).await;
    h.session.start_turn(turn(1, "hi", vec![])).await.unwrap();
    let events = collect_turn(&mut h.events).await;
    assert_eq!(llm.requests().len(), 1);
    assert!(matches!(outcome(&events).0, TurnOutcome::Failed { .. }));
    assert_eq!(last_turn(&events).error.unwrap().name, "APIError");
}

// ---------------------------------------------------------------- PROC-12

#[tokio::test(start_paused = true)]
async fn proc_12_text_and_reasoning_are_persisted_while_streaming() {
    let (tx, rx) = mpsc::unbounded_channel();
    // A window above the cap is clamped to 250 ms.
    let mut h = open(
        FakeLlm::with(vec![Script::Gate(rx)], None),
        |c| c.flush_interval = Duration::from_secs(5),
        None,
    )
    .await;
    h.session.start_turn(turn(1, "hi", vec![])).await.unwrap();
    for (id, start) in [
        ("r", LlmEvent::ReasoningStart { id: "r".into() }),
        ("t", LlmEvent::TextStart { id: "t".into() }),
    ] {
        tx.send(Ok(start)).unwrap();
        let delta = |text: &str| {
            if id == "r" {
                LlmEvent::ReasoningDelta {
                    id: "r".into(),
                    text: text.into(),
                }
            } else {
                LlmEvent::TextDelta {
                    id: "t".into(),
                    text: text.into(),
                }
            }
        };
        // Every delta is written within 250 ms, without the part ending.
        let t0 = tokio::time::Instant::now();
        tx.send(Ok(delta("a"))).unwrap();
        until(&mut h.events, |e| {
            is_item(e, |i| {
                matches!(&i.kind,
                TurnItemKind::Reasoning { text, .. } | TurnItemKind::AssistantMessage { text, .. }
                if text == "a")
            })
        })
        .await;
        assert!(
            t0.elapsed() <= Duration::from_millis(250),
            "{:?}",
            t0.elapsed()
        );
        let t0 = tokio::time::Instant::now();
        tx.send(Ok(delta("b"))).unwrap();
        until(&mut h.events, |e| {
            is_item(e, |i| {
                matches!(&i.kind,
                TurnItemKind::Reasoning { text, streaming: true }
                | TurnItemKind::AssistantMessage { text, streaming: true }
                if text == "ab")
            })
        })
        .await;
        assert!(
            t0.elapsed() <= Duration::from_millis(250),
            "{:?}",
            t0.elapsed()
        );
        // 4 KiB unsent is written at once.
        let t1 = tokio::time::Instant::now();
        tx.send(Ok(delta(&"x".repeat(4096)))).unwrap();
        until(&mut h.events, |e| {
            is_item(e, |i| {
                matches!(&i.kind,
                TurnItemKind::Reasoning { text, .. } | TurnItemKind::AssistantMessage { text, .. }
                if text.len() == 4098)
            })
        })
        .await;
        assert_eq!(t1.elapsed(), Duration::ZERO);
    }
    tx.send(Ok(finish(FinishReason::Stop, 1, 1))).unwrap();
    let events = collect_turn(&mut h.events).await;
    assert_eq!(outcome(&events).0, TurnOutcome::Completed);
}

// ---------------------------------------------------------------- PROC-13

#[tokio::test(start_paused = true)]
async fn proc_13_incomplete_tool_input_is_settled_as_error() {
    let started = |id: &str| {
        vec![
            Ok(LlmEvent::ToolInputStart {
                id: id.into(),
                name: "probe".into(),
            }),
            Ok(LlmEvent::ToolInputDelta {
                id: id.into(),
                delta: "{\"x\":".into(),
            }),
        ]
    };
    // The stream ends without the call event.
    let (tools, runs) = probe_tools(false);
    let llm = FakeLlm::new(vec![started("c1")]);
    let mut h = open(llm, |_| {}, Some(tools)).await;
    h.session.start_turn(turn(1, "hi", vec![])).await.unwrap();
    let events = collect_turn(&mut h.events).await;
    assert_nothing_pending(&events);
    let item = &final_items(&events)[0];
    assert_eq!(item.status, TurnItemStatus::Failed);
    assert!(matches!(
        &item.kind,
        TurnItemKind::ToolCall { error: Some(_), .. }
    ));
    assert_eq!(runs.load(Ordering::SeqCst), 0);

    // The stream fails (not retried) without the call event.
    let (tools, runs) = probe_tools(false);
    let mut failing = started("c2");
    failing.push(Err(provider_error(json!({"error": {"message": "boom"}}))));
    let mut h = open(FakeLlm::new(vec![failing]), |_| {}, Some(tools)).await;
    h.session.start_turn(turn(1, "hi", vec![])).await.unwrap();
    let events = collect_turn(&mut h.events).await;
    assert_nothing_pending(&events);
    assert_eq!(final_items(&events)[0].status, TurnItemStatus::Failed);
    assert_eq!(runs.load(Ordering::SeqCst), 0);
}

#[tokio::test(start_paused = true)]
async fn proc_13_a_tool_call_after_the_abort_is_never_executed() {
    let (tx, rx) = mpsc::unbounded_channel();
    let (tools, runs) = probe_tools(false);
    let mut h = open(
        FakeLlm::with(vec![Script::Gate(rx)], None),
        |_| {},
        Some(tools),
    )
    .await;
    h.session.start_turn(turn(1, "hi", vec![])).await.unwrap();
    tx.send(Ok(LlmEvent::ToolInputStart {
        id: "c1".into(),
        name: "probe".into(),
    }))
    .unwrap();
    let mut seen = until(&mut h.events, |e| is_item(e, |_| true)).await;
    h.session
        .interrupt_turn(&ThreadId::from("thread_1"), InterruptReason::User)
        .await
        .unwrap();
    // The call and the step's end arrive after the abort.
    tx.send(Ok(LlmEvent::ToolCall {
        id: "c1".into(),
        name: "probe".into(),
        arguments: "{}".into(),
    }))
    .unwrap();
    tx.send(Ok(finish(FinishReason::ToolCalls, 1, 1))).unwrap();
    seen.extend(collect_turn(&mut h.events).await);
    // Let anything that could still run, run.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    assert_tool_aborted(&final_items(&seen)[0]);
}

// ---------------------------------------------------------------- finish reasons

#[tokio::test(start_paused = true)]
async fn content_filter_and_length_finishes_stop_with_named_errors() {
    for (reason, name, error_type) in [
        (
            FinishReason::ContentFilter,
            "ContentFilterError",
            "provider.content_filter",
        ),
        (
            FinishReason::Length,
            "MessageOutputLengthError",
            "provider.output_length",
        ),
    ] {
        let mut step = text_step(&["cut ans"]);
        *step.last_mut().unwrap() = Ok(finish(reason, 5, 5));
        let llm = FakeLlm::new(vec![step, text_step(&["never"])]);
        let mut h = open(llm.clone(), |_| {}, None).await;
        h.session.start_turn(turn(1, "hi", vec![])).await.unwrap();
        let events = collect_turn(&mut h.events).await;
        assert_eq!(llm.requests().len(), 1);
        let TurnOutcome::Failed { error } = outcome(&events).0 else {
            panic!("expected a failure for {reason:?}");
        };
        assert_eq!(error.error_type, error_type);
        assert_eq!(last_turn(&events).error.unwrap().name, name);
        // The cut answer itself is kept, complete.
        let items = final_items(&events);
        assert_eq!(text_of(&items[0]), "cut ans");
        assert_eq!(items[0].status, TurnItemStatus::Completed);
    }
    // A `length` step with complete tool calls goes on to run them.
    let mut step = tool_step("c1", "read", r#"{"path":"src/main.rs"}"#);
    *step.last_mut().unwrap() = Ok(finish(FinishReason::Length, 5, 5));
    let llm = FakeLlm::new(vec![step, text_step(&["done"])]);
    let mut h = open(llm.clone(), |_| {}, None).await;
    h.session.start_turn(turn(1, "hi", vec![])).await.unwrap();
    let events = collect_turn(&mut h.events).await;
    assert_eq!(outcome(&events).0, TurnOutcome::Completed);
    assert_eq!(llm.requests().len(), 2);
}

#[tokio::test(start_paused = true)]
async fn compaction_retries_its_summary_request_and_fails_when_even_that_overflows() {
    let overflow =
        || provider_error(json!({"type": "error", "error": {"code": "context_length_exceeded"}}));
    let busy = || LlmError::Http {
        status: 503,
        retry_after: Some(Duration::ZERO),
        body: None,
        message: "Service Unavailable".into(),
    };
    // Summary: a 503 (retried), then an overflow (cannot compact).
    let llm = FakeLlm::new(vec![
        vec![Err(overflow())],
        vec![Err(busy())],
        vec![Err(overflow())],
    ]);
    let mut h = open(llm.clone(), |_| {}, None).await;
    h.session.start_turn(turn(1, "hi", vec![])).await.unwrap();
    let events = collect_turn(&mut h.events).await;
    assert_eq!(llm.requests().len(), 3);
    let TurnOutcome::Failed { error } = outcome(&events).0 else {
        panic!("expected a failure");
    };
    assert_eq!(error.error_type, "provider.context_overflow");
    assert_eq!(
        last_turn(&events).error.unwrap().name,
        "ContextOverflowError"
    );
    let compaction = final_items(&events)
        .into_iter()
        .find(|i| matches!(i.kind, TurnItemKind::Compaction { .. }))
        .unwrap();
    assert_eq!(compaction.status, TurnItemStatus::Failed);
    assert!(
        statuses(&events)
            .iter()
            .any(|s| matches!(s, AgentStatus::Retry { attempt: 1, .. }))
    );
    assert_eq!(statuses(&events).last(), Some(&AgentStatus::Idle));
}

#[test]
fn history_skips_discarded_items_and_failed_compactions() {
    let mut discarded = assistant_item(1, 1, "one");
    discarded.status = TurnItemStatus::Cancelled;
    let failed_compaction = item(
        1,
        2,
        TurnItemStatus::Failed,
        TurnItemKind::Compaction {
            summary: String::new(),
        },
    );
    let history = vec![
        user_item(1, "q"),
        discarded,
        failed_compaction,
        assistant_item(1, 3, "two"),
    ];
    assert_eq!(
        knife_agent::messages::build_messages("sys", &history, "next"),
        [
            ChatMessage::System { text: "sys".into() },
            ChatMessage::User { text: "q".into() },
            ChatMessage::Assistant {
                text: Some("two".into()),
                tool_calls: vec![]
            },
            ChatMessage::User {
                text: "next".into()
            },
        ]
    );
}
