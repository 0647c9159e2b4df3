//! Compaction: PROC-02 (usage overflow), PROC-07 (overflow errors), summary failures, history.

use std::time::Duration;

use crate::common::*;
use crate::support::*;
use knife_agent::compaction::{COMPACTION_PROMPT, SUMMARY_PREFIX};
use knife_llm::*;
use knife_protocol::*;
use serde_json::json;

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

// ---------------------------------------------------------------- PROC-07

/// Anthropic's stop reason `model_context_window_exceeded` is a context overflow
/// (compaction, the turn goes on), not an output limit that stops the turn.
#[tokio::test(start_paused = true)]
async fn proc_07_context_window_exceeded_stop_reason_compacts() {
    let llm = FakeLlm::new(vec![
        vec![
            Ok(LlmEvent::TextStart { id: "t".into() }),
            Ok(LlmEvent::TextDelta {
                id: "t".into(),
                text: "partial".into(),
            }),
            Ok(LlmEvent::TextEnd { id: "t".into() }),
            Ok(finish(FinishReason::ContextOverflow, 10, 5)),
        ],
        text_step(&["the summary"]),
        text_step(&["final answer"]),
    ]);
    let mut h = open(llm.clone(), |_| {}, None).await;
    h.session.start_turn(turn(1, "hi", vec![])).await.unwrap();
    let events = collect_turn(&mut h.events).await;
    assert_eq!(outcome(&events).0, TurnOutcome::Completed);
    let items = final_items(&events);
    assert!(
        items.iter().any(|i| i.kind
            == TurnItemKind::Compaction {
                summary: "the summary".into()
            }),
        "{items:?}"
    );
    assert_eq!(text_of(items.last().unwrap()), "final answer");
    assert_eq!(llm.requests().len(), 3);
}

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

#[tokio::test(start_paused = true)]
async fn an_answer_that_overflows_right_after_compaction_ends_the_turn_instead_of_compacting_again()
{
    // Every answer alone is over the usable context (800 of 1000 - 200): without the
    // guard the agent would compact and ask again until max_steps, paying each time.
    let big_answer = |text: &str| {
        vec![
            Ok(LlmEvent::TextStart { id: "t".into() }),
            Ok(LlmEvent::TextDelta {
                id: "t".into(),
                text: text.into(),
            }),
            Ok(LlmEvent::TextEnd { id: "t".into() }),
            Ok(finish(FinishReason::Stop, 100, 700)),
        ]
    };
    let llm = FakeLlm::new(vec![
        big_answer("first long answer"),
        text_step(&["the summary"]),
        big_answer("second long answer"),
        text_step(&["must not be asked for"]),
        big_answer("must not be asked for"),
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
    // Answer, summary, answer: one compaction, then the turn ended with the answer.
    assert_eq!(llm.requests().len(), 3);
    let items = final_items(&events);
    let compactions = items
        .iter()
        .filter(|i| matches!(i.kind, TurnItemKind::Compaction { .. }))
        .count();
    assert_eq!(compactions, 1);
    assert_eq!(text_of(items.last().unwrap()), "second long answer");
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

#[tokio::test(start_paused = true)]
async fn an_overflowing_summary_request_is_retried_with_a_shrunk_history() {
    let overflow =
        || provider_error(json!({"type": "error", "error": {"code": "context_length_exceeded"}}));
    let history = vec![
        user_item(1, "read it"),
        tool_item(1, 1, "c1", Some(&"y".repeat(10_000)), None),
        assistant_item(1, 2, "it is long"),
    ];
    let llm = FakeLlm::new(vec![
        vec![Err(overflow())],
        vec![Err(overflow())],
        text_step(&["summary of the long file"]),
        text_step(&["answer"]),
    ]);
    let mut h = open(llm.clone(), |_| {}, None).await;
    h.session
        .start_turn(turn(2, "and now?", history))
        .await
        .unwrap();
    let events = collect_turn(&mut h.events).await;
    assert_eq!(outcome(&events).0, TurnOutcome::Completed);
    let requests = llm.requests();
    assert_eq!(requests.len(), 4);
    let tool_content = |r: &LlmRequest| {
        r.messages
            .iter()
            .find_map(|m| match m {
                ChatMessage::Tool { content, .. } => Some(content.len()),
                _ => None,
            })
            .unwrap()
    };
    assert_eq!(tool_content(&requests[0]), 10_000);
    // Summary requests carry no tool blocks (they have no tools): the call's
    // output is plain text, cut.
    for request in &requests[1..3] {
        assert!(request.tools.is_empty());
        assert!(
            !request
                .messages
                .iter()
                .any(|m| matches!(m, ChatMessage::Tool { .. })),
            "{:?}",
            request.messages
        );
        let output = request
            .messages
            .iter()
            .find_map(|m| match m {
                ChatMessage::User { text } if text.starts_with("[tool ") => Some(text.len()),
                _ => None,
            })
            .unwrap();
        assert!(output < 2_100, "not cut: {output}");
    }
    assert_eq!(
        requests[3].messages[1],
        ChatMessage::User {
            text: format!("{SUMMARY_PREFIX}\n\nsummary of the long file")
        }
    );
}
