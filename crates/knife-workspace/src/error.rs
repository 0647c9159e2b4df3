//! Errors of knife-workspace: each says what failed, on which path, and what to do.
//! The runtime records them as "no checkpoint: <message>" or maps them to HTTP codes.

use std::path::PathBuf;

/// Failures of checkpoints, diffs and restores.
#[derive(Debug, thiserror::Error)]
pub enum WorkspaceError {
    /// The `git` program could not be run (checked once at start).
    #[error(
        "the git program was not found ({detail}); knife needs git (2.25 or newer) for checkpoints, \
         diffs and reverts: install it (e.g. `apt-get install git`) or put it on PATH, then restart knife"
    )]
    GitMissing { detail: String },
    /// The working tree to checkpoint is missing or not a directory.
    #[error(
        "the working tree {path} is missing or is not a directory; restore the folder to take checkpoints"
    )]
    WorkTreeMissing { path: PathBuf },
    /// `worktree: true` on a project that is not a git repository with a commit (CHG-07).
    #[error(
        "the project folder {path} is not a git repository with a commit, so a thread cannot get its own worktree; \
         run `git init && git add -A && git commit -m init` there, or create the thread without worktree"
    )]
    NotAGitRepository { path: PathBuf },
    /// A git command failed.
    #[error("git {command} failed in {repo}: {stderr}")]
    Git {
        command: String,
        repo: PathBuf,
        stderr: String,
    },
    /// Reading or writing a file failed.
    #[error("cannot {action} {path}: {source}")]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// git printed something this crate cannot read.
    #[error("unexpected output of git {command}: {detail}")]
    Parse { command: String, detail: String },
}

impl WorkspaceError {
    /// An [`WorkspaceError::Io`] for `action` on `path`.
    pub(crate) fn io(
        action: &'static str,
        path: impl Into<PathBuf>,
    ) -> impl FnOnce(std::io::Error) -> Self {
        let path = path.into();
        move |source| WorkspaceError::Io {
            action,
            path,
            source,
        }
    }
}
