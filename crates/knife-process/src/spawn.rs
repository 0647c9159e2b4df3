//! What to start ([`SpawnSpec`]: the [`Launch`] plus stdio, label, recorder) and the
//! seam a sandbox plugs into ([`Sandbox`]: rewrites the launch before the spawn).

use std::ffi::OsString;
use std::io;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use knife_protocol::ThreadId;

use crate::group::DEFAULT_GRACE;
use crate::record::GroupRecorder;

/// The command line and environment a [`crate::ProcessGroup`] execs: what a
/// [`Sandbox`] sees and may rewrite before the spawn.
///
/// The child's environment is knife's own, minus [`Launch::env_remove`] (or empty
/// when [`Launch::env_clear`]), plus [`Launch::env`] (which wins over a removal).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Launch {
    /// The program (looked up on `PATH` when it has no slash).
    pub program: OsString,
    /// Its arguments.
    pub args: Vec<OsString>,
    /// Working directory.
    pub cwd: PathBuf,
    /// Variables set on top of the inherited environment.
    pub env: Vec<(OsString, OsString)>,
    /// Variables of knife's environment removed by exact name.
    pub env_remove: Vec<OsString>,
    /// Start from an empty environment instead of knife's (then [`Launch::env`]).
    pub env_clear: bool,
    /// Landlock rules (and no-new-privs) the child applies to itself between fork
    /// and exec: set by the Landlock sandbox (SEC-01 fallback).
    pub landlock: Option<crate::sandbox::LandlockRules>,
}

impl Launch {
    /// `program` in `cwd`, no arguments, knife's environment unchanged.
    pub fn new(program: impl Into<OsString>, cwd: impl Into<PathBuf>) -> Self {
        Self {
            program: program.into(),
            args: Vec::new(),
            cwd: cwd.into(),
            env: Vec::new(),
            env_remove: Vec::new(),
            env_clear: false,
            landlock: None,
        }
    }

    /// The command line as one string for messages: `program arg1 arg2`.
    pub fn display(&self) -> String {
        std::iter::once(&self.program)
            .chain(&self.args)
            .map(|a| a.to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// Why a [`Sandbox`] refused a launch: its own error, as a source.
pub type SandboxError = Box<dyn std::error::Error + Send + Sync>;

/// Confines what a process group may do, applied by [`crate::ProcessGroup::spawn`]
/// to every spec that carries it, so callers do not change when a sandbox is
/// configured. An implementation rewrites the [`Launch`]: e.g. the argv prefix
/// `bwrap --ro-bind / / --bind <root> <root> … --` (`program = "bwrap"`, the old
/// program and arguments after `--`) and the environment policy (`env_clear`,
/// `env`, `env_remove`). It must not block (it runs on the async task).
pub trait Sandbox: Send + Sync + std::fmt::Debug + 'static {
    /// Rewrites `launch` in place. Errors: why the command cannot run sandboxed;
    /// the spawn then fails with [`SpawnError::Sandbox`] and nothing runs.
    fn apply(&self, launch: &mut Launch) -> Result<(), SandboxError>;
}

/// What to start and how: the [`Launch`], stdio, the label and thread it is
/// recorded with, the [`GroupRecorder`], the [`Sandbox`] and the drop grace.
/// Stdio defaults to `/dev/null` for all three.
#[derive(Debug)]
pub struct SpawnSpec {
    /// The command line and environment (before the sandbox).
    pub launch: Launch,
    /// The child's stdin.
    pub stdin: Stdio,
    /// The child's stdout.
    pub stdout: Stdio,
    /// The child's stderr.
    pub stderr: Stdio,
    /// Name used in logs and in the group's record (e.g. `codex: app-server`).
    pub label: String,
    /// The thread the group works for (recorded with it), if any.
    pub thread: Option<ThreadId>,
    /// Told about the group right after the spawn and once it is gone.
    pub recorder: Option<Arc<dyn GroupRecorder>>,
    /// Applied to [`SpawnSpec::launch`] right before the spawn.
    pub sandbox: Option<Arc<dyn Sandbox>>,
    /// SIGTERM → SIGKILL when the group is dropped before it was terminated;
    /// default [`DEFAULT_GRACE`] (1 s).
    pub drop_grace: Duration,
}

impl SpawnSpec {
    /// `launch` labelled `label`, stdio `/dev/null`, no thread, recorder or sandbox.
    pub fn new(launch: Launch, label: impl Into<String>) -> Self {
        Self {
            launch,
            stdin: Stdio::null(),
            stdout: Stdio::null(),
            stderr: Stdio::null(),
            label: label.into(),
            thread: None,
            recorder: None,
            sandbox: None,
            drop_grace: DEFAULT_GRACE,
        }
    }

    /// Pipes all three stdio streams (take them with `ProcessGroup::take_stdin` & co.).
    pub fn piped(mut self) -> Self {
        self.stdin = Stdio::piped();
        self.stdout = Stdio::piped();
        self.stderr = Stdio::piped();
        self
    }
}

/// Errors of [`crate::ProcessGroup::spawn`].
#[derive(Debug, thiserror::Error)]
pub enum SpawnError {
    /// The sandbox refused the launch; nothing was started.
    #[error("could not sandbox {label} (`{command}`): {source}; check the sandbox settings")]
    Sandbox {
        /// The spec's label.
        label: String,
        /// The command line before the sandbox.
        command: String,
        /// The sandbox's reason.
        #[source]
        source: SandboxError,
    },
    /// The operating system could not start the program (not found, not
    /// executable, no such working directory, …).
    #[error("could not start {label}: `{program}` in {cwd}: {source}")]
    Spawn {
        /// The spec's label.
        label: String,
        /// The program that was executed (after the sandbox).
        program: String,
        /// The working directory.
        cwd: String,
        /// The operating system's error.
        #[source]
        source: io::Error,
    },
}

impl SpawnError {
    /// The operating system's error kind, for a [`SpawnError::Spawn`].
    pub fn io_kind(&self) -> Option<io::ErrorKind> {
        match self {
            SpawnError::Spawn { source, .. } => Some(source.kind()),
            SpawnError::Sandbox { .. } => None,
        }
    }
}
