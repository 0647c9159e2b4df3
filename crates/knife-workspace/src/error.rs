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
    GitMissing {
        /// Why running `git --version` failed.
        detail: String,
    },
    /// The working tree to checkpoint is missing or not a directory.
    #[error(
        "the working tree {path} is missing or is not a directory; restore the folder to take checkpoints"
    )]
    WorkTreeMissing {
        /// The working tree (project root or thread worktree).
        path: PathBuf,
    },
    /// `worktree: true` on a project that is not a git repository with a commit (CHG-07).
    #[error(
        "the project folder {path} is not a git repository with a commit, so a thread cannot get its own worktree; \
         run `git init && git add -A && git commit -m init` there, or create the thread without worktree"
    )]
    NotAGitRepository {
        /// The project root.
        path: PathBuf,
    },
    /// A git command failed: the run records "no checkpoint: …" (a revert or merge
    /// answers 500 `workspace`); `stderr` says why (a locked index, a full disk, …).
    #[error("git {command} failed in {repo}: {stderr}")]
    Git {
        /// The git subcommand and arguments that failed.
        command: String,
        /// The repository (or working tree) it ran in.
        repo: PathBuf,
        /// What git printed on stderr, trimmed.
        stderr: String,
    },
    /// Reading or writing a file failed (permissions, a full disk): fix the path's
    /// access, then retry.
    #[error("cannot {action} {path}: {source}")]
    Io {
        /// What was being done (`read`, `write`, `create`, …).
        action: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// git printed something this crate cannot read (an unsupported git version):
    /// a bug or an old git; report it with the detail.
    #[error("unexpected output of git {command}: {detail}")]
    Parse {
        /// The git subcommand whose output was read.
        command: String,
        /// What could not be read.
        detail: String,
    },
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
