// knife-testkit: test support shared by the knife crates' tests (never linked by the binary).
// Owns the fake provider adapter and flaky store, the fixture loader and the peers' paths.

//! Test support for knife.
//!
//! * [`mock_llm`] (re-exported from `knife-mock-llm`): a scripted OpenAI-compatible (Chat Completions) streaming
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

/// Locating and loading the shared LLM streaming fixtures (`fixtures/streams`).
pub mod fixtures;
pub mod peers;
pub mod sessions;

pub use fixtures::{fixture, fixtures_dir};
/// The mock LLM lives in its own crate so the `knife` binary links it without the test
/// fakes; tests keep reaching it as `knife_testkit::mock_llm`.
pub use knife_mock_llm as mock_llm;
/// `knife demo`'s script and sample project (in `knife-mock-llm`).
pub use knife_mock_llm::demo;
pub use mock_llm::{MockLlm, MockLlmConfig, MockLlmHandle, parse_write_times};
