//! Provider instance → streaming LLM client, by `driver` (knife.toml
//! `[providers.<id>]`; drivers listed in [`crate::config::providers::DRIVERS`]).

use std::ffi::OsString;
use std::sync::Arc;

use anyhow::bail;
use knife_adapters::codex::CodexConfig;
use knife_llm::LlmClient;
use knife_llm::anthropic::AnthropicClient;
use knife_llm::http::HttpTimeouts;
use knife_llm::openai_chat::OpenAiChatClient;
use knife_llm::openai_responses::OpenAiResponsesClient;
use knife_protocol::ProviderInstanceId;

use crate::config::ProviderConfig;

/// The `codex` adapter config of instance `id` (`command`, `args` (empty: the
/// default), `env`, `model`, `approval_policy`, `sandbox`; the rest from
/// [`CodexConfig::new`]).
pub fn codex_config(id: &str, p: &ProviderConfig) -> CodexConfig {
    let mut config = CodexConfig::new(ProviderInstanceId::from(id));
    if let Some(command) = p.command.as_deref().filter(|c| !c.trim().is_empty()) {
        config.command = command.into();
    }
    if !p.args.is_empty() {
        config.args = p.args.iter().map(OsString::from).collect();
    }
    config.env = p
        .env
        .iter()
        .map(|(k, v)| (OsString::from(k), OsString::from(v)))
        .collect();
    if !p.model.trim().is_empty() {
        config.model = Some(p.model.clone());
    }
    if let Some(policy) = &p.approval_policy {
        config.approval_policy = Some(policy.clone());
    }
    if let Some(sandbox) = &p.sandbox {
        config.sandbox = Some(sandbox.clone());
    }
    config
}

/// Checks what a `codex` instance needs on this machine before its app-server is
/// ever started: a `CODEX_HOME` set in its `env` must be an existing folder (codex
/// exits at once otherwise, with a message knife would only see after its backtrace).
///
/// Errors: the folder is missing or not a folder; the message says how to make it.
pub fn check_codex_instance(id: &str, p: &ProviderConfig) -> anyhow::Result<()> {
    if let Some(home) = p.env.get("CODEX_HOME")
        && !std::path::Path::new(home).is_dir()
    {
        bail!(
            "provider `{id}` sets CODEX_HOME = \"{home}\" but that folder does not exist; create \
             it (mkdir -p {home}) and put codex's config.toml (its model provider) in it, or log \
             codex in there (CODEX_HOME={home} codex login)"
        );
    }
    Ok(())
}

/// The HTTP timeouts of an instance: 10 s to connect and 300 s of silence unless
/// `connect_timeout_secs` / `idle_timeout_secs` say otherwise (at least 1 s, at most
/// [`crate::config::MAX_DURATION_SECS`]).
pub fn timeouts(p: &ProviderConfig) -> HttpTimeouts {
    let mut timeouts = HttpTimeouts::default();
    if let Some(secs) = p.connect_timeout_secs {
        timeouts.connect = crate::config::clamped_secs(secs.max(1));
    }
    if let Some(secs) = p.idle_timeout_secs {
        timeouts.idle = crate::config::clamped_secs(secs.max(1));
    }
    timeouts
}

/// The Responses `reasoning` object from `reasoning_effort` / `reasoning_summary`
/// (`None` when neither is set).
fn responses_reasoning(p: &ProviderConfig) -> Option<serde_json::Value> {
    let mut reasoning = serde_json::Map::new();
    if let Some(effort) = &p.reasoning_effort {
        reasoning.insert("effort".into(), effort.clone().into());
    }
    if let Some(summary) = &p.reasoning_summary {
        reasoning.insert("summary".into(), summary.clone().into());
    }
    (!reasoning.is_empty()).then_some(serde_json::Value::Object(reasoning))
}

