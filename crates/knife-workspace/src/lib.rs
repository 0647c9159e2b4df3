//! knife-workspace: what happens to a thread's working tree — checkpoints in a git
//! repository of knife's own, change sets and diffs between them, and restores (revert).
//!
//! Design (docs/2026-12-01-checkpoints.md): the `git` program, run with an isolated
//! environment ([`git`]), against one bare repository per project under the data dir
//! and one index file per working tree ([`Checkpoints`]). knife never opens the
//! project's own `.git`: no refs, index, config, objects or stash of the user's are
//! read or written, and nothing a sandboxed agent can write (its working tree) holds
//! a checkpoint. Below knife-runtime; it knows nothing of the store.
//!
//! ```no_run
//! # async fn demo() -> Result<(), knife_workspace::WorkspaceError> {
//! use knife_workspace::*;
//! let git = Git::locate().await?;
//! let checkpoints = Checkpoints::new(git, "/data/checkpoints", CheckpointOptions::default());
//! let tree = WorkTree::new("project_1".into(), "/home/me/app");
//! let before = checkpoints.checkpoint(&tree, "refs/knife/demo/before", "before").await?;
//! // … an agent edits files …
//! let after = checkpoints.checkpoint(&tree, "refs/knife/demo/after", "after").await?;
//! let changes = checkpoints.changes(&tree.project, &before.commit, &after.commit).await?;
//! # let _ = changes; Ok(()) }
//! ```

#![deny(missing_docs)]

pub mod changes;
pub mod checkpoints;
pub mod error;
pub mod git;
pub mod restore;
pub mod worktree;

pub use changes::UnifiedDiff;
pub use checkpoints::{
    CheckpointOptions, Checkpoints, DEFAULT_EXCLUDES, DEFAULT_MAX_DIFF_BYTES,
    DEFAULT_MAX_FILE_BYTES, Locked, WorkTree, revert_ref, run_ref,
};
pub use error::WorkspaceError;
pub use git::Git;
pub use restore::Restored;
pub use worktree::{MergeOutcome, Worktrees, worktree_branch};
