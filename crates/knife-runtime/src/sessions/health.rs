//! Agent health marks: whether a thread's latest runtime process was killed for
//! memory (the kernel's OOM killer). Opening a new session for the thread clears it (MGR-03).

use std::collections::HashSet;
use std::sync::Mutex;

use knife_protocol::ThreadId;

/// The failure text a turn of an OOM-killed runtime reads.
pub const OOM_KILLED_MESSAGE: &str = "Killed: out of memory.";

/// Per-thread "OOM-killed" marks, recorded by the process supervisor and read when a
/// turn fails; the answer holds until the thread gets a new session (MGR-03).
#[derive(Debug, Default)]
pub struct AgentHealth {
    oom_killed: Mutex<HashSet<ThreadId>>,
}

impl AgentHealth {
    /// Records that `thread`'s runtime process was killed for memory.
    pub fn mark_oom_killed(&self, thread: &ThreadId) {
        self.lock().insert(thread.clone());
    }

    /// Whether `thread`'s latest runtime was killed for memory.
    pub fn oom_killed(&self, thread: &ThreadId) -> bool {
        self.lock().contains(thread)
    }

    /// Forgets `thread`'s mark (a new runtime must not inherit it).
    pub fn clear(&self, thread: &ThreadId) {
        self.lock().remove(thread);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashSet<ThreadId>> {
        self.oom_killed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}
