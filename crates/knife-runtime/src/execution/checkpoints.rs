//! Checkpoints around runs, for every driver (CHG-01/02/10): the start checkpoint
//! before a run's turn, the end checkpoint and change set after it, and the end
//! checkpoint of runs a crash cut short, taken once per working tree after boot.
//!
//! A checkpoint that fails never fails the run: the run records
//! "no checkpoint: <why>" (and revert refuses it with that reason).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use knife_protocol::*;
use knife_workspace::{Checkpoints, WorkTree, run_ref};
use tokio::sync::OnceCell;

use super::*;

/// How long a working tree's boot checkpoint is shared by the runs a restart
/// settles and resumes (they all start within the sweep, well inside this).
const BOOT_REUSE: Duration = Duration::from_secs(60);

/// Whether and how runs get checkpoints.
#[derive(Clone, Default)]
pub(crate) enum Tracking {
    /// No checkpoints, no events (services built without a data dir, unit tests).
    #[default]
    Off,
    On(Checkpoints),
    /// Checkpoints are configured but cannot be taken (no git program): each run
    /// records "no checkpoint: <why>".
    Unavailable(String),
}

type BootCell = Arc<OnceCell<Result<CheckpointRef, String>>>;

/// One boot checkpoint per working tree (CHG-10), shared for [`BOOT_REUSE`].
#[derive(Default)]
pub(crate) struct BootCheckpoints {
    // std Mutex: held only for the map lookup, never across an `.await`.
    cells: Mutex<HashMap<PathBuf, (tokio::time::Instant, BootCell)>>,
}

impl ExecutionService {
    /// Takes checkpoints before and after every run in `checkpoints` (CHG-01/02); a
    /// deleted thread's checkpoints are collected (CHG-11: installs the
    /// [`crate::lifecycle::ThreadWorkspace`] hook unless one is set). Call before
    /// sharing the service.
    pub fn with_checkpoints(mut self, checkpoints: Checkpoints) -> Self {
        if let Some(inner) = Arc::get_mut(&mut self.inner) {
            inner.tracking = Tracking::On(checkpoints);
            install_workspace_hook(inner);
        }
        self
    }

    /// Records "no checkpoint: `why`" on every run instead (git is missing).
    pub fn with_checkpoints_unavailable(mut self, why: impl Into<String>) -> Self {
        if let Some(inner) = Arc::get_mut(&mut self.inner) {
            inner.tracking = Tracking::Unavailable(why.into());
        }
        self
    }

    /// The checkpoint repositories, when checkpoints are on.
    pub fn checkpoints(&self) -> Option<&Checkpoints> {
        match &self.inner.tracking {
            Tracking::On(c) => Some(c),
            _ => None,
        }
    }

    /// The working tree of a thread's runs: its project's root.
    pub(crate) fn work_tree(&self, c: &Checkpoints, thread: &Thread, root: &Path) -> WorkTree {
        c.work_tree(&thread.project_id, root)
    }

    /// Records the start checkpoint of `ctx.run` (CHG-01) on the run and in the log.
    /// A continuation run after a crash reuses its working tree's boot checkpoint,
    /// which is also the end checkpoint of the run the crash cut short (CHG-10).
    pub(super) async fn record_start(&self, ctx: &mut RunContext) {
        let checkpoint = match &self.inner.tracking {
            Tracking::Off => return,
            Tracking::Unavailable(why) => Err(format!("no checkpoint: {why}")),
            Tracking::On(c) => {
                let tree = self.work_tree(c, &ctx.thread, &ctx.root);
                let git_ref = run_ref(&ctx.thread.id, ctx.run.ordinal, "start");
                if ctx.continuation {
                    self.boot_checkpoint(c, &tree, &git_ref).await
                } else {
                    c.checkpoint(&tree, &git_ref, &message(&ctx.run, "start"))
                        .await
                        .map_err(|e| format!("no checkpoint: {e}"))
                }
            }
        };
        let checkpoint = self.on_this_node(checkpoint);
        let record = record_of(&ctx.run, CheckpointKind::RunStart, &checkpoint);
        match &checkpoint {
            Ok(cp) => ctx.run.checkpoints.start = Some(cp.clone()),
            Err(why) => {
                tracing::warn!(thread = %ctx.thread.id, run = %ctx.run.id, "{why}");
                ctx.run.checkpoints.start_error = Some(why.clone());
            }
        }
        let now = self.inner.clock.now();
        let events = vec![
            DomainEvent::new(now, EventBody::CheckpointRecorded(record)),
            DomainEvent::new(now, EventBody::RunUpdated(ctx.run.clone())),
        ];
        if let Err(e) = self.inner.store.write(events).await {
            tracing::warn!(thread = %ctx.thread.id, run = %ctx.run.id, error = %e, "could not record the start checkpoint");
        }
        if ctx.continuation
            && ctx.run.ordinal > 1
            && let Tracking::On(c) = &self.inner.tracking
        {
            let previous = RunId::for_thread(&ctx.thread.id, ctx.run.ordinal - 1);
            let tree = self.work_tree(c, &ctx.thread, &ctx.root);
            self.settle_end(c, &tree, &previous, checkpoint).await;
        }
    }

