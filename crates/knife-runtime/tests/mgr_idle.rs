//! Session manager — idle release and pins (SPEC.md MGR-20..29), idle window 1 s.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use futures::FutureExt;
use knife_protocol::*;
use knife_runtime::sessions::*;
use knife_testkit::sessions::{FakeBehaviour, SessionProbe};
use support::*;
use tokio::sync::Semaphore;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn probe(flag: &Arc<AtomicBool>) -> SessionProbe {
    let flag = Arc::clone(flag);
    Arc::new(move || {
        let flag = Arc::clone(&flag);
        async move { Ok(flag.load(Ordering::SeqCst)) }.boxed()
    })
}

#[tokio::test(start_paused = true)]
async fn mgr_20_an_idle_session_is_released_after_its_own_idle_timeout() {
    let h = Harness::new(FakeBehaviour::default(), |_| {}).await;
    let (a, b) = (h.thread().await, h.thread().await);
    h.open(&exclusive(&a), &a).await;
    tokio::time::sleep(ms(600)).await;
    h.open(&exclusive(&b), &b).await;
    tokio::time::sleep(ms(500)).await;
    assert!(!h.manager.is_live(&exclusive(&a)));
    assert!(
        h.manager.is_live(&exclusive(&b)),
        "only that session's timer fired"
    );
    assert_eq!(h.adapter.state().close_count(), 1);
    assert_eq!(
        h.session_status(&exclusive(&a)).await,
        Some(SessionStatus::Stopped)
    );
    assert_eq!(
        h.session_status(&exclusive(&b)).await,
        Some(SessionStatus::Ready)
    );
    tokio::time::sleep(ms(600)).await;
    assert!(!h.manager.is_live(&exclusive(&b)));
}

#[tokio::test(start_paused = true)]
async fn mgr_21_a_running_turn_keeps_the_session_until_its_terminal_plus_one_window() {
    let h = Harness::new(
        FakeBehaviour {
            shared: true,
            ..Default::default()
        },
        |_| {},
    )
    .await;
    let (a, b) = (h.thread().await, h.thread().await);
    let handle = h.open(&shared(), &a).await;
    h.open(&shared(), &b).await;
    let (ta, tb) = (turn(&a, 1), turn(&b, 1));
    handle.start_turn(ta.clone()).await.unwrap();
    handle.start_turn(tb.clone()).await.unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        h.manager.is_live(&shared()),
        "alive past the idle timeout while busy"
    );
    let control = h.adapter.session(&shared()).unwrap();
    control.push(terminal(&ta));
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(h.manager.is_live(&shared()), "B's turn still runs");
    control.push(terminal(&tb));
    tokio::time::sleep(ms(800)).await;
    assert!(h.manager.is_live(&shared()));
    tokio::time::sleep(ms(300)).await;
    assert!(
        !h.manager.is_live(&shared()),
        "released one idle window later"
    );
    assert_eq!(h.adapter.state().close_count(), 1);
}

#[tokio::test(start_paused = true)]
async fn mgr_22_a_cancelled_turn_start_counts_the_session_idle_again() {
    let h = Harness::new(
        FakeBehaviour {
            on_start_turn: Some(Arc::new(|_| std::future::pending().boxed())),
            ..Default::default()
        },
        |_| {},
    )
    .await;
    let t = h.thread().await;
    let handle = h.open(&exclusive(&t), &t).await;
    let h2 = handle.clone();
    let t2 = t.clone();
    let start = tokio::spawn(async move { h2.start_turn(turn(&t2, 1)).await });
    wait_until(ms(100), "adapter accepting the turn", || {
        h.adapter.state().started_turns.lock().unwrap().len() == 1
    })
    .await;
    start.abort();
    let _ = start.await;
    tokio::time::sleep(ms(1100)).await;
    assert!(!h.manager.is_live(&exclusive(&t)), "released on time");
    assert_eq!(h.adapter.state().close_count(), 1);
}

