//! Wiring of run checkpoints (SPEC.md CHG-01/02): finds the git program once at
//! start and gives the execution service knife's checkpoint repositories.

use std::path::Path;

use knife_runtime::ExecutionService;
use knife_workspace::{Checkpoints, Git};

use crate::config::Config;

/// Folder of the checkpoint repositories inside the data dir.
pub const CHECKPOINTS_DIR: &str = "checkpoints";

/// Folder of the thread worktrees inside the data dir (CHG-07).
pub const WORKTREES_DIR: &str = "worktrees";

/// `execution` with thread worktrees under `<data_dir>/worktrees` (CHG-07) and
/// checkpoints under `<data_dir>/checkpoints`, unless `[checkpoints] enabled = false`.
/// A missing git program is one clear error line at start; runs then record
/// "no checkpoint: <why>" and keep working, and `worktree: true` is refused.
pub async fn attach(
    execution: ExecutionService,
    config: &Config,
    data_dir: &Path,
) -> ExecutionService {
    let git = Git::locate().await;
    let execution = match &git {
        Ok(git) => execution.with_worktrees(
            knife_workspace::Worktrees::new(git.clone(), data_dir.join(WORKTREES_DIR)),
            config.worktree_roots(),
        ),
        Err(_) => execution,
    };
    if config.checkpoints.enabled == Some(false) {
        return execution;
    }
    match git {
        Ok(git) => {
            tracing::debug!(version = git.version(), "checkpoints use git");
            execution.with_checkpoints(Checkpoints::new(
                git,
                data_dir.join(CHECKPOINTS_DIR),
                config.checkpoint_options(),
            ))
        }
        Err(e) => {
            tracing::error!("checkpoints are off: {e}");
            execution.with_checkpoints_unavailable(e.to_string())
        }
    }
}
