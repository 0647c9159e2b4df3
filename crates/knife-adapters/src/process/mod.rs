//! Supervised child processes that speak newline-delimited JSON over stdio.
//!
//! [`ChildProcess::spawn`] starts a program as a `knife_process::ProcessGroup` (a new
//! session, so a new process group whose id is the child's pid, and no controlling
//! terminal), recorded in the store ([`ProcessGroups`]) so the next boot kills it if
//! knife dies first, and starts four tasks:
//!
//! - **stdout reader**: splits stdout into lines of at most [`ProcessSpec::max_line_bytes`]
//!   (default [`MAX_LINE_BYTES`], 16 MiB) and hands each non-blank UTF-8 line to the
//!   [`ProcessLines`] receiver. A longer line is dropped whole, a line that is not UTF-8
//!   is dropped; both are logged and counted in [`LineStats`] (and the
//!   `knife_adapter_bad_lines_total{reason}` counter) and never stop the reader. Lines
//!   not yet taken are bounded by [`ProcessSpec::max_queued_bytes`] (32 MiB): beyond it
//!   the reader waits and the child blocks on its stdout (back-pressure).
//! - **stdin writer**: [`ChildProcess::send_line`] queues a line (never blocks); the
//!   writer appends `\n` and writes in order. Closing stdin (EOF) drops the queue.
//! - **stderr logger**: every stderr line goes to the log (target
//!   `knife_adapters::child_stderr`, level info; ANSI colour codes removed); the last
//!   [`STDERR_TAIL_LINES`] lines that are not backtrace frames, plus the first line
//!   starting with `Error` / `error:`, are kept for the exit description
//!   ([`ExitInfo::describe`]).
//! - **supervisor**: owns the child. It waits for the child to exit on its own, or for
//!   [`ChildProcess::close`] (or the last handle being dropped), then runs the close
//!   sequence: stdin EOF → [`ProcessSpec::eof_grace`] (3 s) for the leader to exit, then
//!   `ProcessGroup::terminate` with [`ProcessSpec::term_grace`]: SIGTERM to the group →
//!   grace → SIGKILL. Whatever ended the leader, members of the group still alive get
//!   the same, the leader is reaped, the group is forgotten in the store, and the
//!   [`ExitInfo`] is published ([`ChildProcess::wait_exit`]). If the supervisor itself is
//!   dropped (runtime shutdown) the group gets SIGTERM and then SIGKILL.
//!
//! Usage by a driver:
//!
//! ```ignore
//! let (child, lines) = ChildProcess::spawn(spec, Some(groups)).await?;
//! child.register_on(&options.scope);          // closing the session scope closes the child
//! let rpc = RpcConnection::start(child.clone(), lines, RpcOptions::default()); // see crate::jsonrpc
//! // … an unexpected exit: `child.wait_exit().await.describe()` → "exited with status 3 …"
//! ```

use std::ffi::OsString;
use std::io;
use std::path::PathBuf;
use std::process::ExitStatus;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use knife_process::{GroupRecorder, Launch, ProcessGroup, SpawnSpec};
use knife_protocol::ThreadId;
use knife_runtime::process_groups::ProcessGroups;
use knife_runtime::scope::SessionScope;
use nix::sys::signal::Signal;
use tokio::io::{AsyncWriteExt, BufReader};
use tokio::sync::{mpsc, oneshot, watch};

pub(crate) mod lines;
mod tail;
pub use lines::strip_ansi;
use lines::{CappedLines, decode_line};
use tail::StderrTail;

/// Longest stdout line accepted (bytes, without the newline): 16 MiB.
pub const MAX_LINE_BYTES: usize = 16 * 1024 * 1024;
/// Longest stderr line logged (bytes); longer lines are cut.
pub const MAX_STDERR_LINE_BYTES: usize = 64 * 1024;
/// How many of the last stderr lines an [`ExitInfo`] keeps (backtrace frames are not
/// counted; the first error line is kept on top).
pub const STDERR_TAIL_LINES: usize = 8;
/// Default time between stdin EOF and SIGTERM in the close sequence.
pub const EOF_GRACE: Duration = Duration::from_secs(3);
/// Default time between SIGTERM and SIGKILL in the close sequence.
pub const TERM_GRACE: Duration = Duration::from_secs(3);
/// Lines buffered between the stdout reader and its consumer.
const LINE_QUEUE: usize = 1024;
/// Default bound of the bytes of lines read but not yet taken ([`ProcessSpec::max_queued_bytes`]).
pub const MAX_QUEUED_BYTES: usize = 32 * 1024 * 1024;

