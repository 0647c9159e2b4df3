//! `knife.toml`: provider instances and server settings, with env-var overrides.
//! Precedence: flags > environment > file > defaults (docs/config.md).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use knife_agent::permissions::{PermissionRule, PermissionRules};
use serde::Deserialize;

/// Default listen address of `knife serve` (loopback only).
pub const DEFAULT_LISTEN: &str = "127.0.0.1:7878";

/// The provider drivers `driver = "…"` accepts, and each one's default `base_url`.
pub const DRIVERS: &[(&str, &str)] = &[
    ("openai-chat", "https://api.openai.com/v1"),
    ("anthropic", "https://api.anthropic.com/v1"),
    ("openai-responses", "https://api.openai.com/v1"),
    // An agent program speaking the Agent Client Protocol over stdio (no base URL:
    // `command`, `args`, `env` say what to run).
    ("acp", ""),
    // Codex's app-server (`codex app-server`), run like `acp`.
    ("codex", ""),
];

/// Drivers of agent runtimes knife runs as child processes (issue 7): an instance
/// sets `command`, `args`, `env` (and `model`) instead of `base_url` / `api_key_env`.
pub const EXTERNAL_DRIVERS: &[&str] = &["acp", "codex"];

/// The whole configuration file.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Instance used by threads that name none. Default: the only instance, or `openai`.
    pub default_provider: Option<String>,
    #[serde(default)]
    pub server: ServerConfig,
    /// `[sessions]`: provider session lifetimes and the stale-session reaper.
    #[serde(default)]
    pub sessions: SessionsConfig,
    /// Provider instances by id (`[providers.openai]`, `[providers.local-ollama]`, …).
    #[serde(default)]
    pub providers: BTreeMap<String, ProviderConfig>,
    /// Tool permission rules of the built-in agent (`[[permissions]]` tables of
    /// `tool`, `pattern` (default `*`) and `action` = `allow` | `ask` | `deny`), in
    /// order: the last matching rule wins; without a match read-only tools are
    /// allowed and `write` / `edit` / `bash` ask (docs/tools.md).
    #[serde(default)]
    pub permissions: Vec<PermissionRule>,
    /// Agents get browser (`preview`) MCP tools (default true; SPEC.md MCP-02).
    pub agent_browser_access: Option<bool>,
    /// Agents get device MCP tools (default false; SPEC.md MCP-05).
    pub agent_device_access: Option<bool>,
    /// Per-project settings (`[[projects]]` with `root`): permission rules that
    /// come after the global `[[permissions]]` (so they win for sessions in that
    /// project root) and MCP access overrides (MCP-03, MCP-05).
    #[serde(default)]
    pub projects: Vec<ProjectConfig>,
}

/// `[[projects]]`: settings of the project whose root folder is `root`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProjectConfig {
    /// The project's root folder (as given to `knife run` / `POST /api/projects`).
    /// A relative path is relative to the config file's folder.
    pub root: PathBuf,
    /// Rules appended after the global `[[permissions]]` for this project.
    #[serde(default)]
    pub permissions: Vec<PermissionRule>,
    /// Overrides `agent_browser_access`, both ways.
    pub agent_browser_access: Option<bool>,
    /// Overrides `agent_device_access`.
    pub agent_device_access: Option<bool>,
}

impl ProjectConfig {
    /// `root` canonicalized when it exists (projects are stored by canonical root),
    /// else as written.
    pub fn resolved_root(&self) -> PathBuf {
        std::fs::canonicalize(&self.root).unwrap_or_else(|_| self.root.clone())
    }
}

impl Config {
    /// The MCP access settings (issue 6 item 3); project overrides are keyed by the
    /// project's canonical root.
    pub fn access_settings(&self) -> knife_runtime::mcp::AccessSettings {
        let defaults = knife_runtime::mcp::AccessSettings::default();
        knife_runtime::mcp::AccessSettings {
            agent_browser_access: self
                .agent_browser_access
                .unwrap_or(defaults.agent_browser_access),
            agent_device_access: self
                .agent_device_access
                .unwrap_or(defaults.agent_device_access),
            projects: self
                .projects
                .iter()
                .filter(|p| p.agent_browser_access.is_some() || p.agent_device_access.is_some())
                .map(|p| {
                    (
                        p.resolved_root().display().to_string(),
                        knife_runtime::mcp::ProjectAccessOverride {
                            agent_browser_access: p.agent_browser_access,
                            agent_device_access: p.agent_device_access,
                        },
                    )
                })
                .collect(),
        }
    }
}

