// The checks of `knife doctor`, one async function each, listed in [`CHECKS`]; a new
// check (e.g. the sandbox branch's real one) is a function here and a line in the list.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::time::{Duration, Instant};

use tokio::process::Command;

use super::{Context, Finding};
use crate::config::{Config, ProviderConfig};

/// A check: reads the [`Context`], returns its findings (one or more lines).
pub type Check = for<'a> fn(&'a Context) -> Pin<Box<dyn Future<Output = Vec<Finding>> + Send + 'a>>;

/// Every check after `config`, in the order printed: (name, check).
pub const CHECKS: &[(&str, Check)] = &[
    ("data dir", |cx| Box::pin(data_dir(cx))),
    ("providers", |cx| Box::pin(providers(cx))),
    ("git", |cx| Box::pin(git(cx))),
    ("sandbox", |cx| Box::pin(sandbox(cx))),
    ("database", |cx| Box::pin(database(cx))),
];

/// The config file: found (or none: defaults), parsed, and its providers well-formed.
pub fn config(file: Option<&Path>, loaded: &anyhow::Result<Config>) -> Finding {
    let name = file.map_or_else(
        || "no knife.toml (defaults and environment)".to_owned(),
        |f| f.display().to_string(),
    );
    match loaded {
        Ok(c) => {
            let n = c.providers.len();
            match c.default_instance() {
                Ok(default) => Finding::ok(
                    "config",
                    format!("{name} ({n} provider instance(s), default `{default}`)"),
                ),
                Err(e) => Finding::fail("config", format!("{name}: {e:#}"), "set default_provider"),
            }
        }
        Err(e) => Finding::fail(
            "config",
            format!("{e:#}"),
            "correct the file (every key: docs/config.md), or pass another with --config",
        ),
    }
}

fn skipped_without_config(cx: &Context, subject: &str) -> Option<Vec<Finding>> {
    cx.config
        .is_none()
        .then(|| vec![Finding::skip(subject, "the config did not load")])
}

/// The data directory exists and is writable, or can be created.
async fn data_dir(cx: &Context) -> Vec<Finding> {
    let Some(dir) = &cx.data_dir else {
        return vec![Finding::fail(
            "data dir",
            "cannot find a data directory",
            "pass --data-dir, set [server] data_dir, XDG_DATA_HOME or HOME",
        )];
    };
    if dir.is_dir() {
        return match tempfile::NamedTempFile::new_in(dir) {
            Ok(_) => vec![Finding::ok(
                "data dir",
                format!("{} (writable)", dir.display()),
            )],
            Err(e) => vec![Finding::fail(
                "data dir",
                format!("{} is not writable: {e}", dir.display()),
                "fix its permissions, or choose another with --data-dir / [server] data_dir",
            )],
        };
    }
    if dir.exists() {
        return vec![Finding::fail(
            "data dir",
            format!("{} exists but is not a folder", dir.display()),
            "choose another with --data-dir / [server] data_dir",
        )];
    }
    let parent = dir.ancestors().skip(1).find(|a| a.is_dir());
    match parent {
        Some(p) if tempfile::NamedTempFile::new_in(p).is_ok() => vec![Finding::ok(
            "data dir",
            format!(
                "{} does not exist yet; knife serve creates it",
                dir.display()
            ),
        )],
        _ => vec![Finding::fail(
            "data dir",
            format!("{} does not exist and cannot be created", dir.display()),
            "create it (mkdir -p), or choose another with --data-dir / [server] data_dir",
        )],
    }
}

/// Each provider instance: one cheap request (built-in drivers) or its program (external).
async fn providers(cx: &Context) -> Vec<Finding> {
    if let Some(skip) = skipped_without_config(cx, "providers") {
        return skip;
    }
    let Some(config) = &cx.config else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for (id, p) in &config.providers {
        let subject = format!("provider {id}");
        out.push(if p.is_external() {
            external_program(&subject, id, p)
        } else {
            endpoint(&subject, id, p, cx.timeout).await
        });
    }
    out
}

