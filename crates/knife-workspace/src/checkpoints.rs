//! Checkpoints of working trees (CHG-01/02/06): one bare git repository of knife's
//! own per project under the data dir, one index file per working tree, one ref per checkpoint.
//!
//! Layout: `<root>/<project id>.git` (bare; `info/exclude` holds the default and
//! configured excludes, `info/attributes` turns off every content filter) and
//! `<root>/<project id>.git/knife-index/<hash of the working tree path>`. A checkpoint
//! is `git add -A` into that index (fast: git's stat cache skips unchanged files),
//! `write-tree`, `commit-tree` and `update-ref refs/knife/threads/<thread>/…`, so git
//! keeps exactly what a ref names. The project's own `.git` is never opened.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use knife_protocol::{CheckpointRef, ProjectId, RevertId, SkippedFile, ThreadId};
use sha2::{Digest, Sha256};
use tokio::sync::{OwnedMutexGuard, OwnedRwLockReadGuard, OwnedSemaphorePermit, RwLock, Semaphore};

use crate::error::WorkspaceError;
use crate::git::{Git, GitEnv, one_line};

/// Paths never checkpointed, whatever `.gitignore` says (gitignore syntax).
pub const DEFAULT_EXCLUDES: &[&str] = &[
    "node_modules/",
    "target/",
    ".venv/",
    "venv/",
    "dist/",
    "build/",
    "__pycache__/",
    "*.pyc",
    ".mypy_cache/",
    ".pytest_cache/",
    ".ruff_cache/",
    ".tox/",
    ".gradle/",
    ".next/",
    ".turbo/",
    ".cache/",
    ".DS_Store",
];

/// Default size cap of one file in a checkpoint: 50 MiB.
pub const DEFAULT_MAX_FILE_BYTES: u64 = 50 * 1024 * 1024;

/// Default cap of a unified diff's text: 1 MiB.
pub const DEFAULT_MAX_DIFF_BYTES: usize = 1024 * 1024;

/// git processes run at once across all checkpoints (the restart sweep may start
/// thousands of runs; each takes its checkpoint in turn).
const GIT_CONCURRENCY: usize = 4;

/// Settings of [`Checkpoints`] (`[checkpoints]` in knife.toml).
#[derive(Clone, Debug)]
pub struct CheckpointOptions {
    /// Extra excludes for every project (gitignore syntax), after [`DEFAULT_EXCLUDES`].
    pub exclude: Vec<String>,
    /// Files larger than this (bytes) are left out and listed as skipped.
    pub max_file_bytes: u64,
    /// Unified diffs are cut at this many bytes, with a note.
    pub max_diff_bytes: usize,
    /// Extra excludes of one project root (`[[projects]] checkpoint_exclude`).
    pub root_exclude: Vec<(PathBuf, Vec<String>)>,
}

impl Default for CheckpointOptions {
    fn default() -> Self {
        Self {
            exclude: Vec::new(),
            max_file_bytes: DEFAULT_MAX_FILE_BYTES,
            max_diff_bytes: DEFAULT_MAX_DIFF_BYTES,
            root_exclude: Vec::new(),
        }
    }
}

/// A working tree to checkpoint: the project it belongs to (one checkpoint
/// repository per project), its folder, and the project's own extra excludes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkTree {
    /// The project whose checkpoint repository holds its checkpoints.
    pub project: ProjectId,
    /// The folder to checkpoint: the project root or a thread's worktree (absolute).
    pub path: PathBuf,
    /// Per-project excludes (gitignore syntax), added to the global ones.
    pub exclude: Vec<String>,
}

impl WorkTree {
    /// `path` of `project` with no extra excludes.
    pub fn new(project: ProjectId, path: impl Into<PathBuf>) -> Self {
        Self {
            project,
            path: path.into(),
            exclude: Vec::new(),
        }
    }
}

/// The ref of a run's checkpoint: `refs/knife/threads/<thread>/runs/<ordinal>/<side>`
/// (`side` is `start` or `end`).
pub fn run_ref(thread: &ThreadId, ordinal: u32, side: &str) -> String {
    format!("refs/knife/threads/{thread}/runs/{ordinal}/{side}")
}

/// The ref of a revert's checkpoint: `refs/knife/threads/<thread>/reverts/<revert>/<side>`.
pub fn revert_ref(thread: &ThreadId, revert: &RevertId, side: &str) -> String {
    format!("refs/knife/threads/{thread}/reverts/{revert}/{side}")
}

/// Knife's checkpoint repositories under one folder. Cheap to clone.
#[derive(Clone)]
pub struct Checkpoints {
    inner: Arc<Inner>,
}

