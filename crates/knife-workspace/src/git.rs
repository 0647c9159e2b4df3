//! Running the `git` program against knife's own checkpoint repositories: the one
//! place that builds git's isolated environment and turns failures into typed errors.
//!
//! Isolation: every `GIT_*` variable of knife's own environment is removed; no system
//! or global config is read (`GIT_CONFIG_NOSYSTEM`, `GIT_CONFIG_GLOBAL=/dev/null`);
//! the user's global excludes and attributes files are replaced by `/dev/null`; the
//! author and committer are fixed; no prompt, no pager, no hooks, no auto-gc. A
//! user's git configuration therefore cannot change what a checkpoint holds.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::Command;

use crate::error::WorkspaceError;

/// Name and email of every checkpoint commit.
pub const CHECKPOINT_AUTHOR: (&str, &str) = ("knife", "knife@localhost");

/// Config every command runs with (`-c key=value`), over the repository's own.
const ISOLATED_CONFIG: &[&str] = &[
    "core.excludesFile=/dev/null",
    "core.attributesFile=/dev/null",
    "core.hooksPath=/dev/null",
    "core.autocrlf=false",
    "core.safecrlf=false",
    "core.quotePath=false",
    "core.symlinks=true",
    "core.fsmonitor=false",
    "core.untrackedCache=true",
    "core.bigFileThreshold=512m",
    "gc.auto=0",
    "maintenance.auto=false",
    "advice.addEmbeddedRepo=false",
    "advice.addIgnoredFile=false",
    "diff.renames=true",
    "diff.external=",
    "color.ui=false",
];

/// The `git` program, checked once ([`Git::locate`]). Cheap to clone.
#[derive(Clone, Debug)]
pub struct Git {
    program: PathBuf,
    version: String,
}

/// Where one git command works: knife's repository, and optionally a working tree
/// with its own index file.
#[derive(Clone, Copy, Debug)]
pub(crate) struct GitEnv<'a> {
    pub git_dir: &'a Path,
    pub work_tree: Option<&'a Path>,
    pub index: Option<&'a Path>,
}

impl Git {
    /// Finds `git` on `PATH` (or the program named by `KNIFE_GIT`) and reads its
    /// version. Errors: [`WorkspaceError::GitMissing`] when it cannot be run.
    pub async fn locate() -> Result<Git, WorkspaceError> {
        let program = std::env::var_os("KNIFE_GIT")
            .filter(|p| !p.is_empty())
            .map_or_else(|| PathBuf::from("git"), PathBuf::from);
        Self::with_program(program).await
    }

    /// Like [`Git::locate`] with an explicit program path.
    pub async fn with_program(program: PathBuf) -> Result<Git, WorkspaceError> {
        let out = Command::new(&program)
            .arg("--version")
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            .output()
            .await
            .map_err(|e| WorkspaceError::GitMissing {
                detail: format!("{}: {e}", program.display()),
            })?;
        let text = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        if !out.status.success() || !text.starts_with("git version") {
            return Err(WorkspaceError::GitMissing {
                detail: format!("`{} --version` printed {text:?}", program.display()),
            });
        }
        Ok(Git {
            program,
            version: text.trim_start_matches("git version ").to_owned(),
        })
    }

    /// The version git reported (`2.47.3`).
    pub fn version(&self) -> &str {
        &self.version
    }

    /// The program path used.
    pub fn program(&self) -> &Path {
        &self.program
    }

