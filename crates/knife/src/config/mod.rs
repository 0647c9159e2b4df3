//! `knife.toml`: provider instances and server settings, with env-var overrides.
//! Precedence: flags > environment > file > defaults (docs/config.md).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use knife_agent::permissions::{PermissionRule, PermissionRules};
use serde::Deserialize;

pub mod budgets;
pub mod keys;
pub mod prices;
pub mod providers;
pub use providers::ProviderConfig;

/// Default listen address of `knife serve` (loopback only).
pub const DEFAULT_LISTEN: &str = "127.0.0.1:7878";

/// The whole configuration file.
#[derive(Clone, Debug, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Instance used by threads that name none. Default: the only instance, or `openai`.
    pub default_provider: Option<String>,
    #[serde(default)]
    pub server: ServerConfig,
    /// `[sessions]`: provider session lifetimes and the stale-session reaper.
    #[serde(default)]
    pub sessions: SessionsConfig,
    /// `[store]`: where the event log lives (default SQLite in the data dir).
    #[serde(default)]
    pub store: StoreConfig,
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
    /// Model prices in USD per million tokens (`[prices."gpt-4o"] input = 2.5,
    /// cached_input = 1.25, output = 10`), over knife's default table
    /// (`knife_protocol::pricing::DEFAULT_PRICES`); a model is priced by its exact
    /// name, else the longest entry prefixing it (TURN-06).
    #[serde(default)]
    pub prices: BTreeMap<String, prices::PriceConfig>,
    /// `[checkpoints]`: what run checkpoints leave out (CHG-01, CHG-06).
    #[serde(default)]
    pub checkpoints: CheckpointsConfig,
    /// `[budgets]`: limits in tokens or USD per thread, project and day (TURN-07).
    #[serde(default)]
    pub budgets: budgets::BudgetsConfig,
    /// `[telemetry]`: OTLP export of knife's spans (runs, turns, provider sessions, HTTP
    /// requests, model calls).
    #[serde(default)]
    pub telemetry: TelemetryConfig,
    /// The file this config was read from (hidden from sandboxed commands, SEC-01).
    #[serde(skip)]
    pub source: Option<PathBuf>,
}

/// `[telemetry]`: where `knife serve` sends its traces.
#[derive(Clone, Debug, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TelemetryConfig {
    /// OTLP/HTTP endpoint (JSON encoding) of an OpenTelemetry collector, e.g.
    /// `http://127.0.0.1:4318`: spans are POSTed to `<endpoint>/v1/traces` (an endpoint
    /// already ending in `/v1/traces` is used as is). Unset: no export.
    pub otlp_endpoint: Option<String>,
}

/// `[checkpoints]`: knife's own git checkpoints of working trees before and after
/// each run (SPEC.md CHG-01/02; docs/2026-12-01-checkpoints.md).
#[derive(Clone, Debug, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CheckpointsConfig {
    /// `false` turns checkpoints off (no diff, no revert). Default true.
    pub enabled: Option<bool>,
    /// Extra excludes (gitignore syntax) for every project, after `.gitignore` and
    /// the defaults (`node_modules`, `target`, `.venv`, `dist`, `build`, …).
    #[serde(default)]
    pub exclude: Vec<String>,
    /// Files larger than this many bytes are left out (listed as skipped). Default 50 MiB.
    pub max_file_bytes: Option<u64>,
    /// Unified diffs are cut at this many bytes, with a note. Default 1 MiB.
    pub max_diff_bytes: Option<usize>,
}

impl Config {
    /// Canonical roots of the projects whose threads default to a worktree (CHG-07).
    pub fn worktree_roots(&self) -> Vec<String> {
        self.projects
            .iter()
            .filter(|p| p.worktree == Some(true))
            .map(|p| p.resolved_root().display().to_string())
            .collect()
    }

    /// The checkpoint options of the config: global and per-project excludes, caps.
    pub fn checkpoint_options(&self) -> knife_workspace::CheckpointOptions {
        let defaults = knife_workspace::CheckpointOptions::default();
        knife_workspace::CheckpointOptions {
            exclude: self.checkpoints.exclude.clone(),
            max_file_bytes: self
                .checkpoints
                .max_file_bytes
                .unwrap_or(defaults.max_file_bytes),
            max_diff_bytes: self
                .checkpoints
                .max_diff_bytes
                .unwrap_or(defaults.max_diff_bytes),
            root_exclude: self
                .projects
                .iter()
                .filter(|p| !p.checkpoint_exclude.is_empty())
                .map(|p| (p.resolved_root(), p.checkpoint_exclude.clone()))
                .collect(),
        }
    }
}

