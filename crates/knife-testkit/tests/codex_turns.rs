//! Messages during a codex run, usage and budgets (SPEC.md TURN-01/06/07) against the
//! scripted fake app-server: a steer goes to `turn/steer` and is recorded once codex
//! took it, one codex refuses is queued saying why; each `thread/tokenUsage/updated`
//! is one model-call record (the growth of the thread's total since the previous
//! report), totals come from those records, and a report over a budget interrupts the
//! turn (`turn/interrupt`) and ends the run `budget_exceeded` naming the budget.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod codex_support;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use codex_support::*;
use knife_protocol::*;
use knife_runtime::budget::{BUDGET_EXCEEDED, BudgetGuard, Budgets, Limit};
use knife_store::UsageFilter;

/// `(ordinal, input, output)` of each model-call record of `run`, in log order.
fn calls(events: &[StoredEvent], run: &RunId) -> Vec<(u32, u64, u64)> {
    events
        .iter()
        .filter_map(|e| match &e.event.body {
            EventBody::ModelCallRecorded(c) if &c.run_id == run => {
                Some((c.ordinal, c.usage.input_tokens, c.usage.output_tokens))
            }
            _ => None,
        })
        .collect()
}

async fn events(h: &Harness) -> Vec<StoredEvent> {
    let filter = knife_store::StreamFilter {
        thread_id: Some(h.thread.id.clone()),
        after: 0,
        event_type: Some("model-call.recorded".into()),
    };
    h.store.read_events(&filter, 10_000).await.unwrap()
}

