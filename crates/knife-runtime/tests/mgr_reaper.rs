//! The reaper wired to the session manager (REAP-01): `ManagerStopper` releases live
//! sessions, detaches one thread of a shared one, stops orphan rows; the pump raises
//! a session row's last-seen time, throttled.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use knife_protocol::*;
use knife_runtime::reaper::{Reaper, ReaperOptions, SessionStopper, StopOutcome};
use knife_runtime::sessions::*;
use knife_testkit::sessions::FakeBehaviour;
use support::*;

fn stopper(h: &Harness) -> ManagerStopper {
    ManagerStopper::new(h.manager.clone(), h.store.clone(), h.clock.clone())
}

async fn last_seen(h: &Harness, id: &ProviderSessionId) -> Timestamp {
    h.store
        .list_session_activity()
        .await
        .unwrap()
        .into_iter()
        .find(|row| &row.session.id == id)
        .unwrap()
        .last_seen_at
}

#[tokio::test(start_paused = true)]
async fn reap_01_a_sweep_stops_a_stale_live_session_through_the_manager() {
    let h = Harness::new(FakeBehaviour::default(), |o| {
        o.idle_timeout = Duration::from_secs(3600);
    })
    .await;
    let thread = h.thread().await;
    let id = exclusive(&thread);
    h.open(&id, &thread).await;
    let reaper = Reaper::new(
        h.store.clone(),
        h.clock.clone(),
        Arc::new(stopper(&h)),
        ReaperOptions {
            inactivity_threshold: Duration::ZERO,
            ..Default::default()
        },
    );
    let report = reaper.sweep().await.unwrap();
    assert_eq!(report.reaped, vec![(id.clone(), thread.clone())]);
    assert!(!h.manager.is_live(&id));
    assert_eq!(h.adapter.state().close_count(), 1);
    assert_eq!(h.session_status(&id).await, Some(SessionStatus::Stopped));
    // A stopped row is not stopped again (REAP-04).
    let again = reaper.sweep().await.unwrap();
    assert!(again.reaped.is_empty(), "{again:?}");
}

#[tokio::test(start_paused = true)]
async fn reap_01_stopping_one_thread_of_a_shared_session_detaches_only_it() {
    let h = Harness::new(
        FakeBehaviour {
            shared: true,
            ..Default::default()
        },
        |o| o.idle_timeout = Duration::from_secs(3600),
    )
    .await;
    let (a, b) = (h.thread().await, h.thread().await);
    h.open(&shared(), &a).await;
    let handle = h.open(&shared(), &b).await;
    stopper(&h).stop_session(&a, &shared()).await.unwrap();
    assert!(h.manager.is_live(&shared()));
    assert_eq!(handle.attached_threads(), vec![b.clone()]);
    // The last thread: the session itself is released.
    stopper(&h).stop_session(&b, &shared()).await.unwrap();
    assert!(!h.manager.is_live(&shared()));
    assert_eq!(
        h.session_status(&shared()).await,
        Some(SessionStatus::Stopped)
    );
}

#[tokio::test(start_paused = true)]
async fn reap_01_a_row_without_a_live_session_is_recorded_stopped() {
    let h = Harness::new(FakeBehaviour::default(), |_| {}).await;
    let thread = h.thread().await;
    let id = exclusive(&thread);
    let now = h.clock.now();
    let row = ProviderSession {
        id: id.clone(),
        driver: "fake".into(),
        provider_instance_id: instance(),
        status: SessionStatus::Ready,
        cwd: h.workspace.display().to_string(),
        model: None,
        capabilities: ProviderCapabilities::default(),
        created_at: now,
        updated_at: now,
        last_error: None,
    };
    h.store
        .write(vec![
            DomainEvent::new(now, EventBody::ProviderSessionAttached(row)).with_thread(&thread),
        ])
        .await
        .unwrap();
    stopper(&h).stop_session(&thread, &id).await.unwrap();
    assert_eq!(h.session_status(&id).await, Some(SessionStatus::Stopped));
    assert_eq!(h.adapter.state().open_count(), 0, "nothing was opened");
}

#[tokio::test(start_paused = true)]
async fn reap_01_the_pump_raises_last_seen_at_most_every_30_seconds() {
    let h = Harness::new(FakeBehaviour::default(), |o| {
        o.idle_timeout = Duration::from_secs(3600);
    })
    .await;
    let thread = h.thread().await;
    let id = exclusive(&thread);
    h.open(&id, &thread).await;
    let opened = last_seen(&h, &id).await;
    let control = h.adapter.session(&id).unwrap();

    assert!(control.push(AdapterEvent::TurnItemUpdated(assistant_item(
        &thread, 1, "a"
    ))));
    wait_until_async(Duration::from_secs(5), "the first touch", || async {
        last_seen(&h, &id).await > opened
    })
    .await;
    let touched = last_seen(&h, &id).await;

    // More activity within 30 s: no new write of the row.
    assert!(control.push(AdapterEvent::TurnItemUpdated(assistant_item(
        &thread, 2, "b"
    ))));
    settle().await;
    assert_eq!(last_seen(&h, &id).await, touched);

    // After 30 s, the next event raises it again.
    tokio::time::advance(pump_touch_interval()).await;
    assert!(control.push(AdapterEvent::TurnItemUpdated(assistant_item(
        &thread, 3, "c"
    ))));
    wait_until_async(Duration::from_secs(5), "the second touch", || async {
        last_seen(&h, &id).await > touched
    })
    .await;
}

