//! The message queue and steering (SPEC.md TURN-01/02) against the durable-execution
//! harness: a real SQLite store on disk, the scripted in-process runtime, paused time.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::*;
use knife_protocol::*;
use knife_runtime::*;

async fn post(
    exec: &ExecutionService,
    t: &ThreadId,
    text: &str,
    mode: MessageMode,
) -> PostMessageResponse {
    exec.post_message(t, text.into(), None, mode).await.unwrap()
}

/// The user texts of the runs of `t` that the runtime started, in order.
fn texts(h: &Harness, t: &ThreadId) -> Vec<String> {
    h.drains
        .started()
        .into_iter()
        .filter(|s| &s.thread == t)
        .map(|s| s.text)
        .collect()
}

/// Waits (paused time: instant) until `t` has had `n` runs and none is active.
async fn settle(h: &Harness, exec: &ExecutionService, t: &ThreadId, n: u32) {
    for _ in 0..500 {
        exec.await_idle(t).await;
        let thread = h.get(t).await;
        if thread.run_count >= n && thread.active_run_id.is_none() {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    panic!("thread {t} did not reach {n} finished runs");
}

#[tokio::test(start_paused = true)]
async fn turn_01_messages_during_a_run_queue_in_order_and_start_with_the_terminal_write() {
    let h = Harness::new(Drain::Gated).await;
    let t = h.thread(None).await;
    let exec = h.execution();
    let first = post(&exec, &t, "one", MessageMode::Queue).await;
    assert_eq!(first.status, MessageDelivery::Started);
    h.drains.wait_started(1).await;
    let second = post(&exec, &t, "two", MessageMode::Queue).await;
    let third = post(&exec, &t, "three", MessageMode::Queue).await;
    assert_eq!(second.status, MessageDelivery::Queued);
    assert_eq!((second.position, third.position), (Some(1), Some(2)));
    // Visible with positions, durable in the thread row.
    let queue = exec.queue(&t).await.unwrap();
    let queued: Vec<_> = queue
        .queue
        .entries
        .iter()
        .map(|e| e.text.as_str())
        .collect();
    assert_eq!(queued, ["two", "three"]);
    assert_eq!(queue.active_run_id, first.run_id);
    assert_eq!(h.get(&t).await.queue.entries.len(), 2);

    for n in 1..=3 {
        h.drains.wait_started(n).await;
        h.drains.release();
        tokio::task::yield_now().await;
    }
    settle(&h, &exec, &t, 3).await;
    assert_eq!(texts(&h, &t), ["one", "two", "three"]);
    let p = h.projection(&t).await;
    assert!(p.runs.iter().all(|r| r.status == RunStatus::Completed));
    assert!(p.thread.queue.is_empty());
    assert!(!p.thread.is_claimed());

    // Run 1's terminal and run 2's creation are one write: no thread row between
    // them shows the thread idle or unclaimed.
    let events = h
        .store
        .read_events(&knife_store::StreamFilter::thread(t.clone(), 0), 10_000)
        .await
        .unwrap();
    let run1 = RunId::for_thread(&t, 1);
    let end = events
        .iter()
        .position(|e| matches!(&e.event.body, EventBody::RunUpdated(r) if r.id == run1 && r.status.is_terminal()))
        .unwrap();
    let next_thread = events[end..]
        .iter()
        .find_map(|e| match &e.event.body {
            EventBody::ThreadUpdated(t) => Some(t.clone()),
            _ => None,
        })
        .unwrap();
    assert_eq!(next_thread.active_run_id, Some(RunId::for_thread(&t, 2)));
    assert!(next_thread.is_claimed());
    let created = events[end..]
        .iter()
        .position(|e| matches!(&e.event.body, EventBody::RunCreated(r) if r.ordinal == 2))
        .unwrap();
    let idle_between = events[end..end + created]
        .iter()
        .any(|e| matches!(&e.event.body, EventBody::ThreadUpdated(t) if t.active_run_id.is_none()));
    assert!(!idle_between);
}

#[tokio::test(start_paused = true)]
async fn turn_01_a_queued_message_can_be_cancelled_and_reject_answers_run_in_progress() {
    let h = Harness::new(Drain::Gated).await;
    let t = h.thread(None).await;
    let exec = h.execution();
    post(&exec, &t, "one", MessageMode::Queue).await;
    h.drains.wait_started(1).await;
    let two = post(&exec, &t, "two", MessageMode::Queue).await;
    post(&exec, &t, "three", MessageMode::Queue).await;
    let left = exec
        .cancel_queued(&t, &two.queued.unwrap().id)
        .await
        .unwrap();
    assert_eq!(left.queue.entries.len(), 1);
    let gone = exec
        .cancel_queued(&t, &QueuedMessageId::from("queued_nope"))
        .await
        .unwrap_err();
    assert!(
        matches!(gone, RuntimeError::QueuedMessageNotFound { .. }),
        "{gone}"
    );
    let refused = exec
        .post_message(&t, "four".into(), None, MessageMode::Reject)
        .await
        .unwrap_err();
    assert!(
        matches!(refused, RuntimeError::RunInProgress { .. }),
        "{refused}"
    );
    for n in 1..=2 {
        h.drains.wait_started(n).await;
        h.drains.release();
        tokio::task::yield_now().await;
    }
    settle(&h, &exec, &t, 2).await;
    assert_eq!(texts(&h, &t), ["one", "three"]);
}

#[tokio::test(start_paused = true)]
async fn turn_01_interrupt_mode_supersedes_the_run_and_goes_ahead_of_the_queue() {
    let h = Harness::new(Drain::Hang).await;
    let t = h.thread(None).await;
    let exec = h.execution();
    post(&exec, &t, "one", MessageMode::Queue).await;
    h.drains.wait_started(1).await;
    post(&exec, &t, "later", MessageMode::Queue).await;
    h.drains.plan(&t, Drain::Complete);
    let urgent = post(&exec, &t, "now", MessageMode::Interrupt).await;
    assert_eq!(urgent.status, MessageDelivery::Queued);
    assert_eq!(urgent.position, Some(1));
    assert!(urgent.note.unwrap().contains("superseded"));
    settle(&h, &exec, &t, 3).await;
    assert_eq!(texts(&h, &t), ["one", "now", "later"]);
    let run1 = h
        .store
        .get_run(&RunId::for_thread(&t, 1))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(run1.status, RunStatus::Interrupted);
    assert_eq!(run1.error.unwrap().code.as_deref(), Some("superseded"));
}

#[tokio::test(start_paused = true)]
async fn turn_01_steer_is_delivered_into_the_running_turn_once() {
    let h = Harness::new(Drain::Gated).await;
    h.drains.allow_steering();
    let t = h.thread(None).await;
    let exec = h.execution();
    let run = post(&exec, &t, "one", MessageMode::Queue)
        .await
        .run_id
        .unwrap();
    h.drains.wait_started(1).await;
    let steer = post(&exec, &t, "also this", MessageMode::Steer).await;
    assert_eq!(steer.status, MessageDelivery::Steering);
    assert_eq!(steer.run_id.as_ref(), Some(&run));
    h.drains.release();
    settle(&h, &exec, &t, 1).await;
    assert_eq!(h.drains.steers(), ["also this"]);
    // Delivered: recorded in the run, gone from the queue, no extra run.
    let p = h.projection(&t).await;
    let id = TurnItemId::steer_of(&run, &steer.queued.unwrap().id);
    assert!(p.turn_items.iter().any(|i| i.id == id));
    assert!(p.thread.queue.is_empty(), "{:?}", p.thread.queue);
    assert_eq!(p.thread.run_count, 1);
}

#[tokio::test(start_paused = true)]
async fn turn_01_steer_a_runtime_cannot_take_is_queued_saying_so() {
    let h = Harness::new(Drain::Gated).await;
    let t = h.thread(None).await;
    let exec = h.execution();
    post(&exec, &t, "one", MessageMode::Queue).await;
    h.drains.wait_started(1).await;
    let steer = post(&exec, &t, "also this", MessageMode::Steer).await;
    assert_eq!(steer.status, MessageDelivery::Queued);
    assert!(steer.note.unwrap().contains("cannot take"));
    let entry = &exec.queue(&t).await.unwrap().queue.entries[0];
    assert_eq!(entry.steer_run_id, None);
    for n in 1..=2 {
        h.drains.wait_started(n).await;
        h.drains.release();
        tokio::task::yield_now().await;
    }
    settle(&h, &exec, &t, 2).await;
    assert_eq!(texts(&h, &t), ["one", "also this"]);
}

#[tokio::test(start_paused = true)]
async fn turn_01_steering_an_idle_thread_starts_a_run_and_says_so() {
    let h = Harness::new(Drain::Complete).await;
    let t = h.thread(None).await;
    let exec = h.execution();
    let steer = post(&exec, &t, "go", MessageMode::Steer).await;
    assert_eq!(steer.status, MessageDelivery::Started);
    assert!(steer.note.unwrap().contains("no run was active"));
    settle(&h, &exec, &t, 1).await;
}

#[tokio::test(start_paused = true)]
async fn turn_02_a_user_interrupt_pauses_the_queue_until_it_is_resumed() {
    let h = Harness::new(Drain::Hang).await;
    let t = h.thread(None).await;
    let exec = h.execution();
    post(&exec, &t, "one", MessageMode::Queue).await;
    h.drains.wait_started(1).await;
    post(&exec, &t, "two", MessageMode::Queue).await;
    h.drains.plan(&t, Drain::Complete);
    exec.interrupt(&t, InterruptReason::User).await.unwrap();
    settle(&h, &exec, &t, 1).await;
    tokio::time::sleep(std::time::Duration::from_secs(5)).await;
    let paused = h.get(&t).await.queue;
    assert_eq!(
        paused.paused.as_ref().map(|p| p.reason),
        Some(QueuePauseReason::UserInterrupt)
    );
    assert_eq!(paused.entries.len(), 1);
    assert_eq!(texts(&h, &t), ["one"], "a paused queue starts nothing");
    // A new process keeps the pause (durable), and resuming starts the entry.
    exec.manager().shutdown().await;
    let exec = h.execution();
    let report = h
        .restart(&exec, 10)
        .resume_suspended_threads()
        .await
        .unwrap();
    assert!(report.resumed.is_empty());
    assert_eq!(texts(&h, &t), ["one"]);
    let resumed = exec.resume_queue(&t).await.unwrap();
    assert!(resumed.queue.paused.is_none());
    settle(&h, &exec, &t, 2).await;
    assert_eq!(texts(&h, &t), ["one", "two"]);
    assert!(h.get(&t).await.queue.is_empty());
}

#[tokio::test(start_paused = true)]
async fn turn_02_clearing_a_paused_queue_drops_its_messages() {
    let h = Harness::new(Drain::Hang).await;
    let t = h.thread(None).await;
    let exec = h.execution();
    post(&exec, &t, "one", MessageMode::Queue).await;
    h.drains.wait_started(1).await;
    post(&exec, &t, "two", MessageMode::Queue).await;
    exec.interrupt(&t, InterruptReason::User).await.unwrap();
    settle(&h, &exec, &t, 1).await;
    let cleared = exec.clear_queue(&t).await.unwrap();
    assert!(cleared.queue.is_empty());
    assert!(h.get(&t).await.queue.is_empty());
}

#[tokio::test(start_paused = true)]
async fn turn_02_a_spent_resume_budget_pauses_the_queue() {
    let h = Harness::new(Drain::Complete).await;
    let t = h.thread(None).await;
    h.seed_dead_run(&t, 2).await;
    let mut thread = h.get(&t).await;
    thread.queue.entries.push(QueuedMessage {
        id: QueuedMessageId::new(),
        text: "queued before the crash".into(),
        model: None,
        queued_at: h.clock.now(),
        steer_run_id: None,
        note: None,
    });
    h.store
        .write(vec![DomainEvent::new(
            h.clock.now(),
            EventBody::ThreadUpdated(thread),
        )])
        .await
        .unwrap();
    let exec = h.execution();
    let report = h
        .restart(&exec, 2)
        .resume_suspended_threads()
        .await
        .unwrap();
    assert_eq!(report.exhausted, vec![t.clone()]);
    let thread = h.get(&t).await;
    assert_eq!(
        thread.queue.paused.map(|p| p.reason),
        Some(QueuePauseReason::ResumeExhausted)
    );
    assert_eq!(thread.queue.entries.len(), 1);
    assert!(h.drains.started().is_empty());
}

#[tokio::test(start_paused = true)]
async fn turn_01_a_crash_with_two_queued_messages_delivers_each_once_after_restart() {
    let h = Harness::new(Drain::Hang).await;
    let t = h.thread(None).await;
    let crashed = h.execution();
    post(&crashed, &t, "one", MessageMode::Queue).await;
    h.drains.wait_started(1).await;
    post(&crashed, &t, "two", MessageMode::Queue).await;
    post(&crashed, &t, "three", MessageMode::Queue).await;
    // The process dies: nothing of it writes again (its turn hangs forever).
    h.drains.set_default(Drain::Complete);
    h.drains.plan(&t, Drain::Complete);
    let exec = h.execution();
    let report = h
        .restart(&exec, 10)
        .resume_suspended_threads()
        .await
        .unwrap();
    assert_eq!(report.resumed.len(), 1, "{report:?}");
    settle(&h, &exec, &t, 4).await;
    let texts = texts(&h, &t);
    assert_eq!(
        texts,
        [
            "one".to_owned(),
            knife_runtime::execution::runs::CONTINUE_AFTER_SERVER_RESTART.to_owned(),
            "two".to_owned(),
            "three".to_owned()
        ]
    );
    let p = h.projection(&t).await;
    let user_items: Vec<_> = p
        .turn_items
        .iter()
        .filter_map(|i| match &i.kind {
            TurnItemKind::UserMessage {
                text,
                origin: MessageOrigin::User,
                ..
            } => Some(text.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(user_items, ["one", "two", "three"], "each delivered once");
    assert!(p.thread.queue.is_empty());
    assert!(!p.thread.is_claimed());
}
