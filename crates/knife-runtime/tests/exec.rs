//! Durable execution (SPEC.md EXEC-01..10): terminal classification, claims written
//! with the run's start and released with its terminal, and the restart sweep —
//! against an in-process fake runtime and a real SQLite store, under paused time.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::*;
use knife_protocol::*;
use knife_runtime::execution::runs::{
    CONTINUE_AFTER_SERVER_RESTART, CONTINUE_DESCRIPTION, RESUME_EXHAUSTED_TYPE,
};
use knife_runtime::*;
use knife_store::StreamFilter;

#[test]
fn exec_01_success_and_typed_failures_classify() {
    assert_eq!(terminal(ExecutionExit::Success, None), Terminal::Succeeded);
    assert_eq!(
        terminal(
            ExecutionExit::Failure(ExecutionFailure::Transport {
                message: "Disconnected".into()
            }),
            None
        ),
        Terminal::Failed {
            error: RunError::new("provider.transport", "Disconnected")
        }
    );
    let http = RunError {
        http_status: Some(429),
        ..RunError::new("provider.http", "rate limited")
    };
    assert_eq!(
        terminal(
            ExecutionExit::Failure(ExecutionFailure::Typed(http.clone())),
            None
        ),
        Terminal::Failed {
            error: http.clone()
        }
    );
    // A runtime's typed failure keeps its type through the outcome mapping.
    assert_eq!(
        terminal_of_outcome(
            TurnOutcome::Failed {
                error: http.clone()
            },
            None
        ),
        Terminal::Failed { error: http }
    );
    assert_eq!(
        terminal_of_outcome(TurnOutcome::Completed, None),
        Terminal::Succeeded
    );
}

#[tokio::test(start_paused = true)]
async fn exec_01_a_failed_run_records_its_type_and_releases_the_claim() {
    let h = Harness::new(Drain::Fail(RunError::new(
        "provider.transport",
        "Disconnected",
    )))
    .await;
    let exec = h.execution();
    let thread = h.thread(None).await;
    let run = exec.start_run(&thread, "go".into()).await.unwrap();
    exec.await_idle(&thread).await;
    let run = h.store.get_run(&run.id).await.unwrap().unwrap();
    assert_eq!(run.status, RunStatus::Failed);
    let error = run.error.unwrap();
    assert_eq!(
        (error.error_type.as_str(), error.message.as_str()),
        ("provider.transport", "Disconnected")
    );
    let t = h.get(&thread).await;
    assert!(!t.is_claimed(), "a failure releases the claim: {t:?}");
}

#[test]
fn exec_02_interrupts_default_to_shutdown_and_keep_explicit_reasons() {
    use InterruptReason::*;
    let interrupted = |reason| terminal(ExecutionExit::Interrupted, reason);
    assert_eq!(
        interrupted(None),
        Terminal::Interrupted { reason: Shutdown }
    );
    assert_eq!(
        interrupted(Some(User)),
        Terminal::Interrupted { reason: User }
    );
    assert_eq!(
        interrupted(Some(Superseded)),
        Terminal::Interrupted { reason: Superseded }
    );
    assert_eq!(
        terminal(
            ExecutionExit::Failure(ExecutionFailure::UserInterrupted),
            None
        ),
        Terminal::Interrupted { reason: User }
    );
    // The same through a runtime's outcome: a user-interrupted failure type, an
    // interruption nobody recorded (the turn task was aborted), a recorded reason.
    assert_eq!(
        terminal_of_outcome(
            TurnOutcome::Failed {
                error: RunError::new(USER_INTERRUPTED, "Session interrupted by user")
            },
            None
        ),
        Terminal::Interrupted { reason: User }
    );
    assert_eq!(
        terminal_of_outcome(
            TurnOutcome::Interrupted {
                reason: "aborted".into()
            },
            None
        ),
        Terminal::Interrupted { reason: Shutdown }
    );
    assert_eq!(
        terminal_of_outcome(
            TurnOutcome::Interrupted {
                reason: "shutdown".into()
            },
            Some(Superseded)
        ),
        Terminal::Interrupted { reason: Superseded }
    );
    // Only a shutdown keeps the claim.
    assert!(!Terminal::Interrupted { reason: Shutdown }.releases_claim());
    assert!(Terminal::Interrupted { reason: User }.releases_claim());
    assert!(Terminal::Interrupted { reason: Superseded }.releases_claim());
    assert!(Terminal::Succeeded.releases_claim());
}

