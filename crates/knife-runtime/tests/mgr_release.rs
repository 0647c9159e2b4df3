//! Session manager — release, close, shutdown and release retries (SPEC.md MGR-30..40).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use futures::{FutureExt, StreamExt};
use knife_protocol::*;
use knife_runtime::sessions::*;
use knife_testkit::sessions::FakeBehaviour;
use support::*;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Long idle window so only explicit releases happen.
fn no_idle(o: &mut SessionManagerOptions) {
    o.idle_timeout = Duration::from_secs(3600);
}

#[tokio::test(start_paused = true)]
async fn mgr_30_close_and_releases_project_stopped_or_error_with_detail() {
    let h = Harness::new(FakeBehaviour::default(), no_idle).await;
    let (a, b, c) = (h.thread().await, h.thread().await, h.thread().await);
    for t in [&a, &b, &c] {
        h.open(&exclusive(t), t).await;
    }
    h.manager.close(&exclusive(&a)).await.unwrap();
    h.manager
        .release(&exclusive(&b), ReleaseReason::ManualShutdown, None)
        .await
        .unwrap();
    h.manager
        .release(
            &exclusive(&c),
            ReleaseReason::RuntimeError,
            Some("the agent crashed".into()),
        )
        .await
        .unwrap();
    assert_eq!(h.adapter.state().close_count(), 3);
    for t in [&a, &b] {
        assert!(!h.manager.is_live(&exclusive(t)));
        let row = h.session_row(&exclusive(t)).await.unwrap();
        assert_eq!(row.status, SessionStatus::Stopped);
        assert_eq!(row.last_error, None);
    }
    let row = h.session_row(&exclusive(&c)).await.unwrap();
    assert_eq!(row.status, SessionStatus::Error);
    assert_eq!(row.last_error.as_deref(), Some("the agent crashed"));
}

#[tokio::test(start_paused = true)]
async fn mgr_31_a_failing_event_stream_releases_the_session_with_error() {
    let h = Harness::new(FakeBehaviour::default(), no_idle).await;
    let t = h.thread().await;
    let handle = h.open(&exclusive(&t), &t).await;
    let mut events = handle.subscribe_events();
    h.adapter
        .session(&exclusive(&t))
        .unwrap()
        .fail("socket reset");
    let err = events.next().await.unwrap().unwrap_err();
    assert!(err.to_string().contains("socket reset"), "{err}");
    assert!(events.next().await.is_none());
    wait_until(ms(100), "released", || !h.manager.is_live(&exclusive(&t))).await;
    wait_until_async(ms(100), "status recorded", || async {
        h.session_status(&exclusive(&t)).await == Some(SessionStatus::Error)
    })
    .await;
    let row = h.session_row(&exclusive(&t)).await.unwrap();
    assert!(row.last_error.unwrap().contains("socket reset"));
}

#[tokio::test(start_paused = true)]
async fn mgr_32_a_provider_stop_drains_subscribers_in_order_then_releases_once() {
    let h = Harness::new(FakeBehaviour::default(), no_idle).await;
    let t = h.thread().await;
    let handle = h.open(&exclusive(&t), &t).await;
    let mut events = handle.subscribe_events();
    let input = turn(&t, 1);
    handle.start_turn(input.clone()).await.unwrap();
    let mut stopped = handle.session();
    stopped.status = SessionStatus::Stopped;
    let sent = vec![
        AdapterEvent::TurnItemUpdated(assistant_item(&t, 1, "done")),
        terminal(&input),
        AdapterEvent::ProviderSessionUpdated(stopped),
    ];
    let control = h.adapter.session(&exclusive(&t)).unwrap();
    for e in &sent {
        control.push(e.clone());
    }
    control.end();
    let mut got = Vec::new();
    while let Some(e) = events.next().await {
        got.push(e.unwrap());
    }
    assert_eq!(got, sent);
    wait_until(ms(100), "released", || !h.manager.is_live(&exclusive(&t))).await;
    wait_until_async(ms(100), "status recorded", || async {
        h.session_status(&exclusive(&t)).await == Some(SessionStatus::Stopped)
    })
    .await;
    settle().await;
    assert_eq!(h.adapter.state().close_count(), 1, "closed once");
    assert_eq!(
        h.session_status(&exclusive(&t)).await,
        Some(SessionStatus::Stopped)
    );
}

#[tokio::test(start_paused = true)]
async fn mgr_33_a_hanging_close_is_time_boxed_and_the_release_persisted() {
    let h = Harness::new(
        FakeBehaviour {
            close_hangs: true,
            ..Default::default()
        },
        no_idle,
    )
    .await;
    let t = h.thread().await;
    h.open(&exclusive(&t), &t).await;
    let started = tokio::time::Instant::now();
    h.manager.close(&exclusive(&t)).await.unwrap();
    let took = started.elapsed();
    assert!(
        took >= CLOSE_TIMEOUT && took < CLOSE_TIMEOUT + ms(500),
        "{took:?}"
    );
    assert_eq!(
        h.session_status(&exclusive(&t)).await,
        Some(SessionStatus::Stopped)
    );
}

