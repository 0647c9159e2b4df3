//! Wall-clock timestamps come from one [`Clock`] so tests can fix them; durations
//! always use `tokio::time` (ARCHITECTURE.md "Runtime rules").

use knife_protocol::Timestamp;
use std::sync::Arc;

/// Source of wall-clock timestamps for events and entities.
pub trait Clock: Send + Sync + 'static {
    /// Current UTC time.
    fn now(&self) -> Timestamp;
}

/// The system clock.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        chrono::Utc::now()
    }
}

/// Shared clock handle.
pub type SharedClock = Arc<dyn Clock>;
