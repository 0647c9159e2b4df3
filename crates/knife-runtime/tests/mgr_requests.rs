//! Session manager — runtime requests on release and outside runs (SPEC.md MGR-41..43).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::time::Duration;

use futures::StreamExt;
use knife_protocol::*;
use knife_runtime::sessions::requests::request_item_id;
use knife_runtime::sessions::*;
use knife_testkit::sessions::FakeBehaviour;
use support::*;

#[tokio::test(start_paused = true)]
async fn mgr_41_release_expires_live_requests_and_fails_their_node_and_item() {
    let h = Harness::new(FakeBehaviour::default(), |o| {
        o.idle_timeout = Duration::from_secs(3600)
    })
    .await;
    let (t, other) = (h.thread().await, h.thread().await);
    let id = exclusive(&t);
    h.open(&id, &t).await;
    h.open(&exclusive(&other), &other).await;
    let request = h.push_request(&id, &t, "mine").await;
    let elsewhere = h.push_request(&exclusive(&other), &other, "theirs").await;
    h.manager
        .release(&id, ReleaseReason::Idle, None)
        .await
        .unwrap();
    assert!(h.manager.is_live(&exclusive(&other)));

    let row = h.request_row(&request).await;
    assert!(not_resumable(&row), "{row:?}");
    assert!(row.resolved_at.is_some());
    let projection = h.store.thread_projection(&t).await.unwrap().unwrap();
    let node = projection
        .nodes
        .iter()
        .find(|n| n.runtime_request_id.as_ref() == Some(&request))
        .unwrap();
    assert_eq!(node.status, NodeStatus::Failed);
    let item = h
        .store
        .get_turn_item(&request_item_id(&request))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(item.status, TurnItemStatus::Failed);
    // A request live on another session is untouched.
    assert_eq!(
        h.request_row(&elsewhere).await.status,
        RuntimeRequestStatus::Pending
    );
}

#[tokio::test(start_paused = true)]
async fn mgr_42_a_request_persisted_during_the_release_is_still_settled() {
    let h = Harness::new(FakeBehaviour::default(), |o| {
        o.idle_timeout = Duration::from_secs(3600)
    })
    .await;
    let t = h.thread().await;
    let id = exclusive(&t);
    h.open(&id, &t).await;
    let pause = h.flaky.pause(WriteKind::PumpRequests);
    let (request, events) = request_events(&t, &id, "late");
    let control = h.adapter.session(&id).unwrap();
    for e in events {
        control.push(e);
    }
    pause.reached().await;
    let manager = h.manager.clone();
    let id2 = id.clone();
    let close = tokio::spawn(async move { manager.close(&id2).await });
    settle().await;
    assert!(
        !close.is_finished(),
        "the release waits for the request write"
    );
    pause.resume();
    close.await.unwrap().unwrap();
    assert!(not_resumable(&h.request_row(&request).await));
}

#[tokio::test(start_paused = true)]
async fn mgr_43_requests_outside_any_run_are_persisted_waiting_with_null_run_ids() {
    let h = Harness::new(FakeBehaviour::default(), |_| {}).await;
    let t = h.thread().await;
    let id = exclusive(&t);
    let handle = h.open(&id, &t).await;
    let mut events = handle.subscribe_events();
    let request = h.push_request(&id, &t, "login").await;
    let row = h.request_row(&request).await;
    assert_eq!(row.status, RuntimeRequestStatus::Pending);
    assert_eq!(row.run_id, None);
    assert_eq!(row.provider_turn_id, None);
    let projection = h.store.thread_projection(&t).await.unwrap().unwrap();
    let node = projection
        .nodes
        .iter()
        .find(|n| n.runtime_request_id.as_ref() == Some(&request))
        .unwrap();
    assert_eq!(
        (node.status, node.run_id.clone()),
        (NodeStatus::Waiting, None)
    );
    let item = h
        .store
        .get_turn_item(&request_item_id(&request))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (item.status, item.run_id.clone()),
        (TurnItemStatus::Waiting, None)
    );
    // Persisted directly, not offered to run subscribers.
    let marker = assistant_item(&t, 1, "after");
    h.adapter
        .session(&id)
        .unwrap()
        .push(AdapterEvent::TurnItemUpdated(marker.clone()));
    assert_eq!(
        events.next().await.unwrap().unwrap(),
        AdapterEvent::TurnItemUpdated(marker)
    );
}