#[tokio::test(start_paused = true)]
async fn mgr_23_a_cancelled_start_of_one_thread_does_not_idle_a_shared_session() {
    let gate_hits = Arc::new(AtomicUsize::new(0));
    let hits = Arc::clone(&gate_hits);
    let h = Harness::new(
        FakeBehaviour {
            shared: true,
            on_start_turn: Some(Arc::new(move |input: knife_runtime::StartTurnInput| {
                let hits = Arc::clone(&hits);
                async move {
                    // Thread A's start hangs in the adapter; B's is accepted.
                    if input.text == "hang" {
                        hits.fetch_add(1, Ordering::SeqCst);
                        std::future::pending::<()>().await;
                    }
                    Ok(())
                }
                .boxed()
            })),
            ..Default::default()
        },
        |_| {},
    )
    .await;
    let (a, b) = (h.thread().await, h.thread().await);
    let handle = h.open(&shared(), &b).await;
    let tb = turn(&b, 1);
    handle.start_turn(tb.clone()).await.unwrap();

    // 1. A's start cancelled while it re-attaches (its attach write is held).
    let pause = h.flaky.pause(WriteKind::Attach);
    let h1 = handle.clone();
    let a1 = a.clone();
    let start = tokio::spawn(async move { h1.start_turn(turn(&a1, 1)).await });
    pause.reached().await;
    start.abort();
    let _ = start.await;
    h.flaky.unpause(WriteKind::Attach);

    // 2. A's start cancelled after the adapter began the turn, which later ends it.
    let h2 = handle.clone();
    let a2 = a.clone();
    let mut hanging = turn(&a2, 2);
    hanging.text = "hang".into();
    let ta = hanging.clone();
    let start = tokio::spawn(async move { h2.start_turn(hanging).await });
    wait_until(ms(100), "A's start in the adapter", || {
        gate_hits.load(Ordering::SeqCst) == 1
    })
    .await;
    start.abort();
    let _ = start.await;
    h.adapter.session(&shared()).unwrap().push(terminal(&ta));

    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        h.manager.is_live(&shared()),
        "B's turn keeps the session busy"
    );
    h.adapter.session(&shared()).unwrap().push(terminal(&tb));
    tokio::time::sleep(ms(1100)).await;
    assert!(!h.manager.is_live(&shared()));
}

#[tokio::test(start_paused = true)]
async fn mgr_24_pending_background_work_pins_the_session_until_it_ends() {
    let pending = Arc::new(AtomicBool::new(true));
    let h = Harness::new(
        FakeBehaviour {
            pending_work: Some(probe(&pending)),
            ..Default::default()
        },
        |_| {},
    )
    .await;
    let t = h.thread().await;
    h.open(&exclusive(&t), &t).await;
    tokio::time::sleep(ms(3500)).await;
    assert!(h.manager.is_live(&exclusive(&t)));
    assert_eq!(h.adapter.state().close_count(), 0);
    pending.store(false, Ordering::SeqCst);
    tokio::time::sleep(ms(1000)).await;
    assert!(
        !h.manager.is_live(&exclusive(&t)),
        "the next idle check releases it"
    );
    assert_eq!(h.adapter.state().close_count(), 1);
}

#[tokio::test(start_paused = true)]
async fn mgr_25_a_pin_lasts_at_most_max_idle_pin() {
    let pending = Arc::new(AtomicBool::new(true));
    let h = Harness::new(
        FakeBehaviour {
            pending_work: Some(probe(&pending)),
            ..Default::default()
        },
        |o| o.max_idle_pin = Duration::from_secs(3),
    )
    .await;
    let t = h.thread().await;
    h.open(&exclusive(&t), &t).await;
    // Idle at 1 s, pinned from then; the cap ends the pin at 4 s.
    tokio::time::sleep(ms(3500)).await;
    assert!(h.manager.is_live(&exclusive(&t)));
    tokio::time::sleep(ms(1000)).await;
    assert!(
        !h.manager.is_live(&exclusive(&t)),
        "released although work is pending"
    );
    assert_eq!(h.adapter.state().close_count(), 1);
}