/// `[server]`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerConfig {
    /// Listen address, e.g. `127.0.0.1:7878`.
    pub listen: Option<String>,
    /// Data directory (SQLite file lives here).
    pub data_dir: Option<PathBuf>,
    /// Env var holding the API token required for non-loopback binds (default `KNIFE_API_TOKEN`).
    pub api_token_env: Option<String>,
    /// Resumes after a restart allowed per piece of claimed work before it is ended
    /// with an `aborted` error (default 10; SPEC.md EXEC-08). Env `KNIFE_MAX_RESUME_ATTEMPTS`.
    pub max_resume_attempts: Option<u32>,
}

/// Longest duration any `*_secs` key accepts: 30 days. Larger values are clamped to it
/// (a timer that far out is "never" in practice, and unbounded values overflow the
/// monotonic clock).
pub const MAX_DURATION_SECS: u64 = 30 * 24 * 60 * 60;

/// `secs` seconds, clamped to [`MAX_DURATION_SECS`].
pub fn clamped_secs(secs: u64) -> std::time::Duration {
    std::time::Duration::from_secs(secs.min(MAX_DURATION_SECS))
}

/// `[sessions]`: how long provider sessions live (SPEC.md MGR) and how the reaper
/// finds stale ones (REAP). Every key is optional; seconds, at most
/// [`MAX_DURATION_SECS`] (30 days; larger values are clamped).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SessionsConfig {
    /// An idle session (no turn, no activity) is released after this long (default 1800).
    pub idle_timeout_secs: Option<u64>,
    /// Pending background work defers an idle release at most this long (default 14400).
    pub max_idle_pin_secs: Option<u64>,
    /// A running turn with no provider event for this long is interrupted and failed
    /// (default 900; 0 = never).
    pub turn_stall_timeout_secs: Option<u64>,
    /// Time between two sweeps of the stale-session reaper (default 60).
    pub sweep_interval_secs: Option<u64>,
    /// A session unseen this long, whose thread has no active run, is stopped by the
    /// reaper (default 1800).
    pub inactivity_threshold_secs: Option<u64>,
}

impl SessionsConfig {
    /// The session manager's options (defaults for unset keys; no MCP).
    pub fn manager_options(&self) -> knife_runtime::SessionManagerOptions {
        let mut options = knife_runtime::SessionManagerOptions::default();
        if let Some(s) = self.idle_timeout_secs {
            options.idle_timeout = clamped_secs(s);
        }
        if let Some(s) = self.max_idle_pin_secs {
            options.max_idle_pin = clamped_secs(s);
        }
        if let Some(s) = self.turn_stall_timeout_secs {
            options.turn_stall_timeout = clamped_secs(s);
        }
        options
    }

    /// The reaper's options (defaults for unset keys).
    pub fn reaper_options(&self) -> knife_runtime::reaper::ReaperOptions {
        let mut options = knife_runtime::reaper::ReaperOptions::default();
        if let Some(s) = self.sweep_interval_secs {
            options.sweep_interval = clamped_secs(s.max(1));
        }
        if let Some(s) = self.inactivity_threshold_secs {
            options.inactivity_threshold = clamped_secs(s);
        }
        options
    }
}