/// `[[projects]]`: settings of the project whose root folder is `root`.
#[derive(Clone, Debug, Deserialize, schemars::JsonSchema)]
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
    /// Extra checkpoint excludes (gitignore syntax) of this project (CHG-01).
    #[serde(default)]
    pub checkpoint_exclude: Vec<String>,
    /// New threads of this project get their own git worktree unless the request
    /// says `worktree: false` (CHG-07). Default false.
    pub worktree: Option<bool>,
    /// Variables set for the commands the model runs in this project (`bash`), on
    /// top of the allowlist they get from knife's environment (SEC-02).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// The sandbox of this project's commands (SEC-01): `sandbox = "off"` (the
    /// explicit opt-out, warned in the log and on the thread), or
    /// `sandbox.network = true` (keep the network). Default: sandboxed, no network.
    pub sandbox: Option<ProjectSandboxConfig>,
}

/// `[[projects]] sandbox`: `"off"` / `"on"`, or a table `{ network = true }`.
#[derive(Clone, Debug, Deserialize, schemars::JsonSchema)]
#[serde(untagged)]
pub enum ProjectSandboxConfig {
    /// `sandbox = "off"` or `sandbox = "on"`.
    Mode(String),
    /// `sandbox.network = true` (and `sandbox.mode = "off"|"on"`).
    Table {
        /// `off` or `on` (default `on`).
        #[serde(default)]
        mode: Option<String>,
        /// Commands keep the network (default false).
        #[serde(default)]
        network: bool,
    },
}

impl ProjectSandboxConfig {
    /// The settings, or what is wrong with them.
    pub fn settings(&self) -> Result<knife_process::sandbox::ProjectSandbox, String> {
        let (mode, network) = match self {
            ProjectSandboxConfig::Mode(m) => (Some(m.as_str()), false),
            ProjectSandboxConfig::Table { mode, network } => (mode.as_deref(), *network),
        };
        let off = match mode {
            None | Some("on") => false,
            Some("off") => true,
            Some(other) => {
                return Err(format!(
                    "sandbox = \"{other}\" is not a sandbox mode; use \"off\" (no sandbox, \
                     warned) or \"on\" (the default), or sandbox.network = true"
                ));
            }
        };
        Ok(knife_process::sandbox::ProjectSandbox { off, network })
    }
}

impl ProjectConfig {
    /// `root` canonicalized when it exists (projects are stored by canonical root),
    /// else as written.
    pub fn resolved_root(&self) -> PathBuf {
        std::fs::canonicalize(&self.root).unwrap_or_else(|_| self.root.clone())
    }
}

impl Config {
    /// The MCP access settings (SPEC.md MCP-02..05, docs/2026-11-29-mcp.md); project overrides are keyed by the
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

/// `[store]` (SPEC.md SCALE-01).
#[derive(Clone, Debug, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StoreConfig {
    /// `postgres://user:password@host:port/database` runs knife on PostgreSQL;
    /// `sqlite:/path/knife.db` a SQLite file elsewhere; unset (the default): SQLite
    /// `knife.db` in the data dir. `knife serve --database` / `KNIFE_DATABASE_URL`
    /// override it.
    pub url: Option<String>,
    /// This node's id among the nodes sharing one database (SPEC SCALE-04): letters,
    /// digits, `-`, `_`, `.`; default `local`. `knife serve --node-id` / `KNIFE_NODE_ID`.
    pub node_id: Option<String>,
    /// Length of a thread lease in milliseconds (default 10000, at least 300): how
    /// long a dead node's claimed work waits before another node takes it over. Renewed
    /// every third of it.
    pub lease_ms: Option<u64>,
}

