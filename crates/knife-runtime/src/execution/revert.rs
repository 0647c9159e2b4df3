//! Reverting a thread's files (CHG-04) and undoing a revert, crash-safe (CHG-10): the
//! `revert.updated` events are the journal; a boot finishes a revert a crash cut short.
//!
//! Order of a revert: reserve the idle thread, lock its working tree, take the
//! revert's own checkpoint (`before`), check for files changed since the thread's last
//! checkpoint, journal `applying`, restore (temp file + rename per file), take the
//! `after` checkpoint, journal `applied`. A crash after the `applying` entry is
//! finished by [`ExecutionService::replay_revert_journal`] at the next boot (the
//! restore is idempotent), so a revert is either fully applied or not at all.

use std::path::Path;

use knife_protocol::*;
use knife_store::StreamFilter;
use knife_workspace::{Checkpoints, Locked, revert_ref};

use super::checkpoints::Tracking;

use super::*;

/// Longest list of reverts read back for one thread (or at boot).
const MAX_REVERT_EVENTS: usize = 100_000;

impl ExecutionService {
    /// Restores the files touched by run `ordinal` of `thread` and every later run to
    /// their state before that run (CHG-04). The transcript stays; the thread's next
    /// run is told which files were reverted.
    ///
    /// Errors: `ThreadNotFound`, `RunNotFound`, `RunInProgress` (409: a run is
    /// active), `NoCheckpoint` (409: a run in the range has none; the reason),
    /// `RevertConflict` (409: files changed since the thread's last checkpoint, unless
    /// `force`; nothing written), `Workspace`, `Store`.
    pub async fn revert(
        &self,
        thread_id: &ThreadId,
        ordinal: u32,
        force: bool,
    ) -> Result<Revert, RuntimeError> {
        let c = self.checkpoints_or_reason()?.clone();
        let first = self.run_of(thread_id, ordinal).await?;
        let _busy = self.reserve_idle(thread_id).await?;
        let (thread, root) = self.thread_and_root(thread_id).await?;
        let mut runs = vec![first];
        for k in ordinal + 1..=thread.run_count {
            runs.push(self.run_of(thread_id, k).await?);
        }
        let mut files = Vec::new();
        for run in &runs {
            let why = run.checkpoints.missing_reason().or_else(|| {
                run.checkpoints
                    .elsewhere_than(self.inner.store.node().node())
            });
            if let Some(why) = why {
                return Err(RuntimeError::NoCheckpoint(format!(
                    "run {} cannot be reverted: {why}",
                    run.ordinal
                )));
            }
            if let Some(changes) = &run.changes {
                files.extend(changes.touched_paths());
            }
        }
        files.sort();
        files.dedup();
        let target = runs[0]
            .checkpoints
            .start
            .clone()
            .ok_or_else(|| RuntimeError::NoCheckpoint("no checkpoint".into()))?;
        let tree = self.work_tree(&c, &thread, &root);
        let locked = c.lock(&tree).await?;
        let id = RevertId::new();
        let last = self.last_checkpoint(&thread, &runs).await?;
        let before = locked
            .checkpoint(
                &revert_ref(thread_id, &id, "before"),
                &format!("knife: before revert {id}"),
            )
            .await?;
        check_conflicts(
            &c,
            &thread.project_id,
            last.as_ref(),
            &before,
            &files,
            force,
        )
        .await?;
        let now = self.inner.clock.now();
        let revert = Revert {
            id: id.clone(),
            thread_id: thread_id.clone(),
            project_id: thread.project_id.clone(),
            root: root.display().to_string(),
            run_ordinal: ordinal,
            runs_before: thread.run_count,
            status: RevertStatus::Applying,
            files,
            target,
            before: before.clone(),
            after: None,
            after_undo: None,
            forced: force,
            error: None,
            created_at: now,
            updated_at: now,
        };
        self.journal(&revert, CheckpointKind::RevertBefore, &before)
            .await?;
        self.finish(&locked, revert).await
    }