/// The innermost cause of an error chain (`Connection refused (os error 111)`).
fn root_cause(e: &(dyn std::error::Error + 'static)) -> String {
    let mut cause = e;
    while let Some(next) = cause.source() {
        cause = next;
    }
    cause.to_string()
}

/// `GET {base_url}/models` with the instance's key and a short timeout.
async fn endpoint(subject: &str, id: &str, p: &ProviderConfig, timeout: Duration) -> Finding {
    let key = match p.api_key_env.as_deref().filter(|v| !v.is_empty()) {
        None => None,
        Some(var) => match std::env::var(var).ok().filter(|k| !k.is_empty()) {
            Some(k) => Some(k),
            None => {
                return Finding::fail(
                    subject,
                    format!("its API key variable {var} is not set"),
                    format!("export {var}=… (or change api_key_env of [providers.{id}])"),
                );
            }
        },
    };
    let url = format!("{}/models", p.base_url.trim_end_matches('/'));
    let client = match reqwest::Client::builder()
        .connect_timeout(timeout)
        .timeout(timeout)
        .build()
    {
        Ok(c) => c,
        Err(e) => return Finding::fail(subject, format!("no HTTP client: {e}"), "report this"),
    };
    let mut request = client.get(&url);
    if let Some(key) = &key {
        request = if p.driver == "anthropic" {
            request
                .header("x-api-key", key)
                .header("anthropic-version", "2023-06-01")
        } else {
            request.bearer_auth(key)
        };
    }
    let started = Instant::now();
    let response = match request.send().await {
        Ok(r) => r,
        Err(e) => {
            let why = if e.is_timeout() {
                format!("no answer within {} s", timeout.as_secs())
            } else {
                root_cause(&e)
            };
            return Finding::fail(
                subject,
                format!("cannot reach {url}: {why}"),
                format!(
                    "start the model server, or correct base_url of [providers.{id}] (now {})",
                    p.base_url
                ),
            );
        }
    };
    let ms = started.elapsed().as_millis();
    let status = response.status();
    if status == reqwest::StatusCode::UNAUTHORIZED || status == reqwest::StatusCode::FORBIDDEN {
        return Finding::fail(
            subject,
            format!("{url} refused the API key (HTTP {})", status.as_u16()),
            format!(
                "check the key in {}",
                p.api_key_env.as_deref().unwrap_or("api_key_env")
            ),
        );
    }
    if status.is_server_error() {
        return Finding::warn(
            subject,
            format!("{url} answered HTTP {} ({ms} ms)", status.as_u16()),
            "the server is up but failing; check its logs",
        );
    }
    if !status.is_success() {
        return Finding::ok(
            subject,
            format!(
                "{} reachable ({ms} ms; GET /models answered HTTP {})",
                p.base_url,
                status.as_u16()
            ),
        );
    }
    let listed: Vec<String> = response
        .json::<serde_json::Value>()
        .await
        .ok()
        .and_then(|v| v.get("data").and_then(|d| d.as_array()).cloned())
        .unwrap_or_default()
        .iter()
        .filter_map(|m| m.get("id").and_then(|i| i.as_str()).map(str::to_owned))
        .collect();
    if !listed.is_empty() && !listed.contains(&p.model) {
        return Finding::warn(
            subject,
            format!(
                "{} reachable ({ms} ms), but model `{}` is not among its {} models",
                p.base_url,
                p.model,
                listed.len()
            ),
            format!("set model of [providers.{id}] to one the server lists"),
        );
    }
    Finding::ok(
        subject,
        format!("{} reachable ({ms} ms), model `{}`", p.base_url, p.model),
    )
}

/// `program` if it has a slash and is a file, else its first match on `PATH`.
fn find_program(program: &str) -> Option<PathBuf> {
    if program.contains('/') {
        let p = PathBuf::from(program);
        return p.is_file().then_some(p);
    }
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|d| d.join(program))
        .find(|p| p.is_file())
}

/// An external runtime's program (peer): found, and (codex) its `CODEX_HOME`.
fn external_program(subject: &str, id: &str, p: &ProviderConfig) -> Finding {
    let program = p
        .command
        .clone()
        .filter(|c| !c.trim().is_empty())
        .unwrap_or_else(|| p.driver.clone());
    let Some(found) = find_program(&program) else {
        return Finding::fail(
            subject,
            format!(
                "{} program `{program}` is not installed (not on PATH)",
                p.driver
            ),
            format!(
                "install it (scripts/install-peers.sh installs the pinned peers), or set \
                 command = \"/path/to/{program}\" in [providers.{id}]"
            ),
        );
    };
    if p.driver == "codex"
        && let Err(e) = crate::providers::check_codex_instance(id, p)
    {
        return Finding::fail(subject, format!("{e:#}"), "see above");
    }
    Finding::ok(subject, format!("{} program {}", p.driver, found.display()))
}

