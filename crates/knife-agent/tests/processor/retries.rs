//! Retries: PROC-03..06, PROC-10, PROC-11.

use std::sync::Arc;
use std::time::Duration;

use crate::common::*;
use crate::support::*;
use knife_llm::*;
use knife_protocol::*;
use serde_json::json;

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
                max_attempts: Some(8),
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
            r#"{"error":{"message":"inference failed: bad tensor shape"}}"#,
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
    assert!(
        recorded.message.contains("bad tensor shape"),
        "{recorded:?}"
    );

    // The budget is an option.
    let llm = FakeLlm::new((0..20).map(|_| vec![Err(same())]).collect());
    let mut h = open(llm.clone(), |c| c.retry.max_attempts = 3, None).await;
    h.session.start_turn(turn(1, "hi", vec![])).await.unwrap();
    collect_turn(&mut h.events).await;
    assert_eq!(llm.requests().len(), 3);
}

#[tokio::test(start_paused = true)]
async fn proc_11_exhausted_quota_and_refusals_are_not_retried() {
    let bodies = [
        (
            429,
            r#"{"error":{"code":"insufficient_quota","message":"You exceeded your current quota, please check your plan and billing details."}}"#,
        ),
        (
            500,
            r#"{"error":{"message":"The model refused to answer this request"}}"#,
        ),
    ];
    for (status, body) in bodies {
        let error = knife_llm::http::http_error(status, &Default::default(), body);
        let llm = FakeLlm::new(vec![vec![Err(error)], text_step(&["never"])]);
        let mut h = open(llm.clone(), |_| {}, None).await;
        h.session.start_turn(turn(1, "hi", vec![])).await.unwrap();
        let events = collect_turn(&mut h.events).await;
        assert_eq!(llm.requests().len(), 1, "{body}");
        assert!(matches!(outcome(&events).0, TurnOutcome::Failed { .. }));
        assert_eq!(last_turn(&events).error.unwrap().name, "APIError");
    }
}
