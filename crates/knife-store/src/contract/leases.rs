// Contract cases of Leases (SPEC.md SCALE-04): a lease names its node and a database-clock
// expiry, its epoch only grows, fenced writes of a lost lease write nothing, takeovers are once.

use super::StoreFactory;
use super::fixtures::*;
use crate::{Lease, StoreError, TakeScope};
use knife_protocol::*;
use std::collections::BTreeSet;
use std::time::Duration;

const LONG: Duration = Duration::from_secs(30);
/// Short enough to wait out in a test, long enough not to expire between two calls.
const SHORT: Duration = Duration::from_millis(400);

async fn wait_out(lease: &Lease) {
    let left = (lease.expires_at - chrono::Utc::now())
        .to_std()
        .unwrap_or_default();
    tokio::time::sleep(left + Duration::from_millis(50)).await;
}

fn claimed(id: &str, at: i64) -> Thread {
    let mut t = thread(id, "p", 1);
    t.claim(ts(at));
    t
}

pub async fn scale_04_a_lease_names_its_node_and_expiry_and_another_node_is_refused_while_it_is_live(
    factory: &dyn StoreFactory,
) {
    let (_dir, store) = temp_store(factory).await;
    let t = ThreadId::from("t1");
    let before = chrono::Utc::now();
    let a = store.acquire_lease(&t, "node-a", LONG).await.unwrap();
    assert_eq!(
        (a.thread_id.clone(), a.node.as_str(), a.epoch),
        (t.clone(), "node-a", 1)
    );
    // The database's clock is this machine's here: the expiry is ~30 s ahead.
    let ahead = (a.expires_at - before).num_milliseconds();
    assert!(
        (29_000..=31_000).contains(&ahead),
        "expiry {ahead} ms ahead"
    );
    assert_eq!(store.get_lease(&t).await.unwrap(), Some(a.clone()));
    assert_eq!(store.live_leases().await.unwrap(), vec![a.clone()]);

    match store.acquire_lease(&t, "node-b", LONG).await {
        Err(StoreError::LeaseHeld {
            thread_id,
            node,
            expires_at,
        }) => {
            assert_eq!((thread_id, node.as_str()), (t.clone(), "node-a"));
            assert_eq!(expires_at, a.expires_at);
        }
        other => panic!("node-b got {other:?} while node-a's lease is live"),
    }
    let msg = store
        .acquire_lease(&t, "node-b", LONG)
        .await
        .unwrap_err()
        .to_string();
    assert!(msg.contains("node-a"), "{msg}");

    let renewed = store.renew_lease(&a, LONG).await.unwrap();
    assert_eq!((renewed.epoch, renewed.node.as_str()), (1, "node-a"));
    assert!(renewed.expires_at >= a.expires_at);

    // Leases are operational rows, not events: a rebuild leaves them alone.
    store.rebuild().await.unwrap();
    assert_eq!(store.get_lease(&t).await.unwrap(), Some(renewed.clone()));
    assert_eq!(
        store.latest_sequence(None).await.unwrap(),
        0,
        "no event written"
    );

    // A release keeps the row (and its epoch): the next holder gets epoch 2.
    store.release_lease(&renewed).await.unwrap();
    assert!(
        store.live_leases().await.unwrap().is_empty(),
        "released = expired"
    );
    let b = store.acquire_lease(&t, "node-b", LONG).await.unwrap();
    assert_eq!((b.node.as_str(), b.epoch), ("node-b", 2));
    // node-a's lease moved on: renewing it is refused, releasing it is a no-op.
    assert!(matches!(
        store.renew_lease(&renewed, LONG).await,
        Err(StoreError::Fenced { epoch: 1, .. })
    ));
    store.release_lease(&renewed).await.unwrap();
    assert_eq!(store.get_lease(&t).await.unwrap(), Some(b));
}

