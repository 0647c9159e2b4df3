//! Session manager × MCP credentials (SPEC.md MCP-01, MCP-02, MCP-06..11), under
//! paused time with knife-testkit's fake adapter.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use futures::FutureExt;
use futures::future::BoxFuture;
use knife_protocol::*;
use knife_runtime::mcp::{AgentAccess, FixedAccess, McpAccessPolicy};
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

/// A second shared session id on the same instance.
fn second_shared() -> ProviderSessionId {
    ProviderSessionId::from("provider-session:fake:second")
}

/// An access policy that blocks until the test lets it answer.
#[derive(Debug)]
struct GatedAccess {
    gate: Arc<Semaphore>,
    reached: Arc<Semaphore>,
}

impl McpAccessPolicy for GatedAccess {
    fn access<'a>(&'a self, _thread: &'a ThreadId) -> BoxFuture<'a, AgentAccess> {
        async move {
            self.reached.add_permits(1);
            self.gate.acquire().await.unwrap().forget();
            AgentAccess::default()
        }
        .boxed()
    }
}

fn caps(list: &[McpCapability]) -> BTreeSet<McpCapability> {
    list.iter().copied().collect()
}

#[tokio::test(start_paused = true)]
async fn mcp_01_open_mints_a_credential_and_hands_the_adapter_its_config() {
    let h = Harness::new(FakeBehaviour::default(), |_| {}).await;
    let t = h.thread().await;
    let id = exclusive(&t);
    h.open(&id, &t).await;

    let config = h.adapter.state().open_records()[0].mcp.clone().unwrap();
    assert_eq!(
        h.slots.get(&t),
        Some(config.clone()),
        "slot holds the config"
    );
    let json = serde_json::to_value(&config).unwrap();
    assert_eq!(json["threadId"], t.to_string());
    assert_eq!(json["providerInstanceId"], INSTANCE);
    assert_eq!(json["providerSessionId"], id.to_string());
    assert_eq!(json["endpoint"], "http://127.0.0.1:43123/mcp");
    let header = json["authorizationHeader"].as_str().unwrap();
    assert!(header.starts_with("Bearer knife_mcp_"), "{header}");
    assert_eq!(json["browserToolsAvailable"], true);
    assert_eq!(
        json["capabilities"],
        serde_json::json!(["preview", "orchestration", "worktree", "pull-requests"])
    );

    let scope = h.registry.resolve(config.token()).unwrap();
    assert_eq!(scope.thread_id, t);
    assert_eq!(scope.provider_instance_id, instance());
    assert_eq!(scope.capabilities, config.capabilities);

    h.manager.close(&id).await.unwrap();
    assert!(h.registry.resolve(config.token()).is_none(), "revoked");
    assert!(h.slots.get(&t).is_none(), "slot cleared");
    assert!(!h.registry.info(&t).active);
}

#[tokio::test(start_paused = true)]
async fn mcp_02_browser_access_off_withholds_preview() {
    let h = Harness::new(FakeBehaviour::default(), |o| {
        o.mcp_access = Some(Arc::new(FixedAccess(AgentAccess {
            browser: false,
            device: false,
        })));
    })
    .await;
    let t = h.thread().await;
    h.open(&exclusive(&t), &t).await;
    let config = h.slots.get(&t).unwrap();
    assert!(!config.browser_tools_available);
    assert_eq!(
        config.capabilities,
        caps(&[
            McpCapability::Orchestration,
            McpCapability::Worktree,
            McpCapability::PullRequests
        ])
    );
    let info = h.registry.info(&t);
    assert!(info.active);
    assert!(!info.capabilities.contains(&McpCapability::Preview));

    // Default settings (no policy): preview included.
    let d = Harness::new(FakeBehaviour::default(), |_| {}).await;
    let t = d.thread().await;
    d.open(&exclusive(&t), &t).await;
    let config = d.slots.get(&t).unwrap();
    assert!(config.browser_tools_available);
    assert!(config.capabilities.contains(&McpCapability::Preview));
    assert!(!config.capabilities.contains(&McpCapability::Device));
}

#[tokio::test(start_paused = true)]
async fn mcp_06_plain_detach_keeps_the_credential_reattach_reuses_release_revokes() {
    let h = Harness::new(shared_behaviour(), |_| {}).await;
    let (a, b) = (h.thread().await, h.thread().await);
    let handle = h.open(&shared(), &a).await;
    h.open(&shared(), &b).await;
    let first = h.slots.get(&a).unwrap();

    h.manager.detach(&shared(), &a, None, false).await.unwrap();
    assert!(
        h.registry.resolve(first.token()).is_some(),
        "kept: the live process still holds it"
    );
    assert_eq!(h.slots.get(&a), Some(first.clone()));

    handle.resume_thread(&a, None, None).await.unwrap();
    assert!(handle.attached_threads().contains(&a));
    let again = h.slots.get(&a).unwrap();
    assert_eq!(again.token(), first.token(), "no rotation on re-attach");
    assert_eq!(again.credential_id, first.credential_id);

    h.manager.close(&shared()).await.unwrap();
    assert!(
        h.registry.resolve(first.token()).is_none(),
        "release revokes"
    );
    assert!(h.slots.get(&a).is_none());
}

