//! SCALE-08: a node takes a claim (restart sweep, takeover) only where the thread's
//! workspace exists; otherwise it leaves it, once logged, for a node that has it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::path::PathBuf;
use std::time::Duration;

use common::*;
use knife_runtime::boot::takeover::LeaseKeeper;
use knife_runtime::*;
use knife_store::{NodeLeases, Store};

const TTL: Duration = Duration::from_secs(10);

/// The harness store as node `node`, joined to the cluster (live).
async fn node(h: &Harness, node: &str) -> Store {
    let store = h.store.clone().with_node(NodeLeases::new(node, TTL));
    store
        .join_cluster(node, &format!("host:/{node}"), node, TTL)
        .await
        .unwrap();
    store
}

/// With other nodes live, a node whose disk lacks the thread's project root leaves
/// the claim: the restart sweep skips it, a takeover gives the lease back at once and
/// does not take it again; a node that has the folder takes it over and resumes it once.
#[tokio::test(start_paused = true)]
async fn scale_08_a_node_without_the_threads_workspace_leaves_the_claim_to_a_node_with_it() {
    let h = Harness::new(Drain::Complete).await;
    let thread = h.thread(None).await;
    h.seed_dead_run(&thread, 0).await;
    let (a, b, c) = (
        node(&h, "node-a").await,
        node(&h, "node-b").await,
        node(&h, "node-c").await,
    );
    let root = PathBuf::from(&h.project.root);
    let away = h.dir.path().join("elsewhere");
    std::fs::rename(&root, &away).unwrap();

    // node-a restarts without the folder: the claim stays, nothing runs.
    let exec_a = h.execution_over(a);
    let sweep = h
        .restart(&exec_a, 10)
        .resume_suspended_threads()
        .await
        .unwrap();
    assert_eq!(
        sweep.missing_workspace,
        vec![(thread.clone(), root.clone())]
    );
    assert!(sweep.resumed.is_empty(), "{sweep:?}");
    assert!(h.get(&thread).await.is_claimed());

    // node-b lacks it too: it takes the expired claim, gives it straight back, and
    // leaves it alone at its next beats.
    let keeper_b = LeaseKeeper::new(h.execution_over(b.clone()), RestartOptions::default());
    let beat = keeper_b.beat().await;
    assert_eq!(beat.not_here, vec![(thread.clone(), root.clone())]);
    assert!(beat.resumed.is_empty());
    let given_back = b.get_lease(&thread).await.unwrap().unwrap();
    assert_eq!(given_back.node, "node-b");
    assert!(
        given_back.expires_at <= chrono::Utc::now(),
        "{given_back:?}"
    );
    assert!(b.node().get(&thread).is_none(), "not held by node-b");
    let again = keeper_b.beat().await;
    assert!(
        again.not_here.is_empty() && again.resumed.is_empty(),
        "{again:?}"
    );
    assert_eq!(b.get_lease(&thread).await.unwrap().unwrap(), given_back);
    assert!(h.drains.started().is_empty());

    // node-c has the folder (here: it is back): it takes the claim over and resumes it.
    std::fs::rename(&away, &root).unwrap();
    let exec_c = h.execution_over(c);
    let keeper_c = LeaseKeeper::new(exec_c.clone(), RestartOptions::default());
    let beat = keeper_c.beat().await;
    assert_eq!(beat.resumed.len(), 1, "{beat:?}");
    assert!(beat.not_here.is_empty());
    exec_c.await_idle(&thread).await;
    assert_eq!(h.continuations(&thread).await.len(), 1);
    assert!(!h.get(&thread).await.is_claimed());
    assert_eq!(h.drains.started().len(), 1);
}

/// A node alone (no other live node; always on SQLite) resumes as before when the
/// folder is missing: the claim is not left for a node that does not exist.
#[tokio::test(start_paused = true)]
async fn scale_08_a_node_alone_resumes_a_claim_whose_workspace_is_missing_as_before() {
    let h = Harness::new(Drain::Complete).await;
    let thread = h.thread(None).await;
    h.seed_dead_run(&thread, 0).await;
    std::fs::rename(&h.project.root, h.dir.path().join("elsewhere")).unwrap();
    let exec = h.execution();
    let sweep = h
        .restart(&exec, 10)
        .resume_suspended_threads()
        .await
        .unwrap();
    assert!(sweep.missing_workspace.is_empty(), "{sweep:?}");
    assert_eq!(sweep.resumed.len(), 1, "{sweep:?}");
    exec.await_idle(&thread).await;
}
