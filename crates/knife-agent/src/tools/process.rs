//! Shell commands of the `bash` tool, each in a process group of its own owned by a
//! `knife_process::ProcessGroup` (the one supervisor; its crate docs say how a group ends).
//!
//! A command runs as `bash -c <command>` (`sh -c` when bash is missing) in the
//! project root: a new session, so a new process group whose id (pgid) is the
//! shell's pid, and no controlling terminal (a program that opens `/dev/tty` to
//! prompt fails instead of stopping the group). stdin is `/dev/null`; stdout and
//! stderr share one pipe, so their order is kept. Ending it: SIGTERM (+SIGCONT),
//! [`KILL_GRACE`], SIGKILL, reap, and the policy's recorder is told.

use std::io;
use std::os::fd::OwnedFd;
use std::time::Duration;

use knife_process::{Launch, ProcessGroup, SpawnError, SpawnSpec};
use tokio::net::unix::pipe::Receiver;

use super::{ToolContext, ToolError};

/// How long a group gets between SIGTERM and SIGKILL.
pub const KILL_GRACE: Duration = knife_process::DEFAULT_GRACE;

/// A started command: its group and the read end of its output pipe.
pub(crate) struct Spawned {
    pub group: ProcessGroup,
    pub output: Receiver,
}

/// Starts `command` in the project root as described in the module docs, with
/// the policy's secret variables removed from its environment, and records its
/// group with the policy's recorder.
///
/// Errors: [`ToolError::Spawn`] when neither `bash` nor `sh` can be started.
pub(crate) async fn spawn_shell(command: &str, ctx: &ToolContext) -> Result<Spawned, ToolError> {
    let spawn_err = |shell: &str, e: &dyn std::fmt::Display| {
        ToolError::Spawn(format!(
            "{shell} -c failed to start in {}: {e}",
            ctx.root().display()
        ))
    };
    // The operating system's words only: the message above already names the rest.
    let os_err = |e: SpawnError| match e {
        SpawnError::Spawn { source, .. } => source.to_string(),
        other => other.to_string(),
    };
    let (group, reader) = match spawn_with("bash", command, ctx).await {
        Ok(spawned) => spawned,
        Err(e) if e.io_kind() == Some(io::ErrorKind::NotFound) && ctx.root().is_dir() => {
            spawn_with("sh", command, ctx)
                .await
                .map_err(|e| spawn_err("sh", &os_err(e)))?
        }
        Err(e) => return Err(spawn_err("bash", &os_err(e))),
    };
    let output = Receiver::from_owned_fd(reader).map_err(|e| spawn_err("bash", &e))?;
    Ok(Spawned { group, output })
}

/// The sandbox of a command in `ctx`'s root (SEC-01), or `None` (none configured,
/// the project opted out, or none works here: both warned, see [`sandbox_note`]).
fn sandbox_of(ctx: &ToolContext) -> Option<std::sync::Arc<dyn knife_process::Sandbox>> {
    use knife_process::sandbox::SandboxChoice;
    let policy = ctx.policy();
    let project = policy.settings_root_for(ctx.root());
    match policy.sandbox.as_ref()?.for_checkout(ctx.root(), project) {
        SandboxChoice::Sandboxed(sandbox) => Some(sandbox),
        SandboxChoice::OffByProject => {
            tracing::warn!(root = %ctx.root().display(),
                "running a command WITHOUT a sandbox: this project sets sandbox = \"off\"");
            None
        }
        SandboxChoice::Unavailable(why) => {
            tracing::warn!(root = %ctx.root().display(), %why,
                "running a command WITHOUT a sandbox: none works on this machine");
            None
        }
    }
}

/// The line the command's result carries when it ran unsandboxed although the
/// server has sandbox settings (the warning "on the thread"), else `None`.
pub(crate) fn sandbox_note(ctx: &ToolContext) -> Option<String> {
    use knife_process::sandbox::SandboxChoice;
    let policy = ctx.policy();
    let project = policy.settings_root_for(ctx.root());
    match policy.sandbox.as_ref()?.for_checkout(ctx.root(), project) {
        SandboxChoice::Sandboxed(_) => None,
        SandboxChoice::OffByProject => Some(
            "(warning: this command ran without a sandbox: the project sets sandbox = \"off\" \
             in knife.toml)"
                .to_owned(),
        ),
        SandboxChoice::Unavailable(why) => Some(format!(
            "(warning: this command ran without a sandbox: {why})"
        )),
    }
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

async fn spawn_with(
    shell: &str,
    command: &str,
    ctx: &ToolContext,
) -> Result<(ProcessGroup, OwnedFd), SpawnError> {
    let pipe_err = |source: io::Error| SpawnError::Spawn {
        label: label_of(command),
        program: shell.to_owned(),
        cwd: ctx.root().display().to_string(),
        source,
    };
    let (reader, writer) = io::pipe().map_err(pipe_err)?;
    let writer_err = writer.try_clone().map_err(pipe_err)?;
    let policy = ctx.policy();
    let mut launch = Launch::new(shell, ctx.root());
    launch.args = vec!["-c".into(), command.into()];
    // SEC-02: an allowlist of knife's variables plus the project's `env`, never
    // knife's whole environment (no provider key, token or cloud credential).
    launch.env_clear = true;
    launch.env = knife_process::sandbox::env::command_env(
        policy.env_for(policy.settings_root_for(ctx.root())),
    );
    launch.env.retain(|(name, _)| !policy.is_secret_env(name));
    // Nobody can answer a prompt: make git fail instead of waiting for one.
    launch.env.push(("GIT_TERMINAL_PROMPT".into(), "0".into()));
    let mut spec = SpawnSpec::new(launch, label_of(command));
    spec.sandbox = sandbox_of(ctx);
    spec.stdout = writer.into();
    spec.stderr = writer_err.into();
    spec.thread = ctx.thread().cloned();
    spec.recorder = policy.process_recorder.clone();
    spec.drop_grace = KILL_GRACE;
    // The spec's copies of the write end are closed once the spawn returns, so the
    // reader sees EOF once the command's processes are done.
    let group = ProcessGroup::spawn(spec).await?;
    Ok((group, OwnedFd::from(reader)))
}
