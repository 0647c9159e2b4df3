//! knife-adapters: external agent runtimes supervised by knife as child processes.
//!
//! - [`process`]: spawn a program in its own process group, NDJSON over stdio with a
//!   16 MiB line cap, stderr to the log, the close sequence (stdin EOF → SIGTERM →
//!   SIGKILL), exit watch, pgid recorded in the store.
//! - [`jsonrpc`]: JSON-RPC 2.0 over those lines (requests with id correlation and a
//!   timeout, notifications, server→client requests).
//! - turns are recorded through knife-runtime's one recorder
//!   (`knife_runtime::recording`: event sink, text windows, items, settlement).
//! - [`codex`]: the `codex` driver (Codex app-server).
//! - [`acp`]: the `acp` driver (Agent Client Protocol agents over stdio).
//!
//! Both drivers implement `knife_runtime::ProviderAdapter`; the rules are in
//! `docs/2026-11-29-external-runtimes.md`.

#![deny(missing_docs)]

pub mod acp;
pub mod codex;
pub mod jsonrpc;
pub mod process;

#[cfg(test)]
mod fuzz_tests;
