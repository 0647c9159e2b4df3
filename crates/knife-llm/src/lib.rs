//! knife-llm: streaming clients for LLM APIs, normalised to one [`LlmEvent`] stream.
//!
//! Layers: [`sse`] turns bytes into Server-Sent Events (our own decoder, WHATWG
//! rules); a per-protocol mapper turns events into [`LlmEvent`]s; a client
//! ([`openai_chat::OpenAiChatClient`]) does the HTTP and maps failures to [`LlmError`].

#![warn(missing_docs)]

pub mod error;
pub mod http;
pub mod openai_chat;
pub mod retry;
pub mod sse;
pub mod types;

pub use error::*;
pub use types::*;
