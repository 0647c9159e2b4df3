//! Usage and budgets on the `acp` driver (SPEC.md TURN-06/07) against the scripted fake
//! ACP agent: the `usage` of a `session/prompt` result is the turn's one model-call
//! record (the finest an ACP agent reports), and a result over a budget ends the run
//! `budget_exceeded` naming the budget; the next run never reaches the agent.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod acp_support;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use acp_support::*;
use knife_protocol::*;
use knife_runtime::budget::{BUDGET_EXCEEDED, BudgetGuard, Budgets, Limit};
use knife_store::UsageFilter;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn turn_06_and_07_acp_prompt_usage_is_a_model_call_record_checked_against_the_budget() {
    let h = Harness::new().await;
    let budgets = Budgets {
        thread: Limit {
            tokens: Some(20),
            cost_microdollars: None,
        },
        ..Default::default()
    };
    let exec = h
        .execution(Duration::from_secs(60), &[])
        .with_budgets(BudgetGuard::new(
            h.store.clone(),
            budgets,
            Arc::new(PriceTable::default()),
            HashMap::new(),
        ));
    let thread = h.thread().await;
    // The fake's prompt n uses 10 input and n output tokens: 11, then 12 (over 20).
    let first = h.run(&exec, &thread, "one").await;
    assert_eq!(first.status, RunStatus::Completed, "{:?}", first.error);
    let second = h.run(&exec, &thread, "two").await;
    assert_eq!(second.status, RunStatus::BudgetExceeded, "{second:?}");
    let error = second.error.clone().unwrap();
    assert_eq!(error.error_type, BUDGET_EXCEEDED);
    assert_eq!(error.code.as_deref(), Some("thread"));
    assert!(
        error
            .message
            .contains("thread budget of 20 tokens is spent (23 tokens used)"),
        "{}",
        error.message
    );

    let sums = h
        .store
        .usage_sums(&UsageFilter {
            thread: Some(thread.clone()),
            by_run: true,
            ..Default::default()
        })
        .await
        .unwrap();
    let shape: Vec<(Option<RunId>, u64, u64, u64)> = sums
        .iter()
        .map(|s| {
            (
                s.run_id.clone(),
                s.calls,
                s.usage.output_tokens,
                s.budget_tokens,
            )
        })
        .collect();
    assert_eq!(
        shape,
        [
            (Some(first.id.clone()), 1, 1, 11),
            (Some(second.id.clone()), 1, 2, 12)
        ]
    );
    let filter = knife_store::StreamFilter {
        thread_id: Some(thread.clone()),
        after: 0,
        event_type: Some("model-call.recorded".into()),
    };
    let records = h.store.read_events(&filter, 100).await.unwrap();
    assert!(records.iter().all(|e| matches!(&e.event.body,
        EventBody::ModelCallRecorded(c) if c.ordinal == 1 && c.provider_turn_id.is_some())));

    // Spent: the third run ends before its prompt is sent.
    let prompts = |h: &Harness| {
        h.methods()
            .iter()
            .filter(|m| m.as_str() == "session/prompt")
            .count()
    };
    assert_eq!(prompts(&h), 2);
    let third = h.run(&exec, &thread, "three").await;
    assert_eq!(third.status, RunStatus::BudgetExceeded);
    assert_eq!(prompts(&h), 2);
}