    /// Takes the end checkpoint of `ctx.run` and its change set (CHG-02) and puts them
    /// on `ctx.run`; returns the `checkpoint.recorded` event for the terminal write.
    pub(super) async fn record_end(&self, ctx: &mut RunContext) -> Option<DomainEvent> {
        let checkpoint = match &self.inner.tracking {
            Tracking::Off => return None,
            Tracking::Unavailable(why) => Err(format!("no checkpoint: {why}")),
            Tracking::On(c) => {
                let tree = self.work_tree(c, &ctx.thread, &ctx.root);
                let git_ref = run_ref(&ctx.thread.id, ctx.run.ordinal, "end");
                c.checkpoint(&tree, &git_ref, &message(&ctx.run, "end"))
                    .await
                    .map_err(|e| format!("no checkpoint: {e}"))
            }
        };
        let checkpoint = self.on_this_node(checkpoint);
        let record = record_of(&ctx.run, CheckpointKind::RunEnd, &checkpoint);
        self.apply_end(&mut ctx.run, &ctx.thread.project_id, checkpoint)
            .await;
        Some(DomainEvent::new(
            self.inner.clock.now(),
            EventBody::CheckpointRecorded(record),
        ))
    }

    /// `checkpoint` naming this node as the holder of its commit, unless this is the
    /// single-installation node `local` (its refs stay as they were).
    fn on_this_node(
        &self,
        checkpoint: Result<CheckpointRef, String>,
    ) -> Result<CheckpointRef, String> {
        let node = self.inner.store.node().node();
        checkpoint.map(|mut cp| {
            if node != ProviderSessionId::DEFAULT_NODE {
                cp.node = Some(node.to_owned());
            }
            cp
        })
    }

    /// Puts `checkpoint` on `run` as its end, with the change set from its start.
    async fn apply_end(
        &self,
        run: &mut Run,
        project: &ProjectId,
        checkpoint: Result<CheckpointRef, String>,
    ) {
        match checkpoint {
            Ok(end) => {
                let start_node = run.checkpoints.start.as_ref().map(|s| s.node().to_owned());
                if let Some(start_node) = start_node.filter(|n| n != end.node()) {
                    // Taken over (SCALE-05): the start is in another node's repository.
                    run.checkpoints.changes_error = Some(format!(
                        "no change set: node {start_node} took this run's start checkpoint and \
                         node {end_node} its end after taking the run over; each node keeps its \
                         checkpoints in its own data directory, so the run's changes cannot be \
                         shown or reverted (the runs after it can)",
                        end_node = end.node()
                    ));
                    run.checkpoints.end = Some(end);
                    return;
                }
                if let (Some(start), Tracking::On(c)) =
                    (&run.checkpoints.start, &self.inner.tracking)
                {
                    match c.changes(project, &start.commit, &end.commit).await {
                        Ok(mut changes) => {
                            changes.skipped = end.skipped.clone();
                            run.changes = Some(changes);
                        }
                        Err(e) => {
                            tracing::warn!(run = %run.id, error = %e, "could not compute the run's change set")
                        }
                    }
                }
                run.checkpoints.end = Some(end);
            }
            Err(why) => {
                tracing::warn!(run = %run.id, "{why}");
                run.checkpoints.end_error = Some(why);
            }
        }
    }