#[tokio::test(start_paused = true)]
async fn mgr_34_close_instance_closes_every_session_of_the_instance() {
    let h = Harness::new(FakeBehaviour::default(), no_idle).await;
    let (a, b, c) = (h.thread().await, h.thread().await, h.thread().await);
    h.open(&exclusive(&a), &a).await;
    h.open(&exclusive(&b), &b).await;
    let other = ProviderSessionId::exclusive(&other_instance(), &c);
    let mut request = h.request(&other, &c);
    request.provider_instance_id = other_instance();
    h.manager.open(request).await.unwrap();
    h.manager.close_instance(&instance()).await.unwrap();
    assert_eq!(
        h.manager.live_sessions(),
        vec![other.clone()],
        "other instances untouched"
    );
    assert_eq!(h.adapter.state().close_count(), 2);
    assert_eq!(h.other_adapter.state().close_count(), 0);
    for t in [&a, &b] {
        assert_eq!(
            h.session_status(&exclusive(t)).await,
            Some(SessionStatus::Stopped)
        );
    }
}

#[tokio::test(start_paused = true)]
async fn mgr_35_shutdown_releases_live_sessions_and_stops_detached_opens() {
    let h = Harness::new(FakeBehaviour::default(), no_idle).await;
    let (a, b) = (h.thread().await, h.thread().await);
    h.open(&exclusive(&a), &a).await;
    h.adapter.configure(|beh| {
        beh.spawn_before_open = true;
        beh.before_open = Some(Arc::new(|_, _| std::future::pending().boxed()));
    });
    let manager = h.manager.clone();
    let request = h.request(&exclusive(&b), &b);
    let opening = tokio::spawn(async move { manager.open(request).await });
    wait_until(ms(100), "second open in flight", || {
        h.adapter.state().opens_started.load(Ordering::SeqCst) == 2
    })
    .await;

    h.manager.shutdown().await;
    assert!(h.manager.live_sessions().is_empty());
    assert_eq!(
        h.session_status(&exclusive(&a)).await,
        Some(SessionStatus::Stopped)
    );
    assert!(
        opening.await.unwrap().is_err(),
        "the open in flight was stopped"
    );
    wait_until(ms(100), "its process stopped", || {
        h.adapter.state().processes_stopped.load(Ordering::SeqCst) == 1
    })
    .await;
    let err = h
        .manager
        .open(h.request(&exclusive(&a), &a))
        .await
        .unwrap_err();
    assert!(matches!(err, SessionError::ShuttingDown));
}

#[tokio::test(start_paused = true)]
async fn mgr_36_shutdown_releases_in_parallel_under_one_shared_time_box() {
    let h = Harness::new(
        FakeBehaviour {
            close_hangs: true,
            ..Default::default()
        },
        no_idle,
    )
    .await;
    for _ in 0..3 {
        let t = h.thread().await;
        h.open(&exclusive(&t), &t).await;
    }
    let started = tokio::time::Instant::now();
    h.manager.shutdown().await;
    let took = started.elapsed();
    assert!(
        took >= CLOSE_TIMEOUT && took < CLOSE_TIMEOUT + Duration::from_secs(2),
        "{took:?}"
    );
    assert_eq!(h.adapter.state().close_count(), 3);
}

