//! Budgets (SPEC.md TURN-07) against the durable-execution harness: a usage report
//! over a budget interrupts the turn and ends the run `budget_exceeded`, a spent
//! budget stops the next run before its turn, raising it continues the work.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::*;
use knife_protocol::*;
use knife_runtime::budget::{BUDGET_EXCEEDED, Budgets, Limit};

fn thread_tokens(n: u64) -> Budgets {
    Budgets {
        thread: Limit {
            tokens: Some(n),
            cost_microdollars: None,
        },
        ..Default::default()
    }
}

#[tokio::test(start_paused = true)]
async fn turn_07_a_usage_report_over_the_thread_budget_stops_the_run_and_the_next_one_never_starts()
{
    let h = Harness::new(Drain::Usage(150)).await;
    let t = h.thread(None).await;
    let exec = h.execution_with_budgets(thread_tokens(100));
    let run = exec.start_run(&t, "spend".into()).await.unwrap();
    exec.await_idle(&t).await;
    let ended = h.store.get_run(&run.id).await.unwrap().unwrap();
    assert_eq!(ended.status, RunStatus::BudgetExceeded, "{ended:?}");
    let error = ended.error.unwrap();
    assert_eq!(error.error_type, BUDGET_EXCEEDED);
    assert_eq!(error.code.as_deref(), Some("thread"));
    assert!(
        error.message.contains("thread budget of 100 tokens"),
        "{}",
        error.message
    );
    assert!(
        error.message.contains("knife threads budget"),
        "{}",
        error.message
    );
    assert_eq!(ended.usage.map(|u| u.total_tokens), Some(150));
    let thread = h.get(&t).await;
    assert!(!thread.is_claimed());
    assert_eq!(thread.status, ThreadStatus::Failed);

    // The budget is spent: the next run ends before its turn is started.
    let second = exec.start_run(&t, "more".into()).await.unwrap();
    exec.await_idle(&t).await;
    let second = h.store.get_run(&second.id).await.unwrap().unwrap();
    assert_eq!(second.status, RunStatus::BudgetExceeded);
    assert_eq!(
        h.drains.started().len(),
        1,
        "no model call for the second run"
    );

    // Raising it and continuing starts a continuation run that is let through.
    h.drains.plan(&t, Drain::Complete);
    let (raise, cont) = exec.raise_budget(&t, 1000, 0, true).await.unwrap();
    assert_eq!(raise.tokens, 1000);
    let cont = cont.unwrap();
    exec.await_idle(&t).await;
    let cont = h.store.get_run(&cont.id).await.unwrap().unwrap();
    assert_eq!(cont.status, RunStatus::Completed, "{cont:?}");
    let started = h.drains.started();
    assert_eq!(started.len(), 2);
    assert_eq!(
        started[1].text,
        knife_runtime::execution::CONTINUE_AFTER_BUDGET_RAISE
    );
    assert_eq!(h.get(&t).await.budget_raise.unwrap().tokens, 1000);
}

#[tokio::test(start_paused = true)]
async fn turn_07_project_and_day_budgets_count_other_threads() {
    let h = Harness::new(Drain::Usage(60)).await;
    let a = h.thread(None).await;
    let b = h.thread(None).await;
    let exec = h.execution_with_budgets(Budgets {
        day: Limit {
            tokens: Some(100),
            cost_microdollars: None,
        },
        ..Default::default()
    });
    // 60 tokens on thread a: under the day's 100.
    h.drains.plan(&a, Drain::Complete);
    let first = exec.start_run(&a, "one".into()).await.unwrap();
    exec.await_idle(&a).await;
    assert_eq!(
        h.store.get_run(&first.id).await.unwrap().unwrap().status,
        RunStatus::Completed
    );
    // The fake reports no usage on Complete: record 60 tokens on that run by hand.
    let mut r = h.store.get_run(&first.id).await.unwrap().unwrap();
    r.usage = Some(TokenUsage {
        total_tokens: 60,
        ..Default::default()
    });
    h.store
        .write(vec![DomainEvent::new(
            h.clock.now(),
            EventBody::RunUpdated(r),
        )])
        .await
        .unwrap();
    // Thread b's report of 60 more brings the day to 120: over.
    let run = exec.start_run(&b, "two".into()).await.unwrap();
    exec.await_idle(&b).await;
    let ended = h.store.get_run(&run.id).await.unwrap().unwrap();
    assert_eq!(ended.status, RunStatus::BudgetExceeded);
    assert_eq!(ended.error.unwrap().code.as_deref(), Some("day"));
}