struct Inner {
    git: Git,
    root: PathBuf,
    options: CheckpointOptions,
    /// Per repository: checkpoints share it, garbage collection takes it alone.
    // std Mutex: held only for the map lookup, never across an `.await`.
    repos: Mutex<HashMap<PathBuf, Arc<RwLock<()>>>>,
    /// Per working tree: one index, one writer at a time.
    trees: Mutex<HashMap<PathBuf, Arc<tokio::sync::Mutex<()>>>>,
    permits: Arc<Semaphore>,
    /// The last [`Checkpoints::disk_usage_cached`] walk: when, and its bytes.
    usage: Mutex<Option<(tokio::time::Instant, u64)>>,
}

/// A working tree locked for checkpoints and restores (see [`Checkpoints::lock`]).
/// Dropping it releases the tree.
pub struct Locked {
    pub(crate) checkpoints: Checkpoints,
    pub(crate) tree: WorkTree,
    pub(crate) repo: PathBuf,
    pub(crate) index: PathBuf,
    _repo: OwnedRwLockReadGuard<()>,
    _tree: OwnedMutexGuard<()>,
    _permit: OwnedSemaphorePermit,
}

impl Checkpoints {
    /// Checkpoint repositories under `root` (created on first use), run with `git`.
    pub fn new(git: Git, root: impl Into<PathBuf>, options: CheckpointOptions) -> Self {
        Self {
            inner: Arc::new(Inner {
                git,
                root: {
                    let root: PathBuf = root.into();
                    std::path::absolute(&root).unwrap_or(root)
                },
                options,
                repos: Mutex::new(HashMap::new()),
                trees: Mutex::new(HashMap::new()),
                permits: Arc::new(Semaphore::new(GIT_CONCURRENCY)),
                usage: Mutex::new(None),
            }),
        }
    }

    /// The folder holding every checkpoint repository.
    pub fn root(&self) -> &Path {
        &self.inner.root
    }

    /// The git program in use.
    pub fn git(&self) -> &Git {
        &self.inner.git
    }

    /// The settings in use.
    pub fn options(&self) -> &CheckpointOptions {
        &self.inner.options
    }

    /// The checkpoint repository of `project`: `<root>/<project id>.git`.
    pub fn repo_dir(&self, project: &ProjectId) -> PathBuf {
        self.inner.root.join(format!("{project}.git"))
    }