#[tokio::test(start_paused = true)]
async fn mgr_26_pinned_work_reporting_progress_outlives_the_cap_until_it_goes_silent() {
    let pending = Arc::new(AtomicBool::new(true));
    let h = Harness::new(
        FakeBehaviour {
            pending_work: Some(probe(&pending)),
            ..Default::default()
        },
        |o| o.max_idle_pin = Duration::from_secs(3),
    )
    .await;
    let t = h.thread().await;
    let handle = h.open(&exclusive(&t), &t).await;
    let control = h.adapter.session(&exclusive(&t)).unwrap();
    for _ in 0..12 {
        tokio::time::sleep(ms(1500)).await;
        assert!(control.push(AdapterEvent::ProviderSessionUpdated(handle.session())));
    }
    settle().await;
    assert_eq!(
        h.adapter.state().close_count(),
        0,
        "18 s of progress, cap 3 s"
    );
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert_eq!(
        h.adapter.state().close_count(),
        1,
        "silent past the cap: released"
    );
}

#[tokio::test(start_paused = true)]
async fn mgr_27_a_session_turning_busy_during_the_pending_work_check_is_not_released() {
    let entered = Arc::new(Semaphore::new(0));
    let gate = Arc::new(Semaphore::new(0));
    let first = Arc::new(AtomicBool::new(true));
    let (e, g, f) = (Arc::clone(&entered), Arc::clone(&gate), Arc::clone(&first));
    let h = Harness::new(
        FakeBehaviour {
            pending_work: Some(Arc::new(move || {
                let (e, g, f) = (Arc::clone(&e), Arc::clone(&g), Arc::clone(&f));
                async move {
                    if f.swap(false, Ordering::SeqCst) {
                        e.add_permits(1);
                        g.acquire().await.unwrap().forget();
                    }
                    Ok(false)
                }
                .boxed()
            })),
            ..Default::default()
        },
        |_| {},
    )
    .await;
    let t = h.thread().await;
    let handle = h.open(&exclusive(&t), &t).await;
    entered.acquire().await.unwrap().forget();
    let input = turn(&t, 1);
    handle.start_turn(input.clone()).await.unwrap();
    gate.add_permits(1);
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        h.manager.is_live(&exclusive(&t)),
        "the stale idle decision was dropped"
    );
    h.adapter
        .session(&exclusive(&t))
        .unwrap()
        .push(terminal(&input));
    tokio::time::sleep(ms(800)).await;
    assert!(
        h.manager.is_live(&exclusive(&t)),
        "a fresh idle window first"
    );
    tokio::time::sleep(ms(300)).await;
    assert!(!h.manager.is_live(&exclusive(&t)));
}

#[tokio::test(start_paused = true)]
async fn mgr_28_a_stale_pending_answer_does_not_pin_a_replacement() {
    let entered = Arc::new(Semaphore::new(0));
    let gate = Arc::new(Semaphore::new(0));
    let first = Arc::new(AtomicBool::new(true));
    let (e, g, f) = (Arc::clone(&entered), Arc::clone(&gate), Arc::clone(&first));
    let h = Harness::new(
        FakeBehaviour {
            pending_work: Some(Arc::new(move || {
                let (e, g, f) = (Arc::clone(&e), Arc::clone(&g), Arc::clone(&f));
                async move {
                    // The first (stale) probe answers "pending" late; later ones "no".
                    if f.swap(false, Ordering::SeqCst) {
                        e.add_permits(1);
                        g.acquire().await.unwrap().forget();
                        return Ok(true);
                    }
                    Ok(false)
                }
                .boxed()
            })),
            ..Default::default()
        },
        |_| {},
    )
    .await;
    let t = h.thread().await;
    let id = exclusive(&t);
    h.open(&id, &t).await;
    entered.acquire().await.unwrap().forget();
    h.manager.close(&id).await.unwrap();
    let replacement = h.open(&id, &t).await;
    gate.add_permits(1);
    tokio::time::sleep(ms(900)).await;
    assert!(h.manager.get(&id).unwrap().same_runtime(&replacement));
    tokio::time::sleep(ms(200)).await;
    assert!(
        !h.manager.is_live(&id),
        "released after one normal idle window"
    );
    assert_eq!(h.adapter.state().close_count(), 2);
}

