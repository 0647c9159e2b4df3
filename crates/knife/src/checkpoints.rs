//! Wiring of run checkpoints (SPEC.md CHG-01/02): finds the git program once at
//! start and gives the execution service knife's checkpoint repositories.

use std::path::Path;

use knife_runtime::ExecutionService;
use knife_workspace::{Checkpoints, Git};

use crate::config::Config;

/// Folder of the checkpoint repositories inside the data dir.
pub const CHECKPOINTS_DIR: &str = "checkpoints";

/// `execution` with checkpoints under `<data_dir>/checkpoints`, unless
/// `[checkpoints] enabled = false`. A missing git program is one clear error line at
/// start; runs then record "no checkpoint: <why>" and keep working.
pub async fn attach(
    execution: ExecutionService,
    config: &Config,
    data_dir: &Path,
) -> ExecutionService {
    if config.checkpoints.enabled == Some(false) {
        return execution;
    }
    match Git::locate().await {
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