    /// Restores what revert `revert_id` of `thread` replaced (CHG-04). Errors:
    /// `RevertNotFound`, `Invalid` (not applied, or undone already), `RunInProgress`,
    /// `RevertConflict` (unless `force`), `Workspace`, `Store`.
    pub async fn undo_revert(
        &self,
        thread_id: &ThreadId,
        revert_id: &RevertId,
        force: bool,
    ) -> Result<Revert, RuntimeError> {
        let c = self.checkpoints_or_reason()?.clone();
        let _busy = self.reserve_idle(thread_id).await?;
        let mut revert = self
            .reverts_of(thread_id)
            .await?
            .into_iter()
            .find(|r| &r.id == revert_id)
            .ok_or_else(|| RuntimeError::RevertNotFound {
                thread: thread_id.clone(),
                revert: revert_id.clone(),
            })?;
        if revert.status != RevertStatus::Applied {
            return Err(RuntimeError::Invalid(format!(
                "revert {revert_id} is {:?}, not applied: only an applied revert can be undone",
                revert.status
            )));
        }
        let (thread, root) = self.thread_and_root(thread_id).await?;
        let tree = self.work_tree(&c, &thread, &root);
        let locked = c.lock(&tree).await?;
        let runs = match thread.run_count {
            0 => Vec::new(),
            n => vec![self.run_of(thread_id, n).await?],
        };
        let last = self.last_checkpoint(&thread, &runs).await?;
        let now_tree = locked
            .checkpoint(
                &revert_ref(thread_id, revert_id, "undo-before"),
                &format!("knife: before undoing revert {revert_id}"),
            )
            .await?;
        check_conflicts(
            &c,
            &thread.project_id,
            last.as_ref(),
            &now_tree,
            &revert.files,
            force,
        )
        .await?;
        revert.status = RevertStatus::Undoing;
        revert.updated_at = self.inner.clock.now();
        self.journal(&revert, CheckpointKind::RevertBefore, &now_tree)
            .await?;
        self.finish(&locked, revert).await
    }

    /// Every revert of `thread` in its latest state, oldest first.
    pub async fn reverts_of(&self, thread: &ThreadId) -> Result<Vec<Revert>, RuntimeError> {
        let filter = StreamFilter {
            thread_id: Some(thread.clone()),
            after: 0,
            event_type: Some("revert.updated".into()),
        };
        Ok(latest_reverts(
            self.inner
                .store
                .read_events(&filter, MAX_REVERT_EVENTS)
                .await?,
        ))
    }

    /// Finishes every revert (or undo) a crash cut short (CHG-10): its journal entry
    /// says `applying`/`undoing`, so its files are restored again (idempotent) and it
    /// is marked done. Call at boot, before the restart sweep resumes runs. Returns
    /// how many were finished. Errors: `Store` reading the journal.
    pub async fn replay_revert_journal(&self) -> Result<usize, RuntimeError> {
        let Tracking::On(c) = &self.inner.tracking else {
            return Ok(0);
        };
        let filter = StreamFilter {
            thread_id: None,
            after: 0,
            event_type: Some("revert.updated".into()),
        };
        let open: Vec<Revert> = latest_reverts(
            self.inner
                .store
                .read_events(&filter, MAX_REVERT_EVENTS)
                .await?,
        )
        .into_iter()
        .filter(|r| matches!(r.status, RevertStatus::Applying | RevertStatus::Undoing))
        .collect();
        let mut finished = 0;
        for revert in open {
            let tree = c.work_tree(&revert.project_id, Path::new(&revert.root));
            let locked = c.lock(&tree).await?;
            let id = revert.id.clone();
            match self.finish(&locked, revert).await {
                Ok(_) => finished += 1,
                Err(e) => {
                    tracing::error!(revert = %id, error = %e, "could not finish a revert after the crash")
                }
            }
        }
        Ok(finished)
    }

    /// What the thread's run `ordinal` is told: the files reverts (and undos) made
    /// since the previous run restored, or `None`.
    pub(super) async fn revert_note(&self, thread: &ThreadId, ordinal: u32) -> Option<String> {
        let reverts = self.reverts_of(thread).await.ok()?;
        let lines: Vec<String> = reverts
            .iter()
            .filter(|r| r.runs_before + 1 == ordinal)
            .filter_map(|r| match r.status {
                RevertStatus::Applied => Some(format!(
                    "- reverted to their state before run {}: {}",
                    r.run_ordinal,
                    r.files.join(", ")
                )),
                RevertStatus::Undone => Some(format!(
                    "- a revert of run {} was undone, restoring: {}",
                    r.run_ordinal,
                    r.files.join(", ")
                )),
                _ => None,
            })
            .collect();
        (!lines.is_empty()).then(|| {
            format!(
                "[knife] Since your last turn the user reverted files (read them again before \
                 editing):\n{}",
                lines.join("\n")
            )
        })
    }

