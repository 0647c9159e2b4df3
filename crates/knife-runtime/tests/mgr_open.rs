//! Session manager — opening (SPEC.md MGR-01..09), against knife-testkit's fake
//! adapter and a real SQLite store, under paused time.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use futures::FutureExt;
use knife_protocol::*;
use knife_runtime::sessions::*;
use knife_testkit::sessions::FakeBehaviour;
use support::*;
use tokio::sync::{Barrier, Semaphore};

#[tokio::test(start_paused = true)]
async fn mgr_01_opens_of_different_sessions_run_concurrently() {
    // Both opens must be inside the adapter at once to pass the barrier.
    let barrier = Arc::new(Barrier::new(2));
    let b = Arc::clone(&barrier);
    let h = Harness::new(
        FakeBehaviour {
            before_open: Some(Arc::new(move |_, _| {
                let b = Arc::clone(&b);
                async move {
                    b.wait().await;
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
    let (ra, rb) = tokio::join!(
        h.manager.open(h.request(&exclusive(&a), &a)),
        h.manager.open(h.request(&exclusive(&b), &b)),
    );
    let (ra, rb) = (ra.unwrap(), rb.unwrap());
    assert!(!ra.same_runtime(&rb));
    assert_eq!(h.adapter.state().open_count(), 2);
}

#[tokio::test(start_paused = true)]
async fn mgr_02_concurrent_opens_of_one_session_are_single_flight() {
    let gate = Arc::new(Semaphore::new(0));
    let g = Arc::clone(&gate);
    let h = Harness::new(
        FakeBehaviour {
            before_open: Some(Arc::new(move |_, _| {
                let g = Arc::clone(&g);
                async move {
                    g.acquire().await.unwrap().forget();
                    Ok(())
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
    let first = h.manager.open(h.request(&id, &t));
    let second = h.manager.open(h.request(&id, &t));
    let release = async {
        wait_until(Duration::from_secs(1), "first open in the adapter", || {
            h.adapter.state().opens_started.load(Ordering::SeqCst) == 1
        })
        .await;
        settle().await;
        // The second open waits on the session's open lock, not in the adapter.
        assert_eq!(h.adapter.state().opens_started.load(Ordering::SeqCst), 1);
        gate.add_permits(1);
    };
    let (r1, r2, ()) = tokio::join!(first, second, release);
    let (r1, r2) = (r1.unwrap(), r2.unwrap());
    assert!(r1.same_runtime(&r2));
    assert_eq!(h.adapter.state().open_count(), 1);
    assert_eq!(h.adapter.state().opens_started.load(Ordering::SeqCst), 1);
}

#[tokio::test(start_paused = true)]
async fn mgr_03_opening_clears_the_threads_oom_mark_but_reopening_keeps_it() {
    let h = Harness::new(
        FakeBehaviour {
            shared: true,
            ..Default::default()
        },
        |_| {},
    )
    .await;
    let (a, b) = (h.thread().await, h.thread().await);
    let health = h.manager.health();

    health.mark_oom_killed(&a);
    h.open(&shared(), &a).await;
    assert!(
        !health.oom_killed(&a),
        "a new session clears the opener's mark"
    );

    health.mark_oom_killed(&b);
    h.open(&shared(), &b).await;
    assert!(
        !health.oom_killed(&b),
        "joining a shared session clears the mark"
    );

    health.mark_oom_killed(&a);
    h.open(&shared(), &a).await;
    assert!(
        health.oom_killed(&a),
        "re-opening a session the thread uses keeps it"
    );
    assert_eq!(h.adapter.state().open_count(), 1);
}

#[tokio::test(start_paused = true)]
async fn mgr_04_an_open_cancelled_mid_handshake_cleans_up_and_the_next_open_is_fresh() {
    let h = Harness::new(
        FakeBehaviour {
            spawn_before_open: true,
            before_open: Some(Arc::new(|_, _| std::future::pending().boxed())),
            ..Default::default()
        },
        |_| {},
    )
    .await;
    let t = h.thread().await;
    let id = exclusive(&t);
    let manager = h.manager.clone();
    let request = h.request(&id, &t);
    let task = tokio::spawn(async move { manager.open(request).await });
    wait_until(Duration::from_secs(1), "open in its handshake", || {
        h.adapter.state().opens_started.load(Ordering::SeqCst) == 1
    })
    .await;
    let first = h.slots.get(&t).expect("credential minted before the spawn");
    assert!(h.registry.resolve(first.token()).is_some());
    assert_eq!(
        h.adapter.state().open_records()[0].mcp.as_ref(),
        Some(&first)
    );

    task.abort();
    assert!(task.await.unwrap_err().is_cancelled());
    assert!(
        h.registry.resolve(first.token()).is_none(),
        "credential revoked"
    );
    assert!(h.slots.get(&t).is_none(), "thread's MCP slot cleared");
    wait_until(Duration::from_secs(1), "spawned process stopped", || {
        h.adapter.state().processes_stopped.load(Ordering::SeqCst) == 1
    })
    .await;
    assert!(!h.manager.is_live(&id));

    h.adapter.configure(|b| b.before_open = None);
    let handle = h.open(&id, &t).await;
    let second = h.slots.get(&t).unwrap();
    assert_ne!(second.token(), first.token(), "a fresh credential");
    assert_eq!(
        h.adapter.state().processes_spawned.load(Ordering::SeqCst),
        2
    );
    assert_eq!(
        h.session_status(handle.id()).await,
        Some(SessionStatus::Ready)
    );
}

#[tokio::test(start_paused = true)]
async fn mgr_05_a_hanging_close_of_a_cancelled_open_is_time_boxed_and_frees_the_lock() {
    let h = Harness::new(
        FakeBehaviour {
            spawn_before_open: true,
            process_stop_hangs: true,
            before_open: Some(Arc::new(|_, _| std::future::pending().boxed())),
            ..Default::default()
        },
        |o| o.idle_timeout = Duration::from_secs(3600),
    )
    .await;
    let t = h.thread().await;
    let id = exclusive(&t);
    let manager = h.manager.clone();
    let request = h.request(&id, &t);
    let task = tokio::spawn(async move { manager.open(request).await });
    wait_until(Duration::from_secs(1), "open in its handshake", || {
        h.adapter.state().opens_started.load(Ordering::SeqCst) == 1
    })
    .await;
    let first = h.slots.get(&t).unwrap();
    let cancelled_at = tokio::time::Instant::now();
    task.abort();
    let _ = task.await;
    // Credential cleanup ran first, although the process stop hangs.
    assert!(h.registry.resolve(first.token()).is_none());
    assert_eq!(
        h.adapter.state().processes_stopped.load(Ordering::SeqCst),
        0
    );

    // The open lock is free at once: the next open does not wait for the close box.
    h.adapter.configure(|b| {
        b.before_open = None;
        b.spawn_before_open = false;
    });
    h.open(&id, &t).await;
    assert!(cancelled_at.elapsed() < CLOSE_TIMEOUT);
    // The cleanup of the cancelled open gives the hanging stop up after the 30 s box.
    let before = h.manager.background_tasks();
    tokio::time::sleep_until(cancelled_at + CLOSE_TIMEOUT - Duration::from_secs(1)).await;
    assert_eq!(h.manager.background_tasks(), before, "still inside the box");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(h.manager.background_tasks(), before - 1, "given up at 30 s");
    assert_eq!(
        h.adapter.state().processes_stopped.load(Ordering::SeqCst),
        0
    );
}

#[tokio::test(start_paused = true)]
async fn mgr_06_an_exclusive_runtime_refuses_a_second_thread() {
    let h = Harness::new(FakeBehaviour::default(), |_| {}).await;
    let (a, b) = (h.thread().await, h.thread().await);
    let id = exclusive(&a);
    h.open(&id, &a).await;
    let err = h.manager.open(h.request(&id, &b)).await.unwrap_err();
    assert!(matches!(err, SessionError::Open(_)), "{err:?}");
    assert!(
        err.to_string()
            .contains("does not support attaching multiple")
    );
    assert_eq!(h.adapter.state().open_count(), 1);
}

#[tokio::test(start_paused = true)]
async fn mgr_07_open_with_a_missing_or_file_workspace_fails_and_touches_nothing() {
    let h = Harness::new(FakeBehaviour::default(), |_| {}).await;
    let t = h.thread().await;
    let id = exclusive(&t);
    let missing = h.dir.path().join("gone");
    let file = h.dir.path().join("file.txt");
    std::fs::write(&file, "x").unwrap();
    for cwd in [missing, file] {
        let mut request = h.request(&id, &t);
        request.cwd = cwd.clone();
        let err = h.manager.open(request).await.unwrap_err();
        assert!(matches!(err, SessionError::WorkspaceMissing(_)), "{err:?}");
        let message = err.to_string();
        assert!(message.contains(&cwd.display().to_string()), "{message}");
        assert!(message.contains("Restore the folder at this path before retrying."));
    }
    assert_eq!(h.adapter.state().opens_started.load(Ordering::SeqCst), 0);
    assert!(!h.manager.is_live(&id));
    assert!(h.store.list_provider_sessions().await.unwrap().is_empty());
}

#[tokio::test(start_paused = true)]
async fn mgr_08_a_deleted_workspace_fails_the_next_open_without_touching_the_live_session() {
    let h = Harness::new(FakeBehaviour::default(), |_| {}).await;
    let t = h.thread().await;
    let id = exclusive(&t);
    let live = h.open(&id, &t).await;
    let before = h.store.dump_projections().await.unwrap();
    std::fs::remove_dir_all(&h.workspace).unwrap();
    let err = h.manager.open(h.request(&id, &t)).await.unwrap_err();
    assert!(matches!(err, SessionError::WorkspaceMissing(_)), "{err:?}");
    assert!(h.manager.get(&id).unwrap().same_runtime(&live));
    assert_eq!(h.adapter.state().close_count(), 0);
    assert_eq!(h.store.dump_projections().await.unwrap(), before);
}

#[tokio::test(start_paused = true)]
async fn mgr_09_open_passes_the_native_thread_and_item_identity_version() {
    let h = Harness::new(FakeBehaviour::default(), |_| {}).await;
    let t = h.thread().await;
    let mut request = h.request(&exclusive(&t), &t);
    request.native_thread_id = Some("native-1".into());
    request.item_identity_version = Some(2);
    h.manager.open(request).await.unwrap();
    let record = &h.adapter.state().open_records()[0];
    assert_eq!(record.input.native_thread_id.as_deref(), Some("native-1"));
    assert_eq!(record.item_identity_version, Some(2));
}
