//! Compaction under control (SPEC.md TURN-03, TURN-04): `compaction = off` fails
//! an overflow without a summary request; compactions that do not reduce the
//! context are bounded, for tool-calling and text-only turns.

use crate::common::*;
use crate::support::*;
use knife_agent::compaction::{COMPACTION_PROMPT, CompactionMode};
use knife_llm::*;
use knife_protocol::*;
use serde_json::json;

/// 1000-token context with 200 reserved: 800 usable.
fn small_context(c: &mut knife_agent::BuiltinAgentConfig) {
    c.context_limit = 1000;
    c.output_limit = 200;
}

/// A text answer whose step reports `input` prompt tokens and 10 output tokens.
fn answer(text: &str, input: u64) -> Vec<Result<LlmEvent, LlmError>> {
    vec![
        Ok(LlmEvent::TextStart { id: "t".into() }),
        Ok(LlmEvent::TextDelta {
            id: "t".into(),
            text: text.into(),
        }),
        Ok(LlmEvent::TextEnd { id: "t".into() }),
        Ok(finish(FinishReason::Stop, input, 10)),
    ]
}

/// A `list` tool call whose step reports `input` prompt tokens.
fn list_call(id: &str, input: u64) -> Vec<Result<LlmEvent, LlmError>> {
    let mut step = tool_step(id, "list", "{}");
    step.pop();
    step.push(Ok(finish(FinishReason::ToolCalls, input, 10)));
    step
}

fn summary_requests(llm: &FakeLlm) -> usize {
    llm.requests()
        .iter()
        .filter(|r| {
            r.messages.last()
                == Some(&ChatMessage::User {
                    text: COMPACTION_PROMPT.into(),
                })
        })
        .count()
}

fn failure(events: &[AdapterEvent]) -> RunError {
    match outcome(events).0 {
        TurnOutcome::Failed { error } => error,
        other => panic!("expected a failure, got {other:?}"),
    }
}

// ---------------------------------------------------------------- TURN-03

#[tokio::test(start_paused = true)]
async fn turn_03_compaction_off_ends_an_overflowing_turn_without_a_summary_request() {
    // Three ways a step overflows: its usage (900 of 800 usable), the provider's
    // overflow error, and a tool-calling step over the limit (its tool never runs).
    let overflow_error =
        || provider_error(json!({"type": "error", "error": {"code": "context_length_exceeded"}}));
    let cases: Vec<(&str, Vec<Result<LlmEvent, LlmError>>)> = vec![
        ("usage", answer("a long answer", 900)),
        ("error", vec![Err(overflow_error())]),
        ("tool call", list_call("c1", 900)),
    ];
    for (case, first) in cases {
        let llm = FakeLlm::new(vec![
            first,
            text_step(&["a summary that must not be asked for"]),
            text_step(&["an answer that must not be asked for"]),
        ]);
        let mut h = open(
            llm.clone(),
            |c| {
                small_context(c);
                c.compaction = CompactionMode::Off;
            },
            None,
        )
        .await;
        h.session.start_turn(turn(1, "hi", vec![])).await.unwrap();
        let events = collect_turn(&mut h.events).await;

        assert_eq!(
            llm.requests().len(),
            1,
            "{case}: the model got more requests"
        );
        assert_eq!(summary_requests(&llm), 0, "{case}");
        let error = failure(&events);
        assert_eq!(error.error_type, "provider.context_overflow", "{case}");
        assert_eq!(error.code.as_deref(), Some("context_overflow"), "{case}");
        assert!(
            error.message.contains("compaction is off")
                && error.message.contains("compaction = \"auto\""),
            "{case}: {}",
            error.message
        );
        assert_eq!(
            last_turn(&events).error.unwrap().name,
            "ContextOverflowError"
        );
        let items = final_items(&events);
        assert!(
            !items
                .iter()
                .any(|i| matches!(i.kind, TurnItemKind::Compaction { .. })),
            "{case}: {items:?}"
        );
        // The call of the overflowing step is settled, never run.
        for item in &items {
            if let TurnItemKind::ToolCall { output, .. } = &item.kind {
                assert_ne!(item.status, TurnItemStatus::Completed, "{case}: {item:?}");
                assert!(output.is_none(), "{case}: {item:?}");
            }
        }
        assert_nothing_pending(&events);
    }
}

