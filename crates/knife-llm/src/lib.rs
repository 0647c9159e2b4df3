//! knife-llm: streaming clients for LLM APIs, normalised to one [`LlmEvent`] stream.
//!
//! Layers: [`sse`] turns bytes into Server-Sent Events (our own decoder, WHATWG
//! rules); a per-protocol mapper ([`stream::EventMapper`]) turns events into
//! [`LlmEvent`]s; a client does the HTTP and maps failures to [`LlmError`]:
//! [`openai_chat::OpenAiChatClient`] (Chat Completions and compatible servers),
//! [`anthropic::AnthropicClient`] (Anthropic Messages),
//! [`openai_responses::OpenAiResponsesClient`] (OpenAI Responses).

#![deny(missing_docs)]

pub mod anthropic;
pub mod error;
pub mod http;
pub mod openai_chat;
pub mod openai_responses;
pub mod retry;
pub mod sse;
pub mod stream;
pub mod types;

pub use error::*;
pub use types::*;