/// What to start and how to supervise it. `Debug` shows the names of `env`, not the
/// values (they may be API keys).
#[derive(Clone)]
pub struct ProcessSpec {
    /// The program (looked up on `PATH` when it has no slash).
    pub program: OsString,
    /// Its arguments (the instance's `args` in knife.toml).
    pub args: Vec<OsString>,
    /// Variables set on top of knife's environment.
    pub env: Vec<(OsString, OsString)>,
    /// Variables of knife's environment starting with one of these prefixes are removed
    /// (default `["KNIFE_"]`: knife's own settings and secrets stay out of the child).
    pub env_remove_prefixes: Vec<String>,
    /// Variables of knife's environment removed by exact name (default none): knife's
    /// secrets, e.g. the `api_key_env` variables of every provider instance and the API
    /// token's variable. A variable also named in [`ProcessSpec::env`] is set to that value.
    pub env_remove: Vec<String>,
    /// Working directory.
    pub cwd: PathBuf,
    /// Name used in logs and in the store's process-group record (e.g. `codex: app-server`).
    pub label: String,
    /// The thread the process first works for (recorded with the group), if any.
    pub thread: Option<ThreadId>,
    /// Longest stdout line (bytes); default [`MAX_LINE_BYTES`].
    pub max_line_bytes: usize,
    /// Bytes of stdout lines read but not yet taken with [`ProcessLines::next`] (at least
    /// one line is always let through); default [`MAX_QUEUED_BYTES`]. Beyond it knife
    /// stops reading, so a flooding child blocks on its own stdout instead of knife
    /// buffering up to 1024 lines of 16 MiB.
    pub max_queued_bytes: usize,
    /// Stdin EOF → SIGTERM; default [`EOF_GRACE`].
    pub eof_grace: Duration,
    /// SIGTERM → SIGKILL; default [`TERM_GRACE`].
    pub term_grace: Duration,
}

impl ProcessSpec {
    /// A spec with the defaults: no extra env, `KNIFE_*` removed, 16 MiB lines,
    /// 3 s / 3 s grace periods.
    pub fn new(
        program: impl Into<OsString>,
        cwd: impl Into<PathBuf>,
        label: impl Into<String>,
    ) -> Self {
        Self {
            program: program.into(),
            args: Vec::new(),
            env: Vec::new(),
            env_remove_prefixes: vec!["KNIFE_".to_owned()],
            env_remove: Vec::new(),
            cwd: cwd.into(),
            label: label.into(),
            thread: None,
            max_line_bytes: MAX_LINE_BYTES,
            max_queued_bytes: MAX_QUEUED_BYTES,
            eof_grace: EOF_GRACE,
            term_grace: TERM_GRACE,
        }
    }
}

impl std::fmt::Debug for ProcessSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let env: Vec<_> = self.env.iter().map(|(k, _)| k).collect();
        f.debug_struct("ProcessSpec")
            .field("program", &self.program)
            .field("args", &self.args)
            .field("env_names", &env)
            .field("env_remove_prefixes", &self.env_remove_prefixes)
            .field("env_remove", &self.env_remove)
            .field("cwd", &self.cwd)
            .field("label", &self.label)
            .field("thread", &self.thread)
            .field("max_line_bytes", &self.max_line_bytes)
            .field("max_queued_bytes", &self.max_queued_bytes)
            .field("eof_grace", &self.eof_grace)
            .field("term_grace", &self.term_grace)
            .finish()
    }
}

