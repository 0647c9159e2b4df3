//! Session test support: the configurable fake provider adapter ([`FakeAdapter`],
//! turns scripted by [`TurnPlan`]) and a store wrapper that fails, pauses or hooks chosen writes
//! ([`FlakyStore`]).

mod fake_adapter;
mod flaky_store;
mod turns;

pub use fake_adapter::*;
pub use flaky_store::*;
pub use turns::*;
