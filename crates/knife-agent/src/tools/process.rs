//! Shell commands in a process group of their own, and the [`GroupGuard`] that
//! makes sure the whole group dies with the call.
//!
//! A command runs as `bash -c <command>` (`sh -c` when bash is missing) through
//! `process-wrap`'s `ProcessSession`: a new session, so a new process group
//! whose id (pgid) is the shell's pid, and no controlling terminal (a program
//! that opens `/dev/tty` to prompt fails instead of stopping the group). stdin is
//! `/dev/null`; stdout and stderr share one pipe, so their order is kept.
//!
//! Ending a group ([`GroupGuard::finish`], or dropping the guard): SIGTERM (plus
//! SIGCONT so stopped members can act on it) to the group, up to [`KILL_GRACE`]
//! for it to empty, then SIGKILL, then the leader is reaped and the
//! [`ProcessObserver`] told. A member counts as gone once it is a zombie: orphans
//! are reparented away from knife, and not every init reaps them promptly.

use std::io;
use std::os::fd::OwnedFd;
use std::process::{ExitStatus, Stdio};
use std::sync::Arc;
use std::time::Duration;

use nix::sys::signal::Signal;
use process_wrap::tokio::{ChildWrapper, CommandWrap, ProcessSession};
use tokio::net::unix::pipe::Receiver;
use tokio::time::Instant;

use knife_runtime::process_groups::signal_group;

pub(crate) use knife_runtime::process_groups::group_alive;

use super::{ProcessGroupRecord, ProcessObserver, ToolContext, ToolError};

/// How long a group gets between SIGTERM and SIGKILL.
pub const KILL_GRACE: Duration = Duration::from_secs(1);
/// How often a dying group is checked.
const POLL: Duration = Duration::from_millis(10);
/// How long SIGKILLed members get to disappear before knife stops waiting.
const KILL_WAIT: Duration = Duration::from_secs(2);

/// A started command: its group and the read end of its output pipe.
pub(crate) struct Spawned {
    pub guard: GroupGuard,
    pub output: Receiver,
}

/// Starts `command` in the project root as described in the module docs, with
/// the policy's secret variables removed from its environment.
///
/// Errors: [`ToolError::Spawn`] when neither `bash` nor `sh` can be started.
pub(crate) fn spawn_shell(command: &str, ctx: &ToolContext) -> Result<Spawned, ToolError> {
    let spawn_err = |shell: &str, e: io::Error| {
        ToolError::Spawn(format!(
            "{shell} -c failed to start in {}: {e}",
            ctx.root().display()
        ))
    };
    let (child, reader) = match spawn_with("bash", command, ctx) {
        Ok(spawned) => spawned,
        Err(e) if e.kind() == io::ErrorKind::NotFound && ctx.root().is_dir() => {
            spawn_with("sh", command, ctx).map_err(|e| spawn_err("sh", e))?
        }
        Err(e) => return Err(spawn_err("bash", e)),
    };
    let guard = GroupGuard::new(
        child,
        ctx.policy().process_observer.clone(),
        ctx.thread().cloned(),
        label_of(command),
    );
    let output = Receiver::from_owned_fd(reader).map_err(|e| spawn_err("bash", e))?;
    Ok(Spawned { guard, output })
}

/// The label a group is recorded with: `bash: <command>`, first line, at most
/// 80 characters.
fn label_of(command: &str) -> String {
    let line = command.trim().lines().next().unwrap_or_default();
    let short: String = line.chars().take(80).collect();
    let cut = if short.len() < line.len() || command.trim().lines().nth(1).is_some() {
        "…"
    } else {
        ""
    };
    format!("bash: {short}{cut}")
}

fn spawn_with(
    shell: &str,
    command: &str,
    ctx: &ToolContext,
) -> io::Result<(Box<dyn ChildWrapper>, OwnedFd)> {
    let (reader, writer) = io::pipe()?;
    let writer_err = writer.try_clone()?;
    let policy = ctx.policy();
    let mut wrap = CommandWrap::with_new(shell, |cmd| {
        cmd.arg("-c")
            .arg(command)
            .current_dir(ctx.root())
            .stdin(Stdio::null())
            .stdout(writer)
            .stderr(writer_err);
        for (name, _) in std::env::vars_os() {
            if policy.is_secret_env(&name) {
                cmd.env_remove(name);
            }
        }
        // Nobody can answer a prompt: make git fail instead of waiting for one.
        cmd.env("GIT_TERMINAL_PROMPT", "0");
    });
    wrap.wrap(ProcessSession);
    let child = wrap.spawn()?;
    // The command holds the parent's copies of the pipe's write end: close them,
    // so the reader sees EOF once the command's processes are done.
    drop(wrap);
    Ok((child, OwnedFd::from(reader)))
}