#[tokio::test(start_paused = true)]
async fn exec_03_the_sweep_lists_claimed_top_level_threads_and_releases_child_claims() {
    let h = Harness::new(Drain::Hang).await;
    let parent = h.thread(None).await;
    let child = h.thread(Some(&parent)).await;
    let idle = h.thread(None).await;
    h.seed_dead_run(&parent, 0).await;
    let child_run = h.seed_dead_run(&child, 0).await;

    let listed: Vec<ThreadId> = h
        .store
        .list_suspended_threads()
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.id)
        .collect();
    assert_eq!(listed, vec![parent.clone()]);

    let exec = h.execution();
    let report = h
        .restart(&exec, 10)
        .resume_suspended_threads()
        .await
        .unwrap();
    assert_eq!(report.children_released, vec![child.clone()]);
    assert_eq!(
        report
            .resumed
            .iter()
            .map(|r| r.0.clone())
            .collect::<Vec<_>>(),
        vec![parent.clone()]
    );
    h.drains.wait_started(1).await;
    // Only the parent drains; the parent keeps its claim, the child's is gone.
    let started = h.drains.started();
    assert_eq!(started.len(), 1);
    assert_eq!(started[0].thread, parent);
    assert_eq!(
        h.claims(&[&parent, &child, &idle]).await,
        map(&[(&parent, true), (&child, false), (&idle, false)])
    );
    assert_eq!(h.attempts(&child).await, 0);
    // The orphaned child's run is over; it gets no continuation.
    let child_p = h.projection(&child).await;
    let run = child_p.runs.iter().find(|r| r.id == child_run).unwrap();
    assert_eq!(run.status, RunStatus::Interrupted);
    assert!(child_p.thread.active_run_id.is_none());
    assert!(h.continuations(&child).await.is_empty());
    exec.shutdown(std::time::Duration::from_secs(5)).await;
}

#[tokio::test(start_paused = true)]
async fn exec_04_claims_commit_with_the_start_release_on_completion_survive_teardown() {
    let h = Harness::new(Drain::Hang).await;
    let interrupted = h.thread(None).await;
    let completed = h.thread(None).await;
    h.drains.plan(&completed, Drain::Gated);
    let exec = h.execution();
    let run_i = exec.start_run(&interrupted, "one".into()).await.unwrap();
    exec.start_run(&completed, "two".into()).await.unwrap();
    h.drains.wait_started(2).await;

    // The claim exists while the turns run: no shutdown hook involved.
    assert_eq!(
        h.claims(&[&interrupted, &completed]).await,
        map(&[(&interrupted, true), (&completed, true)])
    );
    // Same transaction as run.created: the thread.updated written with it carries it.
    let events = h
        .store
        .read_events(&StreamFilter::thread(interrupted.clone(), 0), 100)
        .await
        .unwrap();
    let created = events
        .iter()
        .position(|e| matches!(&e.event.body, EventBody::RunCreated(r) if r.id == run_i.id))
        .unwrap();
    let claim = events[created..]
        .iter()
        .find_map(|e| match &e.event.body {
            EventBody::ThreadUpdated(t) => Some((e.sequence, t.is_claimed())),
            _ => None,
        })
        .unwrap();
    assert_eq!(claim, (events[created].sequence + 3, true));

    // A drain that completes on its own releases its claim.
    h.drains.release();
    exec.await_idle(&completed).await;
    assert!(!h.get(&completed).await.is_claimed());

    // Teardown (graceful shutdown) interrupts with reason `shutdown` and keeps the claim.
    exec.shutdown(std::time::Duration::from_secs(30)).await;
    exec.await_idle(&interrupted).await;
    let run = h.store.get_run(&run_i.id).await.unwrap().unwrap();
    assert_eq!(run.status, RunStatus::Interrupted);
    assert_eq!(run.error.unwrap().code.as_deref(), Some("shutdown"));
    let t = h.get(&interrupted).await;
    assert!(t.is_claimed(), "{t:?}");
    assert!(t.active_run_id.is_none());
}

