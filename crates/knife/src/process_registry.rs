//! Records the process groups of the built-in agent's `bash` calls in the store
//! (`knife_runtime::process_groups::ProcessGroups`), so that the next boot kills the
//! ones a SIGKILLed server left running (docs/2026-11-29-durable-execution.md).
//!
//! The tool's [`ProcessObserver`] calls are synchronous and must not block: they
//! are queued on a channel and written, in order, by one task (a `register` is
//! always stored before the `unregister` of the same group).

use knife_agent::ProcessObserver;
use knife_agent::tools::ProcessGroupRecord;
use knife_runtime::process_groups::ProcessGroups;
use tokio::sync::mpsc;

enum Change {
    Spawned(ProcessGroupRecord),
    Exited(ProcessGroupRecord),
}

/// A [`ProcessObserver`] writing to a [`ProcessGroups`] registry.
pub struct RegistryObserver {
    changes: mpsc::UnboundedSender<Change>,
}

impl RegistryObserver {
    /// Starts the writer task (call inside the tokio runtime); it ends when the
    /// observer is dropped and its queue is drained.
    pub fn start(groups: ProcessGroups) -> Self {
        let (changes, mut rx) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Some(change) = rx.recv().await {
                let result = match &change {
                    Change::Spawned(g) => match i32::try_from(g.pgid) {
                        Ok(pgid) => groups.register(pgid, g.thread_id.as_ref(), &g.label).await,
                        Err(_) => continue,
                    },
                    Change::Exited(g) => match i32::try_from(g.pgid) {
                        Ok(pgid) => groups.unregister(pgid).await,
                        Err(_) => continue,
                    },
                };
                if let Err(e) = result {
                    // Losing a row only means a crash could leave this group running.
                    tracing::warn!(error = %e, "could not record a command's process group");
                }
            }
        });
        Self { changes }
    }
}

impl ProcessObserver for RegistryObserver {
    fn spawned(&self, group: &ProcessGroupRecord) {
        let _ = self.changes.send(Change::Spawned(group.clone()));
    }

    fn exited(&self, group: &ProcessGroupRecord) {
        let _ = self.changes.send(Change::Exited(group.clone()));
    }
}