/// Errors of [`ChildProcess`].
#[derive(Debug, thiserror::Error)]
pub enum ProcessError {
    /// The program was not found (not on `PATH`, or no file at that path).
    #[error(
        "could not start {label}: the program `{program}` was not found{where_}; install it or set the provider instance's `command` in knife.toml to its full path{hint}"
    )]
    NotFound {
        /// The spec's [`ProcessSpec::label`] (e.g. `codex: app-server`).
        label: String,
        /// The program as configured.
        program: String,
        /// ` on PATH` for a bare name, empty for a path.
        where_: &'static str,
        /// Extra advice (a command with spaces: arguments go in `args`), or empty.
        hint: &'static str,
    },
    /// The program could not be started for another reason.
    #[error(
        "could not start {program} in {cwd}: {source}; check the instance's `command` and that the directory exists"
    )]
    Spawn {
        /// The program as configured.
        program: String,
        /// The working directory it was started in.
        cwd: String,
        /// The OS error of the spawn.
        #[source]
        source: io::Error,
    },
    /// The sandbox refused to start the program; nothing runs.
    #[error(transparent)]
    Sandbox(knife_process::SpawnError),
    /// stdin is closed (the process is closing or gone).
    #[error("the process {0} no longer accepts input (it is closing or has exited)")]
    StdinClosed(String),
}

/// How a child process ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExitInfo {
    /// The leader's exit status; `None` when it could not be reaped.
    pub status: Option<ExitStatus>,
    /// True when knife asked it to stop ([`ChildProcess::close`] or the last handle dropped).
    pub closed_by_knife: bool,
    /// The first stderr line starting with `Error` / `error:` when later lines pushed
    /// it out, then the last [`STDERR_TAIL_LINES`] lines that are not backtrace lines.
    pub stderr_tail: Vec<String>,
}

impl ExitInfo {
    /// `exit status 3`, `killed by signal 9 (SIGKILL)` or `unknown exit status`.
    pub fn status_text(&self) -> String {
        use std::os::unix::process::ExitStatusExt;
        match self.status {
            Some(s) => match (s.code(), s.signal()) {
                (Some(code), _) => format!("exit status {code}"),
                (None, Some(sig)) => match Signal::try_from(sig) {
                    Ok(signal) => format!("killed by signal {sig} ({})", signal.as_str()),
                    Err(_) => format!("killed by signal {sig}"),
                },
                (None, None) => "unknown exit status".to_owned(),
            },
            None => "unknown exit status".to_owned(),
        }
    }

    /// A sentence for `lastError`: `<label> exited unexpectedly (exit status 3); last
    /// stderr: …`.
    pub fn describe(&self, label: &str) -> String {
        let how = if self.closed_by_knife {
            "was stopped"
        } else {
            "exited unexpectedly"
        };
        let mut text = format!("{label} {how} ({})", self.status_text());
        if !self.stderr_tail.is_empty() {
            text.push_str("; last stderr: ");
            text.push_str(&self.stderr_tail.join(" | "));
        }
        text
    }
}

/// Counters of stdout lines that were dropped. Shared by the stdout reader and the
/// JSON-RPC layer (which counts lines that are not valid JSON-RPC).
#[derive(Debug, Default)]
pub struct LineStats {
    oversized: AtomicU64,
    malformed: AtomicU64,
}

impl LineStats {
    /// Lines longer than the cap.
    pub fn oversized(&self) -> u64 {
        self.oversized.load(Ordering::Relaxed)
    }

    /// Lines that were not UTF-8, not JSON, or not a JSON-RPC message we understand
    /// (including answers to unknown request ids).
    pub fn malformed(&self) -> u64 {
        self.malformed.load(Ordering::Relaxed)
    }

    /// Counts and logs one malformed line of process `label`; `line` is shortened
    /// to 200 characters in the log.
    pub fn record_malformed(&self, label: &str, reason: &str, line: &str) {
        self.malformed.fetch_add(1, Ordering::Relaxed);
        ::metrics::counter!("knife_adapter_bad_lines_total", "reason" => "malformed").increment(1);
        let preview: String = line.chars().take(200).collect();
        tracing::warn!(child = %label, reason, line = %preview, "ignored a malformed line from an agent process");
    }

    fn record_oversized(&self, label: &str, cap: usize) {
        self.oversized.fetch_add(1, Ordering::Relaxed);
        ::metrics::counter!("knife_adapter_bad_lines_total", "reason" => "oversized").increment(1);
        tracing::warn!(child = %label, cap_bytes = cap, "ignored a line longer than the cap from an agent process");
    }
}