    pub(crate) fn env<'a>(&self, repo: &'a Path) -> GitEnv<'a> {
        GitEnv {
            git_dir: repo,
            work_tree: None,
            index: None,
        }
    }

    pub(crate) fn run_git(&self) -> &Git {
        &self.inner.git
    }

    fn repo_lock(&self, repo: &Path) -> Arc<RwLock<()>> {
        let mut map = lock(&self.inner.repos);
        map.entry(repo.to_owned()).or_default().clone()
    }

    /// Locks `tree` for checkpoints and restores: other callers on the same tree
    /// wait; a garbage collection of its repository waits for the guard.
    pub async fn lock(&self, tree: &WorkTree) -> Result<Locked, WorkspaceError> {
        let repo = self.repo_dir(&tree.project);
        let repo_guard = self.repo_lock(&repo).read_owned().await;
        let tree_lock = {
            let mut map = lock(&self.inner.trees);
            map.entry(tree.path.clone()).or_default().clone()
        };
        let tree_guard = tree_lock.lock_owned().await;
        let permit = self
            .inner
            .permits
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| WorkspaceError::Parse {
                command: "lock".into(),
                detail: "the checkpoint service is closed".into(),
            })?;
        let index = repo
            .join("knife-index")
            .join(short_hash(&tree.path.to_string_lossy()));
        Ok(Locked {
            checkpoints: self.clone(),
            tree: tree.clone(),
            repo,
            index,
            _repo: repo_guard,
            _tree: tree_guard,
            _permit: permit,
        })
    }

    /// Takes a checkpoint of `tree` under `git_ref` (see [`Locked::checkpoint`]).
    pub async fn checkpoint(
        &self,
        tree: &WorkTree,
        git_ref: &str,
        message: &str,
    ) -> Result<CheckpointRef, WorkspaceError> {
        self.lock(tree).await?.checkpoint(git_ref, message).await
    }

    /// Names checkpoint `cp` also under `git_ref` (one checkpoint of a working tree
    /// shared by several runs: the boot after a crash, CHG-10). Returns the copy.
    pub async fn alias(
        &self,
        project: &ProjectId,
        git_ref: &str,
        cp: &CheckpointRef,
    ) -> Result<CheckpointRef, WorkspaceError> {
        let repo = self.repo_dir(project);
        self.inner
            .git
            .run(self.env(&repo), ["update-ref", git_ref, cp.commit.as_str()])
            .await?;
        Ok(CheckpointRef {
            git_ref: git_ref.to_owned(),
            ..cp.clone()
        })
    }

    /// The working tree at `path` of `project`, with the per-root excludes of the
    /// options ([`CheckpointOptions::root_exclude`]).
    pub fn work_tree(&self, project: &ProjectId, path: impl Into<PathBuf>) -> WorkTree {
        let path = path.into();
        let exclude = self
            .inner
            .options
            .root_exclude
            .iter()
            .filter(|(root, _)| root == &path)
            .flat_map(|(_, patterns)| patterns.iter().cloned())
            .collect();
        WorkTree {
            project: project.clone(),
            path,
            exclude,
        }
    }

    /// Creates the repository of `tree`'s project if needed and writes its excludes
    /// and attributes. Returns the repository folder.
    async fn ensure_repo(&self, tree: &WorkTree, repo: &Path) -> Result<(), WorkspaceError> {
        if !repo.join("HEAD").is_file() {
            tokio::fs::create_dir_all(&self.inner.root)
                .await
                .map_err(WorkspaceError::io("create", &self.inner.root))?;
            self.inner
                .git
                .run(self.env(repo), ["init", "--bare", "--quiet"])
                .await?;
        }
        let info = repo.join("info");
        tokio::fs::create_dir_all(&info)
            .await
            .map_err(WorkspaceError::io("create", &info))?;
        let mut exclude = String::from("# written by knife: checkpoints leave these out\n");
        for pattern in DEFAULT_EXCLUDES
            .iter()
            .copied()
            .chain(self.inner.options.exclude.iter().map(String::as_str))
            .chain(tree.exclude.iter().map(String::as_str))
        {
            exclude.push_str(pattern);
            exclude.push('\n');
        }
        write_if_changed(&info.join("exclude"), exclude.as_bytes()).await?;
        // Highest-precedence attributes: checkpoints hold the bytes on disk, whatever
        // the project's `.gitattributes` asks (no EOL conversion, filters or idents).
        write_if_changed(
            &info.join("attributes"),
            b"* -text -filter -ident -working-tree-encoding\n",
        )
        .await?;
        Ok(())
    }

    /// Deletes every checkpoint ref of `thread` in `project`'s repository (CHG-11);
    /// the objects go at the next [`Checkpoints::collect`]. Returns the refs deleted.
    pub async fn forget_thread(
        &self,
        project: &ProjectId,
        thread: &ThreadId,
    ) -> Result<usize, WorkspaceError> {
        let repo = self.repo_dir(project);
        if !repo.join("HEAD").is_file() {
            return Ok(0);
        }
        let git = &self.inner.git;
        let listed = git
            .run(
                self.env(&repo),
                [
                    "for-each-ref",
                    "--format=%(refname)",
                    &format!("refs/knife/threads/{thread}/"),
                ],
            )
            .await?;
        let refs: Vec<String> = String::from_utf8_lossy(&listed)
            .lines()
            .filter(|l| !l.is_empty())
            .map(str::to_owned)
            .collect();
        if refs.is_empty() {
            return Ok(0);
        }
        let input: String = refs.iter().map(|r| format!("delete {r}\n")).collect();
        git.run_with_input(
            self.env(&repo),
            ["update-ref", "--stdin"],
            Some(input.into_bytes()),
        )
        .await?;
        Ok(refs.len())
    }

    /// Removes the objects no checkpoint ref names from `project`'s repository
    /// (`git gc --prune=now`), with every checkpoint of the project held off meanwhile.
    pub async fn collect(&self, project: &ProjectId) -> Result<(), WorkspaceError> {
        let repo = self.repo_dir(project);
        if !repo.join("HEAD").is_file() {
            return Ok(());
        }
        let _alone = self.repo_lock(&repo).write_owned().await;
        self.inner
            .git
            .run(self.env(&repo), ["gc", "--quiet", "--prune=now"])
            .await?;
        Ok(())
    }

    /// [`Checkpoints::disk_usage`], walked at most once per `max_age` (for `/metrics`).
    pub async fn disk_usage_cached(&self, max_age: std::time::Duration) -> u64 {
        let now = tokio::time::Instant::now();
        if let Some((at, bytes)) = *lock(&self.inner.usage)
            && now.duration_since(at) < max_age
        {
            return bytes;
        }
        let bytes = self.disk_usage().await;
        *lock(&self.inner.usage) = Some((now, bytes));
        bytes
    }

    /// Bytes used by every checkpoint repository (a walk of [`Checkpoints::root`]).
    pub async fn disk_usage(&self) -> u64 {
        let root = self.inner.root.clone();
        tokio::task::spawn_blocking(move || dir_size(&root))
            .await
            .unwrap_or(0)
    }
}

