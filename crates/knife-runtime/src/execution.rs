//! The run lifecycle while the server runs: the execution service that starts and
//! drives runs ([`service`], one turn in `turn.rs`, the message queue in
//! `messages.rs`), creating runs ([`runs`]), the queue's rules (`queue`, TURN-01/02),
//! how a run ended ([`terminal`]) and answering runtime requests ([`answers`]).
//!
//! Arrows point one way: `service` → `runs` → `terminal`; `answers` stands alone;
//! nothing here names [`crate::boot`], which builds on it.

pub mod answers;
pub(crate) mod commanded;
pub(crate) mod queue;
pub mod runs;
mod service;
pub mod terminal;

pub use service::*;
