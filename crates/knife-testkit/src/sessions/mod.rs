//! Session-manager test support: a configurable fake provider adapter
//! ([`FakeAdapter`]) and a store wrapper that fails, pauses or hooks chosen writes
//! ([`FlakyStore`]).

mod fake_adapter;
mod flaky_store;

pub use fake_adapter::*;
pub use flaky_store::*;