#[tokio::test]
async fn turn_06_codex_records_one_model_call_per_usage_report_and_totals_sum_them() {
    let h = harness(Duration::from_secs(60)).await;
    let run = h
        .run(script(
            r#"[{"usage":[100,7]},{"text":"Half way."},{"usage":[40,3]},{"usage":[0,0]}]"#,
        ))
        .await;
    assert_eq!(run.status, RunStatus::Completed, "{:?}", run.error);
    let usage = run.usage.clone().unwrap();
    assert_eq!((usage.input_tokens, usage.output_tokens), (140, 10));
    // Two reports grew the total, the third (nothing new) recorded no call.
    assert_eq!(calls(&events(&h).await, &run.id), [(1, 100, 7), (2, 40, 3)]);
    // A second run's calls start from the thread's total at its start.
    let second = h.run(script(r#"[{"usage":[5,1]}]"#)).await;
    assert_eq!(calls(&events(&h).await, &second.id), [(1, 5, 1)]);
    let sums = h
        .store
        .usage_sums(&UsageFilter {
            thread: Some(h.thread.id.clone()),
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
                s.usage.input_tokens,
                s.budget_tokens,
            )
        })
        .collect();
    assert_eq!(
        shape,
        [
            (Some(run.id.clone()), 2, 140, 150),
            (Some(second.id.clone()), 1, 5, 6)
        ]
    );
    assert_eq!(sums[0].provider_instance_id, instance());
}

#[tokio::test]
async fn turn_07_a_codex_usage_report_over_the_budget_interrupts_the_turn() {
    let h = harness(Duration::from_secs(60)).await;
    let (exec, _) = service(&h.store, &h.codex_home, Duration::from_secs(60));
    let budgets = Budgets {
        thread: Limit {
            tokens: Some(100),
            cost_microdollars: None,
        },
        ..Default::default()
    };
    let exec = exec.with_budgets(BudgetGuard::new(
        h.store.clone(),
        budgets,
        Arc::new(PriceTable::default()),
        HashMap::new(),
    ));
    // The first report is under the budget, the second over it; then the turn would
    // wait forever for an interrupt.
    let run = exec
        .start_run(
            &h.thread.id,
            script(r#"[{"usage":[40,5]},{"usage":[60,5]},{"wait_interrupt":true}]"#),
        )
        .await
        .unwrap();
    tokio::time::timeout(WAIT, exec.await_idle(&h.thread.id))
        .await
        .expect("the run did not end");
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
    assert_eq!(h.sent_methods("turn/interrupt").len(), 1);
    // Both calls are recorded; the next run is stopped before its turn.
    assert_eq!(calls(&events(&h).await, &run.id).len(), 2);
    let next = exec.start_run(&h.thread.id, "more".into()).await.unwrap();
    tokio::time::timeout(WAIT, exec.await_idle(&h.thread.id))
        .await
        .unwrap();
    let next = h.store.get_run(&next.id).await.unwrap().unwrap();
    assert_eq!(next.status, RunStatus::BudgetExceeded);
    assert_eq!(h.sent_methods("turn/start").len(), 1);
}

/// Waits until codex named the running turn (the answer to `turn/start`): a steer
/// needs its id.
async fn native_turn_known(h: &Harness) {
    h.until("codex's turn id", |p| {
        p.provider_turns.iter().any(|t| t.native_turn_id.is_some())
    })
    .await;
}

#[tokio::test]
async fn turn_01_a_steer_during_a_codex_run_goes_to_turn_steer_and_is_recorded() {
    let h = harness(Duration::from_secs(60)).await;
    let run = h
        .exec
        .start_run(&h.thread.id, script(r#"[{"wait_steer":true}]"#))
        .await
        .unwrap();
    native_turn_known(&h).await;
    let answer = h
        .exec
        .post_message(
            &h.thread.id,
            "also check the tests".into(),
            None,
            MessageMode::Steer,
        )
        .await
        .unwrap();
    assert_eq!(answer.status, MessageDelivery::Steering, "{answer:?}");
    assert_eq!(answer.run_id.as_ref(), Some(&run.id));
    let ended = h.finish(&run.id).await;
    assert_eq!(ended.status, RunStatus::Completed, "{:?}", ended.error);
    let p = h.projection().await;
    // codex took it in the same turn, and answered it there.
    assert_eq!(
        assistant_texts(&p, &run.id),
        vec![(
            "steered: also check the tests".to_owned(),
            TurnItemStatus::Completed
        )]
    );
    let id = TurnItemId::steer_of(&run.id, &answer.queued.unwrap().id);
    let item = p
        .turn_items
        .iter()
        .find(|i| i.id == id)
        .expect("the steer item");
    assert!(matches!(&item.kind,
        TurnItemKind::UserMessage { text, .. } if text == "also check the tests"));
    assert!(p.thread.queue.is_empty(), "{:?}", p.thread.queue);
    assert_eq!(p.thread.run_count, 1);
    let native_turn = p.provider_turns[0].native_turn_id.clone().unwrap();
    let sent = &h.sent_methods("turn/steer")[0]["params"];
    assert_eq!(sent["expectedTurnId"], native_turn.as_str());
    assert_eq!(sent["input"][0]["text"], "also check the tests");
}

/// TURN-02 (the steer half of TURN-01): a steer codex accepts as its turn ends (its
/// `turn/steer` answer comes after `turn/completed`) is delivered exactly once: it is
/// recorded in that run, leaves the queue, and never starts a second run.
#[tokio::test]
async fn turn_02_a_steer_codex_accepts_as_its_turn_ends_is_delivered_exactly_once() {
    let h = harness(Duration::from_secs(60)).await;
    let run = h
        .exec
        .start_run(&h.thread.id, script(r#"[{"end_on_steer":true}]"#))
        .await
        .unwrap();
    native_turn_known(&h).await;
    let answer = h
        .exec
        .post_message(
            &h.thread.id,
            "one more thing".into(),
            None,
            MessageMode::Steer,
        )
        .await
        .unwrap();
    assert_eq!(answer.status, MessageDelivery::Steering, "{answer:?}");
    let ended = h.finish(&run.id).await;
    assert_eq!(ended.status, RunStatus::Completed, "{:?}", ended.error);
    // The run's terminal write would have started a second run with it, in the same
    // transaction: none started, the queue is empty, the steer is the run's item.
    let p = h.projection().await;
    assert!(p.thread.queue.is_empty(), "{:?}", p.thread.queue);
    assert_eq!(p.thread.run_count, 1, "{:?}", p.runs);
    assert_eq!(p.runs.len(), 1);
    let id = TurnItemId::steer_of(&run.id, &answer.queued.unwrap().id);
    let steers: Vec<_> = p.turn_items.iter().filter(|i| i.id == id).collect();
    assert_eq!(steers.len(), 1, "{:#?}", p.turn_items);
    assert_eq!(steers[0].run_id.as_ref(), Some(&run.id));
    assert_eq!(h.sent_methods("turn/start").len(), 1, "codex got it once");
    assert_eq!(h.sent_methods("turn/steer").len(), 1);
}

#[tokio::test]
async fn turn_01_a_steer_the_codex_turn_refuses_is_queued_with_codex_s_reason() {
    let h = harness(Duration::from_secs(60)).await;
    let run = h
        .exec
        .start_run(
            &h.thread.id,
            script(r#"[{"refuse_steer":"this turn cannot take input"},{"wait_interrupt":true}]"#),
        )
        .await
        .unwrap();
    native_turn_known(&h).await;
    let answer = h
        .exec
        .post_message(&h.thread.id, "also this".into(), None, MessageMode::Steer)
        .await
        .unwrap();
    assert_eq!(answer.status, MessageDelivery::Queued, "{answer:?}");
    let note = answer.note.unwrap();
    assert!(
        note.contains("codex refused turn/steer") && note.contains("this turn cannot take input"),
        "{note}"
    );
    let queue = h.exec.queue(&h.thread.id).await.unwrap().queue;
    assert_eq!(queue.entries.len(), 1);
    assert_eq!(
        queue.entries[0].steer_run_id, None,
        "a plain queued message now"
    );
    // It runs after the turn: the user stops it (pausing the queue) and resumes.
    h.exec
        .interrupt(&h.thread.id, knife_runtime::InterruptReason::User)
        .await
        .unwrap();
    let stopped = h.finish(&run.id).await;
    assert_eq!(stopped.status, RunStatus::Interrupted);
    h.exec.resume_queue(&h.thread.id).await.unwrap();
    let p = h
        .until("the queued message's run", |p| {
            p.runs.len() == 2 && p.runs[1].status == RunStatus::Completed
        })
        .await;
    assert_eq!(p.thread.run_count, 2);
    let starts = h.sent_methods("turn/start");
    assert_eq!(starts[1]["params"]["input"][0]["text"], "also this");
}