pub async fn scale_04_the_epoch_grows_with_every_resume_and_takeover(factory: &dyn StoreFactory) {
    let (_dir, store) = temp_store(factory).await;
    let t = ThreadId::from("t1");
    let first = store.acquire_lease(&t, "node-a", LONG).await.unwrap();
    // A resume on the same node is a new acquisition: epoch + 1, the old one fenced.
    let resumed = store.acquire_lease(&t, "node-a", SHORT).await.unwrap();
    assert_eq!((first.epoch, resumed.epoch), (1, 2));
    assert!(matches!(
        store.renew_lease(&first, LONG).await,
        Err(StoreError::Fenced { .. })
    ));
    assert!(matches!(
        store.acquire_lease(&t, "node-b", LONG).await,
        Err(StoreError::LeaseHeld { .. })
    ));
    wait_out(&resumed).await;
    let taken = store.acquire_lease(&t, "node-b", LONG).await.unwrap();
    assert_eq!((taken.node.as_str(), taken.epoch), ("node-b", 3));
    let back = store.acquire_lease(&t, "node-b", LONG).await.unwrap();
    assert_eq!(back.epoch, 4);
}

pub async fn scale_04_a_write_fenced_by_a_lost_lease_is_refused_and_writes_nothing(
    factory: &dyn StoreFactory,
) {
    let (_dir, store) = temp_store(factory).await;
    let t = claimed("t1", 2);
    store
        .write(vec![
            ev(EventBody::ProjectCreated(project("p", 1))),
            ev(EventBody::ThreadCreated(t.clone())),
        ])
        .await
        .unwrap();
    let update = |title: &str| {
        let mut t = t.clone();
        t.title = title.to_owned();
        ev_on("t1", EventBody::ThreadUpdated(t))
    };
    let a = store.acquire_lease(&t.id, "node-a", SHORT).await.unwrap();
    let wrote = store
        .write_fenced(std::slice::from_ref(&a), None, vec![update("by a")])
        .await
        .unwrap();
    assert_eq!(wrote.map(|w| w.len()), Some(1));
    // Expired but nobody took it over: the epoch is unchanged, a is still the only
    // writer, so its late write is accepted.
    wait_out(&a).await;
    assert!(
        store
            .write_fenced(std::slice::from_ref(&a), None, vec![update("late a")])
            .await
            .unwrap()
            .is_some()
    );

    let taken = store
        .take_expired_leases("node-b", LONG, TakeScope::Expired, 10, &[])
        .await
        .unwrap();
    assert_eq!(taken.len(), 1);
    let b = taken[0].clone();
    assert_eq!((b.node.as_str(), b.epoch), ("node-b", 2));

    let head = store.latest_sequence(None).await.unwrap();
    match store
        .write_fenced(std::slice::from_ref(&a), None, vec![update("zombie a")])
        .await
    {
        Err(e @ StoreError::Fenced { .. }) => {
            let msg = e.to_string();
            assert!(
                msg.contains("node-a") && msg.contains("node node-b at epoch 2"),
                "{msg}"
            );
            assert!(msg.contains("do not retry"), "{msg}");
        }
        other => panic!("the zombie's write was not fenced: {other:?}"),
    }
    assert_eq!(
        store.latest_sequence(None).await.unwrap(),
        head,
        "nothing written"
    );
    assert_eq!(
        store.get_thread(&t.id).await.unwrap().unwrap().title,
        "late a"
    );
    assert!(matches!(
        store.renew_lease(&a, LONG).await,
        Err(StoreError::Fenced { .. })
    ));

    // The new holder writes; a CAS conflict under a valid fence is `Ok(None)`.
    let stored = store
        .write_fenced(std::slice::from_ref(&b), None, vec![update("by b")])
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stored[0].sequence, head + 1);
    let stale = crate::RowGuard::new(crate::EntityKind::Thread, "t1", Some(1));
    assert_eq!(
        store
            .write_fenced(std::slice::from_ref(&b), Some(stale), vec![update("cas")])
            .await
            .unwrap(),
        None
    );
    assert_eq!(
        store.get_thread(&t.id).await.unwrap().unwrap().title,
        "by b"
    );
}