#[tokio::test(start_paused = true)]
async fn mcp_07_terminal_detach_revokes_while_the_shared_process_lives_on() {
    let h = Harness::new(shared_behaviour(), |_| {}).await;
    let (a, b) = (h.thread().await, h.thread().await);
    h.open(&shared(), &a).await;
    h.open(&shared(), &b).await;
    let cred_a = h.slots.get(&a).unwrap();
    let cred_b = h.slots.get(&b).unwrap();

    h.manager
        .detach(&shared(), &a, Some("Thread archived.".into()), true)
        .await
        .unwrap();
    assert!(h.registry.resolve(cred_a.token()).is_none(), "revoked");
    assert!(h.slots.get(&a).is_none(), "slot cleared");
    assert!(h.manager.is_live(&shared()), "shared process lives on");
    assert_eq!(h.adapter.state().close_count(), 0);
    assert!(
        h.registry.resolve(cred_b.token()).is_some(),
        "the other thread keeps its credential"
    );
    // A retry after the session is gone still revokes thread-wide.
    let again = h.registry.issue(&a, &instance()).unwrap();
    h.manager.close(&shared()).await.unwrap();
    h.manager.detach(&shared(), &a, None, true).await.unwrap();
    assert!(h.registry.resolve(again.token()).is_none());
}

#[tokio::test(start_paused = true)]
async fn mcp_08_detaching_a_superseded_session_keeps_the_replacements_credential() {
    let h = Harness::new(shared_behaviour(), |_| {}).await;
    let (a, b) = (h.thread().await, h.thread().await);
    h.open(&shared(), &a).await;
    h.open(&shared(), &b).await;
    h.manager.detach(&shared(), &a, None, false).await.unwrap();
    // The thread's credential is rotated (revoked externally) and the thread moves to
    // a replacement session, which gets the new credential.
    let old = h.slots.get(&a).unwrap();
    h.registry.revoke(&old.credential_id);
    let replacement = h.open(&second_shared(), &a).await;
    let new = h.slots.get(&a).unwrap();
    assert_ne!(new.credential_id, old.credential_id);

    // Duplicate detach of the superseded session, then its release.
    h.manager.detach(&shared(), &a, None, false).await.unwrap();
    h.manager.close(&shared()).await.unwrap();
    assert!(
        h.registry.resolve(new.token()).is_some(),
        "replacement's credential live"
    );
    assert_eq!(h.slots.get(&a), Some(new.clone()), "slot kept");
    assert!(replacement.attached_threads().contains(&a));

    // Releasing the replacement revokes it.
    h.manager.close(&second_shared()).await.unwrap();
    assert!(h.registry.resolve(new.token()).is_none());
}

#[tokio::test(start_paused = true)]
async fn mcp_09_an_externally_revoked_credential_rotates_and_the_new_one_is_revoked_on_release() {
    let h = Harness::new(shared_behaviour(), |_| {}).await;
    let (a, b) = (h.thread().await, h.thread().await);
    let stale_holder = h.open(&shared(), &a).await;
    h.open(&shared(), &b).await;
    let old = h.slots.get(&a).unwrap();
    h.manager.detach(&shared(), &a, None, false).await.unwrap();

    h.registry.revoke(&old.credential_id);
    let next = h.open(&second_shared(), &a).await;
    let new = h.slots.get(&a).unwrap();
    assert_ne!(new.token(), old.token(), "rotated");
    assert!(h.registry.resolve(new.token()).is_some());
    assert!(
        !next.same_runtime(&stale_holder),
        "another live session keeps a stale record of the old credential"
    );
    assert!(h.manager.is_live(&shared()));

    h.manager.close(&second_shared()).await.unwrap();
    assert!(
        h.registry.resolve(new.token()).is_none(),
        "the stale record on the live session does not veto revocation"
    );
    assert!(h.slots.get(&a).is_none());
}

