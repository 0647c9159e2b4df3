//! Git worktrees per thread (CHG-07): a worktree of the project's repository under
//! the data dir on branch `knife/<short thread id>`, merged back into the project's
//! current branch (refused on conflict, nothing half-applied), removed on delete.
//!
//! Unlike checkpoints these commands work on the user's own repository (that is the
//! point: the branch is theirs to keep), so the user's config applies, but hooks are
//! off and every inherited `GIT_*` variable is removed.

use std::path::{Path, PathBuf};

use knife_protocol::{ProjectId, ThreadId, ThreadWorktree};

use crate::error::WorkspaceError;
use crate::git::{Git, one_line};

/// What [`Worktrees::merge`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MergeOutcome {
    /// Merged: the new commit of the project's branch.
    Merged {
        /// The merge commit's id (hex).
        commit: String,
        /// The project's branch merged into.
        branch: String,
    },
    /// The branch has nothing the project's branch lacks.
    UpToDate,
    /// Refused: these files conflict; nothing was changed.
    Conflict {
        /// The conflicting files, repository-relative.
        files: Vec<String>,
    },
}

/// Thread worktrees under one folder (`<data dir>/worktrees`). Cheap to clone.
#[derive(Clone, Debug)]
pub struct Worktrees {
    git: Git,
    root: PathBuf,
}

/// The branch of `thread`'s worktree: `knife/<first 12 characters of the id's UUID>`.
pub fn worktree_branch(thread: &ThreadId) -> String {
    format!("knife/{}", short_id(thread))
}

fn short_id(thread: &ThreadId) -> String {
    let id = thread.as_str();
    let tail = id.rsplit('_').next().unwrap_or(id);
    tail.chars()
        .rev()
        .take(12)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect()
}

impl Worktrees {
    /// Worktrees under `root`, made with `git`.
    pub fn new(git: Git, root: impl Into<PathBuf>) -> Self {
        let root: PathBuf = root.into();
        Self {
            git,
            root: std::path::absolute(&root).unwrap_or(root),
        }
    }

    /// The folder holding every worktree.
    pub fn root(&self) -> &Path {
        &self.root
    }

    async fn run(&self, dir: &Path, args: &[&str]) -> Result<Vec<u8>, WorkspaceError> {
        self.git.run_in_repo(dir, args).await
    }

    /// The top folder of the git repository `project_root` is in. Errors:
    /// [`WorkspaceError::NotAGitRepository`].
    pub async fn check_repository(&self, project_root: &Path) -> Result<(), WorkspaceError> {
        match self
            .run(project_root, &["rev-parse", "--verify", "HEAD"])
            .await
        {
            Ok(_) => Ok(()),
            Err(_) => Err(WorkspaceError::NotAGitRepository {
                path: project_root.to_owned(),
            }),
        }
    }

    /// Creates `thread`'s worktree: branch `knife/<short id>` from the project's HEAD,
    /// checked out at `<root>/<project>/<short id>`. Errors: `NotAGitRepository`, `Git`.
    pub async fn create(
        &self,
        project_root: &Path,
        project: &ProjectId,
        thread: &ThreadId,
    ) -> Result<ThreadWorktree, WorkspaceError> {
        self.check_repository(project_root).await?;
        let branch = worktree_branch(thread);
        let path = self.root.join(project.as_str()).join(short_id(thread));
        if let Some(parent) = path.parent() {
            tokio::fs::create_dir_all(parent)
                .await
                .map_err(WorkspaceError::io("create", parent))?;
        }
        let base = one_line(&self.run(project_root, &["rev-parse", "HEAD"]).await?);
        let path_text = path.display().to_string();
        self.run(
            project_root,
            &[
                "worktree", "add", "--quiet", "-b", &branch, &path_text, &base,
            ],
        )
        .await?;
        Ok(ThreadWorktree {
            path: path_text,
            branch,
            base_commit: base,
        })
    }