    /// Applies the journalled `revert` (status `applying` or `undoing`) and records
    /// its end: restore, checkpoint, journal `applied`/`undone`. On a write error the
    /// files are put back to the revert's `before` state and it is journalled `failed`.
    async fn finish(&self, locked: &Locked, mut revert: Revert) -> Result<Revert, RuntimeError> {
        let undo = revert.status == RevertStatus::Undoing;
        let (source, tag, side) = if undo {
            (
                revert.before.tree.clone(),
                format!("{}-undo", revert.id),
                "undo-after",
            )
        } else {
            (revert.target.tree.clone(), revert.id.to_string(), "after")
        };
        if let Err(e) = locked.restore(&source, &revert.files, &tag).await {
            // Put back what was there, then say so.
            let back = if undo {
                revert.after.as_ref().map(|a| a.tree.clone())
            } else {
                Some(revert.before.tree.clone())
            };
            if let Some(back) = back {
                let _ = locked.restore(&back, &revert.files, &tag).await;
            }
            revert.status = if undo {
                RevertStatus::Applied
            } else {
                RevertStatus::Failed
            };
            revert.error = Some(e.to_string());
            revert.updated_at = self.inner.clock.now();
            let event = DomainEvent::new(revert.updated_at, EventBody::RevertUpdated(revert));
            self.inner.store.write(vec![event]).await?;
            return Err(e.into());
        }
        let after = locked
            .checkpoint(
                &revert_ref(&revert.thread_id, &revert.id, side),
                &format!(
                    "knife: after {} {}",
                    if undo { "undoing" } else { "revert" },
                    revert.id
                ),
            )
            .await?;
        if undo {
            revert.status = RevertStatus::Undone;
            revert.after_undo = Some(after.clone());
        } else {
            revert.status = RevertStatus::Applied;
            revert.after = Some(after.clone());
        }
        revert.updated_at = self.inner.clock.now();
        self.journal(&revert, CheckpointKind::RevertAfter, &after)
            .await?;
        tracing::info!(thread = %revert.thread_id, revert = %revert.id, files = revert.files.len(), status = ?revert.status, "revert done");
        Ok(revert)
    }

    /// Writes `revert` and the checkpoint `cp` of `kind` in one transaction.
    async fn journal(
        &self,
        revert: &Revert,
        kind: CheckpointKind,
        cp: &CheckpointRef,
    ) -> Result<(), RuntimeError> {
        let now = revert.updated_at;
        let record = CheckpointRecord {
            thread_id: revert.thread_id.clone(),
            run_id: None,
            revert_id: Some(revert.id.clone()),
            kind,
            checkpoint: Some(cp.clone()),
            error: None,
        };
        self.inner
            .store
            .write(vec![
                DomainEvent::new(now, EventBody::CheckpointRecorded(record)),
                DomainEvent::new(now, EventBody::RevertUpdated(revert.clone())),
            ])
            .await?;
        Ok(())
    }

    /// The thread and the folder its runs work in.
    async fn thread_and_root(
        &self,
        thread_id: &ThreadId,
    ) -> Result<(Thread, std::path::PathBuf), RuntimeError> {
        let store = &self.inner.store;
        let thread = store
            .get_thread(thread_id)
            .await?
            .ok_or_else(|| RuntimeError::ThreadNotFound(thread_id.clone()))?;
        let project = store
            .get_project(&thread.project_id)
            .await?
            .ok_or_else(|| RuntimeError::ProjectNotFound(thread.project_id.clone()))?;
        let root = super::worktrees::run_root(&thread, &project);
        Ok((thread, root))
    }

    /// The thread's last checkpoint: the latest of its last run's end and its
    /// reverts' and undos' after checkpoints.
    async fn last_checkpoint(
        &self,
        thread: &Thread,
        runs: &[Run],
    ) -> Result<Option<CheckpointRef>, RuntimeError> {
        let run_end = runs
            .iter()
            .filter(|r| r.ordinal == thread.run_count)
            .find_map(|r| r.checkpoints.end.clone());
        let reverts = self.reverts_of(&thread.id).await?;
        Ok(run_end
            .into_iter()
            .chain(
                reverts
                    .into_iter()
                    .flat_map(|r| [r.after, r.after_undo].into_iter().flatten()),
            )
            .max_by_key(|cp| cp.taken_at))
    }
}

/// `RevertConflict` with the `files` that differ between `last` and `now`, unless `force`.
async fn check_conflicts(
    c: &Checkpoints,
    project: &ProjectId,
    last: Option<&CheckpointRef>,
    now: &CheckpointRef,
    files: &[String],
    force: bool,
) -> Result<(), RuntimeError> {
    let Some(last) = last else {
        return Ok(());
    };
    if force || last.tree == now.tree {
        return Ok(());
    }
    let changed = c
        .changed_paths(project, &last.tree, &now.tree, files)
        .await?;
    if changed.is_empty() {
        Ok(())
    } else {
        Err(RuntimeError::RevertConflict { files: changed })
    }
}

/// The latest state of each revert in `events` (`revert.updated`, in log order),
/// oldest revert first.
fn latest_reverts(events: Vec<StoredEvent>) -> Vec<Revert> {
    let mut order: Vec<RevertId> = Vec::new();
    let mut latest: HashMap<RevertId, Revert> = HashMap::new();
    for event in events {
        if let EventBody::RevertUpdated(r) = event.event.body {
            if !latest.contains_key(&r.id) {
                order.push(r.id.clone());
            }
            latest.insert(r.id.clone(), r);
        }
    }
    order
        .into_iter()
        .filter_map(|id| latest.remove(&id))
        .collect()
}
