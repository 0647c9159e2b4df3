//! What agents change in a working tree: checkpoints, change sets, diffs and reverts
//! (SPEC.md CHG-01..04, CHG-10). Plain serde types; knife-workspace computes them.

use serde::{Deserialize, Serialize};

use crate::Timestamp;
use crate::ids::*;

/// One checkpoint of a working tree: a commit in knife's own checkpoint repository
/// (never the project's `.git`) whose tree holds every file that is not ignored.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CheckpointRef {
    /// Commit id (hex) in the checkpoint repository.
    pub commit: String,
    /// Tree id (hex) of that commit.
    pub tree: String,
    /// The ref that keeps it (`refs/knife/threads/<thread>/runs/<ordinal>/start`, …).
    pub git_ref: String,
    /// When the checkpoint was taken.
    pub taken_at: Timestamp,
    /// Files left out because they exceed the size cap (they keep their previous
    /// checkpointed content, or are absent from it when new).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<SkippedFile>,
}

/// A file a checkpoint left out.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SkippedFile {
    /// Path relative to the working tree, `/`-separated.
    pub path: String,
    /// Its size in bytes.
    pub bytes: u64,
    /// Why it was left out (`over the size cap of 52428800 bytes`).
    pub reason: String,
}

/// The checkpoints of one run (CHG-01/02). A failed checkpoint leaves its `*_error`
/// (`no checkpoint: <why>`) instead of failing the run.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RunCheckpoints {
    /// Checkpoint taken before the run's turn started (CHG-01); `None` if it failed or
    /// was not taken yet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start: Option<CheckpointRef>,
    /// Checkpoint taken after the run ended (CHG-02); `None` until then or if it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end: Option<CheckpointRef>,
    /// Why the start checkpoint is missing (`no checkpoint: <why>`); `None` otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_error: Option<String>,
    /// Why the end checkpoint is missing (`no checkpoint: <why>`); `None` otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_error: Option<String>,
}

impl RunCheckpoints {
    /// True when nothing was recorded yet (the field is then left out of the JSON).
    pub fn is_empty(&self) -> bool {
        self == &RunCheckpoints::default()
    }

    /// Why the run has no usable pair of checkpoints, if it has none.
    pub fn missing_reason(&self) -> Option<String> {
        if let (Some(_), Some(_)) = (&self.start, &self.end) {
            return None;
        }
        Some(
            self.start_error
                .clone()
                .or_else(|| self.end_error.clone())
                .unwrap_or_else(|| {
                    if self.start.is_none() {
                        "no checkpoint: the run has no start checkpoint".into()
                    } else {
                        "no checkpoint: the run has no end checkpoint yet".into()
                    }
                }),
        )
    }
}

/// How a file changed between two checkpoints.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum FileChangeKind {
    /// New file (git's `A`).
    Added,
    /// Content changed (git's `M`).
    Modified,
    /// File removed (git's `D`).
    Deleted,
    /// Moved, possibly with edits (git's `R`); `old_path` holds the old path.
    Renamed,
    /// File ↔ symlink (git's `T`).
    TypeChanged,
}

/// One file of a change set.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct FileChange {
    /// Path after the change (relative, `/`-separated).
    pub path: String,
    /// Path before a rename.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub old_path: Option<String>,
    /// How the file changed.
    pub kind: FileChangeKind,
    /// Lines added (0 for a binary file).
    pub added: u64,
    /// Lines removed (0 for a binary file).
    pub removed: u64,
    /// Binary content: listed, never inlined in a diff.
    #[serde(default)]
    pub binary: bool,
}

/// What a run changed (CHG-02): files with line counts, totals, and the files the
/// end checkpoint left out (size cap).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ChangeSet {
    /// Changed files, sorted by path.
    pub files: Vec<FileChange>,
    /// Sum of `added` over `files`.
    pub added: u64,
    /// Sum of `removed` over `files`.
    pub removed: u64,
    /// Files the end checkpoint left out (over the size cap); empty when none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<SkippedFile>,
}

impl ChangeSet {
    /// Every path the change set touches (both sides of a rename), sorted, unique.
    pub fn touched_paths(&self) -> Vec<String> {
        let mut paths: Vec<String> = self
            .files
            .iter()
            .flat_map(|f| std::iter::once(f.path.clone()).chain(f.old_path.clone()))
            .collect();
        paths.sort();
        paths.dedup();
        paths
    }
}

/// Which checkpoint a `checkpoint.recorded` event records.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum CheckpointKind {
    /// Before a run's turn starts (CHG-01).
    RunStart,
    /// After a run ended, or at the boot after a crash (CHG-02, CHG-10).
    RunEnd,
    /// The working tree a revert (or its undo) replaced (CHG-04).
    RevertBefore,
    /// The working tree right after a revert (or its undo).
    RevertAfter,
}

