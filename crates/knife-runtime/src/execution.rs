//! The run lifecycle while the server runs: the execution service that starts and
//! drives runs ([`service`], one turn in `turn.rs`), creating runs ([`runs`]), how a
//! run ended ([`terminal`]) and answering runtime requests ([`answers`]).
//!
//! Arrows point one way: `service` → `runs` → `terminal`; `answers` stands alone;
//! nothing here names [`crate::boot`], which builds on it.

pub mod answers;
pub mod runs;
mod service;
pub mod terminal;

pub use service::*;