    /// The boot checkpoint of `tree` (taken by the first caller, shared by the
    /// others for [`BOOT_REUSE`]), named also under `git_ref`.
    async fn boot_checkpoint(
        &self,
        c: &Checkpoints,
        tree: &WorkTree,
        git_ref: &str,
    ) -> Result<CheckpointRef, String> {
        let cell: BootCell = {
            let mut cells = lock(&self.inner.boot.cells);
            let now = tokio::time::Instant::now();
            let entry = cells
                .entry(tree.path.clone())
                .or_insert_with(|| (now, BootCell::default()));
            if now.duration_since(entry.0) > BOOT_REUSE {
                *entry = (now, BootCell::default());
            }
            entry.1.clone()
        };
        let cp = cell
            .get_or_init(|| async {
                c.checkpoint(tree, git_ref, "knife: working tree at boot")
                    .await
                    .map_err(|e| format!("no checkpoint: {e}"))
            })
            .await
            .clone()?;
        if cp.git_ref == git_ref {
            return Ok(cp);
        }
        c.alias(&tree.project, git_ref, &cp)
            .await
            .map_err(|e| format!("no checkpoint: {e}"))
    }

    /// Records `checkpoint` as the end of `run_id` when the run has ended without one
    /// (a crash cut it short); does nothing otherwise.
    async fn settle_end(
        &self,
        c: &Checkpoints,
        tree: &WorkTree,
        run_id: &RunId,
        checkpoint: Result<CheckpointRef, String>,
    ) {
        let store = &self.inner.store;
        let Ok(Some(mut run)) = store.get_run(run_id).await else {
            return;
        };
        if !run.status.is_terminal()
            || run.checkpoints.end.is_some()
            || run.checkpoints.end_error.is_some()
            || (run.checkpoints.start.is_none() && run.checkpoints.start_error.is_none())
        {
            return;
        }
        let checkpoint = match checkpoint {
            Ok(cp) => c
                .alias(
                    &tree.project,
                    &run_ref(&run.thread_id, run.ordinal, "end"),
                    &cp,
                )
                .await
                .map_err(|e| format!("no checkpoint: {e}")),
            Err(why) => Err(why),
        };
        let checkpoint = self.on_this_node(checkpoint);
        let record = record_of(&run, CheckpointKind::RunEnd, &checkpoint);
        self.apply_end(&mut run, &tree.project, checkpoint).await;
        let now = self.inner.clock.now();
        let events = vec![
            DomainEvent::new(now, EventBody::CheckpointRecorded(record)),
            DomainEvent::new(now, EventBody::RunUpdated(run)),
        ];
        if let Err(e) = store.write(events).await {
            tracing::warn!(run = %run_id, error = %e, "could not record the end checkpoint after boot");
        }
    }

    /// After the restart sweep started the resumed turns (CHG-10): in the background,
    /// takes one checkpoint per working tree for the last runs of `threads` (threads
    /// whose run the previous process left active and boot ended: reconciled,
    /// exhausted or child threads) and records it as those runs' end checkpoint with
    /// their change set. Continuation runs settle their predecessor themselves,
    /// sharing the same boot checkpoint. Returns at once.
    pub fn checkpoint_after_boot(&self, threads: Vec<ThreadId>) {
        let Tracking::On(c) = self.inner.tracking.clone() else {
            return;
        };
        if threads.is_empty() {
            return;
        }
        let this = self.clone();
        self.inner.tracker.spawn(async move {
            for thread_id in threads {
                let store = &this.inner.store;
                let Ok(Some(thread)) = store.get_thread(&thread_id).await else {
                    continue;
                };
                if thread.run_count == 0 {
                    continue;
                }
                let run_id = RunId::for_thread(&thread.id, thread.run_count);
                let Ok(Some(run)) = store.get_run(&run_id).await else {
                    continue;
                };
                let Ok(Some(project)) = store.get_project(&thread.project_id).await else {
                    continue;
                };
                let tree =
                    this.work_tree(&c, &thread, &super::worktrees::run_root(&thread, &project));
                let git_ref = run_ref(&run.thread_id, run.ordinal, "end");
                let cp = this.boot_checkpoint(&c, &tree, &git_ref).await;
                this.settle_end(&c, &tree, &run_id, cp).await;
            }
        });
    }
}