#[tokio::test(start_paused = true)]
async fn mgr_29_is_live_neither_delays_nor_resets_idle_release() {
    let h = Harness::new(FakeBehaviour::default(), |_| {}).await;
    let t = h.thread().await;
    h.open(&exclusive(&t), &t).await;
    for _ in 0..9 {
        tokio::time::sleep(ms(100)).await;
        assert!(h.manager.is_live(&exclusive(&t)));
    }
    tokio::time::sleep(ms(150)).await;
    assert!(!h.manager.is_live(&exclusive(&t)));
}

/// `describe` shows threads, busy turns, the idle deadline and the pin (for
/// `/api/sessions`), without side effects.
#[tokio::test(start_paused = true)]
async fn describe_shows_busy_turns_idle_deadlines_and_pins() {
    let pending = Arc::new(AtomicBool::new(true));
    let h = Harness::new(
        FakeBehaviour {
            pending_work: Some(probe(&pending)),
            ..Default::default()
        },
        |_| {},
    )
    .await;
    let (a, b) = (h.thread().await, h.thread().await);
    let ha = h.open(&exclusive(&a), &a).await;
    let opened = chrono::Utc::now();
    let hb = h.open(&exclusive(&b), &b).await;
    let input = turn(&b, 1);
    hb.start_turn(input.clone()).await.unwrap();

    let info = h.manager.describe();
    assert_eq!(info.len(), 2);
    let ia = info
        .iter()
        .find(|i| &i.provider_session_id == ha.id())
        .unwrap();
    let ib = info
        .iter()
        .find(|i| &i.provider_session_id == hb.id())
        .unwrap();
    assert_eq!(ia.threads, vec![a.clone()]);
    assert!(ia.busy_turns.is_empty());
    let deadline = ia.idle_deadline.unwrap();
    let expected = opened + chrono::Duration::seconds(1);
    assert!(
        (deadline - expected).num_milliseconds().abs() < 200,
        "{deadline} vs {expected}"
    );
    assert_eq!(ia.pinned_since, None);
    assert_eq!(ib.busy_turns, vec![input.provider_turn_id.clone()]);
    assert_eq!(ib.idle_deadline, None);

    tokio::time::sleep(ms(1500)).await;
    let info = h.manager.describe();
    let ia = info
        .iter()
        .find(|i| &i.provider_session_id == ha.id())
        .unwrap();
    assert!(ia.pinned_since.is_some(), "pending work pins it");
}

/// An open that joins a live shared session while its idle release comes due (the
/// join's attach write is still in flight) gets a live session: the released entry is
/// noticed after the touch and a fresh session is opened, so the first turn does not
/// fail with `SessionGone`.
#[tokio::test(start_paused = true)]
async fn mgr_20_an_open_racing_a_due_idle_release_returns_a_live_session() {
    let h = Harness::new(
        FakeBehaviour {
            shared: true,
            ..Default::default()
        },
        |_| {},
    )
    .await;
    let (a, b) = (h.thread().await, h.thread().await);
    h.open(&shared(), &a).await;
    let pause = h.flaky.pause(WriteKind::Attach);
    let manager = h.manager.clone();
    let request = h.request(&shared(), &b);
    let join = tokio::spawn(async move { manager.open(request).await });
    pause.reached().await;
    // The idle window passes while b's attach is being written: the session goes.
    tokio::time::sleep(ms(1500)).await;
    assert!(!h.manager.is_live(&shared()), "released while b attached");
    h.flaky.unpause(WriteKind::Attach);
    pause.resume();
    let handle = join.await.unwrap().unwrap();
    assert!(h.manager.is_live(&shared()), "a fresh session was opened");
    handle.start_turn(turn(&b, 1)).await.unwrap();
}