fn pump_touch_interval() -> Duration {
    knife_runtime::sessions::TOUCH_INTERVAL
}

/// A stale row whose live session is running a turn (the store does not know of a
/// run, e.g. a turn started outside a run) is skipped and kept: the stopper re-checks
/// busy on the live entry instead of releasing it under the turn.
#[tokio::test(start_paused = true)]
async fn reap_02_a_busy_live_session_is_skipped_and_kept() {
    let h = Harness::new(FakeBehaviour::default(), |o| {
        o.idle_timeout = Duration::from_secs(3600);
        o.turn_stall_timeout = Duration::ZERO;
    })
    .await;
    let thread = h.thread().await;
    let id = exclusive(&thread);
    let handle = h.open(&id, &thread).await;
    handle.start_turn(turn(&thread, 1)).await.unwrap();
    let reaper = Reaper::new(
        h.store.clone(),
        h.clock.clone(),
        Arc::new(stopper(&h)),
        ReaperOptions {
            inactivity_threshold: Duration::ZERO,
            ..Default::default()
        },
    );
    let report = reaper.sweep().await.unwrap();
    assert!(report.reaped.is_empty(), "{report:?}");
    assert_eq!(report.skipped_active, 1, "{report:?}");
    assert!(h.manager.is_live(&id));
    assert_eq!(h.adapter.state().close_count(), 0);
    assert_eq!(
        stopper(&h).stop_session(&thread, &id).await.unwrap(),
        StopOutcome::Skipped
    );
}

/// A thread no longer attached to a live shared session: the stop settles only its
/// binding; the session and the threads it serves are untouched.
#[tokio::test(start_paused = true)]
async fn reap_02_a_detached_thread_of_a_live_shared_session_only_loses_its_binding() {
    let h = Harness::new(
        FakeBehaviour {
            shared: true,
            ..Default::default()
        },
        // Paused time jumps to the next timer while the store's writer thread works:
        // b's turn keeps the session busy (no idle release, no stall watchdog).
        |o| {
            o.idle_timeout = Duration::from_secs(3600);
            o.turn_stall_timeout = Duration::ZERO;
        },
    )
    .await;
    let (a, b) = (h.thread().await, h.thread().await);
    h.open(&shared(), &a).await;
    let handle = h.open(&shared(), &b).await;
    handle.start_turn(turn(&b, 1)).await.unwrap();
    h.manager.detach(&shared(), &a, None, false).await.unwrap();
    // The binding is still there (a plain detach writes none): the reaper would see it.
    assert_eq!(
        stopper(&h).stop_session(&a, &shared()).await.unwrap(),
        StopOutcome::Stopped
    );
    assert!(h.manager.is_live(&shared()));
    assert_eq!(handle.attached_threads(), vec![b.clone()]);
    assert_eq!(h.adapter.state().close_count(), 0);
    let bound: Vec<ThreadId> = h
        .store
        .list_session_activity()
        .await
        .unwrap()
        .into_iter()
        .filter(|row| row.session.id == shared())
        .map(|row| row.thread_id)
        .collect();
    assert_eq!(bound, vec![b.clone()]);
}

/// A thread joining a live shared session must not move the session's last-seen time
/// back to when it was opened: the reaper would see a just-joined session as stale.
#[tokio::test(start_paused = true)]
async fn reap_03_a_thread_joining_a_shared_session_does_not_move_last_seen_back() {
    let h = Harness::new(
        FakeBehaviour {
            shared: true,
            ..Default::default()
        },
        |o| o.idle_timeout = Duration::from_secs(3600),
    )
    .await;
    let (a, b) = (h.thread().await, h.thread().await);
    h.open(&shared(), &a).await;
    let opened = last_seen(&h, &shared()).await;
    let control = h.adapter.session(&shared()).unwrap();
    assert!(control.push(AdapterEvent::TurnItemUpdated(assistant_item(&a, 1, "a"))));
    wait_until_async(Duration::from_secs(5), "the pump's touch", || async {
        last_seen(&h, &shared()).await > opened
    })
    .await;
    let touched = last_seen(&h, &shared()).await;

    h.open(&shared(), &b).await;
    let joined = last_seen(&h, &shared()).await;
    assert!(
        joined >= touched,
        "last seen moved back from {touched} to {joined} when a thread joined"
    );
}