/// The child's stdout, one line at a time (see the module docs).
#[derive(Debug)]
pub struct ProcessLines {
    /// Each line with its share of the byte budget, given back when it is taken.
    rx: mpsc::Receiver<(String, tokio::sync::OwnedSemaphorePermit)>,
}

impl ProcessLines {
    /// The next line (without `\n` / `\r\n`); `None` once stdout is closed.
    pub async fn next(&mut self) -> Option<String> {
        self.rx.recv().await.map(|(line, _budget)| line)
    }
}

/// A handle to a supervised child process; cheap to clone. When the last handle is
/// dropped, the process is closed as by [`ChildProcess::close`] (in the background).
#[derive(Clone, Debug)]
pub struct ChildProcess {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    pgid: u32,
    label: String,
    stdin: Mutex<Option<mpsc::UnboundedSender<Vec<u8>>>>,
    /// Dropping or firing it starts the close sequence.
    close: Mutex<Option<oneshot::Sender<()>>>,
    exit: watch::Receiver<Option<ExitInfo>>,
    stats: Arc<LineStats>,
}

impl ChildProcess {
    /// Starts `spec` as described in the module docs and records its process group in
    /// `groups` (awaited, so a crash right after still finds the row).
    ///
    /// Errors: [`ProcessError::NotFound`] / [`ProcessError::Spawn`] when the program
    /// cannot be started, [`ProcessError::Sandbox`] when a sandbox refuses it.
    pub async fn spawn(
        spec: ProcessSpec,
        groups: Option<ProcessGroups>,
    ) -> Result<(ChildProcess, ProcessLines), ProcessError> {
        let spawn_err = |source: io::Error| {
            let program = spec.program.to_string_lossy().into_owned();
            if source.kind() == io::ErrorKind::NotFound && spec.cwd.is_dir() {
                ProcessError::NotFound {
                    label: spec.label.clone(),
                    where_: if program.contains('/') {
                        ""
                    } else {
                        " on PATH"
                    },
                    hint: if program.trim().contains(char::is_whitespace) {
                        " (`command` is one program; put its arguments in `args`)"
                    } else {
                        ""
                    },
                    program,
                }
            } else {
                ProcessError::Spawn {
                    program,
                    cwd: spec.cwd.display().to_string(),
                    source,
                }
            }
        };
        let mut launch = Launch::new(&spec.program, &spec.cwd);
        launch.args = spec.args.clone();
        launch.env_remove = std::env::vars_os()
            .map(|(name, _)| name)
            .filter(|name| {
                let text = name.to_string_lossy();
                spec.env_remove_prefixes
                    .iter()
                    .any(|p| text.starts_with(p.as_str()))
                    || spec.env_remove.iter().any(|n| *n == text)
            })
            .collect();
        launch.env = spec.env.clone();
        let mut process = SpawnSpec::new(launch, spec.label.clone()).piped();
        process.thread = spec.thread.clone();
        process.recorder = groups.map(|g| Arc::new(g) as Arc<dyn GroupRecorder>);
        process.drop_grace = spec.term_grace;
        let mut group = ProcessGroup::spawn(process).await.map_err(|e| match e {
            knife_process::SpawnError::Spawn { source, .. } => spawn_err(source),
            other => ProcessError::Sandbox(other),
        })?;
        let pgid = group.pgid();
        let stdin = group.take_stdin();
        let stdout = group.take_stdout();
        let stderr = group.take_stderr();
        let label = spec.label.clone();
        tracing::info!(child = %label, pgid, "started an agent process");

        let stats = Arc::new(LineStats::default());
        let tail = Arc::new(Mutex::new(StderrTail::default()));

        let (line_tx, line_rx) = mpsc::channel(LINE_QUEUE);
        if let Some(stdout) = stdout {
            let stats = Arc::clone(&stats);
            let label = label.clone();
            let cap = spec.max_line_bytes;
            let budget_bytes = u32::try_from(spec.max_queued_bytes.max(1)).unwrap_or(u32::MAX);
            let budget = Arc::new(tokio::sync::Semaphore::new(budget_bytes as usize));
            tokio::spawn(async move {
                let mut lines = CappedLines::new(BufReader::with_capacity(64 * 1024, stdout), cap);
                let mut receiver_gone = false;
                while let Some(line) = lines.next().await {
                    let Some(bytes) = line else {
                        stats.record_oversized(&label, cap);
                        continue;
                    };
                    let Some(text) = decode_line(bytes, &label, &stats) else {
                        continue;
                    };
                    // Keep draining stdout when nobody listens, so the child never blocks;
                    // a full queue makes the reader wait (back-pressure on the child).
                    // …and so does an exhausted byte budget (a line larger than the whole
                    // budget takes all of it).
                    if receiver_gone {
                        continue;
                    }
                    let want = u32::try_from(text.len())
                        .unwrap_or(u32::MAX)
                        .clamp(1, budget_bytes);
                    let Ok(permit) = Arc::clone(&budget).acquire_many_owned(want).await else {
                        receiver_gone = true;
                        continue;
                    };
                    if line_tx.send((text, permit)).await.is_err() {
                        receiver_gone = true;
                    }
                }
            });
        }

        let (stdin_tx, mut stdin_rx) = mpsc::unbounded_channel::<Vec<u8>>();
        if let Some(mut stdin) = stdin {
            let label = label.clone();
            tokio::spawn(async move {
                while let Some(line) = stdin_rx.recv().await {
                    let written = async {
                        stdin.write_all(&line).await?;
                        stdin.flush().await
                    };
                    if let Err(e) = written.await {
                        tracing::debug!(child = %label, error = %e, "writing to the agent process's stdin failed");
                        break;
                    }
                }
                // `stdin` drops here: the child sees EOF.
            });
        }

        if let Some(stderr) = stderr {
            let label = label.clone();
            let tail = Arc::clone(&tail);
            tokio::spawn(async move {
                let mut lines = CappedLines::new(BufReader::new(stderr), MAX_STDERR_LINE_BYTES);
                while let Some(line) = lines.next().await {
                    let Some(bytes) = line else {
                        tracing::info!(target: "knife_adapters::child_stderr", child = %label, "(a stderr line longer than 64 KiB was dropped)");
                        continue;
                    };
                    let text = strip_ansi(&String::from_utf8_lossy(&bytes));
                    let text = text.trim_end();
                    if text.is_empty() {
                        continue;
                    }
                    tracing::info!(target: "knife_adapters::child_stderr", child = %label, "{text}");
                    if let Ok(mut tail) = tail.lock() {
                        tail.push(text);
                    }
                }
            });
        }

        let (close_tx, close_rx) = oneshot::channel();
        let (exit_tx, exit_rx) = watch::channel(None);
        let shared = Arc::new(Shared {
            pgid,
            label: label.clone(),
            stdin: Mutex::new(Some(stdin_tx)),
            close: Mutex::new(Some(close_tx)),
            exit: exit_rx,
            stats,
        });
        let supervisor = Supervisor {
            group,
            label,
            tail,
            eof_grace: spec.eof_grace,
            term_grace: spec.term_grace,
            stdin: Arc::downgrade(&shared),
        };
        tokio::spawn(supervisor.run(close_rx, exit_tx));
        Ok((ChildProcess { shared }, ProcessLines { rx: line_rx }))
    }

