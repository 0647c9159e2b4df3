//! Session manager — shared runtimes and threads (SPEC.md MGR-10..17).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::{FutureExt, StreamExt};
use knife_protocol::*;
use knife_runtime::sessions::*;
use knife_testkit::sessions::FakeBehaviour;
use support::*;
use tokio::sync::Semaphore;

fn shared_behaviour() -> FakeBehaviour {
    FakeBehaviour {
        shared: true,
        can_unload: true,
        ..Default::default()
    }
}

#[tokio::test(start_paused = true)]
async fn mgr_10_shared_session_is_opened_once_and_resumes_are_deduplicated() {
    let h = Harness::new(shared_behaviour(), |_| {}).await;
    let (a, b) = (h.thread().await, h.thread().await);
    let ra = h.open(&shared(), &a).await;
    let rb = h.open(&shared(), &b).await;
    assert!(ra.same_runtime(&rb));
    assert_eq!(h.adapter.state().open_count(), 1);
    assert_eq!(ra.attached_threads().len(), 2);

    let resume = |model: &str| ra.resume_thread(&a, Some("native-a".into()), Some(model.into()));
    resume("m1").await.unwrap();
    assert_eq!(h.adapter.state().resume_count(), 1);
    resume("m1").await.unwrap();
    assert_eq!(
        h.adapter.state().resume_count(),
        1,
        "same selection: deduplicated"
    );
    resume("m2").await.unwrap();
    assert_eq!(
        h.adapter.state().resume_count(),
        2,
        "changed model reaches the adapter"
    );
    h.manager.detach(&shared(), &a, None, false).await.unwrap();
    resume("m2").await.unwrap();
    assert_eq!(
        h.adapter.state().resume_count(),
        3,
        "after a detach it reaches it again"
    );
}

#[tokio::test(start_paused = true)]
async fn mgr_11_every_subscriber_gets_every_event_after_it_is_persisted() {
    let h = Harness::new(shared_behaviour(), |_| {}).await;
    let t = h.thread().await;
    let handle = h.open(&shared(), &t).await;
    let mut first = handle.subscribe_events();
    let mut second = handle.events();
    let control = h.adapter.session(&shared()).unwrap();
    let items: Vec<_> = (1..=3).map(|n| assistant_item(&t, n, "hello")).collect();
    for item in &items {
        assert!(control.push(AdapterEvent::TurnItemUpdated(item.clone())));
    }
    for sub in [&mut first, &mut second] {
        for item in &items {
            let got = sub.next().await.unwrap().unwrap();
            assert_eq!(got, AdapterEvent::TurnItemUpdated(item.clone()));
            // Handed over only after the store committed it.
            assert!(h.store.get_turn_item(&item.id).await.unwrap().is_some());
        }
    }
}

/// Persists a provider thread of `thread` with native id `native` through the pump.
async fn persist_provider_thread(h: &Harness, thread: &ThreadId, native: &str) {
    let pt = provider_thread(thread, &shared(), native, &[]);
    let id = pt.id.clone();
    h.adapter
        .session(&shared())
        .unwrap()
        .push(AdapterEvent::ProviderThreadUpdated(pt));
    let store = h.store.clone();
    wait_until_async(
        Duration::from_millis(500),
        "provider thread persisted",
        || {
            let store = store.clone();
            let id = id.clone();
            async move { store.get_provider_thread(&id).await.unwrap().is_some() }
        },
    )
    .await;
}