/// One provider instance (`[providers.<id>]`).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProviderConfig {
    /// `openai-chat` (OpenAI Chat Completions and compatible servers: Ollama, vLLM,
    /// llama.cpp), `anthropic` (Anthropic Messages) or `openai-responses` (OpenAI
    /// Responses). See [`DRIVERS`].
    pub driver: String,
    /// API base URL including the version path, e.g. `https://api.openai.com/v1`.
    /// Empty or absent: the driver's default ([`DRIVERS`]).
    #[serde(default)]
    pub base_url: String,
    /// Default model of the instance. Required for the built-in agent's drivers;
    /// external runtimes (`codex`, `acp`) may leave it out to use their own default.
    #[serde(default)]
    pub model: String,
    /// Name of the env var holding the API key (none for local servers).
    pub api_key_env: Option<String>,
    /// System prompt override for the built-in agent.
    pub system_prompt: Option<String>,
    /// Seconds to establish a connection (default 10).
    pub connect_timeout_secs: Option<u64>,
    /// Seconds of silence from the endpoint before the run fails (default 300; reasoning
    /// models may think for minutes before their first byte).
    pub idle_timeout_secs: Option<u64>,
    /// The model's context window in tokens (default 128 000; 0 turns the
    /// usage-based compaction check off; PROC-02).
    #[serde(default)]
    pub context_limit: Option<u64>,
    /// The model's output token limit (tokens). The `anthropic` driver sends it
    /// as `max_tokens`, which Anthropic requires (8192 when unset); the other
    /// drivers send no cap. The built-in agent also reserves it in the context
    /// window: the history is compacted once a step's usage reaches
    /// `context_limit - output_limit` (default reserve 32 000; PROC-02).
    pub output_limit: Option<u32>,
    /// Model calls per step when the provider fails transiently, the first one
    /// included (default 8; 1 = never retry; PROC-11).
    #[serde(default)]
    pub max_retry_attempts: Option<u32>,
    /// `openai-responses` only: `reasoning.effort` (`minimal`, `low`, `medium`,
    /// `high`) for reasoning models. Unset: not sent.
    pub reasoning_effort: Option<String>,
    /// `openai-responses` only: `reasoning.summary` (`auto`, `concise`,
    /// `detailed`); reasoning models stream summaries only when this is set.
    pub reasoning_summary: Option<String>,
    /// External runtimes ([`EXTERNAL_DRIVERS`]): the program to run (looked up on
    /// `PATH` unless it has a slash; `codex` defaults to `codex`, `acp` requires it).
    pub command: Option<String>,
    /// External runtimes: the program's arguments (e.g. `["--acp"]`). Empty: the
    /// driver's default (`codex`: `app-server` with the plugin/app/update features off).
    #[serde(default)]
    pub args: Vec<String>,
    /// External runtimes: variables set for the program on top of knife's
    /// environment (knife's own `KNIFE_*` variables are removed), e.g. `CODEX_HOME`.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// `codex` only: `approvalPolicy` of new threads (`untrusted`, `on-request`,
    /// `never`; default `on-request`). Approvals become runtime requests.
    pub approval_policy: Option<String>,
    /// `codex` only: sandbox of new threads (`read-only`, `workspace-write`,
    /// `danger-full-access`; default `workspace-write`).
    pub sandbox: Option<String>,
}

impl ProviderConfig {
    /// True for drivers of external runtimes ([`EXTERNAL_DRIVERS`]).
    pub fn is_external(&self) -> bool {
        EXTERNAL_DRIVERS.contains(&self.driver.as_str())
    }

    /// The default `base_url` of `driver`, or `None` for an unknown driver.
    pub fn default_base_url(driver: &str) -> Option<&'static str> {
        DRIVERS
            .iter()
            .find(|(name, _)| *name == driver)
            .map(|(_, url)| *url)
    }
}

impl Config {
    /// Loads `path` if given, else `$KNIFE_CONFIG`, else `./knife.toml`, else
    /// `$XDG_CONFIG_HOME/knife/knife.toml`; a missing default file is an empty config.
    /// Then applies env overrides and fills the default `openai` instance when none is set.
    pub fn load(path: Option<&Path>) -> anyhow::Result<Config> {
        let explicit = path
            .map(Path::to_path_buf)
            .or_else(|| std::env::var_os("KNIFE_CONFIG").map(PathBuf::from));
        let candidate = match explicit {
            Some(p) => Some(p),
            None => [
                Some(PathBuf::from("knife.toml")),
                config_home().map(|d| d.join("knife/knife.toml")),
            ]
            .into_iter()
            .flatten()
            .find(|p| p.is_file()),
        };
        let mut config = match candidate {
            Some(p) => Self::parse_file(&p)?,
            None => Config::default(),
        };
        config.apply_env(|k| std::env::var(k).ok());
        Ok(config)
    }

