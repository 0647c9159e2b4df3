//! Any node serves the API for any thread (SPEC.md SCALE-06), in process: two execution
//! services with their own node ids over one SQLite database and the scripted runtime.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::*;
use knife_protocol::*;
use knife_runtime::*;
use knife_store::StreamFilter;
use tokio_util::sync::CancellationToken;

/// The answers (`thread.command_applied`) in the log of `t`.
async fn answers(h: &Harness, t: &ThreadId) -> Vec<ThreadCommandApplied> {
    let filter = StreamFilter {
        thread_id: Some(t.clone()),
        after: 0,
        event_type: Some(THREAD_COMMAND_APPLIED.to_owned()),
    };
    h.store
        .read_events(&filter, 1000)
        .await
        .unwrap()
        .into_iter()
        .filter_map(|e| match e.event.body {
            EventBody::ThreadCommandApplied(a) => Some(a),
            _ => None,
        })
        .collect()
}

/// Node A runs a turn; node B queues a message in the thread row (no command) and
/// interrupts the run through a command that A's listener applies. The run ends
/// `interrupted` (user) on A, the queue is paused with B's message in it (TURN-02), and
/// the log holds A's answer. A command naming an older run is ignored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scale_06_node_b_queues_in_the_thread_row_and_interrupts_node_as_run_by_command() {
    let h = Harness::new(Drain::Hang).await;
    let t = h.thread(None).await;
    let a = h.execution_on("node-a");
    let b = h.execution_on("node-b");
    let stop = CancellationToken::new();
    let listeners = [
        a.start_command_listener(stop.clone()),
        b.start_command_listener(stop.clone()),
    ];
    let first = a
        .post_message(&t, "one".into(), None, MessageMode::Queue)
        .await
        .unwrap();
    assert_eq!(first.status, MessageDelivery::Started);
    h.drains.wait_started(1).await;
    let run = first.run_id.clone().unwrap();

    let queued = b
        .post_message(&t, "two".into(), None, MessageMode::Queue)
        .await
        .unwrap();
    assert_eq!(queued.status, MessageDelivery::Queued);
    assert_eq!(queued.run_id.as_ref(), Some(&run));
    assert_eq!(queued.position, Some(1));
    assert!(
        answers(&h, &t).await.is_empty(),
        "a queued message needs no command"
    );
    let rejected = b
        .post_message(&t, "no".into(), None, MessageMode::Reject)
        .await;
    assert!(
        matches!(rejected, Err(RuntimeError::RunInProgress { .. })),
        "{rejected:?}"
    );

    let asked = b.interrupt(&t, InterruptReason::User).await.unwrap();
    assert_eq!(asked.as_ref(), Some(&run));
    a.await_idle(&t).await;
    let p = h.projection(&t).await;
    assert_eq!(p.runs.len(), 1, "{:?}", p.runs);
    assert_eq!(p.runs[0].status, RunStatus::Interrupted);
    assert_eq!(
        p.runs[0].error.as_ref().and_then(|e| e.code.as_deref()),
        Some("user")
    );
    assert_eq!(
        p.thread.queue.paused.as_ref().map(|p| p.reason),
        Some(QueuePauseReason::UserInterrupt)
    );
    assert_eq!(p.thread.queue.entries[0].text, "two");
    let applied = answers(&h, &t).await;
    assert_eq!(applied.len(), 1, "{applied:?}");
    assert_eq!(applied[0].node, "node-a");
    assert_eq!(applied[0].run_id, run);
    assert_eq!(applied[0].outcome, CommandOutcome::Applied);

    // Run 2 starts on B (idle thread: B takes the lease); a stale command for run 1
    // that A would have applied acts on nothing.
    b.resume_queue(&t).await.unwrap();
    h.drains.wait_started(2).await;
    let stale = ThreadCommand {
        id: ThreadCommandId::new(),
        thread_id: t.clone(),
        run_id: run.clone(),
        from_node: "node-a".into(),
        issued_at: chrono::Utc::now(),
        action: CommandAction::Interrupt {
            reason: CommandInterruptReason::User,
        },
    };
    let stale_id = stale.id.clone();
    h.store
        .write(vec![DomainEvent::new(
            stale.issued_at,
            EventBody::ThreadCommanded(stale),
        )])
        .await
        .unwrap();
    let interrupted = a.interrupt(&t, InterruptReason::User).await.unwrap();
    assert_eq!(interrupted, Some(RunId::for_thread(&t, 2)), "A asks B now");
    b.await_idle(&t).await;
    let p = h.projection(&t).await;
    assert_eq!(p.runs[1].status, RunStatus::Interrupted, "{:?}", p.runs);
    let applied = answers(&h, &t).await;
    assert_eq!(applied.len(), 2, "{applied:?}");
    assert_eq!(applied[1].node, "node-b");
    assert!(
        applied.iter().all(|a| a.command_id != stale_id),
        "{applied:?}"
    );
    stop.cancel();
    for listener in listeners {
        listener.await.unwrap();
    }
}
