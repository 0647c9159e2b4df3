//! `[providers.<id>]` of `knife.toml`: the drivers and one provider instance's
//! settings (built-in agent drivers and external runtimes, docs/2026-11-29-external-runtimes.md).

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::bail;
use knife_agent::{DEFAULT_CONTEXT_LIMIT, DEFAULT_OUTPUT_LIMIT};
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

/// Drivers of agent runtimes knife runs as child processes (codex app-server, ACP agents): an instance
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
    /// Built-in agent drivers only: `"auto"` (default) summarises the history when
    /// the context is full; `"off"` ends the run with a context-overflow error
    /// instead, sending no summary request (TURN-03). `true` / `false` are read
    /// as `"auto"` / `"off"`.
    #[serde(default)]
    pub compaction: Option<Compaction>,
    /// Built-in agent drivers only: compactions in a row that leave the context
    /// over `context_limit - output_limit` before the run fails saying the
    /// context cannot be reduced (default 2, at least 1; TURN-04).
    pub max_compactions: Option<u32>,
    /// Built-in agent drivers only: model calls per run before it fails without a
    /// final answer (default 50).
    pub max_steps: Option<u32>,
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

/// `compaction = "auto" | "off"` of a provider instance (TURN-03).
#[derive(Clone, Copy, Debug, PartialEq, Eq, schemars::JsonSchema)]
#[schemars(rename_all = "lowercase")]
pub enum Compaction {
    /// Summarise the history when the context is full (the default).
    Auto,
    /// Never summarise: an overflow ends the run with an error.
    Off,
}

impl<'de> Deserialize<'de> for Compaction {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = Compaction;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str(r#""auto" or "off""#)
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Compaction, E> {
                match v {
                    "auto" => Ok(Compaction::Auto),
                    "off" => Ok(Compaction::Off),
                    other => Err(E::custom(format!(
                        r#"compaction = "{other}" is not a mode; use "auto" (summarise the history when the context is full) or "off""#
                    ))),
                }
            }
            fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<Compaction, E> {
                Ok(if v { Compaction::Auto } else { Compaction::Off })
            }
        }
        deserializer.deserialize_any(Visitor)
    }
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
        if self.is_external() && (self.compaction.is_some() || self.max_compactions.is_some()) {
            bail!(
                "provider `{id}` in {} has driver `{}`, which manages its own context: \
                 `compaction` and `max_compactions` apply to the built-in agent's drivers \
                 (openai-chat, openai-responses, anthropic) only; remove them",
                path.display(),
                self.driver
            );
        }
        if !self.is_external()
            && let Some(warning) = self.check_limits(id, path)?
        {
            tracing::warn!("{warning}");
        }
        Ok(())
    }

    /// Checks that the output reserve leaves usable context (TURN-05) and returns
    /// a warning when it corrected the default reserve. `context_limit = 0` means
    /// no usage check: nothing to check.
    ///
    /// - An explicit `output_limit >= context_limit` is refused: every step would
    ///   compact. The error names both numbers and what to set.
    /// - Without `output_limit`, the default reserve (32 000 tokens) is meant for
    ///   large windows: when it is more than half of `context_limit`, the reserve
    ///   becomes a quarter of the window (`output_limit` is set to it) and the
    ///   warning names the numbers.
    pub fn check_limits(&mut self, id: &str, path: &Path) -> anyhow::Result<Option<String>> {
        let context = self.context_limit.unwrap_or(DEFAULT_CONTEXT_LIMIT);
        if context == 0 {
            return Ok(None);
        }
        if let Some(output) = self.output_limit {
            if u64::from(output) >= context {
                bail!(
                    "provider `{id}` in {}: output_limit = {output} leaves no usable context of \
                     context_limit = {context} (every step would have to compact); set \
                     output_limit below context_limit, e.g. output_limit = {}, or set \
                     context_limit to the model's real window (0 turns the usage check off)",
                    path.display(),
                    context / 4
                );
            }
            return Ok(None);
        }
        if DEFAULT_OUTPUT_LIMIT.saturating_mul(2) <= context {
            return Ok(None);
        }
        let reserve = context / 4;
        self.output_limit = Some(u32::try_from(reserve).unwrap_or(u32::MAX));
        Ok(Some(format!(
            "provider `{id}` in {}: context_limit = {context} is too small for the default \
             output reserve of {DEFAULT_OUTPUT_LIMIT} tokens (compaction would run at almost \
             every step); reserving {reserve} tokens instead. Set output_limit = {reserve} (or \
             the model's real output limit, below {context}) in [providers.{id}] to say so",
            path.display()
        )))
    }

    /// The default `base_url` of `driver`, or `None` for an unknown driver.
    pub fn default_base_url(driver: &str) -> Option<&'static str> {
        DRIVERS
            .iter()
            .find(|(name, _)| *name == driver)
            .map(|(_, url)| *url)
    }
}
