//! knife-protocol: the shared vocabulary of knife — identifiers, entities, the
//! domain event log, adapter events and HTTP API types.
//!
//! Plain serde types only: no tokio, no I/O. Every other crate depends on this one.
//! The JSON shapes here are the wire format of the HTTP API, the event log stored
//! in SQLite and the events streamed over SSE / WebSocket.

#![deny(missing_docs)]

pub mod adapter;
pub mod api;
pub mod changes;
pub mod commands;
pub mod entities;
pub mod events;
pub mod ids;
pub mod limits;
pub mod live;
pub mod mcp;
pub mod pricing;
pub mod search;

pub use adapter::*;
pub use api::*;
pub use changes::*;
pub use commands::*;
pub use entities::*;
pub use events::*;
pub use ids::*;
pub use live::*;
pub use mcp::*;
pub use pricing::{
    ModelPrice, ModelUsage, PriceTable, RunUsage, UsageReport, UsageTotals, format_usd,
};
pub use search::*;

/// Wall-clock timestamps (UTC). Durations never use this type; see ARCHITECTURE.md "Runtime rules".
pub type Timestamp = chrono::DateTime<chrono::Utc>;