/// A shutdown while the run's provider session is still opening ends the run
/// `interrupted{shutdown}` at once and keeps the claim; the open is dropped, not
/// recorded as a `provider.open` failure.
#[tokio::test(start_paused = true)]
async fn exec_04_a_shutdown_during_the_open_keeps_the_claim() {
    let h = Harness::new(Drain::Hang).await;
    let thread = h.thread(None).await;
    h.drains.hang_opens();
    let exec = h.execution();
    let run = exec.start_run(&thread, "one".into()).await.unwrap();
    h.drains.wait_opens(1).await;

    // Only the execution service stops here: nothing else ends the hanging open.
    exec.shutdown(std::time::Duration::from_secs(30)).await;
    // Paused time jumps ahead while the store's writer thread works, so the wait
    // for the run's end is bounded in real time (10 s), by yielding.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while exec.is_active(&thread) {
        assert!(
            std::time::Instant::now() < deadline,
            "the run kept waiting for its open after the shutdown"
        );
        tokio::task::yield_now().await;
    }

    let run = h.store.get_run(&run.id).await.unwrap().unwrap();
    assert_eq!(run.status, RunStatus::Interrupted, "{run:?}");
    assert_eq!(run.error.unwrap().code.as_deref(), Some("shutdown"));
    let t = h.get(&thread).await;
    assert!(t.is_claimed(), "{t:?}");
}

/// The app shuts the manager down too: an open it stops (or refuses) under a run the
/// shutdown interrupted is that interruption, not a `provider.open` failure.
#[tokio::test(start_paused = true)]
async fn exec_09_an_open_stopped_by_the_manager_shutdown_keeps_the_claim() {
    let h = Harness::new(Drain::Hang).await;
    let thread = h.thread(None).await;
    h.drains.hang_opens();
    let exec = h.execution();
    exec.start_run(&thread, "one".into()).await.unwrap();
    h.drains.wait_opens(1).await;
    exec.manager().shutdown().await;
    exec.shutdown(std::time::Duration::from_secs(30)).await;
    exec.await_idle(&thread).await;
    let t = h.get(&thread).await;
    assert!(t.is_claimed(), "{t:?}");
    let p = h.projection(&thread).await;
    assert_eq!(p.runs[0].status, RunStatus::Interrupted, "{:?}", p.runs[0]);
}

#[tokio::test(start_paused = true)]
async fn exec_05_a_user_interrupt_releases_the_claim() {
    let h = Harness::new(Drain::Hang).await;
    let user = h.thread(None).await;
    let superseded = h.thread(None).await;
    let exec = h.execution();
    exec.start_run(&user, "one".into()).await.unwrap();
    exec.start_run(&superseded, "two".into()).await.unwrap();
    h.drains.wait_started(2).await;
    assert!(h.get(&user).await.is_claimed());

    exec.interrupt(&user, InterruptReason::User).await.unwrap();
    exec.interrupt(&superseded, InterruptReason::Superseded)
        .await
        .unwrap();
    exec.await_idle(&user).await;
    exec.await_idle(&superseded).await;
    assert_eq!(
        h.claims(&[&user, &superseded]).await,
        map(&[(&user, false), (&superseded, false)])
    );

    // Never resurrected: a later sweep does nothing.
    let report = h
        .restart(&exec, 10)
        .resume_suspended_threads()
        .await
        .unwrap();
    assert!(report.resumed.is_empty(), "{report:?}");
    assert_eq!(h.drains.started().len(), 2);
}

/// A user interrupt followed by a shutdown before the run's terminal is written keeps
/// the user's reason: the claim is released and the stopped work is never resumed.
#[tokio::test(start_paused = true)]
async fn exec_05_user_interrupt_is_not_overwritten_by_shutdown() {
    let h = Harness::new(Drain::Hang).await;
    let thread = h.thread(None).await;
    let exec = h.execution();
    let run = exec.start_run(&thread, "one".into()).await.unwrap();
    h.drains.wait_started(1).await;

    exec.interrupt(&thread, InterruptReason::User)
        .await
        .unwrap();
    // Ctrl-C right after: the app calls shutdown (twice) before the terminal lands.
    exec.shutdown(std::time::Duration::from_secs(30)).await;
    exec.shutdown(std::time::Duration::from_secs(30)).await;
    exec.await_idle(&thread).await;

    let run = h.store.get_run(&run.id).await.unwrap().unwrap();
    assert_eq!(run.status, RunStatus::Interrupted);
    assert_eq!(run.error.unwrap().code.as_deref(), Some("user"));
    let t = h.get(&thread).await;
    assert!(
        !t.is_claimed(),
        "user-interrupted work must not be resumed: {t:?}"
    );
    let next = h.execution();
    let report = h
        .restart(&next, 10)
        .resume_suspended_threads()
        .await
        .unwrap();
    assert!(report.resumed.is_empty(), "{report:?}");
}

