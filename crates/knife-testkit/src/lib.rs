// knife-testkit: test support shared by every knife crate and the `knife` binary.
// Owns the scripted mock LLM, the gated SSE streaming, the fixture loader and the demo script.

//! Test support for knife.
//!
//! * [`mock_llm`]: a scripted OpenAI-compatible (Chat Completions) streaming
//!   server on loopback that records every request; replays `.sse` fixtures,
//!   splits and delays chunks, can be gated chunk by chunk, and serves bench
//!   streams of write-time markers. Behind `knife mock-llm`, `knife demo` and
//!   `knife bench stream`.
//! * [`fixtures`]: the shared streaming fixtures (`fixtures/streams`).
//! * [`demo`]: the scripted model and sample project of `knife demo`.
//! * [`peers`]: where the real peers of `scripts/install-peers.sh` are, and the
//!   Codex app-server JSON schema check.
//! * [`sessions`]: the fake provider adapter and flaky store of the session
//!   manager's tests.

#![deny(missing_docs)]

/// The scripted model and sample project of `knife demo`.
pub mod demo;
/// Locating and loading the shared LLM streaming fixtures (`fixtures/streams`).
pub mod fixtures;
pub mod mock_llm;
pub mod peers;
pub mod sessions;

pub use fixtures::{fixture, fixtures_dir};
pub use mock_llm::{MockLlm, MockLlmConfig, MockLlmHandle, parse_write_times};