/// Owns a command's process group until it is gone; see the module docs.
///
/// Dropping it before [`Self::finish`] completed (the tool call's future was
/// dropped: the turn was interrupted, also while a timeout was being handled)
/// sends SIGTERM at once and finishes the group from a spawned task; if that
/// task is dropped too (the runtime shuts down), the group gets SIGKILL.
pub(crate) struct GroupGuard {
    child: Option<Box<dyn ChildWrapper>>,
    pgid: u32,
    record: ProcessGroupRecord,
    observer: Option<Arc<dyn ProcessObserver>>,
    /// Owned by the task a dropped guard spawned: do not spawn again.
    detached: bool,
}

impl GroupGuard {
    fn new(
        child: Box<dyn ChildWrapper>,
        observer: Option<Arc<dyn ProcessObserver>>,
        thread_id: Option<knife_protocol::ThreadId>,
        label: String,
    ) -> Self {
        let pgid = child.id().unwrap_or(0);
        let record = ProcessGroupRecord {
            thread_id,
            label,
            ..ProcessGroupRecord::capture(pgid)
        };
        if let Some(observer) = &observer {
            observer.spawned(&record);
        }
        Self {
            child: Some(child),
            pgid,
            record,
            observer,
            detached: false,
        }
    }

    /// The group's id (the shell's pid).
    pub(crate) fn pgid(&self) -> u32 {
        self.pgid
    }

    /// Waits for the shell (the group leader) to exit and reaps it. Cancel-safe.
    ///
    /// Only the leader is waited for: `ProcessGroupChild::wait` would also block
    /// until every group member that is knife's child exits, which background
    /// processes are when knife reaps orphans (as PID 1 of a container).
    pub(crate) async fn wait_leader(&mut self) -> io::Result<ExitStatus> {
        match self.child.as_mut() {
            Some(child) => child.inner_mut().wait().await,
            None => Err(io::Error::other("the command was already ended")),
        }
    }

    /// Ends what is left of the group — SIGTERM, [`KILL_GRACE`], SIGKILL —,
    /// reaps the leader and tells the observer. Returns whether any member was
    /// still running. Dropping this future mid-way leaves the guard's `Drop` to
    /// finish the job.
    pub(crate) async fn finish(mut self) -> bool {
        let pgid = self.pgid;
        let Some(child) = self.child.as_mut() else {
            return false;
        };
        let mut alive = || {
            // Reaps the leader once it has exited, so it does not linger as a zombie.
            let _ = child.inner_mut().try_wait();
            group_alive(pgid)
        };
        let had_members = alive();
        if had_members {
            signal_group(pgid, Signal::SIGTERM);
            signal_group(pgid, Signal::SIGCONT);
            if !wait_until_gone(&mut alive, KILL_GRACE).await {
                tracing::debug!(pgid, "process group outlived SIGTERM; sending SIGKILL");
                signal_group(pgid, Signal::SIGKILL);
                if !wait_until_gone(&mut alive, KILL_WAIT).await {
                    tracing::warn!(pgid, "process group still has members after SIGKILL");
                }
            }
        }
        if let Err(e) = child.inner_mut().wait().await {
            tracing::debug!(pgid, "reaping the command's shell failed: {e}");
        }
        // Reaps, without blocking, members that became knife's children (knife
        // as a reaper of orphans) and have exited.
        let _ = child.try_wait();
        self.child = None;
        if let Some(observer) = self.observer.take() {
            observer.exited(&self.record);
        }
        had_members
    }
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        let Some(child) = self.child.take() else {
            return;
        };
        let observer = self.observer.take();
        // Signal now: a task spawned while the runtime shuts down may never run.
        signal_group(self.pgid, Signal::SIGTERM);
        signal_group(self.pgid, Signal::SIGCONT);
        let handle = tokio::runtime::Handle::try_current().ok();
        match handle.filter(|_| !self.detached) {
            Some(handle) => {
                let guard = GroupGuard {
                    child: Some(child),
                    pgid: self.pgid,
                    record: self.record.clone(),
                    observer,
                    detached: true,
                };
                handle.spawn(guard.finish());
            }
            None => {
                signal_group(self.pgid, Signal::SIGKILL);
                // tokio reaps a dropped child in the background.
                drop(child);
                if let Some(observer) = observer {
                    observer.exited(&self.record);
                }
            }
        }
    }
}

/// Polls `alive` every [`POLL`] until it says no or `limit` passed; true if gone.
async fn wait_until_gone(alive: &mut impl FnMut() -> bool, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if !alive() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(POLL).await;
    }
}