/// A panic while driving a run frees the thread: `await_idle` returns, and the next
/// message starts a run (no `run_in_progress` until restart); the panicked run is
/// settled by that next run.
#[tokio::test(start_paused = true)]
async fn exec_04_a_panicking_drive_frees_the_thread() {
    let h = Harness::new(Drain::Complete).await;
    let thread = h.thread(None).await;
    h.drains.plan(&thread, Drain::Panic);
    let exec = h.execution();
    let first = exec.start_run(&thread, "one".into()).await.unwrap();
    h.drains.wait_started(1).await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while exec.is_active(&thread) {
        assert!(
            std::time::Instant::now() < deadline,
            "the thread stayed active after its drive panicked"
        );
        tokio::task::yield_now().await;
    }
    exec.await_idle(&thread).await;

    h.drains.plan(&thread, Drain::Complete);
    let second = exec.start_run(&thread, "two".into()).await.unwrap();
    exec.await_idle(&thread).await;
    let p = h.projection(&thread).await;
    let status = |id: &RunId| p.runs.iter().find(|r| &r.id == id).unwrap().status;
    assert_eq!(status(&second.id), RunStatus::Completed);
    assert_ne!(status(&first.id), RunStatus::Running, "{:?}", p.runs);
    exec.shutdown(std::time::Duration::from_secs(5)).await;
}

