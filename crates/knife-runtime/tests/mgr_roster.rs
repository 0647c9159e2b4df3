//! Session manager — the background-task roster on release (SPEC.md MGR-44..47).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::time::Duration;

use futures::FutureExt;
use knife_protocol::*;
use knife_runtime::sessions::*;
use knife_testkit::sessions::FakeBehaviour;
use support::*;

fn no_idle(o: &mut SessionManagerOptions) {
    o.idle_timeout = Duration::from_secs(3600);
}

#[tokio::test(start_paused = true)]
async fn mgr_44_releasing_a_session_clears_its_provider_threads_rosters_only() {
    let h = Harness::new(FakeBehaviour::default(), |_| {}).await;
    let (a, b) = (h.thread().await, h.thread().await);
    h.open(&exclusive(&a), &a).await;
    h.open(&exclusive(&b), &b).await;
    let pa = provider_thread(&a, &exclusive(&a), "native-a", &["dev-server", "watch"]);
    let pb = provider_thread(&b, &exclusive(&b), "native-b", &["tests"]);
    h.push_provider_thread(&exclusive(&a), pa.clone()).await;
    h.push_provider_thread(&exclusive(&b), pb.clone()).await;
    // Keep B busy so only A idles out.
    h.manager
        .get(&exclusive(&b))
        .unwrap()
        .start_turn(turn(&b, 1))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert!(!h.manager.is_live(&exclusive(&a)));
    assert!(
        h.roster(&pa.id).await.is_empty(),
        "idle release cleared A's roster"
    );
    assert_eq!(h.roster(&pb.id).await, vec!["tests".to_owned()]);

    h.manager.close(&exclusive(&b)).await.unwrap();
    assert!(h.roster(&pb.id).await.is_empty(), "close clears it too");

    let c = h.thread().await;
    h.open(&exclusive(&c), &c).await;
    let pc = provider_thread(&c, &exclusive(&c), "native-c", &["build"]);
    h.push_provider_thread(&exclusive(&c), pc.clone()).await;
    h.manager
        .detach(&exclusive(&c), &c, Some("Thread archived.".into()), false)
        .await
        .unwrap();
    assert!(
        !h.manager.is_live(&exclusive(&c)),
        "detaching its only thread releases it"
    );
    assert!(h.roster(&pc.id).await.is_empty(), "and clears its roster");
}

#[tokio::test(start_paused = true)]
async fn mgr_45_a_runtime_whose_tasks_outlive_it_keeps_the_roster() {
    let h = Harness::new(
        FakeBehaviour {
            background_tasks_outlive_session: true,
            ..Default::default()
        },
        no_idle,
    )
    .await;
    let t = h.thread().await;
    h.open(&exclusive(&t), &t).await;
    let pt = provider_thread(&t, &exclusive(&t), "native", &["dev-server"]);
    h.push_provider_thread(&exclusive(&t), pt.clone()).await;
    h.manager.close(&exclusive(&t)).await.unwrap();
    assert_eq!(h.roster(&pt.id).await, vec!["dev-server".to_owned()]);
}

#[tokio::test(start_paused = true)]
async fn mgr_46_tasks_a_replacement_reports_during_the_close_are_kept() {
    let h = Harness::new(
        FakeBehaviour {
            close_hangs: true,
            ..Default::default()
        },
        no_idle,
    )
    .await;
    let t = h.thread().await;
    let id = exclusive(&t);
    h.open(&id, &t).await;
    h.push_provider_thread(&id, provider_thread(&t, &id, "native", &["old-task"]))
        .await;
    let manager = h.manager.clone();
    let id2 = id.clone();
    let closing = tokio::spawn(async move { manager.close(&id2).await });
    let reached = h.adapter.state().close_reached.notified();
    reached.await;

    h.adapter.configure(|b| b.close_hangs = false);
    h.open(&id, &t).await;
    let pt = provider_thread(&t, &id, "native", &["old-task", "new-task"]);
    h.push_provider_thread(&id, pt.clone()).await;
    closing.await.unwrap().unwrap();
    assert_eq!(
        h.roster(&pt.id).await,
        vec!["new-task".to_owned()],
        "only what the released session listed is removed"
    );
}

#[tokio::test(start_paused = true)]
async fn mgr_47_an_update_landing_between_read_and_clear_wins() {
    let h = Harness::new(FakeBehaviour::default(), no_idle).await;
    let t = h.thread().await;
    let id = exclusive(&t);
    h.open(&id, &t).await;
    let pt = provider_thread(&t, &id, "native", &["listed"]);
    h.push_provider_thread(&id, pt.clone()).await;
    // An update that keeps `updated_at` but adds a task, written after the clear read
    // the row and before its compare-and-set write.
    let mut concurrent = h.store.get_provider_thread(&pt.id).await.unwrap().unwrap();
    concurrent
        .pending_background_tasks
        .push(PendingBackgroundTask {
            task_id: "arrived".into(),
            kind: None,
            description: None,
        });
    let store = h.store.clone();
    let event = DomainEvent::new(
        concurrent.updated_at,
        EventBody::ProviderThreadUpdated(concurrent),
    );
    h.flaky.before_next(WriteKind::RosterClear, move || {
        async move { write_direct(&store, vec![event]).await }.boxed()
    });
    h.manager.close(&id).await.unwrap();
    assert_eq!(
        h.roster(&pt.id).await,
        vec!["arrived".to_owned()],
        "the update was not overwritten; the clear re-read and removed only its task"
    );
    assert_eq!(
        h.flaky.writes(WriteKind::RosterClear),
        2,
        "one CAS lost, one retried"
    );
}