impl StoreConfig {
    /// The node this process writes as (SCALE-04).
    ///
    /// Errors: a node id with other characters, or a lease under 300 ms.
    pub fn node(&self) -> anyhow::Result<knife_store::NodeLeases> {
        let node = self.node_id.as_deref().unwrap_or(knife_store::LOCAL_NODE);
        if node.is_empty()
            || !node
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        {
            anyhow::bail!(
                "[store] node_id {node:?} is not a node id: use letters, digits, '-', '_' or '.' \
                 (e.g. the host name), one per node"
            );
        }
        let ttl = match self.lease_ms {
            None => knife_store::DEFAULT_LEASE_TTL,
            Some(ms) if ms >= 300 => std::time::Duration::from_millis(ms),
            Some(ms) => anyhow::bail!(
                "[store] lease_ms = {ms} is too short: a lease must outlast a few database \
                 round trips; use at least 300 (default 10000)"
            ),
        };
        Ok(knife_store::NodeLeases::new(node, ttl))
    }
}

/// `[server]`.
#[derive(Clone, Debug, Default, Deserialize, schemars::JsonSchema)]
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
    /// Connections open at once before new ones are refused with 503 (default
    /// 4096, above the 1,000 live subscribers the streaming target needs; SEC-04).
    /// Each takes a file descriptor: `knife serve` raises its soft `RLIMIT_NOFILE`
    /// to the hard limit and warns when the cap does not fit under it.
    pub max_connections: Option<usize>,
    /// Seconds a client has to send a request's head before its connection is
    /// closed (default 10; SEC-04).
    pub header_read_timeout_secs: Option<u64>,
}

impl ServerConfig {
    /// The server loop's bounds (defaults for unset keys).
    pub fn limits(&self) -> knife_server::ServerLimits {
        let mut limits = knife_server::ServerLimits::default();
        if let Some(n) = self.max_connections {
            limits.max_connections = n.max(1);
        }
        if let Some(s) = self.header_read_timeout_secs {
            limits.header_read_timeout = clamped_secs(s.max(1));
        }
        limits
    }
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
#[derive(Clone, Debug, Default, Deserialize, schemars::JsonSchema)]
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

impl Config {
    /// Loads `path` if given, else `$KNIFE_CONFIG`, else `./knife.toml`, else
    /// `$XDG_CONFIG_HOME/knife/knife.toml`; a missing default file is an empty config.
    /// Then applies env overrides and fills the default `openai` instance when none is set.
    pub fn load(path: Option<&Path>) -> anyhow::Result<Config> {
        let mut config = match Self::locate(path) {
            Some(p) => {
                let mut config = Self::parse_file(&p)?;
                config.source = std::fs::canonicalize(&p).ok().or(Some(p));
                config
            }
            None => Config::default(),
        };
        config.apply_env(|k| std::env::var(k).ok());
        Ok(config)
    }

    /// The file [`Config::load`] reads: `path`, else `$KNIFE_CONFIG`, else the first of
    /// `./knife.toml` and `$XDG_CONFIG_HOME/knife/knife.toml` that exists; `None`: no file.
    pub fn locate(path: Option<&Path>) -> Option<PathBuf> {
        let explicit = path
            .map(Path::to_path_buf)
            .or_else(|| std::env::var_os("KNIFE_CONFIG").map(PathBuf::from));
        match explicit {
            Some(p) => Some(p),
            None => [
                Some(PathBuf::from("knife.toml")),
                config_home().map(|d| d.join("knife/knife.toml")),
            ]
            .into_iter()
            .flatten()
            .find(|p| p.is_file()),
        }
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
        keys::check(&text)
            .map_err(|e| anyhow::anyhow!("invalid config file {}: {e}", path.display()))?;
        let mut config: Config = toml::from_str(&text)
            .with_context(|| format!("invalid config file {}", path.display()))?;
        PermissionRules::new(config.permissions.clone())
            .with_context(|| format!("invalid [[permissions]] in {}", path.display()))?;
        let base = path.parent().unwrap_or(Path::new("."));
        for project in &mut config.projects {
            if project.root.is_relative() {
                project.root = base.join(&project.root);
            }
            if let Some(sandbox) = &project.sandbox {
                sandbox.settings().map_err(|e| {
                    anyhow::anyhow!(
                        "invalid sandbox of project {} in {}: {e}",
                        project.root.display(),
                        path.display()
                    )
                })?;
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
            p.check(id, path)?;
        }
        config
            .budgets
            .budgets()
            .with_context(|| format!("invalid [budgets] in {}", path.display()))?;
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
mod tests;