/// The client of instance `id`: `openai-chat` → Chat Completions (Bearer key),
/// `anthropic` → Anthropic Messages (`x-api-key`; `max_tokens` from
/// `output_limit`, else 8192), `openai-responses` → OpenAI Responses
/// (Bearer key; `reasoning` from `reasoning_effort` / `reasoning_summary`).
///
/// Errors: an unknown driver (a config built in code skips the file check).
pub fn llm_client(
    id: &str,
    p: &ProviderConfig,
    api_key: Option<String>,
) -> anyhow::Result<Arc<dyn LlmClient>> {
    let timeouts = timeouts(p);
    let base_url = if p.base_url.trim().is_empty() {
        ProviderConfig::default_base_url(&p.driver)
            .unwrap_or_default()
            .to_owned()
    } else {
        p.base_url.clone()
    };
    Ok(match p.driver.as_str() {
        "openai-chat" => Arc::new(OpenAiChatClient::with_timeouts(base_url, api_key, timeouts)),
        "anthropic" => {
            let mut client = AnthropicClient::with_timeouts(base_url, api_key, timeouts);
            if let Some(max) = p.output_limit {
                client.default_max_tokens = max.max(1);
            }
            Arc::new(client)
        }
        "openai-responses" => {
            let mut client = OpenAiResponsesClient::with_timeouts(base_url, api_key, timeouts);
            client.reasoning = responses_reasoning(p);
            Arc::new(client)
        }
        other => bail!(
            "provider `{id}` has driver `{other}`; supported drivers: openai-chat, anthropic, openai-responses"
        ),
    })
}

/// Names of knife's secret environment variables, which no child process (`bash`
/// commands, codex / ACP agent programs) inherits: every provider instance's
/// `api_key_env` and `[server] api_token_env`, sorted, without duplicates. An agent
/// instance's own `env` may set any of them again for its program.
pub fn secret_env_vars(config: &crate::config::Config) -> Vec<String> {
    let mut names: Vec<String> = config
        .providers
        .values()
        .filter_map(|p| p.api_key_env.clone())
        .chain(config.server.api_token_env.clone())
        .filter(|n| !n.trim().is_empty())
        .collect();
    names.sort();
    names.dedup();
    names
}

/// The variables an external runtime instance `p` (codex, ACP) does not inherit:
/// [`secret_env_vars`] except the instance's own `api_key_env` (its own key; its
/// `env` table may set any of the others explicitly).
pub fn agent_env_remove(config: &crate::config::Config, p: &ProviderConfig) -> Vec<String> {
    let mut names: Vec<String> = secret_env_vars(config)
        .into_iter()
        .filter(|name| p.api_key_env.as_ref() != Some(name))
        .collect();
    // SEC-02: of the rest of knife's environment, only what an agent needs passes
    // (knife_process::sandbox::env::agent_env: locale, PATH, HOME, XDG dirs, proxies,
    // CA certificates, its own key); GITHUB_TOKEN, AWS_* and the like do not.
    let own: Vec<String> = p.api_key_env.iter().cloned().collect();
    let allowed = knife_process::sandbox::env::agent_env(&own, &[]);
    names.extend(
        std::env::vars_os()
            .filter_map(|(name, _)| name.into_string().ok())
            .filter(|name| !allowed.iter().any(|(a, _)| a == name.as_str()))
            .filter(|name| !p.env.contains_key(name)),
    );
    names.sort();
    names.dedup();
    names
}