    /// A config with one `openai-chat` instance `id` at `base_url` serving `model`
    /// (no API key): what the demo and the benchmarks point at the mock LLM.
    pub fn single_instance(id: &str, base_url: String, model: &str) -> Config {
        let mut config = Config::default();
        config.providers.insert(
            id.to_owned(),
            ProviderConfig {
                driver: "openai-chat".into(),
                base_url,
                model: model.to_owned(),
                api_key_env: None,
                system_prompt: None,
                connect_timeout_secs: None,
                idle_timeout_secs: None,
                context_limit: None,
                output_limit: None,
                max_retry_attempts: None,
                reasoning_effort: None,
                reasoning_summary: None,
                ..ProviderConfig::default()
            },
        );
        config
    }

    /// Parses one file. Errors name the file and the offending key.
    pub fn parse_file(path: &Path) -> anyhow::Result<Config> {
        let text = std::fs::read_to_string(path).with_context(|| {
            format!(
                "cannot read config file {}; check the path given to --config",
                path.display()
            )
        })?;
        let mut config: Config = toml::from_str(&text)
            .with_context(|| format!("invalid config file {}", path.display()))?;
        PermissionRules::new(config.permissions.clone())
            .with_context(|| format!("invalid [[permissions]] in {}", path.display()))?;
        let base = path.parent().unwrap_or(Path::new("."));
        for project in &mut config.projects {
            if project.root.is_relative() {
                project.root = base.join(&project.root);
            }
            PermissionRules::new(project.permissions.clone()).with_context(|| {
                format!(
                    "invalid [[projects.permissions]] of project {} in {}",
                    project.root.display(),
                    path.display()
                )
            })?;
        }
        for (id, p) in config.providers.iter_mut() {
            let Some(default_url) = ProviderConfig::default_base_url(&p.driver) else {
                bail!(
                    "provider `{id}` in {} has driver `{}`; supported drivers: {}",
                    path.display(),
                    p.driver,
                    DRIVERS
                        .iter()
                        .map(|(name, _)| *name)
                        .collect::<Vec<_>>()
                        .join(", ")
                );
            };
            if p.base_url.trim().is_empty() {
                p.base_url = default_url.to_owned();
            }
            if p.driver == "acp" {
                if p.command.as_deref().is_none_or(|c| c.trim().is_empty()) {
                    bail!(
                        "provider `{id}` in {} has driver `acp` but no `command`; set the agent \
                         program, e.g. command = \"claude-agent-acp\" or command = \"gemini\" \
                         with args = [\"--acp\"]",
                        path.display()
                    );
                }
            } else if !p.is_external() && p.model.trim().is_empty() {
                bail!(
                    "provider `{id}` in {} has no `model`; set the model the instance serves, \
                     e.g. model = \"gpt-4o-mini\"",
                    path.display()
                );
            }
        }
        Ok(config)
    }

    /// The per-project rule lists for the tool policy: each `[[projects]]` root
    /// (canonicalized when it exists) with the global rules followed by its own.
    /// A root that does not exist is kept as written, with a warning.
    ///
    /// Errors: an invalid glob (normally caught by [`Config::parse_file`]).
    pub fn project_permissions(&self) -> anyhow::Result<Vec<(PathBuf, PermissionRules)>> {
        let global = PermissionRules::new(self.permissions.clone())
            .context("invalid [[permissions]] in the config")?;
        self.projects
            .iter()
            .filter(|p| !p.permissions.is_empty())
            .map(|p| {
                let root = std::fs::canonicalize(&p.root).unwrap_or_else(|e| {
                    tracing::warn!(
                        root = %p.root.display(), error = %e,
                        "a [[projects]] root of the config cannot be resolved; its rules apply \
                         only to a project at exactly this path"
                    );
                    p.root.clone()
                });
                let rules = global.then(p.permissions.clone()).with_context(|| {
                    format!(
                        "invalid [[projects.permissions]] of project {}",
                        p.root.display()
                    )
                })?;
                Ok((root, rules))
            })
            .collect()
    }

