//! [`ProcessGroup`]: owns one spawned process group until it is gone — the spawn,
//! the record, the time-boxed SIGTERM → SIGKILL, the reaping, the kill on drop.

use std::io;
use std::process::ExitStatus;
use std::sync::Arc;
use std::time::Duration;

use nix::sys::signal::Signal;
use process_wrap::tokio::{ChildWrapper, CommandWrap, ProcessSession};
use tokio::process::{ChildStderr, ChildStdin, ChildStdout};
use tokio::time::Instant;

use crate::record::{GroupRecord, GroupRecorder};
use crate::signals::{group_alive, signal_group};
use crate::spawn::{SpawnError, SpawnSpec};

/// Default time between SIGTERM and SIGKILL when a group is dropped (1 s).
pub const DEFAULT_GRACE: Duration = Duration::from_secs(1);
/// How long SIGKILLed members get to disappear before knife stops waiting (2 s).
pub const KILL_WAIT: Duration = Duration::from_secs(2);
/// How often a dying group is checked.
const POLL: Duration = Duration::from_millis(10);

/// How a group ended ([`ProcessGroup::terminate`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Termination {
    /// The leader's exit status; `None` when it could not be reaped in time.
    pub leader: Option<ExitStatus>,
    /// Whether any member was still running when `terminate` began.
    pub had_members: bool,
    /// Whether SIGKILL was needed (the grace ran out).
    pub killed: bool,
    /// Whether the group is gone now (false: members survived SIGKILL, stuck in the
    /// kernel; the record is kept for the next boot).
    pub gone: bool,
}

/// Owns a process group from its spawn until it is gone; see the crate docs.
///
/// Dropping it before [`ProcessGroup::terminate`] completed (its owner's future was
/// dropped: an interrupted tool call, a supervisor task cancelled) sends SIGTERM at
/// once and terminates the group from a spawned task with the spec's
/// `drop_grace`; if there is no runtime, or that task is dropped too (the runtime
/// shuts down), the group gets SIGKILL.
#[derive(Debug)]
pub struct ProcessGroup {
    child: Option<Box<dyn ChildWrapper>>,
    record: GroupRecord,
    recorder: Option<Arc<dyn GroupRecorder>>,
    drop_grace: Duration,
    /// Owned by the task a dropped group spawned: do not spawn again.
    detached: bool,
}

impl ProcessGroup {
    /// Applies the spec's sandbox to its launch, starts it in a new session (so a
    /// new process group; no controlling terminal), captures the [`GroupRecord`] and
    /// awaits the recorder's `register` (a failure is logged, not returned).
    ///
    /// Errors: [`SpawnError::Sandbox`] when the sandbox refuses the launch,
    /// [`SpawnError::Spawn`] when the program cannot be started.
    pub async fn spawn(spec: SpawnSpec) -> Result<ProcessGroup, SpawnError> {
        let SpawnSpec {
            mut launch,
            stdin,
            stdout,
            stderr,
            label,
            thread,
            recorder,
            sandbox,
            drop_grace,
        } = spec;
        if let Some(sandbox) = &sandbox {
            let command = launch.display();
            sandbox
                .apply(&mut launch)
                .map_err(|source| SpawnError::Sandbox {
                    label: label.clone(),
                    command,
                    source,
                })?;
        }
        // The Landlock ruleset is created here, in knife: the child only restricts itself.
        let confinement = match &launch.landlock {
            Some(rules) => Some(rules.build().map_err(|e| SpawnError::Sandbox {
                label: label.clone(),
                command: launch.display(),
                source: Box::new(e),
            })?),
            None => None,
        };
        let mut wrap = CommandWrap::with_new(&launch.program, |cmd| {
            if let Some(ruleset) = confinement {
                confine_before_exec(cmd, ruleset);
            }
            cmd.args(&launch.args)
                .current_dir(&launch.cwd)
                .stdin(stdin)
                .stdout(stdout)
                .stderr(stderr);
            if launch.env_clear {
                cmd.env_clear();
            }
            for name in &launch.env_remove {
                cmd.env_remove(name);
            }
            for (name, value) in &launch.env {
                cmd.env(name, value);
            }
        });
        wrap.wrap(ProcessSession);
        let spawned = wrap.spawn();
        // The command holds the parent's copies of handed-in pipe ends: close them
        // now, so a reader sees EOF once the group's processes are done.
        drop(wrap);
        let child = spawned.map_err(|source| SpawnError::Spawn {
            label: label.clone(),
            program: launch.program.to_string_lossy().into_owned(),
            cwd: launch.cwd.display().to_string(),
            source,
        })?;
        let pgid = child.id().unwrap_or(0);
        // Armed before the await below, so the group never outlives a dropped spawn.
        let group = ProcessGroup {
            child: Some(child),
            record: GroupRecord::capture(pgid, thread, label),
            recorder,
            drop_grace,
            detached: false,
        };
        if let Some(recorder) = &group.recorder
            && let Err(e) = recorder.register(&group.record).await
        {
            tracing::warn!(label = %group.record.label, pgid, error = %e,
                "could not record the process group; a crash could leave it running");
        }
        Ok(group)
    }