    /// A command for `env`, isolated from the user's configuration.
    pub(crate) fn command(&self, env: GitEnv<'_>) -> Command {
        let mut cmd = Command::new(&self.program);
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("GIT_") {
                cmd.env_remove(&key);
            }
        }
        cmd.env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_TERMINAL_PROMPT", "0")
            .env("GIT_PAGER", "cat")
            .env("GIT_AUTHOR_NAME", CHECKPOINT_AUTHOR.0)
            .env("GIT_AUTHOR_EMAIL", CHECKPOINT_AUTHOR.1)
            .env("GIT_COMMITTER_NAME", CHECKPOINT_AUTHOR.0)
            .env("GIT_COMMITTER_EMAIL", CHECKPOINT_AUTHOR.1)
            .env("LC_ALL", "C")
            .env("GIT_DIR", env.git_dir);
        if let Some(tree) = env.work_tree {
            cmd.env("GIT_WORK_TREE", tree).current_dir(tree);
        } else {
            // GIT_DIR is absolute; the folder may not exist yet (`init`).
            cmd.current_dir("/");
        }
        if let Some(index) = env.index {
            cmd.env("GIT_INDEX_FILE", index);
        }
        for kv in ISOLATED_CONFIG {
            cmd.arg("-c").arg(kv);
        }
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        cmd
    }

    /// Runs `git <args>` in `env` and returns its stdout. Errors: [`WorkspaceError::Git`]
    /// with git's stderr on a non-zero exit.
    pub(crate) async fn run<I, S>(
        &self,
        env: GitEnv<'_>,
        args: I,
    ) -> Result<Vec<u8>, WorkspaceError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.run_with_input(env, args, None).await
    }

    /// Like [`Git::run`], writing `input` to git's stdin.
    pub(crate) async fn run_with_input<I, S>(
        &self,
        env: GitEnv<'_>,
        args: I,
        input: Option<Vec<u8>>,
    ) -> Result<Vec<u8>, WorkspaceError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let args: Vec<std::ffi::OsString> =
            args.into_iter().map(|a| a.as_ref().to_owned()).collect();
        let name = command_name(&args);
        let mut cmd = self.command(env);
        cmd.args(&args);
        if input.is_some() {
            cmd.stdin(Stdio::piped());
        }
        let mut child = cmd
            .spawn()
            .map_err(WorkspaceError::io("run git for", env.git_dir))?;
        let writer = match (input, child.stdin.take()) {
            (Some(bytes), Some(mut stdin)) => Some(tokio::spawn(async move {
                let _ = stdin.write_all(&bytes).await;
                drop(stdin);
            })),
            _ => None,
        };
        let out = child
            .wait_with_output()
            .await
            .map_err(WorkspaceError::io("run git in", env.git_dir))?;
        if let Some(writer) = writer {
            let _ = writer.await;
        }
        if !out.status.success() {
            return Err(WorkspaceError::Git {
                command: name,
                repo: env.git_dir.to_owned(),
                stderr: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
            });
        }
        Ok(out.stdout)
    }

    /// Runs `git <args>` and returns at most `cap` bytes of its stdout, and whether
    /// there was more (the command is then killed).
    pub(crate) async fn run_capped<I, S>(
        &self,
        env: GitEnv<'_>,
        args: I,
        cap: usize,
    ) -> Result<(Vec<u8>, bool), WorkspaceError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let args: Vec<std::ffi::OsString> =
            args.into_iter().map(|a| a.as_ref().to_owned()).collect();
        let name = command_name(&args);
        let mut cmd = self.command(env);
        cmd.args(&args);
        let mut child = cmd
            .spawn()
            .map_err(WorkspaceError::io("run git for", env.git_dir))?;
        let mut out = Vec::new();
        if let Some(stdout) = child.stdout.take() {
            let limit = u64::try_from(cap).unwrap_or(u64::MAX).saturating_add(1);
            stdout
                .take(limit)
                .read_to_end(&mut out)
                .await
                .map_err(WorkspaceError::io("read git output in", env.git_dir))?;
        }
        if out.len() > cap {
            out.truncate(cap);
            let _ = child.kill().await;
            return Ok((out, true));
        }
        let status = child
            .wait_with_output()
            .await
            .map_err(WorkspaceError::io("run git in", env.git_dir))?;
        if !status.status.success() {
            return Err(WorkspaceError::Git {
                command: name,
                repo: env.git_dir.to_owned(),
                stderr: String::from_utf8_lossy(&status.stderr).trim().to_owned(),
            });
        }
        Ok((out, false))
    }
}

impl Git {
    /// A command in the user's own repository at `dir` (worktrees, CHG-07): the user's
    /// config applies, but inherited `GIT_*` variables are removed and hooks are off.
    fn user_command(&self, dir: &Path, args: &[&str]) -> Command {
        let mut cmd = Command::new(&self.program);
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("GIT_") {
                cmd.env_remove(&key);
            }
        }
        cmd.env("GIT_TERMINAL_PROMPT", "0")
            .env("LC_ALL", "C")
            .arg("-C")
            .arg(dir)
            .args(["-c", "core.hooksPath=/dev/null", "-c", "color.ui=false"])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        cmd
    }

    /// Runs `git -C dir <args>` in the user's repository; stdout, or
    /// [`WorkspaceError::Git`] with git's stderr.
    pub(crate) async fn run_in_repo(
        &self,
        dir: &Path,
        args: &[&str],
    ) -> Result<Vec<u8>, WorkspaceError> {
        let (ok, stdout, stderr) = self.run_in_repo_status(dir, args).await?;
        if ok {
            Ok(stdout)
        } else {
            Err(WorkspaceError::Git {
                command: args.first().copied().unwrap_or_default().to_owned(),
                repo: dir.to_owned(),
                stderr: String::from_utf8_lossy(&stderr).trim().to_owned(),
            })
        }
    }

    /// Like [`Git::run_in_repo`], returning (exit success, stdout, stderr) instead of failing.
    pub(crate) async fn run_in_repo_status(
        &self,
        dir: &Path,
        args: &[&str],
    ) -> Result<(bool, Vec<u8>, Vec<u8>), WorkspaceError> {
        let out = self
            .user_command(dir, args)
            .output()
            .await
            .map_err(WorkspaceError::io("run git in", dir))?;
        Ok((out.status.success(), out.stdout, out.stderr))
    }
}

fn command_name(args: &[std::ffi::OsString]) -> String {
    args.first()
        .map(|a| a.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// Trims git's trailing newline from a one-line answer (an object id).
pub(crate) fn one_line(out: &[u8]) -> String {
    String::from_utf8_lossy(out).trim().to_owned()
}
