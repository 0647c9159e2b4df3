//! Entities of the event log. Every "updated" event carries one of these whole
//! (upsert by id, last write wins), never a diff. Shapes follow SPEC.md's glossary and
//! `reference/t3code.md` §1.3, trimmed to what knife uses.
//!
//! One file per concept, all re-exported here (`knife_protocol::Thread`, …):
//! [`project`], [`thread`] (and its [`queue`]), [`run`], [`provider`] (sessions,
//! provider threads and turns), [`request`] (runtime requests), [`transcript`]
//! (nodes and turn items).

pub mod project;
pub mod provider;
pub mod queue;
pub mod request;
pub mod run;
pub mod thread;
pub mod transcript;

pub use project::*;
pub use provider::*;
pub use queue::*;
pub use request::*;
pub use run::*;
pub use thread::*;
pub use transcript::*;