    /// The group's id (the leader's pid).
    pub fn pgid(&self) -> u32 {
        self.record.pgid
    }

    /// What was recorded about the group at its spawn.
    pub fn record(&self) -> &GroupRecord {
        &self.record
    }

    /// The leader's stdin, when it was piped and not taken yet.
    pub fn take_stdin(&mut self) -> Option<ChildStdin> {
        self.child.as_mut().and_then(|c| c.stdin().take())
    }

    /// The leader's stdout, when it was piped and not taken yet.
    pub fn take_stdout(&mut self) -> Option<ChildStdout> {
        self.child.as_mut().and_then(|c| c.stdout().take())
    }

    /// The leader's stderr, when it was piped and not taken yet.
    pub fn take_stderr(&mut self) -> Option<ChildStderr> {
        self.child.as_mut().and_then(|c| c.stderr().take())
    }

    /// Waits for the leader to exit and reaps it (the group may live on). Cancel-safe;
    /// after the leader was reaped it returns the same status again.
    ///
    /// Only the leader is waited for: waiting on the whole group would also block
    /// until every member that is knife's child exits, which background processes are
    /// when knife reaps orphans (as PID 1 of a container).
    pub async fn wait_leader(&mut self) -> io::Result<ExitStatus> {
        match self.child.as_mut() {
            Some(child) => child.inner_mut().wait().await,
            None => Err(io::Error::other("the process group was already terminated")),
        }
    }

    /// Whether the group still has a live (non-zombie) member.
    pub fn is_alive(&self) -> bool {
        group_alive(self.record.pgid)
    }

