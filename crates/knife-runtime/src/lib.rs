//! knife-runtime: the provider-adapter contract every agent runtime implements,
//! the session manager that owns live provider sessions, the ingestor that turns
//! adapter events into domain events, and the execution service that runs turns.
//!
//! The runtime never names a concrete driver: the built-in agent (knife-agent) and
//! external runtimes (knife-adapters) implement [`ProviderAdapter`].

#![deny(missing_docs)]

pub mod adapter;
pub mod boot;
pub mod bounds;
pub mod budget;
pub mod clock;
pub mod commands;
pub mod error;
pub mod execution;
pub mod fork;
pub mod ingest;
pub mod lifecycle;
pub mod live;
pub mod live_relay;
pub mod mcp;
pub mod process_groups;
pub mod reaper;
pub mod recording;
pub mod scope;
pub mod sessions;
pub mod usage;

pub use adapter::*;
pub use boot::restart::*;
pub use clock::*;
pub use error::*;
pub use execution::terminal::*;
pub use execution::{
    COMMAND_WAIT, DEFAULT_MAX_RESUME_ATTEMPTS, ExecutionService, INTERRUPT_GRACE, RemoteClose,
    ResumeOutcome,
};
pub use lifecycle::{SharedThreadWorkspace, ThreadWorkspace};
pub use sessions::{
    ModelCallObserver, OpenRequest, SessionError, SessionHandle, SessionManager,
    SessionManagerOptions,
};