    /// The process group id (= the child's pid).
    pub fn pgid(&self) -> u32 {
        self.shared.pgid
    }

    /// The label given at spawn.
    pub fn label(&self) -> &str {
        &self.shared.label
    }

    /// Counters of dropped stdout lines.
    pub fn stats(&self) -> Arc<LineStats> {
        Arc::clone(&self.shared.stats)
    }

    /// Queues `line` (a newline is appended) for the child's stdin; never blocks.
    ///
    /// Errors: [`ProcessError::StdinClosed`] once stdin was closed.
    pub fn send_line(&self, line: &str) -> Result<(), ProcessError> {
        let mut bytes = Vec::with_capacity(line.len() + 1);
        bytes.extend_from_slice(line.as_bytes());
        bytes.push(b'\n');
        let guard = self
            .shared
            .stdin
            .lock()
            .map_err(|_| ProcessError::StdinClosed(self.shared.label.clone()))?;
        match guard.as_ref() {
            Some(tx) if tx.send(bytes).is_ok() => Ok(()),
            _ => Err(ProcessError::StdinClosed(self.shared.label.clone())),
        }
    }

    /// Closes stdin once the queued lines are written (the child sees EOF).
    pub fn close_stdin(&self) {
        close_stdin(&self.shared);
    }

    /// Runs the close sequence (module docs) and waits for it; returns how the process
    /// ended. Idempotent; concurrent callers all wait for the same end. The sequence
    /// runs in the supervisor task, so dropping this future does not cut it short.
    pub async fn close(&self) -> ExitInfo {
        if let Ok(mut close) = self.shared.close.lock()
            && let Some(tx) = close.take()
        {
            let _ = tx.send(());
        }
        self.wait_exit().await
    }

