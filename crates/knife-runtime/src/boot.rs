//! The run lifecycle at boot, before serving: reconciliation of what the previous
//! process left in flight ([`recovery`]), then the restart sweep ([`restart`]).
//!
//! Builds on [`crate::execution`]; nothing there depends on this module.

pub mod membership;
pub mod paths;
pub mod recovery;
pub mod restart;
pub mod takeover;