pub async fn takeover_of_expired_claims_by_concurrent_sweepers_takes_each_exactly_once(
    factory: &dyn StoreFactory,
) {
    let (_dir, store) = temp_store(factory).await;
    let mut events = vec![ev(EventBody::ProjectCreated(project("p", 1)))];
    let expected: BTreeSet<String> = (0..20).map(|i| format!("c{i:02}")).collect();
    for (i, id) in expected.iter().enumerate() {
        events.push(ev(EventBody::ThreadCreated(claimed(id, 10 + i as i64))));
    }
    let mut child = claimed("child", 3);
    child.parent_thread_id = Some(ThreadId::from("c00"));
    events.push(ev(EventBody::ThreadCreated(child)));
    events.push(ev(EventBody::ThreadCreated(thread("idle", "p", 1))));
    events.push(ev(EventBody::ThreadCreated(claimed("live", 4))));
    store.write(events).await.unwrap();
    store
        .acquire_lease(&ThreadId::from("live"), "node-x", LONG)
        .await
        .unwrap();
    // An expired lease on one of them: taken over like the never-leased ones.
    let old = store
        .acquire_lease(
            &ThreadId::from("c05"),
            "node-dead",
            Duration::from_millis(1),
        )
        .await
        .unwrap();
    wait_out(&old).await;

    let sweeps = (0..4).map(|n| {
        let store = store.clone();
        async move {
            store
                .take_expired_leases(&format!("node-{n}"), LONG, TakeScope::Expired, 100, &[])
                .await
                .unwrap()
        }
    });
    let taken: Vec<Lease> = futures::future::join_all(sweeps).await.concat();
    let ids: Vec<String> = taken.iter().map(|l| l.thread_id.to_string()).collect();
    let unique: BTreeSet<String> = ids.iter().cloned().collect();
    assert_eq!(ids.len(), unique.len(), "a thread was taken twice: {ids:?}");
    assert_eq!(
        unique, expected,
        "claimed top-level threads without a live lease"
    );
    for l in &taken {
        let want = if l.thread_id.as_str() == "c05" { 2 } else { 1 };
        assert_eq!(l.epoch, want, "{l:?}");
        assert_eq!(
            store.get_lease(&l.thread_id).await.unwrap().as_ref(),
            Some(l)
        );
    }
    // Oldest claim first within one sweep.
    let n0: Vec<&Lease> = taken.iter().filter(|l| l.node == "node-0").collect();
    assert!(
        n0.windows(2)
            .all(|w| w[0].thread_id.as_str() < w[1].thread_id.as_str())
    );

    // All live now: a second sweep takes nothing; a restarted node-x takes back its own.
    assert!(
        store
            .take_expired_leases("node-9", LONG, TakeScope::Expired, 100, &[])
            .await
            .unwrap()
            .is_empty()
    );
    let own = store
        .take_expired_leases("node-x", LONG, TakeScope::ExpiredOrOwn, 100, &[])
        .await
        .unwrap();
    assert_eq!(own.len(), 1);
    assert_eq!((own[0].thread_id.as_str(), own[0].epoch), ("live", 2));
}