/// Runs `program args` with the time budget; `Ok(stdout)` when it exits 0, else why not.
async fn run(program: &Path, args: &[&str], timeout: Duration) -> Result<String, String> {
    let mut cmd = Command::new(program);
    cmd.args(args)
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    match tokio::time::timeout(timeout, cmd.output()).await {
        Err(_) => Err(format!("did not finish within {} s", timeout.as_secs())),
        Ok(Err(e)) => Err(e.to_string()),
        Ok(Ok(out)) if out.status.success() => {
            Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
        }
        Ok(Ok(out)) => {
            let stderr = String::from_utf8_lossy(&out.stderr);
            Err(format!(
                "{}: {}",
                out.status,
                stderr
                    .lines()
                    .rev()
                    .find(|l| !l.trim().is_empty())
                    .unwrap_or("")
                    .trim()
            ))
        }
    }
}

/// `git` is installed (checkpoints and the agent's tools use it).
async fn git(cx: &Context) -> Vec<Finding> {
    let Some(git) = find_program("git") else {
        return vec![Finding::fail(
            "git",
            "git is not installed",
            "install git (apt-get install git)",
        )];
    };
    vec![match run(&git, &["--version"], cx.timeout).await {
        Ok(v) => Finding::ok("git", v),
        Err(e) => Finding::fail(
            "git",
            format!("`git --version` failed: {e}"),
            "reinstall git",
        ),
    }]
}

/// Which sandbox the commands the model runs get here (SEC-01): bubblewrap,
/// Landlock (and why not bubblewrap), or none and why — plus every project that
/// opts out or keeps the network.
async fn sandbox(cx: &Context) -> Vec<Finding> {
    let config = cx.config.clone().unwrap_or_default();
    let data_dir = cx.data_dir.clone().unwrap_or_default();
    // The probe runs bwrap once: off the async threads.
    let settings =
        match tokio::task::spawn_blocking(move || crate::sandbox::settings(&config, &data_dir))
            .await
        {
            Ok(s) => s,
            Err(e) => {
                return vec![Finding::fail(
                    "sandbox",
                    format!("the probe failed: {e}"),
                    "report this",
                )];
            }
        };
    use knife_process::sandbox::SandboxSupport;
    let mut out = vec![match &settings.support {
        SandboxSupport::Bubblewrap { .. } => Finding::ok("sandbox", settings.support.describe()),
        SandboxSupport::Landlock { .. } => Finding::warn(
            "sandbox",
            settings.support.describe(),
            "install bubblewrap (apt-get install bubblewrap) and allow unprivileged user \
             namespaces (sysctl kernel.unprivileged_userns_clone=1; on Ubuntu 24.04 also \
             kernel.apparmor_restrict_unprivileged_userns=0)",
        ),
        SandboxSupport::Unavailable { .. } => Finding::fail(
            "sandbox",
            settings.support.describe(),
            "apt-get install bubblewrap (or use a kernel with Landlock)",
        ),
    }];
    for (root, p) in &settings.projects {
        if p.off {
            out.push(Finding::warn(
                "sandbox",
                format!("OFF for project {} (sandbox = \"off\")", root.display()),
                "remove sandbox = \"off\" from its [[projects]] entry",
            ));
        } else if p.network {
            out.push(Finding::ok(
                "sandbox",
                format!(
                    "project {} keeps the network (sandbox.network = true)",
                    root.display()
                ),
            ));
        }
    }
    out
}

/// The SQLite event log opens (applying pending migrations), unless a running server
/// holds the data directory.
async fn database(cx: &Context) -> Vec<Finding> {
    let Some(dir) = cx.data_dir.as_deref().filter(|d| d.is_dir()) else {
        return vec![Finding::ok("database", "none yet; knife serve creates it")];
    };
    let path = dir.join(crate::app::DB_FILE);
    if !path.is_file() {
        return vec![Finding::ok(
            "database",
            format!(
                "{} does not exist yet; knife serve creates it",
                path.display()
            ),
        )];
    }
    let lock = match crate::lock::DataDirLock::acquire(dir).await {
        Ok(lock) => lock,
        Err(e) => {
            return vec![Finding::ok(
                "database",
                format!("{} is in use: {e:#}", path.display()),
            )];
        }
    };
    let opened = tokio::time::timeout(cx.timeout * 4, knife_store_sqlite::open(&path)).await;
    let finding = match opened {
        Err(_) => Finding::fail(
            "database",
            format!(
                "{} did not open within {} s",
                path.display(),
                cx.timeout.as_secs() * 4
            ),
            "check the disk; another program may hold the file",
        ),
        Ok(Err(e)) => Finding::fail("database", format!("{e}"), "see above"),
        Ok(Ok(store)) => match store.schema_version().await {
            Ok(v) => Finding::ok("database", format!("{} (schema {v})", path.display())),
            Err(e) => Finding::fail("database", format!("{e}"), "see above"),
        },
    };
    drop(lock);
    vec![finding]
}