    /// Ends what is left of the group within a time box: SIGTERM + SIGCONT, up to
    /// `grace` for it to empty, then SIGKILL and up to [`KILL_WAIT`]; reaps the
    /// leader, and unregisters the record once the group is gone. A member counts as
    /// gone once it is a zombie (orphans are reparented away from knife, and not
    /// every init reaps them promptly). Dropping this future mid-way leaves the
    /// guard's `Drop` to finish the job.
    pub async fn terminate(mut self, grace: Duration) -> Termination {
        let pgid = self.record.pgid;
        let Some(child) = self.child.as_mut() else {
            return Termination::default();
        };
        let mut end = Termination::default();
        let mut leader = None;
        end.had_members = alive(child.as_mut(), pgid, &mut leader);
        if end.had_members {
            signal_group(pgid, Signal::SIGTERM);
            signal_group(pgid, Signal::SIGCONT);
            if !wait_until_gone(child.as_mut(), pgid, &mut leader, grace).await {
                tracing::debug!(pgid, label = %self.record.label, "process group outlived SIGTERM; sending SIGKILL");
                end.killed = true;
                signal_group(pgid, Signal::SIGKILL);
                if !wait_until_gone(child.as_mut(), pgid, &mut leader, KILL_WAIT).await {
                    tracing::warn!(pgid, label = %self.record.label, "process group still has members after SIGKILL");
                }
            }
        }
        if leader.is_none() {
            match tokio::time::timeout(KILL_WAIT, child.inner_mut().wait()).await {
                Ok(Ok(status)) => leader = Some(status),
                Ok(Err(e)) => tracing::debug!(pgid, "reaping the group leader failed: {e}"),
                Err(_) => tracing::warn!(pgid, "the group leader could not be reaped in time"),
            }
        }
        // Reaps, without blocking, members that became knife's children (knife as a
        // reaper of orphans) and have exited.
        let _ = child.try_wait();
        self.child = None;
        end.leader = leader;
        end.gone = !group_alive(pgid);
        if end.gone
            && let Some(recorder) = self.recorder.take()
            && let Err(e) = recorder.unregister(&self.record).await
        {
            tracing::warn!(pgid, label = %self.record.label, error = %e, "could not forget the process group's record");
        }
        end
    }
}

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        let Some(child) = self.child.take() else {
            return;
        };
        let pgid = self.record.pgid;
        // Signal now: a task spawned while the runtime shuts down may never run.
        signal_group(pgid, Signal::SIGTERM);
        signal_group(pgid, Signal::SIGCONT);
        let handle = tokio::runtime::Handle::try_current().ok();
        match handle.filter(|_| !self.detached) {
            Some(handle) => {
                let group = ProcessGroup {
                    child: Some(child),
                    record: self.record.clone(),
                    recorder: self.recorder.take(),
                    drop_grace: self.drop_grace,
                    detached: true,
                };
                let grace = self.drop_grace;
                handle.spawn(group.terminate(grace));
            }
            None => {
                // The record stays: the next boot finds the group gone and forgets it.
                signal_group(pgid, Signal::SIGKILL);
                // tokio reaps a dropped child in the background.
                drop(child);
            }
        }
    }
}

/// Reaps the leader once it has exited (so it does not linger as a zombie) and
/// tells whether the group still has a live member.
fn alive(child: &mut dyn ChildWrapper, pgid: u32, leader: &mut Option<ExitStatus>) -> bool {
    if leader.is_none()
        && let Ok(Some(status)) = child.inner_mut().try_wait()
    {
        *leader = Some(status);
    }
    group_alive(pgid)
}

/// Polls every [`POLL`] until the group is gone or `limit` passed; true if gone.
async fn wait_until_gone(
    child: &mut dyn ChildWrapper,
    pgid: u32,
    leader: &mut Option<ExitStatus>,
    limit: Duration,
) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if !alive(child, pgid, leader) {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Makes the child apply `ruleset` (Landlock) and no-new-privs to itself right
/// before it execs (SEC-01, the fallback where bubblewrap cannot run).
///
/// This is the one `unsafe` in knife (ARCHITECTURE.md "Child processes"): the
/// `pre_exec` hook. SAFETY: the closure runs in the forked child, where only
/// async-signal-safe work is allowed. It takes the ruleset (built in the parent,
/// so no allocation happens here) and calls `RulesetCreated::restrict_self`, which
/// makes two syscalls — `prctl(PR_SET_NO_NEW_PRIVS)` and `landlock_restrict_self` on
/// the ruleset's fd, inherited through the fork — and allocates nothing on success;
/// on failure the hook returns a preallocated raw errno (EPERM), the exec does not
/// happen, and the spawn fails instead of running the command unconfined.
#[allow(unsafe_code)]
fn confine_before_exec(cmd: &mut tokio::process::Command, ruleset: landlock::RulesetCreated) {
    let mut ruleset = Some(ruleset);
    // SAFETY: see above; the closure touches only its own captured ruleset.
    unsafe {
        cmd.pre_exec(move || match ruleset.take() {
            Some(ruleset) => match ruleset.restrict_self() {
                Ok(_) => Ok(()),
                Err(_) => Err(io::Error::from_raw_os_error(1)),
            },
            None => Ok(()),
        });
    }
}