/// Payload of `checkpoint.recorded`: a checkpoint, or why there is none.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CheckpointRecord {
    /// The thread whose working tree was checkpointed.
    pub thread_id: ThreadId,
    /// The run, for `run_start` / `run_end`; `None` for revert checkpoints.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<RunId>,
    /// The revert, for `revert_before` / `revert_after`; `None` for run checkpoints.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revert_id: Option<RevertId>,
    /// Which checkpoint this is.
    pub kind: CheckpointKind,
    /// The checkpoint; `None` when it failed (`error` then says why).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint: Option<CheckpointRef>,
    /// `no checkpoint: <why>` when it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Where a revert stands. `applying`/`undoing` are the journal's open states: a boot
/// that finds one finishes it (CHG-10).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RevertStatus {
    /// Files are being written (journal open; a boot finishes or rolls it back, CHG-10).
    Applying,
    /// Files restored to `target`; can be undone.
    Applied,
    /// The undo is writing `before` back (journal open, CHG-10).
    Undoing,
    /// Undone: the files are as they were before the revert.
    Undone,
    /// Writing failed and what was written was put back (`error` says why).
    Failed,
}

/// A revert of a thread's files (CHG-04): the files touched by run `run_ordinal` and
/// every later run, restored to `target` (the start checkpoint of that run). Stored
/// as `revert.updated` events (whole entity; the journal of CHG-10).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Revert {
    /// Revert id, `revert_<uuid v7>`; `POST /api/threads/{id}/reverts/{revert_id}/undo` names it.
    pub id: RevertId,
    /// The thread whose runs' changes were reverted.
    pub thread_id: ThreadId,
    /// The thread's project.
    pub project_id: ProjectId,
    /// The working tree the files were written in (absolute path).
    pub root: String,
    /// The first run reverted.
    pub run_ordinal: u32,
    /// The thread's run count when the revert was made: the next run
    /// (`runs_before + 1`) is told which files were reverted.
    pub runs_before: u32,
    /// Where the revert stands.
    pub status: RevertStatus,
    /// Paths restored (relative, `/`-separated, sorted).
    pub files: Vec<String>,
    /// The checkpoint the files were restored to.
    pub target: CheckpointRef,
    /// The revert's own checkpoint: the working tree it replaced (what undo restores).
    pub before: CheckpointRef,
    /// The working tree right after the revert.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<CheckpointRef>,
    /// The working tree right after the undo.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after_undo: Option<CheckpointRef>,
    /// The conflict check was overridden.
    #[serde(default)]
    pub forced: bool,
    /// Why a revert or undo failed (its files were put back).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// When the revert was made.
    pub created_at: Timestamp,
    /// When its status last changed.
    pub updated_at: Timestamp,
}

/// Body of `POST /api/threads/{id}/runs/{ordinal}/revert` and of `…/undo`.
#[derive(Clone, Debug, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RevertRequest {
    /// Overwrite files someone changed since the thread's last checkpoint.
    #[serde(default)]
    pub force: bool,
}

/// Answer of `GET /api/threads/{id}/runs/{ordinal}/diff` (CHG-03).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RunDiff {
    /// The thread of the run.
    pub thread_id: ThreadId,
    /// Ordinal of the run the diff is of (1-based).
    pub run_ordinal: u32,
    /// Start checkpoint commit.
    pub from: String,
    /// End checkpoint commit.
    pub to: String,
    /// Per-file stats (all files, also those cut from `diff`).
    pub files: Vec<FileChange>,
    /// Lines added, over every file.
    pub added: u64,
    /// Lines removed, over every file.
    pub removed: u64,
    /// Unified diff (git format); binary files appear as "Binary files … differ".
    pub diff: String,
    /// The diff was cut at the size cap.
    pub truncated: bool,
    /// Says what was cut and how to see all of it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// Files the end checkpoint left out (over the size cap); not in `diff`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<SkippedFile>,
}

/// A thread's git worktree (CHG-07): a worktree of the project's repository under
/// the data dir, on its own branch.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ThreadWorktree {
    /// Absolute path of the worktree (the runtime's working directory).
    pub path: String,
    /// Its branch: `knife/<short thread id>`.
    pub branch: String,
    /// The project's HEAD commit the branch started from.
    pub base_commit: String,
}

/// Answer of `POST /api/threads/{id}/merge` (CHG-07).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct MergeResponse {
    /// The worktree thread that was merged.
    pub thread_id: ThreadId,
    /// The thread's branch.
    pub branch: String,
    /// `merged` or `up_to_date`.
    pub status: String,
    /// The project's branch merged into.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub into: Option<String>,
    /// The merge commit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
}