/// The `acp` adapter config of instance `id`: `command` (required), `args`, `env`;
/// its process groups are recorded in `groups`.
///
/// Errors: no `command` (a config built in code skips the file check).
pub fn acp_config(
    id: &str,
    p: &ProviderConfig,
    groups: knife_runtime::process_groups::ProcessGroups,
    clock: knife_runtime::SharedClock,
) -> anyhow::Result<knife_adapters::acp::AcpConfig> {
    let Some(command) = p.command.as_deref().filter(|c| !c.trim().is_empty()) else {
        bail!("provider `{id}` has driver `acp` but no `command`; set the agent program to run");
    };
    let mut config =
        knife_adapters::acp::AcpConfig::new(knife_protocol::ProviderInstanceId::from(id), command);
    config.args = p.args.iter().map(Into::into).collect();
    config.env = p.env.iter().map(|(k, v)| (k.into(), v.into())).collect();
    config.process_groups = Some(groups);
    config.clock = clock;
    Ok(config)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn instance(driver: &str) -> ProviderConfig {
        toml::from_str(&format!("driver = '{driver}'\nmodel = 'm'\n")).unwrap()
    }

    #[test]
    fn responses_reasoning_only_when_configured() {
        let mut p = instance("openai-responses");
        assert_eq!(responses_reasoning(&p), None);
        p.reasoning_summary = Some("auto".into());
        p.reasoning_effort = Some("low".into());
        assert_eq!(
            responses_reasoning(&p),
            Some(serde_json::json!({"effort": "low", "summary": "auto"}))
        );
    }

    #[test]
    fn a_codex_instance_maps_command_args_env_model_and_policies() {
        let p: ProviderConfig = toml::from_str(
            "driver = 'codex'\ncommand = '/opt/codex/bin/codex'\nargs = ['app-server']\n\
             model = 'mock-model'\napproval_policy = 'untrusted'\n[env]\nCODEX_HOME = '/var/lib/knife/codex'\n",
        )
        .unwrap();
        let c = codex_config("cx", &p);
        assert_eq!(c.provider_instance_id, ProviderInstanceId::from("cx"));
        assert_eq!(c.command, OsString::from("/opt/codex/bin/codex"));
        assert_eq!(c.args, vec![OsString::from("app-server")]);
        assert_eq!(
            c.env,
            vec![(
                OsString::from("CODEX_HOME"),
                OsString::from("/var/lib/knife/codex")
            )]
        );
        assert_eq!(c.model.as_deref(), Some("mock-model"));
        assert_eq!(c.approval_policy.as_deref(), Some("untrusted"));
        assert_eq!(c.sandbox.as_deref(), Some("workspace-write"));
        // Defaults: `codex app-server` with the outbound features off, codex's own model.
        let d = codex_config("cx", &toml::from_str("driver = 'codex'").unwrap());
        assert_eq!(d.command, OsString::from("codex"));
        assert_eq!(d.args[0], OsString::from("app-server"));
        assert_eq!(d.model, None);
    }

    #[test]
    fn a_codex_home_that_does_not_exist_is_refused_with_how_to_fix_it() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("codex-home");
        let with_home = |home: &std::path::Path| -> ProviderConfig {
            toml::from_str(&format!(
                "driver = 'codex'\n[env]\nCODEX_HOME = '{}'\n",
                home.display()
            ))
            .unwrap()
        };
        let err = check_codex_instance("cx", &with_home(&missing))
            .unwrap_err()
            .to_string();
        assert!(err.contains("provider `cx`"), "{err}");
        assert!(
            err.contains(&format!("mkdir -p {}", missing.display())),
            "{err}"
        );
        std::fs::write(&missing, "a file, not a folder").unwrap();
        assert!(check_codex_instance("cx", &with_home(&missing)).is_err());
        std::fs::remove_file(&missing).unwrap();
        std::fs::create_dir(&missing).unwrap();
        check_codex_instance("cx", &with_home(&missing)).unwrap();
        // No CODEX_HOME: codex uses its own default (~/.codex); nothing to check.
        check_codex_instance("cx", &toml::from_str("driver = 'codex'").unwrap()).unwrap();
    }

    #[test]
    fn secret_env_vars_lists_every_api_key_variable_and_the_api_token_once() {
        let config: crate::config::Config = toml::from_str(
            "default_provider = 'a'\n[server]\napi_token_env = 'TOKEN_VAR'\n\
             [providers.a]\ndriver = 'openai-chat'\nmodel = 'm'\napi_key_env = 'B_KEY'\n\
             [providers.b]\ndriver = 'anthropic'\nmodel = 'm'\napi_key_env = 'B_KEY'\n\
             [providers.c]\ndriver = 'openai-responses'\nmodel = 'm'\napi_key_env = 'A_KEY'\n\
             [providers.cx]\ndriver = 'codex'\n",
        )
        .unwrap();
        assert_eq!(secret_env_vars(&config), ["A_KEY", "B_KEY", "TOKEN_VAR"]);
        // An agent instance keeps its own key variable.
        let mut own = config.providers["cx"].clone();
        let removed = agent_env_remove(&config, &own);
        for name in ["A_KEY", "B_KEY", "TOKEN_VAR"] {
            assert!(removed.iter().any(|r| r == name), "{name}: {removed:?}");
        }
        assert!(!removed.iter().any(|r| r == "PATH"), "PATH passes");
        own.api_key_env = Some("A_KEY".into());
        let removed = agent_env_remove(&config, &own);
        assert!(!removed.iter().any(|r| r == "A_KEY"), "its own key passes");
        assert!(removed.iter().any(|r| r == "B_KEY"));
    }

    #[test]
    fn every_driver_builds_a_client_and_unknown_ones_are_refused() {
        for driver in ["openai-chat", "anthropic", "openai-responses"] {
            assert!(llm_client("x", &instance(driver), None).is_ok(), "{driver}");
        }
        let err = llm_client("x", &instance("gemini"), None)
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("supported drivers"), "{err}");
    }
}