    /// Waits until the process has ended and was reaped (by itself or by a close).
    pub async fn wait_exit(&self) -> ExitInfo {
        let mut rx = self.shared.exit.clone();
        match rx.wait_for(Option::is_some).await {
            Ok(info) => info.clone().unwrap_or_else(lost_exit),
            Err(_) => lost_exit(),
        }
    }

    /// How the process ended, once it has.
    pub fn exit_info(&self) -> Option<ExitInfo> {
        self.shared.exit.borrow().clone()
    }

    /// Registers [`ChildProcess::close`] as a finalizer of `scope`, so closing (or
    /// cancelling) the provider session stops the process.
    pub fn register_on(&self, scope: &SessionScope) {
        let child = self.clone();
        scope.add_finalizer(async move {
            child.close().await;
        });
    }
}

fn lost_exit() -> ExitInfo {
    ExitInfo {
        status: None,
        closed_by_knife: false,
        stderr_tail: Vec::new(),
    }
}

fn close_stdin(shared: &Shared) {
    if let Ok(mut stdin) = shared.stdin.lock() {
        stdin.take();
    }
}

/// Owns the child's process group; see the module docs.
struct Supervisor {
    group: ProcessGroup,
    label: String,
    tail: Arc<Mutex<StderrTail>>,
    eof_grace: Duration,
    term_grace: Duration,
    stdin: std::sync::Weak<Shared>,
}

impl Supervisor {
    async fn run(
        mut self,
        mut close_rx: oneshot::Receiver<()>,
        exit_tx: watch::Sender<Option<ExitInfo>>,
    ) {
        let exited = {
            let wait = self.group.wait_leader();
            tokio::pin!(wait);
            tokio::select! {
                status = &mut wait => Some(status.ok()),
                _ = &mut close_rx => None,
            }
        };
        let (status, closed_by_knife) = match exited {
            Some(status) => (status, false),
            None => (self.wait_after_eof().await, true),
        };
        if let Some(shared) = self.stdin.upgrade() {
            close_stdin(&shared);
        }
        if closed_by_knife && status.is_none() {
            tracing::debug!(child = %self.label, "agent process ignored stdin EOF; sending SIGTERM");
        }
        // The leader if it is still running, and members it left behind (a crashed
        // agent's tool commands): SIGTERM → term_grace → SIGKILL, reaped. The record
        // goes only with the group: members that survived SIGKILL (stuck in the
        // kernel) stay recorded, so the next boot tries again.
        let Supervisor {
            group,
            label,
            tail,
            term_grace,
            ..
        } = self;
        let end = group.terminate(term_grace).await;
        if end.killed {
            tracing::warn!(child = %label, "agent process group ignored SIGTERM; sent SIGKILL");
        }
        let stderr_tail = tail.lock().map(|t| t.lines()).unwrap_or_default();
        let info = ExitInfo {
            status: status.or(end.leader),
            closed_by_knife,
            stderr_tail,
        };
        if closed_by_knife {
            tracing::info!(child = %label, status = %info.status_text(), "stopped an agent process");
        } else {
            tracing::warn!(child = %label, status = %info.status_text(), "an agent process exited");
        }
        let _ = exit_tx.send(Some(info));
    }

    /// Closes stdin and gives the leader `eof_grace` to exit; its status if it did.
    async fn wait_after_eof(&mut self) -> Option<ExitStatus> {
        if let Some(shared) = self.stdin.upgrade() {
            close_stdin(&shared);
        }
        match tokio::time::timeout(self.eof_grace, self.group.wait_leader()).await {
            Ok(status) => status.ok(),
            Err(_) => None,
        }
    }
}