/// A runtime that never answers the interrupt does not keep a user-interrupted run
/// from ending: the interrupt call is time-boxed by the interrupt grace, the run ends
/// `interrupted{user}` and its claim is released.
#[tokio::test(start_paused = true)]
async fn exec_05_a_runtime_deaf_to_the_interrupt_still_ends_the_run() {
    let h = Harness::new(Drain::Deaf).await;
    let thread = h.thread(None).await;
    let exec = h.execution();
    let run = exec.start_run(&thread, "one".into()).await.unwrap();
    h.drains.wait_started(1).await;
    exec.interrupt(&thread, InterruptReason::User)
        .await
        .unwrap();
    // Virtual time moves in small steps; the wait is bounded in real time.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while exec.is_active(&thread) {
        assert!(
            std::time::Instant::now() < deadline,
            "the run waited for the runtime's interrupt answer"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let run = h.store.get_run(&run.id).await.unwrap().unwrap();
    assert_eq!(run.status, RunStatus::Interrupted);
    assert_eq!(run.error.unwrap().code.as_deref(), Some("user"));
    assert!(!h.get(&thread).await.is_claimed());
}

#[tokio::test(start_paused = true)]
async fn exec_06_the_sweep_starts_every_claimed_execution_concurrently() {
    let h = Harness::new(Drain::Hang).await;
    let mut threads = Vec::new();
    for _ in 0..5 {
        let t = h.thread(None).await;
        h.seed_dead_run(&t, 0).await;
        threads.push(t);
    }
    let exec = h.execution();
    // No drain ever finishes: the sweep returning with all five started proves it
    // does not wait for earlier drains.
    let report = h
        .restart(&exec, 10)
        .resume_suspended_threads()
        .await
        .unwrap();
    assert_eq!(report.resumed.len(), 5);
    h.drains.wait_started(5).await;
    let mut active: Vec<ThreadId> = exec.active_threads().into_iter().collect();
    active.sort();
    threads.sort();
    assert_eq!(active, threads);
    exec.shutdown(std::time::Duration::from_secs(5)).await;
}

#[tokio::test(start_paused = true)]
async fn exec_07_each_claimed_thread_is_resumed_once() {
    let h = Harness::new(Drain::Complete).await;
    let first = h.thread(None).await;
    let second = h.thread(None).await;
    let dead = h.seed_dead_run(&first, 0).await;
    h.seed_claim(&second, 0).await;
    let exec = h.execution();
    let sweep = h.restart(&exec, 10);

    let report = sweep.resume_suspended_threads().await.unwrap();
    assert_eq!(report.resumed.len(), 2);
    exec.await_idle(&first).await;
    exec.await_idle(&second).await;
    let mut drained: Vec<ThreadId> = h.drains.started().into_iter().map(|s| s.thread).collect();
    drained.sort();
    let mut both = vec![first.clone(), second.clone()];
    both.sort();
    assert_eq!(drained, both);
    for s in h.drains.started() {
        assert_eq!(s.text, CONTINUE_AFTER_SERVER_RESTART);
    }
    for t in [&first, &second] {
        let items = h.continuations(t).await;
        assert_eq!(items.len(), 1, "{items:?}");
        assert!(matches!(
            &items[0].kind,
            TurnItemKind::UserMessage { text, origin: MessageOrigin::System, description: Some(d) }
                if text == CONTINUE_AFTER_SERVER_RESTART && d == CONTINUE_DESCRIPTION
        ));
    }
    // The dead run ended (its running tool aborted); the continuation run completed.
    let p = h.projection(&first).await;
    assert_eq!(
        p.runs.iter().find(|r| r.id == dead).unwrap().status,
        RunStatus::Interrupted
    );
    assert!(p.turn_items.iter().any(|i| matches!(
        &i.kind,
        TurnItemKind::ToolCall { error: Some(e), .. } if e == "Tool execution aborted"
    )));
    assert_eq!(p.runs.last().unwrap().status, RunStatus::Completed);
    // Natural completion released the claims and reset the counters.
    assert_eq!(
        h.claims(&[&first, &second]).await,
        map(&[(&first, false), (&second, false)])
    );
    assert_eq!(h.attempts(&first).await, 0);

    // A second sweep does nothing.
    let again = sweep.resume_suspended_threads().await.unwrap();
    assert_eq!(again, SweepReport::default());
    assert_eq!(h.drains.started().len(), 2);
    assert_eq!(h.continuations(&first).await.len(), 1);
    assert_eq!(h.continuations(&second).await.len(), 1);
}

#[tokio::test(start_paused = true)]
async fn exec_08_a_spent_budget_terminalises_with_aborted_instead_of_draining() {
    let h = Harness::new(Drain::Complete).await;
    let crashed = h.thread(None).await;
    let shut_down = h.thread(None).await;
    // Claims from dead processes, already resumed twice without completing.
    let dead = h.seed_dead_run(&crashed, 2).await;
    h.seed_claim(&shut_down, 2).await;
    let exec = h.execution();
    let report = h
        .restart(&exec, 2)
        .resume_suspended_threads()
        .await
        .unwrap();

    assert!(h.drains.started().is_empty());
    let mut exhausted = report.exhausted.clone();
    exhausted.sort();
    let mut both = vec![crashed.clone(), shut_down.clone()];
    both.sort();
    assert_eq!(exhausted, both);
    let run = h.store.get_run(&dead).await.unwrap().unwrap();
    assert_eq!(run.status, RunStatus::Failed);
    assert_eq!(run.error.unwrap().error_type, RESUME_EXHAUSTED_TYPE);
    for t in [&crashed, &shut_down] {
        let t = h.get(t).await;
        assert_eq!(t.status, ThreadStatus::Failed);
        assert_eq!(t.last_error.unwrap().error_type, "aborted");
        // The terminal released the claim and reset the counter atomically.
        assert!(t.time_suspended.is_none());
        assert_eq!(t.resume_attempts, 0);
        assert!(t.active_run_id.is_none());
    }
    assert!(h.continuations(&crashed).await.is_empty());
    // Later sweeps do nothing.
    let again = h
        .restart(&exec, 2)
        .resume_suspended_threads()
        .await
        .unwrap();
    assert_eq!(again, SweepReport::default());
}

#[tokio::test(start_paused = true)]
async fn exec_09_each_resume_counts_durably_before_the_drain_and_shutdown_keeps_both() {
    let h = Harness::new(Drain::Hang).await;
    let thread = h.thread(None).await;
    h.seed_dead_run(&thread, 0).await;

    let exec = h.execution();
    h.restart(&exec, 10)
        .resume_suspended_threads()
        .await
        .unwrap();
    h.drains.wait_started(1).await;
    // Counted before the drain runs; the claim is held throughout.
    assert_eq!(h.attempts(&thread).await, 1);
    assert!(h.get(&thread).await.is_claimed());

    // A graceful shutdown during the drain keeps both.
    exec.shutdown(std::time::Duration::from_secs(30)).await;
    exec.await_idle(&thread).await;
    assert_eq!(h.attempts(&thread).await, 1);
    assert!(h.get(&thread).await.is_claimed());

    // The next boot counts attempt 2 against the same work.
    let next = h.execution();
    let report = h
        .restart(&next, 10)
        .resume_suspended_threads()
        .await
        .unwrap();
    assert_eq!(report.resumed.len(), 1);
    assert_eq!(report.resumed[0].2, 2);
    h.drains.wait_started(2).await;
    assert_eq!(h.attempts(&thread).await, 2);
    assert_eq!(h.continuations(&thread).await.len(), 2);
    next.shutdown(std::time::Duration::from_secs(5)).await;
}

#[tokio::test(start_paused = true)]
async fn exec_10_the_sweep_leaves_threads_draining_in_this_process_untouched() {
    let h = Harness::new(Drain::Hang).await;
    let thread = h.thread(None).await;
    let exec = h.execution();
    exec.start_run(&thread, "live".into()).await.unwrap();
    h.drains.wait_started(1).await;
    let before = h.projection(&thread).await.latest_sequence;

    let report = h
        .restart(&exec, 10)
        .resume_suspended_threads()
        .await
        .unwrap();
    assert_eq!(report.skipped_active, vec![thread.clone()]);
    assert!(report.resumed.is_empty());
    assert!(h.continuations(&thread).await.is_empty());
    assert_eq!(h.attempts(&thread).await, 0);
    assert!(h.get(&thread).await.is_claimed());
    assert_eq!(h.projection(&thread).await.latest_sequence, before);
    assert_eq!(h.drains.started().len(), 1);
    // Direct resume of a locally draining thread joins it: nothing written either.
    assert_eq!(
        exec.resume(&thread).await.unwrap(),
        ResumeOutcome::AlreadyActive
    );
    assert_eq!(h.projection(&thread).await.latest_sequence, before);
    exec.shutdown(std::time::Duration::from_secs(5)).await;
}

#[tokio::test(start_paused = true)]
async fn resuming_an_unclaimed_thread_writes_nothing() {
    let h = Harness::new(Drain::Complete).await;
    let thread = h.thread(None).await;
    let exec = h.execution();
    let before = h.projection(&thread).await.latest_sequence;
    assert_eq!(
        exec.resume(&thread).await.unwrap(),
        ResumeOutcome::NotClaimed
    );
    assert_eq!(h.projection(&thread).await.latest_sequence, before);
    assert!(
        exec.active_threads().is_empty(),
        "the reservation was undone"
    );
    assert!(h.drains.started().is_empty());
    // The thread still takes a message.
    exec.start_run(&thread, "hello".into()).await.unwrap();
    exec.await_idle(&thread).await;
    assert!(!h.get(&thread).await.is_claimed());
}

#[tokio::test(start_paused = true)]
async fn live_07_a_sweep_of_more_claims_than_its_concurrency_resumes_each_once() {
    let h = Harness::new(Drain::Complete).await;
    let mut threads = Vec::new();
    for _ in 0..40 {
        let t = h.thread(None).await;
        h.seed_claim(&t, 0).await;
        threads.push(t);
    }
    let exec = h.execution();
    // Four resumes in flight at a time: the other 36 wait their turn, none is lost.
    let sweep = RestartService::new(
        exec.clone(),
        RestartOptions {
            max_resume_attempts: 10,
            concurrency: 4,
        },
    );
    let report = sweep.resume_suspended_threads().await.unwrap();
    let mut resumed: Vec<ThreadId> = report.resumed.iter().map(|(t, _, _)| t.clone()).collect();
    resumed.sort();
    threads.sort();
    assert_eq!(resumed, threads, "every claimed thread, once");
    assert!(report.resumed.iter().all(|(_, _, attempt)| *attempt == 1));
    for t in &threads {
        exec.await_idle(t).await;
    }
    let mut drained: Vec<ThreadId> = h.drains.started().into_iter().map(|s| s.thread).collect();
    drained.sort();
    assert_eq!(drained, threads, "one drain each");
    assert!(h.store.list_suspended_threads().await.unwrap().is_empty());
    exec.shutdown(std::time::Duration::from_secs(5)).await;
}
