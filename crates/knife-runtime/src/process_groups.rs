//! Process groups a knife server spawned (tool commands, adapter processes), recorded
//! in the store so the next server can kill the ones that outlived a crashed owner
//! (docs/ARCHITECTURE.md "Child processes"; the boot order of docs/2026-11-29-durable-execution.md).
//!
//! [`ProcessGroups`] is the `knife_process::GroupRecorder` every spawn is given: the
//! group is registered right after the spawn and unregistered once it was reaped
//! (the signalling itself lives in knife-process). At boot, before the restart
//! sweep, [`kill_leftover_process_groups`] kills every recorded group of a previous
//! process that is still alive and forgets all rows of dead owners.

use knife_process::signals::process_start_ticks;
use knife_process::{GroupRecord, GroupRecorder, RecordError};
use knife_store::{ProcessGroupRecord, Store};
use nix::errno::Errno;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

use crate::clock::SharedClock;
use crate::error::RuntimeError;

/// Registry of the process groups this server spawns. Cheap to clone.
#[derive(Clone)]
pub struct ProcessGroups {
    store: Store,
    clock: SharedClock,
    owner: u32,
}

impl ProcessGroups {
    /// A registry recording groups as owned by this process.
    pub fn new(store: Store, clock: SharedClock) -> Self {
        Self {
            store,
            clock,
            owner: std::process::id(),
        }
    }
}

#[async_trait::async_trait]
impl GroupRecorder for ProcessGroups {
    async fn register(&self, group: &GroupRecord) -> Result<(), RecordError> {
        let pgid = i32::try_from(group.pgid)?;
        self.store
            .register_process_group(ProcessGroupRecord {
                node: self.store.node().node().to_owned(),
                pgid,
                owner_pid: self.owner,
                leader_start: group.leader_start_ticks,
                thread_id: group.thread_id.clone(),
                label: group.label.clone(),
                registered_at: self.clock.now(),
            })
            .await?;
        Ok(())
    }

    async fn unregister(&self, group: &GroupRecord) -> Result<(), RecordError> {
        self.store
            .unregister_process_group(self.store.node().node(), i32::try_from(group.pgid)?)
            .await?;
        Ok(())
    }
}

/// What [`kill_leftover_process_groups`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KillReport {
    /// Groups that were still alive and got SIGKILL: (pgid, label).
    pub killed: Vec<(i32, String)>,
    /// Rows of groups that were already gone.
    pub gone: usize,
    /// Rows of other nodes, left alone (SCALE-07).
    pub other_nodes: usize,
}

/// Kills every process group this node recorded whose owner is not this process and
/// that is still alive (SIGKILL to the whole group), then forgets those rows. A group
/// whose leader pid now belongs to a different process (start time differs) is not ours
/// any more and is only forgotten. Groups recorded by other nodes are never signalled
/// nor forgotten (SPEC SCALE-07: their pids are another host's). Call at boot while
/// holding the data-directory lock and the node id (the node's membership), so every
/// other owner of this node's rows is known dead.
///
/// Errors: [`RuntimeError::Store`]; a failed kill is logged and the row kept.
pub async fn kill_leftover_process_groups(store: &Store) -> Result<KillReport, RuntimeError> {
    let me = std::process::id();
    let node = store.node().node().to_owned();
    let mut report = KillReport::default();
    for record in store.list_process_groups().await? {
        if record.node != node {
            report.other_nodes += 1;
            continue;
        }
        if record.owner_pid == me {
            continue;
        }
        let now = u32::try_from(record.pgid)
            .ok()
            .and_then(process_start_ticks);
        let reused = match (record.leader_start, now) {
            (Some(recorded), Some(now)) => recorded != now,
            _ => false,
        };
        if reused || record.pgid <= 1 {
            report.gone += 1;
        } else {
            match killpg(Pid::from_raw(record.pgid), Signal::SIGKILL) {
                Ok(()) => {
                    tracing::warn!(
                        pgid = record.pgid, label = %record.label, owner = record.owner_pid,
                        "killed a process group left running by a previous knife process"
                    );
                    report.killed.push((record.pgid, record.label.clone()));
                }
                Err(Errno::ESRCH) => report.gone += 1,
                Err(e) => {
                    tracing::error!(
                        pgid = record.pgid, label = %record.label, error = %e,
                        "could not kill a process group left by a previous knife process; kill it by hand"
                    );
                    continue;
                }
            }
        }
        store.unregister_process_group(&node, record.pgid).await?;
    }
    Ok(report)
}