    /// Env overrides: `KNIFE_DEFAULT_PROVIDER`, `KNIFE_LISTEN`, and per instance
    /// `KNIFE_PROVIDER_<ID>_BASE_URL` / `_MODEL` (id upper-cased, `-` → `_`). With no
    /// instance configured, an `openai` instance is made from `OPENAI_BASE_URL`
    /// (default `https://api.openai.com/v1`), `KNIFE_MODEL` (default `gpt-4o-mini`) and
    /// the key in `OPENAI_API_KEY`.
    pub fn apply_env(&mut self, var: impl Fn(&str) -> Option<String>) {
        if self.providers.is_empty() {
            self.providers.insert(
                "openai".into(),
                ProviderConfig {
                    driver: "openai-chat".into(),
                    base_url: var("OPENAI_BASE_URL")
                        .unwrap_or_else(|| "https://api.openai.com/v1".into()),
                    model: var("KNIFE_MODEL").unwrap_or_else(|| "gpt-4o-mini".into()),
                    api_key_env: Some("OPENAI_API_KEY".into()),
                    system_prompt: None,
                    connect_timeout_secs: None,
                    idle_timeout_secs: None,
                    context_limit: None,
                    output_limit: None,
                    max_retry_attempts: None,
                    reasoning_effort: None,
                    reasoning_summary: None,
                    ..ProviderConfig::default()
                },
            );
        }
        for (id, p) in self.providers.iter_mut() {
            let key = id.to_uppercase().replace('-', "_");
            if let Some(v) = var(&format!("KNIFE_PROVIDER_{key}_BASE_URL")) {
                p.base_url = v;
            }
            if let Some(v) = var(&format!("KNIFE_PROVIDER_{key}_MODEL")) {
                p.model = v;
            }
        }
        if let Some(v) = var("KNIFE_DEFAULT_PROVIDER") {
            self.default_provider = Some(v);
        }
        if let Some(v) = var("KNIFE_LISTEN") {
            self.server.listen = Some(v);
        }
        if let Some(n) = var("KNIFE_MAX_RESUME_ATTEMPTS").and_then(|v| v.trim().parse().ok()) {
            self.server.max_resume_attempts = Some(n);
        }
    }

    /// The default instance id (see [`Config::default_provider`]).
    pub fn default_instance(&self) -> anyhow::Result<String> {
        let id = match &self.default_provider {
            Some(id) => id.clone(),
            None if self.providers.len() == 1 => {
                self.providers.keys().next().cloned().unwrap_or_default()
            }
            None => "openai".into(),
        };
        if !self.providers.contains_key(&id) {
            let configured = self.providers.keys().cloned().collect::<Vec<_>>();
            if self.default_provider.is_none() {
                bail!(
                    "knife.toml configures several provider instances ({}) and no \
                     default_provider; add default_provider = \"{}\" at the top of knife.toml \
                     (before the first [table]): threads that name no provider use it",
                    configured.join(", "),
                    configured.first().map(String::as_str).unwrap_or("openai")
                );
            }
            bail!(
                "default provider `{id}` is not configured; configured: {}. Set default_provider in knife.toml",
                configured.join(", ")
            );
        }
        Ok(id)
    }

    /// Makes `provider` the default instance when the config names none and
    /// `provider` is configured: `knife run --provider X` serving in-process needs
    /// no `default_provider` when the config has several instances.
    pub fn default_to(&mut self, provider: Option<&str>) {
        if self.default_provider.is_none()
            && let Some(id) = provider.filter(|id| self.providers.contains_key(*id))
        {
            self.default_provider = Some(id.to_owned());
        }
    }

    /// The listen address: `flag`, else the config, else [`DEFAULT_LISTEN`].
    pub fn listen(&self, flag: Option<&str>) -> anyhow::Result<SocketAddr> {
        let text = flag
            .map(str::to_owned)
            .or_else(|| self.server.listen.clone())
            .unwrap_or_else(|| DEFAULT_LISTEN.into());
        text.parse().with_context(|| {
            format!("invalid listen address `{text}`; use HOST:PORT such as 127.0.0.1:7878")
        })
    }

