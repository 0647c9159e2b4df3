// Contract cases of Cluster and per-node process groups (SPEC.md SCALE-05, SCALE-07): node
// ids held by one live process, singletons held by one node, process groups per node.

use super::StoreFactory;
use super::fixtures::*;
use crate::{ProcessGroupRecord, StoreError};
use knife_protocol::ThreadId;
use std::time::Duration;

const LONG: Duration = Duration::from_secs(30);
/// Short enough to wait out in a test, long enough not to expire between two calls.
const SHORT: Duration = Duration::from_millis(400);

fn group(node: &str, pgid: i32, label: &str) -> ProcessGroupRecord {
    ProcessGroupRecord {
        node: node.into(),
        pgid,
        owner_pid: 17,
        leader_start: Some(5),
        thread_id: Some(ThreadId::from("t1")),
        label: label.into(),
        registered_at: ts(3),
    }
}

/// Two hosts may have the same pgid: both rows are kept, each listed with its node, and
/// forgetting one node's leaves the other's.
pub async fn scale_07_process_groups_are_recorded_per_node_and_one_node_never_forgets_another_s(
    factory: &dyn StoreFactory,
) {
    let (_dir, store) = temp_store(factory).await;
    let a = group("node-a", 4242, "bash: sleep on a");
    let b = group("node-b", 4242, "bash: sleep on b");
    store.register_process_group(a.clone()).await.unwrap();
    store.register_process_group(b.clone()).await.unwrap();
    // Re-registering a pgid replaces that node's row only.
    let a2 = ProcessGroupRecord {
        owner_pid: 18,
        ..a.clone()
    };
    store.register_process_group(a2.clone()).await.unwrap();
    assert_eq!(
        store.list_process_groups().await.unwrap(),
        vec![a2.clone(), b.clone()]
    );
    store
        .unregister_process_group("node-a", 4242)
        .await
        .unwrap();
    assert_eq!(store.list_process_groups().await.unwrap(), vec![b.clone()]);
    store
        .unregister_process_group("node-c", 4242)
        .await
        .unwrap();
    assert_eq!(store.list_process_groups().await.unwrap(), vec![b]);
}

/// A singleton is held by one node at a time: of racing holders exactly one wins; the
/// holder renews; others are refused until it releases or its hold expires.
pub async fn scale_07_a_cluster_singleton_is_held_by_one_node_at_a_time(
    factory: &dyn StoreFactory,
) {
    let (_dir, store) = temp_store(factory).await;
    let mut racers = Vec::new();
    for i in 0..6 {
        let store = store.clone();
        racers.push(tokio::spawn(async move {
            let node = format!("node-{i}");
            let held = store.hold_singleton("reaper", &node, LONG).await.unwrap();
            (node, held)
        }));
    }
    let mut winners = Vec::new();
    for r in racers {
        let (node, held) = r.await.unwrap();
        if held {
            winners.push(node);
        }
    }
    assert_eq!(winners.len(), 1, "exactly one holder: {winners:?}");
    let holder = winners.remove(0);
    let other = if holder == "node-0" {
        "node-1"
    } else {
        "node-0"
    };
    assert!(store.hold_singleton("reaper", &holder, LONG).await.unwrap());
    assert!(!store.hold_singleton("reaper", other, LONG).await.unwrap());
    // Another singleton is independent.
    assert!(store.hold_singleton("other", other, LONG).await.unwrap());
    // A release by a non-holder changes nothing; by the holder frees it.
    store.release_singleton("reaper", other).await.unwrap();
    assert!(!store.hold_singleton("reaper", other, LONG).await.unwrap());
    store.release_singleton("reaper", &holder).await.unwrap();
    assert!(store.hold_singleton("reaper", other, SHORT).await.unwrap());
    assert!(
        !store
            .hold_singleton("reaper", &holder, SHORT)
            .await
            .unwrap()
    );
    // An expired hold is taken by the next node that asks.
    tokio::time::sleep(SHORT + Duration::from_millis(150)).await;
    assert!(store.hold_singleton("reaper", &holder, LONG).await.unwrap());
    assert!(!store.hold_singleton("reaper", other, LONG).await.unwrap());
}

/// A node id heartbeated from another place is refused with the row's location and
/// expiry; the same place (its data-directory lock proves the old process gone) takes it
/// back at once; an expired row, or one left cleanly, is free; a heartbeat of a process
/// whose id was taken over fails.
pub async fn scale_05_a_node_id_is_held_by_one_live_process_and_taken_back_by_its_own_place(
    factory: &dyn StoreFactory,
) {
    let (_dir, store) = temp_store(factory).await;
    let first = store
        .join_cluster("node-a", "host1:/data/a", "proc-1", SHORT)
        .await
        .unwrap();
    assert_eq!(
        (
            first.node.as_str(),
            first.location.as_str(),
            first.instance.as_str()
        ),
        ("node-a", "host1:/data/a", "proc-1")
    );
    assert!(first.expires_at > chrono::Utc::now());
    // Another place while the first heartbeats: refused, naming where it runs.
    let beat = store
        .heartbeat_node("node-a", "proc-1", SHORT)
        .await
        .unwrap();
    assert!(beat.expires_at >= first.expires_at);
    match store
        .join_cluster("node-a", "host2:/data/a", "proc-2", SHORT)
        .await
    {
        Err(StoreError::NodeIdLive {
            node,
            location,
            expires_at,
        }) => {
            assert_eq!(
                (node.as_str(), location.as_str()),
                ("node-a", "host1:/data/a")
            );
            assert_eq!(expires_at, beat.expires_at);
        }
        other => panic!("expected NodeIdLive, got {other:?}"),
    }
    // Other ids are free.
    store
        .join_cluster("node-b", "host2:/data/b", "proc-3", LONG)
        .await
        .unwrap();
    // The same place (a restart after a crash) takes its id back at once.
    let back = store
        .join_cluster("node-a", "host1:/data/a", "proc-4", SHORT)
        .await
        .unwrap();
    assert_eq!(back.instance, "proc-4");
    // The old process's heartbeat now fails: it must stop.
    assert!(matches!(
        store.heartbeat_node("node-a", "proc-1", SHORT).await,
        Err(StoreError::NodeIdLive { .. })
    ));
    let live: Vec<String> = store
        .live_nodes()
        .await
        .unwrap()
        .into_iter()
        .map(|m| m.node)
        .collect();
    assert_eq!(live, ["node-a", "node-b"]);
    // Once its row expired, the id is free for any place.
    tokio::time::sleep(SHORT + Duration::from_millis(150)).await;
    let moved = store
        .join_cluster("node-a", "host2:/data/a", "proc-5", LONG)
        .await
        .unwrap();
    assert_eq!(moved.location, "host2:/data/a");
    // A clean leave frees it at once.
    store.leave_cluster("node-a", "proc-5").await.unwrap();
    store
        .join_cluster("node-a", "host3:/x", "proc-6", LONG)
        .await
        .unwrap();
    // A leave by a process that no longer owns the row changes nothing.
    store.leave_cluster("node-a", "proc-5").await.unwrap();
    assert!(matches!(
        store
            .join_cluster("node-a", "host4:/y", "proc-7", LONG)
            .await,
        Err(StoreError::NodeIdLive { .. })
    ));
}