#[tokio::test(start_paused = true)]
async fn mgr_12_detach_interrupts_and_unloads_one_thread_and_the_last_detach_lets_it_idle_out() {
    let h = Harness::new(shared_behaviour(), |_| {}).await;
    let (a, b) = (h.thread().await, h.thread().await);
    h.open(&shared(), &a).await;
    h.open(&shared(), &b).await;
    persist_provider_thread(&h, &a, "native-a").await;
    h.adapter
        .session(&shared())
        .unwrap()
        .push(AdapterEvent::ProviderTurnUpdated(provider_turn(
            &a,
            &shared(),
            ProviderTurnStatus::Running,
        )));
    settle().await;

    h.manager.detach(&shared(), &a, None, false).await.unwrap();
    assert_eq!(h.adapter.state().interrupt_count(), 1);
    assert_eq!(h.adapter.state().unloaded(), vec!["native-a".to_owned()]);
    assert!(h.manager.is_live(&shared()));
    assert_eq!(h.adapter.state().close_count(), 0);

    // B has no persisted provider thread: nothing to unload.
    h.manager.detach(&shared(), &b, None, false).await.unwrap();
    assert_eq!(h.adapter.state().unloaded().len(), 1);
    assert!(h.manager.is_live(&shared()), "not released at once");
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert!(
        !h.manager.is_live(&shared()),
        "released after one idle window"
    );
    assert_eq!(h.adapter.state().close_count(), 1);
}

#[tokio::test(start_paused = true)]
async fn mgr_13_reattaching_during_an_unload_waits_for_it_then_reloads() {
    let gate = Arc::new(Semaphore::new(0));
    let reached = Arc::new(Semaphore::new(0));
    let (g, r) = (Arc::clone(&gate), Arc::clone(&reached));
    let mut behaviour = shared_behaviour();
    behaviour.before_unload = Some(Arc::new(move |_, _| {
        let (g, r) = (Arc::clone(&g), Arc::clone(&r));
        async move {
            r.add_permits(1);
            g.acquire().await.unwrap().forget();
        }
        .boxed()
    }));
    let h = Harness::new(behaviour, |_| {}).await;
    let (a, b) = (h.thread().await, h.thread().await);
    let handle = h.open(&shared(), &a).await;
    h.open(&shared(), &b).await;
    handle
        .resume_thread(&a, Some("native-a".into()), None)
        .await
        .unwrap();
    persist_provider_thread(&h, &a, "native-a").await;

    let manager = h.manager.clone();
    let a2 = a.clone();
    let detach = tokio::spawn(async move { manager.detach(&shared(), &a2, None, false).await });
    reached.acquire().await.unwrap().forget();
    let h2 = handle.clone();
    let a3 = a.clone();
    let resume =
        tokio::spawn(async move { h2.resume_thread(&a3, Some("native-a".into()), None).await });
    settle().await;
    assert_eq!(
        h.adapter.state().resume_count(),
        1,
        "the re-attach waits for the unload"
    );
    assert!(!resume.is_finished());

    gate.add_permits(1);
    detach.await.unwrap().unwrap();
    resume.await.unwrap().unwrap();
    assert_eq!(h.adapter.state().unloaded(), vec!["native-a".to_owned()]);
    assert_eq!(h.adapter.state().resume_count(), 2, "then reloads");
}

/// Opens a shared session for A and B, resumes A (native `native-a`) and keeps B busy.
async fn two_threads_b_busy(h: &Harness) -> (ThreadId, ThreadId, SessionHandle) {
    let (a, b) = (h.thread().await, h.thread().await);
    let handle = h.open(&shared(), &a).await;
    h.open(&shared(), &b).await;
    handle
        .resume_thread(&a, Some("native-a".into()), None)
        .await
        .unwrap();
    handle.start_turn(turn(&b, 1)).await.unwrap();
    (a, b, handle)
}

#[tokio::test(start_paused = true)]
async fn mgr_14_an_idle_thread_of_a_shared_runtime_is_unloaded_and_reloaded_on_resume() {
    let h = Harness::new(shared_behaviour(), |_| {}).await;
    let (a, _b, handle) = two_threads_b_busy(&h).await;
    let control = h.adapter.session(&shared()).unwrap();

    let first = turn(&a, 1);
    handle.start_turn(first.clone()).await.unwrap();
    control.push(terminal(&first));
    tokio::time::sleep(Duration::from_millis(500)).await;
    // A follow-up turn before the timeout keeps the thread loaded.
    let second = turn(&a, 2);
    handle.start_turn(second.clone()).await.unwrap();
    control.push(terminal(&second));
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert!(h.adapter.state().unloaded().is_empty());

    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(h.adapter.state().unloaded(), vec!["native-a".to_owned()]);
    assert!(h.manager.is_live(&shared()), "the runtime stays up for B");
    assert_eq!(h.adapter.state().resume_count(), 1);
    handle
        .resume_thread(&a, Some("native-a".into()), None)
        .await
        .unwrap();
    assert_eq!(
        h.adapter.state().resume_count(),
        2,
        "the next resume reloads it"
    );
}

