//! Threads in their own git worktree (CHG-07): created with the thread, the runs'
//! working directory, merged back on request (refused on conflict), removed on delete.

use std::path::PathBuf;

use knife_protocol::*;
use knife_workspace::{MergeOutcome, WorkspaceError, Worktrees};

use super::*;

impl ExecutionService {
    /// Gives threads created with `worktree: true` (or in `default_roots`, the
    /// project roots whose config says `worktree = true`) their own worktree under
    /// `worktrees`. Call before sharing the service.
    pub fn with_worktrees(mut self, worktrees: Worktrees, default_roots: Vec<String>) -> Self {
        if let Some(inner) = Arc::get_mut(&mut self.inner) {
            inner.worktrees = Some((worktrees, default_roots));
            checkpoints::install_workspace_hook(inner);
        }
        self
    }

    pub(crate) fn worktrees(&self) -> Option<&Worktrees> {
        self.inner.worktrees.as_ref().map(|(w, _)| w)
    }

    /// Whether a thread created by `request` gets a worktree: its `worktree` flag, else
    /// the project's default. With one, checks the project is a git repository first.
    /// Errors: `ProjectNotFound`, `Invalid` (worktrees unavailable), `Workspace`
    /// (`NotAGitRepository`: HTTP 400).
    pub async fn wants_worktree(
        &self,
        request: &CreateThreadRequest,
    ) -> Result<bool, RuntimeError> {
        let project = self
            .inner
            .store
            .get_project(&request.project_id)
            .await?
            .ok_or_else(|| RuntimeError::ProjectNotFound(request.project_id.clone()))?;
        let default = self
            .inner
            .worktrees
            .as_ref()
            .is_some_and(|(_, roots)| roots.iter().any(|r| r == &project.root));
        if !request.worktree.unwrap_or(default) {
            return Ok(false);
        }
        let Some(w) = self.worktrees() else {
            return Err(RuntimeError::Invalid(
                "this server cannot make worktrees (the git program was not found); create the thread without worktree"
                    .into(),
            ));
        };
        w.check_repository(std::path::Path::new(&project.root))
            .await?;
        Ok(true)
    }

    /// Creates the worktree of new `thread` (branch `knife/<short id>` from the
    /// project's HEAD) and records it on the thread. Errors: `Workspace`, `Store`.
    pub async fn attach_worktree(&self, mut thread: Thread) -> Result<Thread, RuntimeError> {
        let Some(w) = self.worktrees() else {
            return Ok(thread);
        };
        let project = self
            .inner
            .store
            .get_project(&thread.project_id)
            .await?
            .ok_or_else(|| RuntimeError::ProjectNotFound(thread.project_id.clone()))?;
        let worktree = w
            .create(std::path::Path::new(&project.root), &project.id, &thread.id)
            .await?;
        tracing::info!(thread = %thread.id, path = %worktree.path, branch = %worktree.branch, "created the thread's worktree");
        thread.worktree = Some(worktree);
        thread.updated_at = self.inner.clock.now();
        self.inner
            .store
            .write(vec![DomainEvent::new(
                thread.updated_at,
                EventBody::ThreadUpdated(thread.clone()),
            )])
            .await?;
        Ok(thread)
    }

    /// Merges the work of `thread`'s worktree into the project's current branch
    /// (CHG-07): uncommitted work is committed on the thread's branch first; a
    /// conflict refuses with the files and changes nothing.
    ///
    /// Errors: `ThreadNotFound`, `Invalid` (no worktree), `RunInProgress`,
    /// `MergeConflict` (409), `Workspace` (git refused, e.g. local changes in the
    /// project would be overwritten: nothing changed), `Store`.
    pub async fn merge_thread(&self, thread_id: &ThreadId) -> Result<MergeResponse, RuntimeError> {
        let _busy = self.reserve_idle(thread_id).await?;
        let store = &self.inner.store;
        let thread = store
            .get_thread(thread_id)
            .await?
            .ok_or_else(|| RuntimeError::ThreadNotFound(thread_id.clone()))?;
        let (Some(wt), Some(w)) = (thread.worktree.clone(), self.worktrees()) else {
            return Err(RuntimeError::Invalid(format!(
                "thread {thread_id} has no worktree: its runs work in the project folder itself, there is nothing to merge"
            )));
        };
        let project = store
            .get_project(&thread.project_id)
            .await?
            .ok_or_else(|| RuntimeError::ProjectNotFound(thread.project_id.clone()))?;
        let outcome = w
            .merge(std::path::Path::new(&project.root), &wt, thread_id)
            .await?;
        match outcome {
            MergeOutcome::Conflict { files } => Err(RuntimeError::MergeConflict {
                branch: wt.branch,
                files,
            }),
            MergeOutcome::UpToDate => Ok(MergeResponse {
                thread_id: thread_id.clone(),
                branch: wt.branch,
                status: "up_to_date".into(),
                into: None,
                commit: None,
            }),
            MergeOutcome::Merged { commit, branch } => Ok(MergeResponse {
                thread_id: thread_id.clone(),
                branch: wt.branch,
                status: "merged".into(),
                into: Some(branch),
                commit: Some(commit),
            }),
        }
    }
}

/// The folder a thread's runs work in: its worktree, else the project root.
pub(crate) fn run_root(thread: &Thread, project: &Project) -> PathBuf {
    match &thread.worktree {
        Some(w) => PathBuf::from(&w.path),
        None => PathBuf::from(&project.root),
    }
}

/// Why a delete of `thread` would lose worktree work (`None` when it would not).
pub(crate) async fn unsaved_work(
    w: &Worktrees,
    store: &knife_store::Store,
    thread: &Thread,
) -> Result<Option<String>, WorkspaceError> {
    let Some(wt) = &thread.worktree else {
        return Ok(None);
    };
    let Ok(Some(project)) = store.get_project(&thread.project_id).await else {
        return Ok(None);
    };
    w.unsaved_work(std::path::Path::new(&project.root), wt)
        .await
}
