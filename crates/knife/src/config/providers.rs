//! `[providers.<id>]` of `knife.toml`: the drivers and one provider instance's
//! settings (built-in agent drivers and external runtimes, issue 7).

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::bail;
use serde::Deserialize;

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

/// One provider instance (`[providers.<id>]`).
#[derive(Clone, Debug, Default, Deserialize, schemars::JsonSchema)]
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

    /// Checks instance `id` of config file `path` and fills the driver's default
    /// `base_url`.
    ///
    /// Errors (naming the file and the instance, saying what to set): an unknown
    /// `driver`; `acp` without `command`; a built-in agent driver without `model`.
    pub fn check(&mut self, id: &str, path: &Path) -> anyhow::Result<()> {
        let Some(default_url) = ProviderConfig::default_base_url(&self.driver) else {
            bail!(
                "provider `{id}` in {} has driver `{}`; supported drivers: {}",
                path.display(),
                self.driver,
                DRIVERS
                    .iter()
                    .map(|(name, _)| *name)
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        };
        if self.base_url.trim().is_empty() {
            self.base_url = default_url.to_owned();
        }
        if self.driver == "acp" {
            if self.command.as_deref().is_none_or(|c| c.trim().is_empty()) {
                bail!(
                    "provider `{id}` in {} has driver `acp` but no `command`; set the agent \
                     program, e.g. command = \"claude-agent-acp\" or command = \"gemini\" \
                     with args = [\"--acp\"]",
                    path.display()
                );
            }
        } else if !self.is_external() && self.model.trim().is_empty() {
            bail!(
                "provider `{id}` in {} has no `model`; set the model the instance serves, \
                 e.g. model = \"gpt-4o-mini\"",
                path.display()
            );
        }
        Ok(())
    }

    /// The default `base_url` of `driver`, or `None` for an unknown driver.
    pub fn default_base_url(driver: &str) -> Option<&'static str> {
        DRIVERS
            .iter()
            .find(|(name, _)| *name == driver)
            .map(|(_, url)| *url)
    }
}