/// The delete hook (CHG-08/11): refuses to drop unsaved worktree work without
/// `force`; drops the worktree and its branch, and the thread's checkpoint refs, whose
/// objects are collected in the background.
struct WorkspaceHook {
    checkpoints: Option<Checkpoints>,
    worktrees: Option<knife_workspace::Worktrees>,
    store: Store,
    tracker: TaskTracker,
}

/// Installs [`WorkspaceHook`] with what `inner` has now, unless another hook was set.
pub(super) fn install_workspace_hook(inner: &mut Inner) {
    if inner.thread_workspace.is_some() && !inner.own_hook {
        return;
    }
    inner.own_hook = true;
    inner.thread_workspace = Some(Arc::new(WorkspaceHook {
        checkpoints: match &inner.tracking {
            Tracking::On(c) => Some(c.clone()),
            _ => None,
        },
        worktrees: inner.worktrees.as_ref().map(|(w, _)| w.clone()),
        store: inner.store.clone(),
        tracker: inner.tracker.clone(),
    }));
}

#[async_trait::async_trait]
impl crate::lifecycle::ThreadWorkspace for WorkspaceHook {
    async fn check_delete(&self, thread: &Thread, force: bool) -> Result<(), String> {
        let Some(w) = &self.worktrees else {
            return Ok(());
        };
        match super::worktrees::unsaved_work(w, &self.store, thread).await {
            Ok(Some(why)) if !force => Err(format!(
                "{why}; merge it first (`knife threads merge {}`) or delete with force",
                thread.id
            )),
            Ok(_) => Ok(()),
            Err(e) => Err(e.to_string()),
        }
    }

    async fn drop_thread(&self, thread: &Thread) -> Result<(), String> {
        if let (Some(w), Some(wt)) = (&self.worktrees, &thread.worktree)
            && let Ok(Some(project)) = self.store.get_project(&thread.project_id).await
        {
            w.remove(Path::new(&project.root), wt)
                .await
                .map_err(|e| e.to_string())?;
        }
        let Some(c) = &self.checkpoints else {
            return Ok(());
        };
        let deleted = c
            .forget_thread(&thread.project_id, &thread.id)
            .await
            .map_err(|e| e.to_string())?;
        if deleted > 0 {
            collect_later(&self.tracker, c, thread);
        }
        Ok(())
    }
}

/// Runs `git gc` on `thread`'s project repository in the background (it can take a
/// while on a big repository, and the delete has answered already).
fn collect_later(tracker: &TaskTracker, c: &Checkpoints, thread: &Thread) {
    let c = c.clone();
    let project = thread.project_id.clone();
    let thread = thread.id.clone();
    tracker.spawn(async move {
        if let Err(e) = c.collect(&project).await {
            tracing::warn!(%thread, error = %e, "could not collect the checkpoints of a deleted thread");
        }
    });
}

fn message(run: &Run, side: &str) -> String {
    format!("knife: {side} of run {} of {}", run.ordinal, run.thread_id)
}

fn record_of(
    run: &Run,
    kind: CheckpointKind,
    checkpoint: &Result<CheckpointRef, String>,
) -> CheckpointRecord {
    CheckpointRecord {
        thread_id: run.thread_id.clone(),
        run_id: Some(run.id.clone()),
        revert_id: None,
        kind,
        checkpoint: checkpoint.as_ref().ok().cloned(),
        error: checkpoint.as_ref().err().cloned(),
    }
}

impl ExecutionService {
    /// Run `ordinal` of `thread`, or [`RuntimeError::RunNotFound`] /
    /// [`RuntimeError::ThreadNotFound`].
    pub async fn run_of(&self, thread: &ThreadId, ordinal: u32) -> Result<Run, RuntimeError> {
        let store = &self.inner.store;
        if store.get_thread(thread).await?.is_none() {
            return Err(RuntimeError::ThreadNotFound(thread.clone()));
        }
        store
            .get_run(&RunId::for_thread(thread, ordinal))
            .await?
            .ok_or_else(|| RuntimeError::RunNotFound {
                thread: thread.clone(),
                ordinal,
            })
    }

