//! Sandboxes for the commands knife runs for a model (SPEC.md SEC-01, SEC-02):
//! bubblewrap where it works, else Landlock + no-new-privs, else none (said so).
//!
//! [`SandboxSettings`] is built once at start ([`probe`] finds what this machine
//! allows) and answers, per project root, which [`Sandbox`] the spawn of a `bash`
//! command gets ([`SandboxSettings::for_root`]).

mod bwrap;
pub mod env;
mod git;
mod landlock;

use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use bwrap::BwrapSandbox;
pub use git::git_dirs_outside;
pub use landlock::{LandlockRules, LandlockSandbox, landlock_available};

use crate::spawn::Sandbox;

/// A project's sandbox settings (`[[projects]] sandbox = "off"` or
/// `sandbox.network = true` in knife.toml).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProjectSandbox {
    /// The explicit opt-out: commands of this project run unsandboxed (warned).
    pub off: bool,
    /// Commands of this project keep the network.
    pub network: bool,
}

/// What this machine offers, found by [`probe`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SandboxSupport {
    /// bubblewrap runs (user namespaces allowed, or knife is root).
    Bubblewrap {
        /// The `bwrap` program.
        program: PathBuf,
    },
    /// bubblewrap is missing or refused (why); Landlock is enforced by the kernel.
    Landlock {
        /// Why bubblewrap cannot be used.
        why_not_bwrap: String,
    },
    /// Neither works; commands run unsandboxed.
    Unavailable {
        /// Why neither can be used, and what to install.
        why: String,
    },
}

impl SandboxSupport {
    /// `bubblewrap`, `landlock` or `none` (for status pages and metrics).
    pub fn kind(&self) -> &'static str {
        match self {
            SandboxSupport::Bubblewrap { .. } => "bubblewrap",
            SandboxSupport::Landlock { .. } => "landlock",
            SandboxSupport::Unavailable { .. } => "none",
        }
    }

    /// One line for `knife doctor`, `/api/status` and the log.
    pub fn describe(&self) -> String {
        match self {
            SandboxSupport::Bubblewrap { program } => format!(
                "bubblewrap ({}): commands the model runs see the project read-write, the rest \
                 read-only, no knife data, config or home, own /tmp, /dev, PID and network namespaces",
                program.display()
            ),
            SandboxSupport::Landlock { why_not_bwrap } => format!(
                "Landlock + no-new-privs (bubblewrap unusable: {why_not_bwrap}): writes only in \
                 the project and /tmp, knife's data dir, config and home unreadable, TCP refused \
                 where the kernel supports it; /tmp and /proc are shared (install bubblewrap or \
                 allow user namespaces for the full sandbox)"
            ),
            SandboxSupport::Unavailable { why } => {
                format!("none: {why}; commands the model runs can reach everything this user can")
            }
        }
    }
}

/// Finds the best sandbox this machine allows: runs `bwrap` once with the flags
/// the sandbox uses (`bwrap --unshare-pid --ro-bind / / --proc /proc -- true`), then
/// checks Landlock. Blocking (a short child process): call it at start.
pub fn probe() -> SandboxSupport {
    let program = find_program("bwrap");
    let why_not_bwrap = match &program {
        None => "bwrap is not installed (Debian/Ubuntu: apt-get install bubblewrap)".to_owned(),
        Some(program) => {
            let out = std::process::Command::new(program)
                .args([
                    "--die-with-parent",
                    "--unshare-pid",
                    "--unshare-net",
                    "--ro-bind",
                    "/",
                    "/",
                    "--dev",
                    "/dev",
                    "--proc",
                    "/proc",
                    "--tmpfs",
                    "/tmp",
                    "--",
                    "true",
                ])
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::piped())
                .output();
            match out {
                Ok(out) if out.status.success() => {
                    return SandboxSupport::Bubblewrap {
                        program: program.clone(),
                    };
                }
                Ok(out) => format!(
                    "{} fails: {} (user namespaces refused? e.g. Ubuntu's \
                     kernel.apparmor_restrict_unprivileged_userns)",
                    program.display(),
                    String::from_utf8_lossy(&out.stderr).trim()
                ),
                Err(e) => format!("{} cannot start: {e}", program.display()),
            }
        }
    };
    match landlock_available() {
        Ok(()) => SandboxSupport::Landlock { why_not_bwrap },
        Err(why) => SandboxSupport::Unavailable {
            why: format!("{why_not_bwrap}; Landlock: {why}"),
        },
    }
}

fn find_program(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}

/// The sandbox decision for the whole server: what the machine offers, what to hide,
/// and each project's settings.
#[derive(Clone, Debug)]
pub struct SandboxSettings {
    /// Found by [`probe`] at start.
    pub support: SandboxSupport,
    /// Hidden from every sandboxed command: knife's data dir and config file(s).
    pub hidden: Vec<PathBuf>,
    /// The real home directory, replaced by an empty one.
    pub home: Option<PathBuf>,
    /// Per project root (canonical): its settings; other roots get the default
    /// (sandboxed, no network).
    pub projects: Vec<(PathBuf, ProjectSandbox)>,
}

/// What [`SandboxSettings::for_root`] chose for one root.
#[derive(Clone, Debug)]
pub enum SandboxChoice {
    /// Spawn through this sandbox.
    Sandboxed(Arc<dyn Sandbox>),
    /// The project opted out (`sandbox = "off"`): run unsandboxed, and warn.
    OffByProject,
    /// No sandbox works on this machine (why): run unsandboxed, and warn.
    Unavailable(String),
}

impl SandboxSettings {
    /// The settings of the project whose root is `root` or contains it.
    pub fn project(&self, root: &Path) -> ProjectSandbox {
        self.projects
            .iter()
            .filter(|(r, _)| root.starts_with(r))
            .max_by_key(|(r, _)| r.as_os_str().len())
            .map(|(_, p)| p.clone())
            .unwrap_or_default()
    }

    /// The sandbox of commands run in project root `root`: [`Self::for_checkout`]
    /// of `root` with its own settings.
    pub fn for_root(&self, root: &Path) -> SandboxChoice {
        self.for_checkout(root, root)
    }

    /// The sandbox of commands run in `root` (a project root, or a thread's worktree
    /// of the project at `project_root`, CHG-07) under the settings of
    /// `project_root`: writable `root` plus the repository's git dirs outside it
    /// ([`git_dirs_outside`]: the project's `.git` for a worktree), so git works inside.
    pub fn for_checkout(&self, root: &Path, project_root: &Path) -> SandboxChoice {
        let project = self.project(project_root);
        if project.off {
            return SandboxChoice::OffByProject;
        }
        let mut writable = vec![root.to_path_buf()];
        writable.extend(git_dirs_outside(root));
        match &self.support {
            SandboxSupport::Bubblewrap { program } => {
                SandboxChoice::Sandboxed(Arc::new(BwrapSandbox {
                    program: program.clone(),
                    writable,
                    hidden: self.hidden.clone(),
                    home: self.home.clone(),
                    network: project.network,
                }))
            }
            SandboxSupport::Landlock { .. } => {
                let mut hidden = self.hidden.clone();
                hidden.extend(self.home.clone());
                SandboxChoice::Sandboxed(Arc::new(LandlockSandbox {
                    rules: LandlockRules {
                        writable,
                        hidden,
                        network: project.network,
                    },
                }))
            }
            SandboxSupport::Unavailable { why } => SandboxChoice::Unavailable(why.clone()),
        }
    }
}
