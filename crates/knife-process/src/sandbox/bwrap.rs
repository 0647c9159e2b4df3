//! The bubblewrap sandbox (SPEC.md SEC-01): rewrites a [`Launch`] into
//! `bwrap <mounts and namespaces> -- <program> <args>`.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use crate::spawn::{Launch, Sandbox, SandboxError};

/// A bubblewrap sandbox for commands run in one project root (or worktree).
///
/// Inside: the whole filesystem read-only; `writable` (the root, and the repository's
/// git dir when it lies outside, so git works in a worktree) read-write; `hidden`
/// folders replaced by empty ones and hidden files by an empty file (knife's data
/// dir and config; the real home becomes an empty home); a private `/tmp`, `/dev`
/// and `/proc`; new PID, IPC, UTS and (unless `network`) network namespaces; the
/// sandbox dies with knife (`--die-with-parent`).
#[derive(Clone, Debug)]
pub struct BwrapSandbox {
    /// The `bwrap` program.
    pub program: PathBuf,
    /// Read-write inside (the project root first).
    pub writable: Vec<PathBuf>,
    /// Hidden inside: folders become empty, files empty.
    pub hidden: Vec<PathBuf>,
    /// The real home, replaced by an empty (writable, throw-away) one.
    pub home: Option<PathBuf>,
    /// Keep the host's network (`sandbox.network = true` of the project).
    pub network: bool,
}

impl BwrapSandbox {
    /// The bwrap arguments before `--` (the order matters: later mounts cover
    /// earlier ones).
    pub fn args(&self) -> Vec<OsString> {
        let mut a: Vec<OsString> = Vec::new();
        let mut push =
            |items: &[&std::ffi::OsStr]| a.extend(items.iter().map(|s| s.to_os_string()));
        push(&[
            // No --new-session: the command stays in the process group knife made
            // for bwrap, so signals to the group reach it too.
            "--die-with-parent".as_ref(),
            "--unshare-pid".as_ref(),
            "--unshare-ipc".as_ref(),
            "--unshare-uts".as_ref(),
            "--unshare-cgroup-try".as_ref(),
        ]);
        if !self.network {
            push(&["--unshare-net".as_ref()]);
        }
        push(&[
            "--ro-bind".as_ref(),
            "/".as_ref(),
            "/".as_ref(),
            "--dev".as_ref(),
            "/dev".as_ref(),
            "--proc".as_ref(),
            "/proc".as_ref(),
            "--tmpfs".as_ref(),
            "/tmp".as_ref(),
        ]);
        // Hidden paths that contain a writable one are covered first (the bind below
        // then shows the root again); the others after the binds, so a data dir or
        // config file inside the project stays hidden too.
        let covers_writable = |h: &Path| self.writable.iter().any(|w| w.starts_with(h));
        if let Some(home) = self.home.as_deref().filter(|h| h.is_dir()) {
            push(&["--tmpfs".as_ref(), home.as_os_str()]);
        }
        for h in self.hidden.iter().filter(|h| covers_writable(h)) {
            hide(&mut a, h);
        }
        for w in self.writable.iter().filter(|w| w.exists()) {
            a.extend(["--bind".into(), w.clone().into(), w.clone().into()]);
        }
        for h in self.hidden.iter().filter(|h| !covers_writable(h)) {
            hide(&mut a, h);
        }
        a
    }
}

/// `--tmpfs DIR` or `--ro-bind /dev/null FILE`; nothing for a path that does not exist.
fn hide(args: &mut Vec<OsString>, path: &Path) {
    if path.is_dir() {
        args.extend(["--tmpfs".into(), path.as_os_str().to_os_string()]);
    } else if path.exists() {
        args.extend([
            "--ro-bind".into(),
            "/dev/null".into(),
            path.as_os_str().to_os_string(),
        ]);
    }
}

impl Sandbox for BwrapSandbox {
    fn apply(&self, launch: &mut Launch) -> Result<(), SandboxError> {
        let mut args = self.args();
        args.push("--chdir".into());
        args.push(launch.cwd.clone().into());
        args.push("--".into());
        args.push(std::mem::take(&mut launch.program));
        args.append(&mut launch.args);
        launch.program = self.program.clone().into();
        launch.args = args;
        // The private /tmp is the only temp dir inside.
        launch.env.retain(|(k, _)| k != "TMPDIR");
        launch.env.push(("TMPDIR".into(), "/tmp".into()));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn the_launch_becomes_bwrap_with_the_old_command_after_the_separator() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("proj");
        let data = dir.path().join("data");
        std::fs::create_dir_all(&root).unwrap();
        std::fs::create_dir_all(&data).unwrap();
        let sandbox = BwrapSandbox {
            program: "/usr/bin/bwrap".into(),
            writable: vec![root.clone()],
            hidden: vec![data.clone()],
            home: None,
            network: false,
        };
        let mut launch = Launch::new("sh", &root);
        launch.args = vec!["-c".into(), "echo hi".into()];
        sandbox.apply(&mut launch).unwrap();
        assert_eq!(launch.program, OsString::from("/usr/bin/bwrap"));
        let args: Vec<String> = launch
            .args
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        let sep = args.iter().position(|a| a == "--").unwrap();
        assert_eq!(&args[sep + 1..], ["sh", "-c", "echo hi"]);
        for flag in [
            "--die-with-parent",
            "--unshare-pid",
            "--unshare-net",
            "--proc",
        ] {
            assert!(args[..sep].contains(&flag.to_owned()), "{flag}: {args:?}");
        }
        let bind = args.iter().position(|a| a == "--bind").unwrap();
        let hide = args
            .iter()
            .position(|a| a == data.to_str().unwrap())
            .unwrap();
        assert!(hide > bind, "the data dir is hidden after the root's bind");
    }
}