    /// The unified diff and per-file stats of run `ordinal` of `thread`, between its
    /// start and end checkpoints (CHG-03); cut at the diff cap with a note.
    ///
    /// Errors: `ThreadNotFound`, `RunNotFound`, `NoCheckpoint` (checkpoints off, the
    /// run still running, or its checkpoint failed: the reason), `Workspace`, `Store`.
    pub async fn run_diff(&self, thread: &ThreadId, ordinal: u32) -> Result<RunDiff, RuntimeError> {
        let run = self.run_of(thread, ordinal).await?;
        let c = self.checkpoints_or_reason()?;
        if let Some(why) = run.checkpoints.changes_error.clone().or_else(|| {
            run.checkpoints
                .elsewhere_than(self.inner.store.node().node())
        }) {
            return Err(RuntimeError::NoCheckpoint(why));
        }
        let (Some(start), Some(end)) = (&run.checkpoints.start, &run.checkpoints.end) else {
            return Err(RuntimeError::NoCheckpoint(
                run.checkpoints
                    .missing_reason()
                    .unwrap_or_else(|| "no checkpoint".into()),
            ));
        };
        let project = self
            .inner
            .store
            .get_thread(thread)
            .await?
            .map(|t| t.project_id)
            .ok_or_else(|| RuntimeError::ThreadNotFound(thread.clone()))?;
        let changes = match run.changes.clone() {
            Some(changes) => changes,
            None => c.changes(&project, &start.commit, &end.commit).await?,
        };
        let diff = c.diff(&project, &start.commit, &end.commit).await?;
        Ok(RunDiff {
            thread_id: thread.clone(),
            run_ordinal: ordinal,
            from: start.commit.clone(),
            to: end.commit.clone(),
            added: changes.added,
            removed: changes.removed,
            files: changes.files,
            diff: diff.text,
            truncated: diff.truncated,
            note: diff.note,
            skipped: changes.skipped,
        })
    }

    /// The checkpoint repositories, or why there are none (`NoCheckpoint`).
    pub(crate) fn checkpoints_or_reason(&self) -> Result<&Checkpoints, RuntimeError> {
        match &self.inner.tracking {
            Tracking::On(c) => Ok(c),
            Tracking::Unavailable(why) => {
                Err(RuntimeError::NoCheckpoint(format!("no checkpoint: {why}")))
            }
            Tracking::Off => Err(RuntimeError::NoCheckpoint(
                "no checkpoint: checkpoints are off on this server ([checkpoints] enabled = false)"
                    .into(),
            )),
        }
    }
}

impl ExecutionService {
    /// Drops every checkpoint of `thread` (CHG-08 delete, CHG-11): its refs in the
    /// project's checkpoint repository go now, and the objects no other thread's
    /// checkpoint names are collected in the background (`git gc --prune=now`, with
    /// the project's checkpoints held off meanwhile). Returns the refs deleted (0 when
    /// checkpoints are off). Errors: `ThreadNotFound`, `Workspace`, `Store`.
    pub async fn forget_checkpoints(&self, thread: &ThreadId) -> Result<usize, RuntimeError> {
        let Tracking::On(c) = &self.inner.tracking else {
            return Ok(0);
        };
        let project = self
            .inner
            .store
            .get_thread(thread)
            .await?
            .ok_or_else(|| RuntimeError::ThreadNotFound(thread.clone()))?
            .project_id;
        let deleted = c.forget_thread(&project, thread).await?;
        if deleted > 0 {
            let c = c.clone();
            let thread = thread.clone();
            self.inner.tracker.spawn(async move {
                if let Err(e) = c.collect(&project).await {
                    tracing::warn!(%thread, error = %e, "could not collect the checkpoints of a deleted thread");
                }
            });
        }
        Ok(deleted)
    }

    /// Bytes used by the checkpoint repositories (0 when checkpoints are off); also
    /// sets the `knife_checkpoint_bytes` gauge (CHG-11; `/metrics` calls it per scrape).
    pub async fn checkpoint_bytes(&self) -> u64 {
        let bytes = match &self.inner.tracking {
            // A walk of the repositories; `/metrics` scrapes often, so at most every 30 s.
            Tracking::On(c) => c.disk_usage_cached(Duration::from_secs(30)).await,
            _ => 0,
        };
        metrics::gauge!("knife_checkpoint_bytes").set(bytes as f64);
        bytes
    }
}
