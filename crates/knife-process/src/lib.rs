//! knife's one process-group supervisor: every child process knife starts (the
//! built-in agent's `bash` commands, the codex / ACP agent processes) runs through it.
//!
//! - [`ProcessGroup::spawn`] starts a [`SpawnSpec`] through `process-wrap` in a new
//!   session (so a new process group whose id, the pgid, is the leader's pid, and no
//!   controlling terminal), after the spec's [`Sandbox`] (if any) rewrote the
//!   [`Launch`], and tells the spec's [`GroupRecorder`] (awaited) so a crash right
//!   after still leaves a record for the next boot.
//! - [`ProcessGroup::terminate`] ends the group within a time box: SIGTERM (plus
//!   SIGCONT, so stopped members can act on it) → grace → SIGKILL → wait until the
//!   group is gone (at most [`KILL_WAIT`]); it always reaps the leader and forgets
//!   the record once the group is gone.
//! - Dropping a [`ProcessGroup`] before `terminate` finished sends SIGTERM at once
//!   and finishes from a spawned task; with no runtime (or when that task is
//!   dropped too) the group gets SIGKILL.
//! - [`signals`]: the helpers (`signal_group`, `group_alive`, start ticks, boot id).
//!
//! This crate names no store: the record goes through [`GroupRecorder`] (knife-runtime's
//! `ProcessGroups` implements it over the store). It denies `unsafe_code` instead of
//! forbidding it: the sandbox's `pre_exec` (no-new-privs, Landlock) and [`allocator`]'s
//! `malloc_trim` (knife's own process returning freed memory, LIVE-06) are the reviewed
//! places with a local `allow` (ARCHITECTURE.md "Child processes").

#![deny(missing_docs)]

pub mod allocator;
mod group;
mod record;
pub mod sandbox;
pub mod signals;
mod spawn;

pub use group::{DEFAULT_GRACE, KILL_WAIT, ProcessGroup, Termination};
pub use record::{GroupRecord, GroupRecorder, RecordError};
pub use signals::{group_alive, signal_group};
pub use spawn::{Launch, Sandbox, SandboxError, SpawnError, SpawnSpec};
