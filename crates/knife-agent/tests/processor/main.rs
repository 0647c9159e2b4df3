//! The stream processor's behaviours (SPEC.md PROC-01..13), one test per ID at
//! least, through the built-in agent's session under paused time.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../common/mod.rs"]
mod common;

mod cancel;
mod compaction;
mod context_control;
mod retries;
mod retry_reports;
mod stream;
mod support;
