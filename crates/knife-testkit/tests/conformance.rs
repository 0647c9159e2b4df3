//! The driver conformance suite: the same scenarios (conformance/scenarios.rs) run
//! against every driver's rig (conformance/rigs.rs): the built-in agent on the mock LLM,
//! the codex driver on the fake app-server, the ACP driver on the fake agent.
//! Real processes, real SQLite, real loopback HTTP; nothing of knife is faked.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "conformance/rigs.rs"]
mod rigs;
#[path = "conformance/scenarios.rs"]
#[macro_use]
mod scenarios;

conformance!(builtin, crate::rigs::builtin);
conformance!(fake_codex, crate::rigs::fake_codex);
conformance!(fake_acp, crate::rigs::fake_acp);
