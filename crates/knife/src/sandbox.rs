//! The sandbox of model-run commands as the server configures it (SPEC.md SEC-01,
//! SEC-02): what to hide and each project's settings (`knife doctor`'s sandbox check
//! and `GET /healthz/detail` describe the result).

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use knife_process::sandbox::{ProjectSandbox, SandboxSettings, SandboxSupport, probe};

use crate::config::Config;

/// The sandbox settings for a server on `data_dir` with `config`: probes the
/// machine (`KNIFE_SANDBOX_BACKEND=landlock` forces the fallback where the kernel
/// has it, for tests and for machines where bubblewrap misbehaves), hides the data
/// dir, the config file and the real home, and applies `[[projects]] sandbox`.
pub fn settings(config: &Config, data_dir: &Path) -> SandboxSettings {
    let support = match std::env::var("KNIFE_SANDBOX_BACKEND").as_deref() {
        Ok("landlock") => match knife_process::sandbox::landlock_available() {
            Ok(()) => SandboxSupport::Landlock {
                why_not_bwrap: "KNIFE_SANDBOX_BACKEND=landlock".into(),
            },
            Err(why) => SandboxSupport::Unavailable { why },
        },
        _ => probe(),
    };
    let canonical = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    let mut hidden = vec![canonical(data_dir)];
    hidden.extend(config.source.as_deref().map(canonical));
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .map(|h| canonical(&h))
        .filter(|h| h.parent().is_some());
    let projects = config
        .projects
        .iter()
        .map(|p| {
            let settings = p
                .sandbox
                .as_ref()
                .and_then(|s| s.settings().ok())
                .unwrap_or_default();
            if settings.off {
                tracing::warn!(root = %p.root.display(),
                    "sandbox = \"off\": commands the model runs in this project are NOT sandboxed");
            }
            (p.resolved_root(), settings)
        })
        .collect::<Vec<(PathBuf, ProjectSandbox)>>();
    SandboxSettings {
        support,
        hidden,
        home,
        projects,
    }
}

/// Each project's `env` table, by canonical root.
pub fn project_env(config: &Config) -> Vec<(PathBuf, Vec<(OsString, OsString)>)> {
    config
        .projects
        .iter()
        .filter(|p| !p.env.is_empty())
        .map(|p| {
            let env = p
                .env
                .iter()
                .map(|(k, v)| (OsString::from(k), OsString::from(v)))
                .collect();
            (p.resolved_root(), env)
        })
        .collect()
}
