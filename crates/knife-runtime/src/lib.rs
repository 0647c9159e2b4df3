//! knife-runtime: the provider-adapter contract every agent runtime implements,
//! the session manager that owns live provider sessions, the ingestor that turns
//! adapter events into domain events, and the execution service that runs turns.
//!
//! The runtime never names a concrete driver: the built-in agent (knife-agent) and
//! external runtimes (knife-adapters) implement [`ProviderAdapter`].

pub mod adapter;
pub mod answers;
pub mod bounds;
pub mod clock;
pub mod commands;
pub mod error;
pub mod execution;
pub mod fork;
pub mod ingest;
pub mod lifecycle;
pub mod mcp;
pub mod process_groups;
pub mod reaper;
pub mod recovery;
pub mod restart;
pub mod runs;
pub mod scope;
pub mod sessions;
pub mod terminal;

pub use adapter::*;
pub use clock::*;
pub use error::*;
pub use execution::*;
pub use lifecycle::{SharedThreadWorkspace, ThreadWorkspace};
pub use restart::*;
pub use sessions::{
    OpenRequest, SessionError, SessionHandle, SessionManager, SessionManagerOptions,
};
pub use terminal::*;