    /// Commits what the thread left uncommitted in its worktree (as knife), so the
    /// branch holds all of its work. Returns whether there was anything.
    async fn commit_pending(
        &self,
        wt: &ThreadWorktree,
        thread: &ThreadId,
    ) -> Result<bool, WorkspaceError> {
        let dir = Path::new(&wt.path);
        let status = self.run(dir, &["status", "--porcelain"]).await?;
        if status.is_empty() {
            return Ok(false);
        }
        self.run(dir, &["add", "-A"]).await?;
        let message = format!("knife: work of thread {thread}");
        self.run(
            dir,
            &[
                "-c",
                "user.name=knife",
                "-c",
                "user.email=knife@localhost",
                "commit",
                "--quiet",
                "--no-verify",
                "-m",
                &message,
            ],
        )
        .await?;
        Ok(true)
    }

    /// Merges `thread`'s branch into the project's current branch (CHG-07). Pending
    /// work in the worktree is committed on the branch first. A conflict is found
    /// with `git merge-tree` before anything is touched and answered with the files;
    /// a merge git refuses (local changes in the project would be overwritten) changes
    /// nothing either.
    pub async fn merge(
        &self,
        project_root: &Path,
        wt: &ThreadWorktree,
        thread: &ThreadId,
    ) -> Result<MergeOutcome, WorkspaceError> {
        self.commit_pending(wt, thread).await?;
        let merged = self
            .run(
                project_root,
                &["merge-base", "--is-ancestor", &wt.branch, "HEAD"],
            )
            .await
            .is_ok();
        if merged {
            return Ok(MergeOutcome::UpToDate);
        }
        let (clean, listed, _) = self
            .git
            .run_in_repo_status(
                project_root,
                &[
                    "merge-tree",
                    "--write-tree",
                    "--name-only",
                    "--no-messages",
                    "HEAD",
                    &wt.branch,
                ],
            )
            .await?;
        if !clean {
            let files = String::from_utf8_lossy(&listed)
                .lines()
                .skip(1)
                .filter(|l| !l.is_empty())
                .map(str::to_owned)
                .collect();
            return Ok(MergeOutcome::Conflict { files });
        }
        let message = format!("knife: merge thread {thread} ({})", wt.branch);
        self.run(
            project_root,
            &[
                "-c",
                "user.name=knife",
                "-c",
                "user.email=knife@localhost",
                "merge",
                "--no-ff",
                "--no-verify",
                "--quiet",
                "-m",
                &message,
                &wt.branch,
            ],
        )
        .await?;
        let commit = one_line(&self.run(project_root, &["rev-parse", "HEAD"]).await?);
        let branch = one_line(
            &self
                .run(project_root, &["rev-parse", "--abbrev-ref", "HEAD"])
                .await?,
        );
        Ok(MergeOutcome::Merged { commit, branch })
    }

    /// Why deleting `wt` would lose work, if it would: uncommitted changes in it, or
    /// commits on its branch the project's branch does not have.
    pub async fn unsaved_work(
        &self,
        project_root: &Path,
        wt: &ThreadWorktree,
    ) -> Result<Option<String>, WorkspaceError> {
        let dir = Path::new(&wt.path);
        if !dir.is_dir() {
            return Ok(None);
        }
        let status = self.run(dir, &["status", "--porcelain"]).await?;
        if !status.is_empty() {
            return Ok(Some(format!(
                "the worktree {} has uncommitted changes",
                wt.path
            )));
        }
        let merged = self
            .run(
                project_root,
                &["merge-base", "--is-ancestor", &wt.branch, "HEAD"],
            )
            .await
            .is_ok();
        if !merged {
            return Ok(Some(format!(
                "branch {} has commits that are not merged (`knife threads merge`)",
                wt.branch
            )));
        }
        Ok(None)
    }

    /// Removes the worktree and its branch.
    pub async fn remove(
        &self,
        project_root: &Path,
        wt: &ThreadWorktree,
    ) -> Result<(), WorkspaceError> {
        let _ = self
            .run(project_root, &["worktree", "remove", "--force", &wt.path])
            .await;
        let _ = self.run(project_root, &["worktree", "prune"]).await;
        self.run(project_root, &["branch", "-D", &wt.branch])
            .await?;
        Ok(())
    }
}