impl Locked {
    /// The working tree this guard holds.
    pub fn tree(&self) -> &WorkTree {
        &self.tree
    }

    pub(crate) fn tree_env(&self) -> GitEnv<'_> {
        GitEnv {
            git_dir: &self.repo,
            work_tree: Some(&self.tree.path),
            index: Some(&self.index),
        }
    }

    /// Records the working tree as a commit under `git_ref` (CHG-01/02): every file
    /// that is not ignored (`.gitignore`, [`DEFAULT_EXCLUDES`], the configured
    /// excludes); files over the size cap are left out and listed in
    /// [`CheckpointRef::skipped`]. Only changed content is hashed and stored.
    ///
    /// Errors: [`WorkspaceError::WorkTreeMissing`], [`WorkspaceError::Git`] (disk full,
    /// permissions), [`WorkspaceError::Io`].
    pub async fn checkpoint(
        &self,
        git_ref: &str,
        message: &str,
    ) -> Result<CheckpointRef, WorkspaceError> {
        let checkpoints = &self.checkpoints;
        if !self.tree.path.is_dir() {
            return Err(WorkspaceError::WorkTreeMissing {
                path: self.tree.path.clone(),
            });
        }
        checkpoints.ensure_repo(&self.tree, &self.repo).await?;
        if let Some(dir) = self.index.parent() {
            tokio::fs::create_dir_all(dir)
                .await
                .map_err(WorkspaceError::io("create", dir))?;
        }
        // This guard is the only writer of the index: a lock file left by a git
        // killed mid-checkpoint (a crash) would block every later checkpoint.
        let stale = self.index.with_extension("lock");
        if stale.exists() {
            let _ = tokio::fs::remove_file(&stale).await;
        }
        let git = checkpoints.run_git();
        let env = self.tree_env();
        let changed = git
            .run(
                env,
                [
                    "ls-files",
                    "-z",
                    "--others",
                    "--modified",
                    "--exclude-standard",
                ],
            )
            .await?;
        let skipped = self.oversized(&changed).await;
        let mut args: Vec<String> = vec!["add".into(), "-A".into(), "--".into(), ".".into()];
        args.extend(
            skipped
                .iter()
                .map(|s| format!(":(exclude,literal){}", s.path)),
        );
        git.run(env, &args).await?;
        let tree = one_line(&git.run(env, ["write-tree"]).await?);
        let commit = one_line(
            &git.run(env, ["commit-tree", tree.as_str(), "-m", message])
                .await?,
        );
        git.run(env, ["update-ref", git_ref, commit.as_str()])
            .await?;
        Ok(CheckpointRef {
            commit,
            tree,
            git_ref: git_ref.to_owned(),
            taken_at: chrono::Utc::now(),
            skipped,
        })
    }

    /// The files of `listed` (NUL-separated, from `ls-files`) over the size cap.
    async fn oversized(&self, listed: &[u8]) -> Vec<SkippedFile> {
        let cap = self.checkpoints.inner.options.max_file_bytes;
        let mut skipped = Vec::new();
        let mut seen = HashSet::new();
        for raw in listed.split(|b| *b == 0).filter(|p| !p.is_empty()) {
            let path = String::from_utf8_lossy(raw).into_owned();
            if !seen.insert(path.clone()) {
                continue;
            }
            let Ok(meta) = tokio::fs::symlink_metadata(self.tree.path.join(&path)).await else {
                continue; // deleted since: `add -A` records the deletion
            };
            if meta.is_file() && meta.len() > cap {
                skipped.push(SkippedFile {
                    path,
                    bytes: meta.len(),
                    reason: format!("over the checkpoint size cap of {cap} bytes"),
                });
            }
        }
        skipped
    }
}

/// First 16 hex digits of the SHA-256 of `text` (a file name for a working tree's index).
fn short_hash(text: &str) -> String {
    let digest = Sha256::digest(text.as_bytes());
    digest.iter().take(8).map(|b| format!("{b:02x}")).collect()
}

async fn write_if_changed(path: &Path, content: &[u8]) -> Result<(), WorkspaceError> {
    if tokio::fs::read(path).await.ok().as_deref() == Some(content) {
        return Ok(());
    }
    tokio::fs::write(path, content)
        .await
        .map_err(WorkspaceError::io("write", path))
}

fn dir_size(path: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(path) else {
        return 0;
    };
    entries
        .filter_map(Result::ok)
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => dir_size(&e.path()),
            Ok(_) => e.metadata().map(|m| m.len()).unwrap_or(0),
            Err(_) => 0,
        })
        .sum()
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