#[tokio::test(start_paused = true)]
async fn mgr_15_an_idle_thread_with_pending_background_work_stays_loaded() {
    let pending = Arc::new(AtomicBool::new(true));
    let p = Arc::clone(&pending);
    let mut behaviour = shared_behaviour();
    behaviour.pending_thread_work = Some(Arc::new(move |_, native| {
        let p = Arc::clone(&p);
        async move { Ok(native == "native-a" && p.load(Ordering::SeqCst)) }.boxed()
    }));
    let h = Harness::new(behaviour, |_| {}).await;
    let (a, _b, handle) = two_threads_b_busy(&h).await;
    let first = turn(&a, 1);
    handle.start_turn(first.clone()).await.unwrap();
    h.adapter.session(&shared()).unwrap().push(terminal(&first));
    tokio::time::sleep(Duration::from_millis(3500)).await;
    assert!(
        h.adapter.state().unloaded().is_empty(),
        "kept loaded while work runs"
    );

    pending.store(false, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert_eq!(h.adapter.state().unloaded(), vec!["native-a".to_owned()]);
}

#[tokio::test(start_paused = true)]
async fn mgr_16_a_cancelled_attach_leaves_the_attachment_to_the_next_attach_of_the_thread() {
    let h = Harness::new(shared_behaviour(), |_| {}).await;
    let (a, b) = (h.thread().await, h.thread().await);
    let handle = h.open(&shared(), &b).await;
    let pause = h.flaky.pause(WriteKind::Attach);

    let h1 = handle.clone();
    let a1 = a.clone();
    let first = tokio::spawn(async move { h1.resume_thread(&a1, None, None).await });
    pause.reached().await;
    let stale = h.slots.get(&a).unwrap();
    let h2 = handle.clone();
    let a2 = a.clone();
    let second = tokio::spawn(async move { h2.resume_thread(&a2, None, None).await });
    settle().await;

    first.abort();
    let _ = first.await;
    pause.reached().await;
    pause.resume();
    second.await.unwrap().unwrap();

    assert!(handle.attached_threads().contains(&a));
    let owned = h.slots.get(&a).expect("the second attach's credential");
    assert!(h.registry.resolve(owned.token()).is_some());
    assert_ne!(
        owned, stale,
        "the cancelled attach's credential is not reused"
    );
    assert!(
        h.registry.resolve(stale.token()).is_none(),
        "and it was revoked"
    );
    let row = h.store.thread_projection(&a).await.unwrap().unwrap();
    assert_eq!(
        row.provider_sessions.len(),
        1,
        "attached once, by the second attach"
    );
}

#[tokio::test(start_paused = true)]
async fn mgr_17_cancelling_a_stale_attach_leaves_the_replacement_intact() {
    let h = Harness::new(shared_behaviour(), |_| {}).await;
    let (a, b) = (h.thread().await, h.thread().await);
    let old = h.open(&shared(), &b).await;
    let pause = h.flaky.pause(WriteKind::Attach);
    let o = old.clone();
    let a1 = a.clone();
    let stale = tokio::spawn(async move { o.resume_thread(&a1, None, None).await });
    pause.reached().await;
    let credential = h.slots.get(&a).unwrap();

    h.manager.close(&shared()).await.unwrap();
    h.flaky.unpause(WriteKind::Attach);
    let replacement = h.open(&shared(), &a).await;
    assert!(!replacement.same_runtime(&old));

    stale.abort();
    let _ = stale.await;
    settle().await;
    assert_eq!(replacement.attached_threads(), vec![a.clone()]);
    assert_eq!(h.slots.get(&a), Some(credential.clone()), "slot kept");
    assert!(
        h.registry.resolve(credential.token()).is_some(),
        "credential kept"
    );

    let attaches = h.flaky.writes(WriteKind::Attach);
    replacement.resume_thread(&a, None, None).await.unwrap();
    assert_eq!(
        h.flaky.writes(WriteKind::Attach),
        attaches,
        "no second attached event"
    );
}

/// Issue 5 item 7: a thread's unload deferral is capped at `max_idle_pin`, so a
/// per-thread probe that never clears cannot keep it loaded forever.
#[tokio::test(start_paused = true)]
async fn thread_unload_deferral_is_capped_at_max_idle_pin() {
    let mut behaviour = shared_behaviour();
    behaviour.pending_thread_work = Some(Arc::new(|_, _| async { Ok(true) }.boxed()));
    let h = Harness::new(behaviour, |o| o.max_idle_pin = Duration::from_secs(3)).await;
    let (a, _b, handle) = two_threads_b_busy(&h).await;
    let first = turn(&a, 1);
    handle.start_turn(first.clone()).await.unwrap();
    h.adapter.session(&shared()).unwrap().push(terminal(&first));
    // Idle at 1 s, deferred from then; the cap ends the deferral at 4 s.
    tokio::time::sleep(Duration::from_millis(3500)).await;
    assert!(h.adapter.state().unloaded().is_empty());
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert_eq!(h.adapter.state().unloaded(), vec!["native-a".to_owned()]);
}

/// The unload time box (10 s): a detach whose unload hangs still returns.
#[tokio::test(start_paused = true)]
async fn an_unload_that_hangs_is_time_boxed() {
    let mut behaviour = shared_behaviour();
    behaviour.before_unload = Some(Arc::new(|_, _| std::future::pending().boxed()));
    let h = Harness::new(behaviour, |o| o.idle_timeout = Duration::from_secs(3600)).await;
    let (a, b) = (h.thread().await, h.thread().await);
    h.open(&shared(), &a).await;
    h.open(&shared(), &b).await;
    persist_provider_thread(&h, &a, "native-a").await;
    let started = tokio::time::Instant::now();
    h.manager.detach(&shared(), &a, None, false).await.unwrap();
    let took = started.elapsed();
    assert!(
        took >= UNLOAD_TIMEOUT && took < UNLOAD_TIMEOUT + Duration::from_secs(1),
        "{took:?}"
    );
    assert!(h.manager.is_live(&shared()));
}

/// A runtime that never answers the interrupt does not hang a detach: the interrupt
/// is time-boxed (`INTERRUPT_TIMEOUT`) and the thread is detached.
#[tokio::test(start_paused = true)]
async fn mgr_12_detach_time_boxes_an_interrupt_the_runtime_never_answers() {
    let mut behaviour = shared_behaviour();
    behaviour.interrupt_hangs = true;
    let h = Harness::new(behaviour, |o| o.idle_timeout = Duration::from_secs(3600)).await;
    let (a, b) = (h.thread().await, h.thread().await);
    h.open(&shared(), &a).await;
    let handle = h.open(&shared(), &b).await;
    h.adapter
        .session(&shared())
        .unwrap()
        .push(AdapterEvent::ProviderTurnUpdated(provider_turn(
            &a,
            &shared(),
            ProviderTurnStatus::Running,
        )));
    settle().await;
    tokio::time::timeout(
        INTERRUPT_TIMEOUT + Duration::from_secs(5),
        h.manager.detach(&shared(), &a, None, false),
    )
    .await
    .expect("the detach waited for the runtime's interrupt answer")
    .unwrap();
    assert_eq!(h.adapter.state().interrupt_count(), 1);
    assert_eq!(handle.attached_threads(), vec![b.clone()]);
}
