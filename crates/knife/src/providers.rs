//! Provider instance → streaming LLM client, by `driver` (knife.toml
//! `[providers.<id>]`; drivers listed in [`crate::config::DRIVERS`]).

use std::sync::Arc;
use std::time::Duration;

use anyhow::bail;
use knife_llm::LlmClient;
use knife_llm::anthropic::AnthropicClient;
use knife_llm::http::HttpTimeouts;
use knife_llm::openai_chat::OpenAiChatClient;
use knife_llm::openai_responses::OpenAiResponsesClient;

use crate::config::ProviderConfig;

/// The HTTP timeouts of an instance: 10 s to connect and 300 s of silence unless
/// `connect_timeout_secs` / `idle_timeout_secs` say otherwise (at least 1 s).
pub fn timeouts(p: &ProviderConfig) -> HttpTimeouts {
    let mut timeouts = HttpTimeouts::default();
    if let Some(secs) = p.connect_timeout_secs {
        timeouts.connect = Duration::from_secs(secs.max(1));
    }
    if let Some(secs) = p.idle_timeout_secs {
        timeouts.idle = Duration::from_secs(secs.max(1));
    }
    timeouts
}

/// The client of instance `id`: `openai-chat` → Chat Completions (Bearer key),
/// `anthropic` → Anthropic Messages (`x-api-key`; `max_tokens` from
/// `output_limit`, else 8192), `openai-responses` → OpenAI Responses
/// (Bearer key).
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
        "openai-responses" => Arc::new(OpenAiResponsesClient::with_timeouts(
            base_url, api_key, timeouts,
        )),
        other => bail!(
            "provider `{id}` has driver `{other}`; supported drivers: openai-chat, anthropic, openai-responses"
        ),
    })
}
