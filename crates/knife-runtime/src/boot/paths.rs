//! Whether this node has a thread's workspace (SPEC.md SCALE-08): while other nodes are
//! live, a node takes a claim (restart sweep, takeover) only if the thread's worktree, or
//! else its project root, exists here; otherwise it leaves the claim to a node that has
//! it. A node alone (always on SQLite) resumes as before: the run then fails saying the
//! folder is missing, instead of staying claimed with nobody to take it. Every node needs
//! the same paths (a shared volume): README "Several machines".

use std::path::PathBuf;

use knife_protocol::ThreadId;
use knife_store::Store;

use crate::error::RuntimeError;
use crate::execution::run_root;

/// The folder `thread`'s runs work in when it is missing on this node (not a
/// directory here); `None` when it exists, or when the thread or its project is gone
/// (the resume then settles the claim its usual way).
///
/// Errors: [`RuntimeError::Store`].
pub async fn missing_workspace(
    store: &Store,
    thread: &ThreadId,
) -> Result<Option<PathBuf>, RuntimeError> {
    let Some(thread) = store.get_thread(thread).await? else {
        return Ok(None);
    };
    let Some(project) = store.get_project(&thread.project_id).await? else {
        return Ok(None);
    };
    let root = run_root(&thread, &project);
    let here = tokio::fs::metadata(&root).await.is_ok_and(|m| m.is_dir());
    Ok((!here).then_some(root))
}

/// Whether a node other than this one is live on the store (its membership row has not
/// expired). `false` on a single node, or when the rows cannot be read.
pub async fn other_nodes_live(store: &Store) -> bool {
    let me = store.node().node();
    match store.live_nodes().await {
        Ok(live) => live.iter().any(|m| m.node != me),
        Err(e) => {
            tracing::warn!(error = %e, "could not list the live nodes; taking claims as a node alone");
            false
        }
    }
}