/// A second `shutdown` (the server calls it again after its HTTP side stopped) returns
/// only once the first call's releases wrote their records: the process exits after
/// it, and a release still in flight would be cut off (it was, on PostgreSQL).
#[tokio::test(start_paused = true)]
async fn mgr_35_a_second_shutdown_waits_for_the_release_records_of_the_first() {
    let h = Harness::new(
        FakeBehaviour {
            close_hangs: true,
            ..Default::default()
        },
        no_idle,
    )
    .await;
    let t = h.thread().await;
    h.open(&exclusive(&t), &t).await;
    let manager = h.manager.clone();
    let first = tokio::spawn(async move { manager.shutdown().await });
    wait_until(ms(100), "the first shutdown took the session out", || {
        h.manager.live_sessions().is_empty()
    })
    .await;
    assert_ne!(
        h.session_status(&exclusive(&t)).await,
        Some(SessionStatus::Stopped),
        "the release is still closing the runtime"
    );
    h.manager.shutdown().await;
    assert_eq!(
        h.session_status(&exclusive(&t)).await,
        Some(SessionStatus::Stopped),
        "the second shutdown returned before the release record was written"
    );
    first.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn mgr_37_subscriber_streams_end_normally_on_shutdown() {
    let h = Harness::new(FakeBehaviour::default(), no_idle).await;
    let t = h.thread().await;
    let handle = h.open(&exclusive(&t), &t).await;
    let mut events = handle.subscribe_events();
    let control = h.adapter.session(&exclusive(&t)).unwrap();
    control.push(AdapterEvent::TurnItemUpdated(assistant_item(&t, 1, "x")));
    let store = h.store.clone();
    let item = assistant_item(&t, 1, "x").id;
    wait_until_async(ms(200), "event pumped", || {
        let (store, item) = (store.clone(), item.clone());
        async move { store.get_turn_item(&item).await.unwrap().is_some() }
    })
    .await;
    settle().await;
    h.manager.shutdown().await;
    // Buffered events are dropped and the stream ends without an error.
    assert!(events.next().await.is_none());
    assert!(handle.subscribe_events().next().await.is_none());
}

#[tokio::test(start_paused = true)]
async fn mgr_38_a_failed_status_write_still_revokes_and_settles_and_is_retried_with_backoff() {
    let h = Harness::new(FakeBehaviour::default(), no_idle).await;
    let t = h.thread().await;
    let id = exclusive(&t);
    h.open(&id, &t).await;
    let request = h.push_request(&id, &t, "a").await;
    let credential = h.slots.get(&t).unwrap();
    h.flaky.fail(WriteKind::ReleaseStatus, Some(2));

    let err = h.manager.close(&id).await.unwrap_err();
    assert!(matches!(err, SessionError::Close(_)), "{err:?}");
    assert!(
        h.registry.resolve(credential.token()).is_none(),
        "credential revoked"
    );
    assert!(h.slots.get(&t).is_none(), "slot cleared");
    assert!(
        not_resumable(&h.request_row(&request).await),
        "requests settled"
    );
    assert_eq!(h.session_status(&id).await, Some(SessionStatus::Ready));

    // Retry 1 s later fails again; the next one, 2 s after that, lands.
    tokio::time::sleep(ms(1100)).await;
    assert_eq!(h.flaky.failures(WriteKind::ReleaseStatus), 2);
    assert_eq!(h.session_status(&id).await, Some(SessionStatus::Ready));
    tokio::time::sleep(ms(1700)).await;
    assert_eq!(h.session_status(&id).await, Some(SessionStatus::Ready));
    tokio::time::sleep(ms(400)).await;
    assert_eq!(h.session_status(&id).await, Some(SessionStatus::Stopped));
}

#[tokio::test(start_paused = true)]
async fn mgr_39_release_retries_leave_a_replacement_alone() {
    let h = Harness::new(FakeBehaviour::default(), no_idle).await;
    let t = h.thread().await;
    let id = exclusive(&t);
    h.open(&id, &t).await;
    let old = h.push_request(&id, &t, "old").await;
    h.flaky.fail(WriteKind::ReleaseStatus, None);
    h.flaky.fail(WriteKind::ReleaseRequests, None);
    assert!(h.manager.close(&id).await.is_err());
    assert_eq!(
        h.request_row(&old).await.status,
        RuntimeRequestStatus::Pending
    );

    h.open(&id, &t).await;
    let new = h.push_request(&id, &t, "new").await;
    h.flaky.heal(WriteKind::ReleaseStatus);
    h.flaky.heal(WriteKind::ReleaseRequests);
    tokio::time::sleep(ms(1500)).await;

    assert!(h.manager.is_live(&id));
    assert_eq!(h.session_status(&id).await, Some(SessionStatus::Ready));
    assert!(not_resumable(&h.request_row(&old).await));
    let new = h.request_row(&new).await;
    assert_eq!(new.status, RuntimeRequestStatus::Pending);
    assert!(matches!(
        new.response_capability,
        ResponseCapability::Live { .. }
    ));
}

#[tokio::test(start_paused = true)]
async fn mgr_40_each_failed_release_retries_its_own_cleanup() {
    let h = Harness::new(
        FakeBehaviour {
            shared: true,
            ..Default::default()
        },
        no_idle,
    )
    .await;
    let (a, b) = (h.thread().await, h.thread().await);
    h.open(&shared(), &a).await;
    h.open(&shared(), &b).await;
    let ra = h.push_request(&shared(), &a, "a").await;
    let rb = h.push_request(&shared(), &b, "b").await;
    h.flaky.fail(WriteKind::ReleaseStatus, None);
    h.flaky.fail(WriteKind::ReleaseRequests, None);
    assert!(h.manager.close(&shared()).await.is_err());

    h.open(&shared(), &a).await;
    let ra2 = h.push_request(&shared(), &a, "a2").await;
    assert!(h.manager.close(&shared()).await.is_err());
    for r in [&ra, &rb, &ra2] {
        assert_eq!(h.request_row(r).await.status, RuntimeRequestStatus::Pending);
    }

    h.flaky.heal(WriteKind::ReleaseStatus);
    h.flaky.heal(WriteKind::ReleaseRequests);
    tokio::time::sleep(ms(1500)).await;
    for r in [&ra, &rb, &ra2] {
        assert!(not_resumable(&h.request_row(r).await), "{r}");
    }
    assert_eq!(
        h.session_status(&shared()).await,
        Some(SessionStatus::Stopped)
    );
}