#[tokio::test(start_paused = true)]
async fn turn_03_compaction_auto_is_the_default_and_compacts() {
    let llm = FakeLlm::new(vec![
        answer("a long answer", 900),
        text_step(&["the summary"]),
        answer("short", 50),
    ]);
    let mut h = open(llm.clone(), small_context, None).await;
    h.session.start_turn(turn(1, "hi", vec![])).await.unwrap();
    let events = collect_turn(&mut h.events).await;
    assert_eq!(outcome(&events).0, TurnOutcome::Completed);
    assert_eq!(summary_requests(&llm), 1);
}

// ---------------------------------------------------------------- TURN-04

/// A provider whose reported usage never drops below the threshold: every step
/// overflows, whatever the summary. Without a bound a tool-calling turn compacts
/// at every step until the step limit (50 compactions, 100 paid requests).
#[tokio::test(start_paused = true)]
async fn turn_04_tool_calling_turn_fails_after_two_compactions_that_do_not_reduce_the_context() {
    let mut scripts = Vec::new();
    for n in 0..60 {
        scripts.push(list_call(&format!("c{n}"), 900));
        scripts.push(text_step(&["a summary"]));
    }
    let llm = FakeLlm::new(scripts);
    let mut h = open(llm.clone(), small_context, None).await;
    h.session.start_turn(turn(1, "go", vec![])).await.unwrap();
    let events = collect_turn(&mut h.events).await;

    // step, summary, step, summary, step: two compactions, then the failure.
    assert_eq!(llm.requests().len(), 5);
    assert_eq!(summary_requests(&llm), 2);
    let error = failure(&events);
    assert_eq!(error.error_type, "provider.context_overflow");
    assert_eq!(error.code.as_deref(), Some("context_not_reduced"));
    assert!(
        error.message.contains("cannot be reduced")
            && error.message.contains("2 compactions in a row")
            && error.message.contains("910 tokens of the 800 usable")
            && error.message.contains("new thread")
            && error.message.contains("[providers.local]"),
        "{}",
        error.message
    );
    assert!(!error.message.contains("max_steps"), "{}", error.message);
    assert_ne!(error.error_type, "runtime");
    assert_eq!(
        last_turn(&events).error.unwrap().name,
        "ContextOverflowError"
    );
    assert_nothing_pending(&events);
}

/// The same provider on a text-only turn: the answer after a compaction still
/// reports a prompt over the threshold, so the turn must not end `completed`.
#[tokio::test(start_paused = true)]
async fn turn_04_text_only_turn_fails_when_compaction_does_not_reduce_the_context() {
    for (max_compactions, requests) in [(None, 5), (Some(1), 3)] {
        let mut scripts = Vec::new();
        for n in 0..10 {
            scripts.push(answer(&format!("answer {n}"), 900));
            scripts.push(text_step(&["a summary"]));
        }
        let llm = FakeLlm::new(scripts);
        let mut h = open(
            llm.clone(),
            |c| {
                small_context(c);
                if let Some(n) = max_compactions {
                    c.max_compactions = n;
                }
            },
            None,
        )
        .await;
        h.session.start_turn(turn(1, "hi", vec![])).await.unwrap();
        let events = collect_turn(&mut h.events).await;

        assert_eq!(llm.requests().len(), requests, "max {max_compactions:?}");
        let error = failure(&events);
        assert_eq!(error.code.as_deref(), Some("context_not_reduced"));
        assert!(
            error.message.contains("cannot be reduced") && error.message.contains("context_limit"),
            "{}",
            error.message
        );
        assert_nothing_pending(&events);
    }
}

/// A step that fits between two compactions resets the count: compactions that
/// work are not bounded by TURN-04.
#[tokio::test(start_paused = true)]
async fn turn_04_a_step_that_fits_resets_the_count_of_compactions_in_a_row() {
    let llm = FakeLlm::new(vec![
        list_call("c1", 900),
        text_step(&["summary one"]),
        list_call("c2", 100),
        list_call("c3", 900),
        text_step(&["summary two"]),
        list_call("c4", 100),
        list_call("c5", 900),
        text_step(&["summary three"]),
        answer("done", 100),
    ]);
    let mut h = open(llm.clone(), small_context, None).await;
    h.session.start_turn(turn(1, "go", vec![])).await.unwrap();
    let events = collect_turn(&mut h.events).await;
    assert_eq!(outcome(&events).0, TurnOutcome::Completed);
    assert_eq!(summary_requests(&llm), 3);
    assert_eq!(llm.requests().len(), 9);
}