    /// The data directory: `flag`, else the config, else `$XDG_DATA_HOME/knife`
    /// (`~/.local/share/knife`).
    pub fn data_dir(&self, flag: Option<&Path>) -> anyhow::Result<PathBuf> {
        if let Some(p) = flag
            .map(Path::to_path_buf)
            .or_else(|| self.server.data_dir.clone())
        {
            return Ok(p);
        }
        let base = std::env::var_os("XDG_DATA_HOME")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/share")))
            .context("cannot find a data directory: set --data-dir, XDG_DATA_HOME or HOME")?;
        Ok(base.join("knife"))
    }
}

fn config_home() -> Option<PathBuf> {
    std::env::var_os("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn access_settings_are_read_with_project_overrides() {
        let c: Config = toml::from_str(
            "agent_browser_access = false\n\
             [[projects]]\nroot = \"/w\"\nagent_browser_access = true\nagent_device_access = true",
        )
        .unwrap();
        let s = c.access_settings();
        assert!(!s.agent_browser_access);
        assert!(!s.agent_device_access);
        assert_eq!(s.projects["/w"].agent_browser_access, Some(true));
        assert_eq!(s.projects["/w"].agent_device_access, Some(true));
        let d = Config::default().access_settings();
        assert!(d.agent_browser_access && !d.agent_device_access);
    }

    #[test]
    fn parses_instances_and_applies_env_overrides() {
        let mut c: Config = toml::from_str(
            r#"
            default_provider = "local"
            [providers.local]
            driver = "openai-chat"
            base_url = "http://127.0.0.1:11434/v1"
            model = "llama3.2"
            "#,
        )
        .unwrap();
        c.apply_env(|k| (k == "KNIFE_PROVIDER_LOCAL_MODEL").then(|| "qwen3".to_owned()));
        assert_eq!(c.providers["local"].model, "qwen3");
        assert_eq!(c.default_instance().unwrap(), "local");
        assert_eq!(
            c.providers.len(),
            1,
            "no implicit openai instance when one is configured"
        );
    }

    #[test]
    fn context_limits_and_retry_budget_are_optional_per_instance() {
        let c: Config = toml::from_str(
            "[providers.a]\ndriver='openai-chat'\nbase_url='x'\nmodel='m'\n\
             context_limit=8192\noutput_limit=1024\nmax_retry_attempts=3\n\
             [providers.b]\ndriver='openai-chat'\nbase_url='y'\nmodel='m'",
        )
        .unwrap();
        let a = &c.providers["a"];
        assert_eq!(
            (a.context_limit, a.output_limit, a.max_retry_attempts),
            (Some(8192), Some(1024), Some(3))
        );
        let b = &c.providers["b"];
        assert_eq!(
            (b.context_limit, b.output_limit, b.max_retry_attempts),
            (None, None, None)
        );
    }

    #[test]
    fn no_file_gives_an_openai_instance_from_env() {
        let mut c = Config::default();
        c.apply_env(|k| (k == "OPENAI_BASE_URL").then(|| "http://x/v1".to_owned()));
        assert_eq!(c.providers["openai"].base_url, "http://x/v1");
        assert_eq!(c.default_instance().unwrap(), "openai");
    }

    #[test]
    fn sessions_settings_default_and_override() {
        use std::time::Duration;
        let defaults = SessionsConfig::default();
        let m = defaults.manager_options();
        assert_eq!(m.idle_timeout, Duration::from_secs(1800));
        assert_eq!(m.max_idle_pin, Duration::from_secs(14_400));
        assert_eq!(m.turn_stall_timeout, Duration::from_secs(900));
        let r = defaults.reaper_options();
        assert_eq!(r.sweep_interval, Duration::from_secs(60));
        assert_eq!(r.inactivity_threshold, Duration::from_secs(1800));

        let c: Config = toml::from_str(
            "[sessions]\nidle_timeout_secs = 5\nmax_idle_pin_secs = 6\nturn_stall_timeout_secs = 0\n\
             sweep_interval_secs = 7\ninactivity_threshold_secs = 8\n",
        )
        .unwrap();
        let m = c.sessions.manager_options();
        assert_eq!(m.idle_timeout, Duration::from_secs(5));
        assert_eq!(m.max_idle_pin, Duration::from_secs(6));
        assert!(m.turn_stall_timeout.is_zero(), "0 turns the watchdog off");
        let r = c.sessions.reaper_options();
        assert_eq!(r.sweep_interval, Duration::from_secs(7));
        assert_eq!(r.inactivity_threshold, Duration::from_secs(8));
        let err = toml::from_str::<Config>("[sessions]\nidle_timeout = 5\n").unwrap_err();
        assert!(err.to_string().contains("idle_timeout"), "{err}");
    }

    /// Huge durations are clamped to 30 days instead of overflowing `Instant + d`.
    #[test]
    fn mgr_20_huge_session_durations_are_clamped_to_30_days() {
        let c: Config = toml::from_str(&format!(
            "[sessions]\nidle_timeout_secs = {max}\nmax_idle_pin_secs = {max}\n\
             turn_stall_timeout_secs = {max}\nsweep_interval_secs = {max}\n\
             inactivity_threshold_secs = {max}\n\n\
             [providers.a]\ndriver='openai-chat'\nbase_url='x'\nmodel='m'\n\
             connect_timeout_secs = {max}\nidle_timeout_secs = {max}\n",
            max = u64::MAX
        ))
        .unwrap();
        let limit = std::time::Duration::from_secs(MAX_DURATION_SECS);
        let m = c.sessions.manager_options();
        let r = c.sessions.reaper_options();
        for d in [
            m.idle_timeout,
            m.max_idle_pin,
            m.turn_stall_timeout,
            r.sweep_interval,
            r.inactivity_threshold,
        ] {
            assert_eq!(d, limit);
            assert!(tokio::time::Instant::now().checked_add(d).is_some());
        }
        let t = crate::providers::timeouts(&c.providers["a"]);
        assert_eq!((t.connect, t.idle), (limit, limit));
    }

    #[test]
    fn unknown_keys_are_rejected_with_the_key_name() {
        let err = toml::from_str::<Config>(
            "[providers.a]\ndriver='openai-chat'\nbase_url='x'\nmodel='m'\nbogus=1",
        )
        .unwrap_err();
        assert!(err.to_string().contains("bogus"), "{err}");
    }

    #[test]
    fn anthropic_and_responses_drivers_parse_with_default_base_urls() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("knife.toml");
        std::fs::write(
            &path,
            r#"
            [providers.claude]
            driver = "anthropic"
            model = "claude-sonnet-4-5"
            api_key_env = "ANTHROPIC_API_KEY"
            output_limit = 4096

            [providers.gpt]
            driver = "openai-responses"
            model = "gpt-5"
            reasoning_summary = "auto"

            [providers.proxy]
            driver = "anthropic"
            base_url = "http://127.0.0.1:9/v1"
            model = "m"
            "#,
        )
        .unwrap();
        let c = Config::parse_file(&path).unwrap();
        assert_eq!(
            c.providers["claude"].base_url,
            "https://api.anthropic.com/v1"
        );
        assert_eq!(c.providers["claude"].output_limit, Some(4096));
        assert_eq!(c.providers["gpt"].base_url, "https://api.openai.com/v1");
        assert_eq!(
            c.providers["gpt"].reasoning_summary.as_deref(),
            Some("auto")
        );
        assert_eq!(c.providers["proxy"].base_url, "http://127.0.0.1:9/v1");
    }

    #[test]
    fn several_instances_without_default_provider_say_how_to_pick_one() {
        let mut c: Config = toml::from_str(
            "[providers.cat]\ndriver = 'acp'\ncommand = 'cat'\n\
             [providers.cx]\ndriver = 'codex'\n",
        )
        .unwrap();
        let err = c.default_instance().unwrap_err().to_string();
        assert!(
            err.contains("several provider instances (cat, cx)"),
            "{err}"
        );
        assert!(err.contains("default_provider = \"cat\""), "{err}");
        // `knife run --provider cx` picks the default it needs in-process ...
        c.default_to(Some("cx"));
        assert_eq!(c.default_instance().unwrap(), "cx");
        // ... but never overrides the config's own choice or names an unknown one.
        c.default_to(Some("cat"));
        assert_eq!(c.default_instance().unwrap(), "cx");
        let mut d: Config = toml::from_str(
            "[providers.a]\ndriver = 'acp'\ncommand = 'a'\n[providers.b]\ndriver = 'codex'\n",
        )
        .unwrap();
        d.default_to(Some("nope"));
        assert!(d.default_instance().is_err());
    }

    #[test]
    fn an_unknown_driver_names_the_supported_ones() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("knife.toml");
        std::fs::write(&path, "[providers.x]\ndriver = 'gemini'\nmodel = 'm'\n").unwrap();
        let err = Config::parse_file(&path).unwrap_err().to_string();
        assert!(
            err.contains("openai-chat, anthropic, openai-responses, acp, codex"),
            "{err}"
        );
    }

    #[test]
    fn a_codex_instance_needs_no_base_url_or_model_but_agent_drivers_need_a_model() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("knife.toml");
        std::fs::write(
            &path,
            "[providers.cx]\ndriver = 'codex'\ncommand = 'codex'\nargs = ['app-server']\n\
             [providers.cx.env]\nCODEX_HOME = '/srv/codex'\n",
        )
        .unwrap();
        let c = Config::parse_file(&path).unwrap();
        let cx = &c.providers["cx"];
        assert!(cx.is_external());
        assert_eq!(cx.base_url, "");
        assert_eq!(cx.model, "");
        assert_eq!(cx.env["CODEX_HOME"], "/srv/codex");
        std::fs::write(&path, "[providers.x]\ndriver = 'openai-chat'\n").unwrap();
        let err = Config::parse_file(&path).unwrap_err().to_string();
        assert!(err.contains("has no `model`"), "{err}");
    }

    #[test]
    fn permission_rules_are_read_in_order_and_invalid_globs_refused() {
        use knife_agent::permissions::PermissionAction;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("knife.toml");
        std::fs::write(
            &path,
            r#"
            [[permissions]]
            tool = "bash"
            action = "deny"

            [[permissions]]
            tool = "bash"
            pattern = "git *"
            action = "allow"
            "#,
        )
        .unwrap();
        let c = Config::parse_file(&path).unwrap();
        let rules = PermissionRules::new(c.permissions).unwrap();
        assert_eq!(
            rules.evaluate("bash", "git status", true).action,
            PermissionAction::Allow
        );
        assert_eq!(
            rules.evaluate("bash", "curl x", true).action,
            PermissionAction::Deny
        );

        std::fs::write(
            &path,
            "[[permissions]]\ntool = 'bash'\npattern = '[x'\naction = 'deny'\n",
        )
        .unwrap();
        let err = format!("{:#}", Config::parse_file(&path).unwrap_err());
        assert!(
            err.contains("invalid [[permissions]]") && err.contains("[x"),
            "{err}"
        );
        std::fs::write(&path, "[[permissions]]\ntool = 'bash'\naction = 'maybe'\n").unwrap();
        assert!(Config::parse_file(&path).is_err());
    }

    #[test]
    fn approvals_project_permission_overrides_come_after_the_global_rules() {
        use knife_agent::permissions::PermissionAction;
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("app")).unwrap();
        let path = dir.path().join("knife.toml");
        std::fs::write(
            &path,
            r#"
            [[permissions]]
            tool = "bash"
            action = "deny"

            [[projects]]
            root = "app"

            [[projects.permissions]]
            tool = "bash"
            pattern = "cargo *"
            action = "allow"

            [[projects]]
            root = "/no/such/folder"
            "#,
        )
        .unwrap();
        let c = Config::parse_file(&path).unwrap();
        assert_eq!(c.projects.len(), 2);
        let per_project = c.project_permissions().unwrap();
        assert_eq!(per_project.len(), 1, "projects without rules are skipped");
        let (root, rules) = &per_project[0];
        assert_eq!(
            root,
            &std::fs::canonicalize(dir.path().join("app")).unwrap()
        );
        assert_eq!(
            rules.evaluate("bash", "cargo test", true).action,
            PermissionAction::Allow
        );
        assert_eq!(
            rules.evaluate("bash", "curl x", true).action,
            PermissionAction::Deny
        );

        std::fs::write(
            &path,
            "[[projects]]\nroot = '.'\n[[projects.permissions]]\ntool = '[x'\naction = 'deny'\n",
        )
        .unwrap();
        let err = format!("{:#}", Config::parse_file(&path).unwrap_err());
        assert!(err.contains("[[projects.permissions]]"), "{err}");
    }
}
