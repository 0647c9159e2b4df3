// The node a `Store` handle writes for (SPEC.md SCALE-04): its id, lease length, and the
// leases it holds, by which every write of the handle for those threads is fenced.

//! One knife process is one node. Its [`Store`](crate::Store) clones share one
//! [`NodeLeases`]: the threads this node holds leases on. [`crate::Store::write`] and
//! [`crate::Store::write_if`] fence every batch that touches such a thread with its
//! lease, so turn events, session events, releases and their retries are all fenced
//! without their callers knowing (docs/2026-12-01-leases.md).

use crate::leases::{DEFAULT_LEASE_TTL, Lease};
use knife_protocol::{DomainEvent, ThreadId};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The node id of a single SQLite installation (and the default).
pub const LOCAL_NODE: &str = "local";

/// How long a lost lease keeps failing this node's writes for its thread: long enough
/// for the abandoned turn and its session to wind down (their late writes are refused),
/// short enough that an unrelated later write (a rename) on this node is not blocked
/// for good: 10 lease lengths.
const LOST_FOR_LEASES: u32 = 10;

#[derive(Debug, Clone)]
enum Entry {
    /// Held: writes of the thread are fenced by it.
    Held(Lease),
    /// Lost (fenced once): writes of the thread fail at once until `until`, or until
    /// this node takes the thread's lease again.
    Lost(Lease, Instant),
}

/// Who this process is in the cluster and what it holds.
#[derive(Debug)]
pub struct NodeLeases {
    node: String,
    ttl: Duration,
    held: Mutex<HashMap<ThreadId, Entry>>,
    /// Threads lost since [`NodeLeases::take_newly_lost`] was last called.
    newly_lost: Mutex<Vec<ThreadId>>,
}

impl Default for NodeLeases {
    fn default() -> Self {
        NodeLeases::new(LOCAL_NODE, DEFAULT_LEASE_TTL)
    }
}

/// What [`NodeLeases::fences_for`] found for a batch.
#[derive(Debug, PartialEq, Eq)]
pub enum Fences {
    /// No thread of the batch is leased by this node: write unfenced.
    None,
    /// Fence the write by these leases.
    Check(Vec<Lease>),
    /// A thread of the batch lost its lease: refuse without asking the database.
    Lost(Lease),
}

impl NodeLeases {
    /// Node `node` taking leases of `ttl`.
    pub fn new(node: impl Into<String>, ttl: Duration) -> NodeLeases {
        NodeLeases {
            node: node.into(),
            ttl,
            held: Mutex::default(),
            newly_lost: Mutex::default(),
        }
    }

    /// This node's id.
    pub fn node(&self) -> &str {
        &self.node
    }

    /// The length of the leases it takes (renewed every third of it).
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    fn held(&self) -> std::sync::MutexGuard<'_, HashMap<ThreadId, Entry>> {
        self.held
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Records `lease` as held (replacing an older or lost one of its thread).
    pub fn hold(&self, lease: Lease) {
        self.held()
            .insert(lease.thread_id.clone(), Entry::Held(lease));
    }

    /// Marks the lease of `thread` at `epoch` lost (the database fenced it); returns
    /// whether it was held until now.
    pub fn lose(&self, thread: &ThreadId, epoch: u64) -> bool {
        let mut held = self.held();
        match held.get(thread) {
            Some(Entry::Held(l)) if l.epoch == epoch => {
                let until = Instant::now() + self.ttl * LOST_FOR_LEASES;
                let lease = l.clone();
                held.insert(thread.clone(), Entry::Lost(lease, until));
                self.newly_lost
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .push(thread.clone());
                true
            }
            _ => false,
        }
    }

    /// The threads whose lease was lost (by a fenced write or renewal) since the last
    /// call, oldest first: the work the lease keeper must abandon.
    pub fn take_newly_lost(&self) -> Vec<ThreadId> {
        std::mem::take(
            &mut *self
                .newly_lost
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    }

    /// Forgets the held lease of `thread` (a lost one stays lost until it times out);
    /// returns it.
    pub fn forget(&self, thread: &ThreadId) -> Option<Lease> {
        let mut held = self.held();
        match held.get(thread) {
            Some(Entry::Held(_)) => match held.remove(thread) {
                Some(Entry::Held(l)) => Some(l),
                _ => None,
            },
            _ => None,
        }
    }

    /// Takes `renewed`'s expiry if its thread is still held at its epoch (in place:
    /// writes never see the thread unheld).
    pub fn renewed(&self, renewed: Lease) {
        if let Some(Entry::Held(l)) = self.held().get_mut(&renewed.thread_id)
            && l.epoch == renewed.epoch
        {
            *l = renewed;
        }
    }

    /// The lease held (not lost) on `thread`, if any.
    pub fn get(&self, thread: &ThreadId) -> Option<Lease> {
        match self.held().get(thread) {
            Some(Entry::Held(l)) => Some(l.clone()),
            _ => None,
        }
    }

    /// Every lease held (not lost), by thread id.
    pub fn all(&self) -> Vec<Lease> {
        let mut all: Vec<Lease> = self
            .held()
            .values()
            .filter_map(|e| match e {
                Entry::Held(l) => Some(l.clone()),
                Entry::Lost(..) => None,
            })
            .collect();
        all.sort_by(|a, b| a.thread_id.as_str().cmp(b.thread_id.as_str()));
        all
    }

    /// How a batch must be fenced: by the leases of the threads its events are filed
    /// under (envelope thread id), or refused when one of them was lost.
    pub fn fences_for(&self, events: &[DomainEvent]) -> Fences {
        let mut held = self.held();
        if held.is_empty() {
            return Fences::None;
        }
        let now = Instant::now();
        held.retain(|_, e| !matches!(e, Entry::Lost(_, until) if *until <= now));
        let mut fences: Vec<Lease> = Vec::new();
        for thread in events.iter().filter_map(|e| e.thread_id.as_ref()) {
            match held.get(thread) {
                Some(Entry::Lost(l, _)) => return Fences::Lost(l.clone()),
                Some(Entry::Held(l)) if !fences.iter().any(|f| &f.thread_id == thread) => {
                    fences.push(l.clone());
                }
                _ => {}
            }
        }
        if fences.is_empty() {
            Fences::None
        } else {
            Fences::Check(fences)
        }
    }
}