#[tokio::test(start_paused = true)]
async fn mcp_10_a_credential_reserved_by_an_inflight_open_survives_a_predecessor_release() {
    let gate = Arc::new(Semaphore::new(0));
    let g = Arc::clone(&gate);
    let h = Harness::new(shared_behaviour(), |_| {}).await;
    let (a, b) = (h.thread().await, h.thread().await);
    h.open(&shared(), &a).await;
    h.open(&shared(), &b).await;
    let kept = h.slots.get(&a).unwrap();
    h.manager.detach(&shared(), &a, None, false).await.unwrap();

    h.adapter.configure(move |behaviour| {
        let g = Arc::clone(&g);
        behaviour.before_open = Some(Arc::new(move |_, _| {
            let g = Arc::clone(&g);
            async move {
                g.acquire().await.unwrap().forget();
                Ok(())
            }
            .boxed()
        }));
    });
    let manager = h.manager.clone();
    let request = h.request(&second_shared(), &a);
    let open = tokio::spawn(async move { manager.open(request).await });
    wait_until(
        Duration::from_secs(1),
        "second open in its handshake",
        || h.adapter.state().opens_started.load(Ordering::SeqCst) == 2,
    )
    .await;
    assert!(h.registry.is_reserved(&kept.credential_id));

    // The predecessor, which recorded the credential, is released meanwhile.
    h.manager.close(&shared()).await.unwrap();
    assert!(
        h.registry.resolve(kept.token()).is_some(),
        "reserved: not revoked"
    );

    gate.add_permits(1);
    let handle = open.await.unwrap().unwrap();
    let config = h.adapter.state().open_records()[1].mcp.clone().unwrap();
    assert_eq!(config.token(), kept.token(), "the open reused it");
    assert!(h.registry.resolve(kept.token()).is_some());
    assert!(!h.registry.is_reserved(&kept.credential_id));
    assert!(handle.attached_threads().contains(&a));
}

#[tokio::test(start_paused = true)]
async fn mcp_11_a_reattach_cancelled_during_the_reuse_check_leaves_nothing_holding_it() {
    let gate = Arc::new(Semaphore::new(0));
    let reached = Arc::new(Semaphore::new(0));
    let policy = Arc::new(GatedAccess {
        gate: Arc::clone(&gate),
        reached: Arc::clone(&reached),
    });
    let h = Harness::new(shared_behaviour(), |o| o.mcp_access = Some(policy)).await;
    let (a, b) = (h.thread().await, h.thread().await);
    let open_a = {
        let manager = h.manager.clone();
        let request = h.request(&shared(), &a);
        tokio::spawn(async move { manager.open(request).await })
    };
    reached.acquire().await.unwrap().forget();
    gate.add_permits(1);
    let handle = open_a.await.unwrap().unwrap();
    let kept = h.slots.get(&a).unwrap();
    let open_b = {
        let manager = h.manager.clone();
        let request = h.request(&shared(), &b);
        tokio::spawn(async move { manager.open(request).await })
    };
    reached.acquire().await.unwrap().forget();
    gate.add_permits(1);
    open_b.await.unwrap().unwrap();
    h.manager.detach(&shared(), &a, None, false).await.unwrap();

    // Re-attach, cancelled while the kept credential's reusability is being checked.
    let h1 = handle.clone();
    let a1 = a.clone();
    let reattach = tokio::spawn(async move { h1.resume_thread(&a1, None, None).await });
    reached.acquire().await.unwrap().forget();
    assert!(
        h.registry.is_reserved(&kept.credential_id),
        "held during the check"
    );
    reattach.abort();
    let _ = reattach.await;
    assert!(
        !h.registry.is_reserved(&kept.credential_id),
        "nothing holds it"
    );
    assert!(!handle.attached_threads().contains(&a));

    h.manager.close(&shared()).await.unwrap();
    assert!(
        h.registry.resolve(kept.token()).is_none(),
        "the terminal release revokes it"
    );
}

/// A turn refreshes the liveness of the thread's credential (the 24 h window).
#[tokio::test(start_paused = true)]
async fn a_started_turn_keeps_the_credential_alive_past_the_liveness_window() {
    let h = Harness::new(FakeBehaviour::default(), |o| {
        o.idle_timeout = Duration::from_secs(7 * 24 * 3600);
        o.turn_stall_timeout = Duration::ZERO;
    })
    .await;
    let t = h.thread().await;
    let handle = h.open(&exclusive(&t), &t).await;
    let config = h.slots.get(&t).unwrap();
    let window = knife_runtime::mcp::DEFAULT_LIVENESS_WINDOW;
    tokio::time::advance(window - Duration::from_secs(60)).await;
    let first = turn(&t, 1);
    handle.start_turn(first.clone()).await.unwrap();
    tokio::time::advance(Duration::from_secs(120)).await;
    assert!(
        h.registry.resolve(config.token()).is_some(),
        "touched by the turn"
    );
    tokio::time::advance(window).await;
    assert!(
        h.registry.resolve(config.token()).is_none(),
        "expired a window after the last turn"
    );
}