pub async fn scale_04_a_node_fences_every_write_of_a_thread_it_holds_and_stops_after_losing_it(
    factory: &dyn StoreFactory,
) {
    let (_dir, store) = temp_store(factory).await;
    let t = claimed("t1", 2);
    store
        .write(vec![
            ev(EventBody::ProjectCreated(project("p", 1))),
            ev(EventBody::ThreadCreated(t.clone())),
            ev(EventBody::ThreadCreated(thread("other", "p", 1))),
        ])
        .await
        .unwrap();
    // Two nodes on one database: two handles of the same backend.
    let a = store
        .clone()
        .with_node(crate::NodeLeases::new("node-a", SHORT));
    let b = store
        .clone()
        .with_node(crate::NodeLeases::new("node-b", LONG));
    let titled = |id: &str, title: &str| {
        let mut t = if id == "t1" {
            claimed(id, 2)
        } else {
            thread(id, "p", 1)
        };
        t.title = title.to_owned();
        ev_on(id, EventBody::ThreadUpdated(t))
    };
    let held = a.hold_lease(&t.id).await.unwrap();
    assert_eq!(a.node().get(&t.id), Some(held.clone()));
    a.write(vec![titled("t1", "a's turn")]).await.unwrap();

    // node-a stalls past its lease; node-b takes the thread over.
    wait_out(&held).await;
    let taken = b
        .take_expired_leases("node-b", LONG, TakeScope::Expired, 10, &[])
        .await
        .unwrap();
    assert_eq!(taken.len(), 1);
    b.adopt_lease(taken[0].clone());

    // Every later write of node-a for that thread is refused (plain `write`, a CAS
    // `write_if`, a batch mixing threads), the first by the database, the next at once.
    let head = store.latest_sequence(None).await.unwrap();
    assert!(matches!(
        a.write(vec![titled("t1", "zombie")]).await,
        Err(StoreError::Fenced { .. })
    ));
    assert!(a.node().get(&t.id).is_none(), "the lease is lost");
    let guard = crate::RowGuard::new(crate::EntityKind::Thread, "t1", None);
    assert!(matches!(
        a.write_if(guard, vec![titled("t1", "zombie cas")]).await,
        Err(StoreError::Fenced { .. })
    ));
    assert!(matches!(
        a.write(vec![titled("other", "x"), titled("t1", "zombie mixed")])
            .await,
        Err(StoreError::Fenced { .. })
    ));
    // The lease keeper hears of the loss once (to abandon the run), then nothing.
    assert_eq!(a.renew_held_leases().await.0, vec![t.id.clone()]);
    assert!(
        a.renew_held_leases().await.0.is_empty(),
        "nothing held any more"
    );
    assert_eq!(
        store.latest_sequence(None).await.unwrap(),
        head,
        "nothing written"
    );
    // Threads it does not lease are not fenced.
    a.write(vec![titled("other", "renamed on a")])
        .await
        .unwrap();

    // node-b writes under its lease, renews it, and lets it go at the run's end.
    b.write(vec![titled("t1", "b's turn")]).await.unwrap();
    let (lost, failed) = b.renew_held_leases().await;
    assert!(lost.is_empty() && failed.is_empty(), "{lost:?} {failed:?}");
    b.let_go(&t.id).await.unwrap();
    assert!(b.node().get(&t.id).is_none());
    assert!(store.live_leases().await.unwrap().is_empty());
    assert_eq!(
        store.get_thread(&t.id).await.unwrap().unwrap().title,
        "b's turn"
    );
}

/// SCALE-08 (store part): a taker's excluded threads (workspaces it does not have) are
/// never taken by it; they stay for the next taker that does not exclude them.
pub async fn scale_08_a_taker_never_takes_the_threads_it_excludes(factory: &dyn StoreFactory) {
    let (_dir, store) = temp_store(factory).await;
    store
        .write(vec![
            ev(EventBody::ProjectCreated(project("p", 1))),
            ev(EventBody::ThreadCreated(claimed("e1", 1))),
            ev(EventBody::ThreadCreated(claimed("e2", 2))),
            ev(EventBody::ThreadCreated(claimed("e3", 3))),
        ])
        .await
        .unwrap();
    let ids = |taken: Vec<Lease>| -> Vec<String> {
        taken.into_iter().map(|l| l.thread_id.to_string()).collect()
    };
    let not_here = [ThreadId::from("e1"), ThreadId::from("e3")];
    let b = store
        .take_expired_leases("node-b", LONG, TakeScope::Expired, 10, &not_here)
        .await
        .unwrap();
    assert_eq!(ids(b), ["e2"]);
    let c = store
        .take_expired_leases("node-c", LONG, TakeScope::Expired, 10, &[])
        .await
        .unwrap();
    assert_eq!(ids(c), ["e1", "e3"]);
}
