//! Node membership (SPEC.md SCALE-05): before a node touches what its previous process
//! left, it joins the cluster under its node id, and it heartbeats that row while it runs.
//! A node id another live process heartbeats refuses the start; a restart at the same
//! place (host + data directory, whose lock this process holds) takes the id back at once;
//! a restart elsewhere waits the old row out.

use std::time::Duration;

use knife_protocol::Timestamp;
use knife_store::{Store, StoreError};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::error::RuntimeError;

/// This process's membership row: heartbeated until [`Membership::leave`] (or drop).
pub struct Membership {
    store: Store,
    instance: String,
    stop: CancellationToken,
    lost: CancellationToken,
    task: Option<JoinHandle<()>>,
}

/// How long to sleep before looking at a live row again: until just after its expiry
/// (this machine's clock against the database's: bounded to one lease either way).
fn until_after(expires_at: Timestamp, ttl: Duration) -> Duration {
    let left = (expires_at - chrono::Utc::now())
        .to_std()
        .unwrap_or_default();
    left.min(ttl) + Duration::from_millis(100)
}

impl Membership {
    /// Joins as the store's node (`store.node()`: id and lease length) from
    /// `location` (`<host>:<data directory>`; the caller holds that directory's lock),
    /// then heartbeats every third of the lease length.
    ///
    /// When another place's row is live it waits that row out once: if its expiry then
    /// moved on, a live process heartbeats the id and the start is refused; if it ran
    /// out, the previous process is dead and the id is taken (its leases are then taken
    /// back by the restart sweep, or by other nodes once they expire).
    ///
    /// Errors: [`RuntimeError::Store`] with [`StoreError::NodeIdLive`] (names the id, where
    /// the other process runs, and what to do), or the database's error.
    pub async fn join(store: &Store, location: &str) -> Result<Membership, RuntimeError> {
        let node = store.node().node().to_owned();
        let ttl = store.node().ttl();
        let instance = uuid::Uuid::now_v7().to_string();
        let mut seen: Option<Timestamp> = None;
        loop {
            match store.join_cluster(&node, location, &instance, ttl).await {
                Ok(_) => break,
                Err(StoreError::NodeIdLive {
                    node,
                    location: other,
                    expires_at,
                }) => {
                    if seen.is_some_and(|before| expires_at > before) {
                        return Err(StoreError::NodeIdLive {
                            node,
                            location: other,
                            expires_at,
                        }
                        .into());
                    }
                    tracing::warn!(
                        %node, other = %other, %expires_at,
                        "another process held this node id until just now; waiting for its heartbeat to run out"
                    );
                    seen = Some(expires_at);
                    tokio::time::sleep(until_after(expires_at, ttl)).await;
                }
                Err(e) => return Err(e.into()),
            }
        }
        let (stop, lost) = (CancellationToken::new(), CancellationToken::new());
        let task = tokio::spawn(heartbeat(
            store.clone(),
            instance.clone(),
            stop.clone(),
            lost.clone(),
        ));
        Ok(Membership {
            store: store.clone(),
            instance,
            stop,
            lost,
            task: Some(task),
        })
    }

    /// Cancelled when another process took this node id over (this process's row was
    /// replaced): the node must stop serving.
    pub fn lost(&self) -> CancellationToken {
        self.lost.clone()
    }

    /// Stops the heartbeat and expires the row (a clean stop frees the id at once).
    pub async fn leave(mut self) {
        self.stop.cancel();
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
        let node = self.store.node().node().to_owned();
        if let Err(e) = self.store.leave_cluster(&node, &self.instance).await {
            tracing::warn!(%node, error = %e, "could not leave the cluster; the node id is free once its heartbeat runs out");
        }
    }
}

impl Drop for Membership {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

async fn heartbeat(
    store: Store,
    instance: String,
    stop: CancellationToken,
    lost: CancellationToken,
) {
    let node = store.node().node().to_owned();
    let ttl = store.node().ttl();
    let mut tick = tokio::time::interval((ttl / 3).max(Duration::from_millis(10)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tick.tick() => {}
        }
        match store.heartbeat_node(&node, &instance, ttl).await {
            Ok(_) => {}
            Err(StoreError::NodeIdLive { location, .. }) => {
                tracing::error!(
                    %node, other = %location,
                    "another knife process took over this node id; this node stops (give each node its own `[store] node_id`)"
                );
                lost.cancel();
                return;
            }
            Err(e) => {
                tracing::warn!(%node, error = %e, "could not heartbeat the node's membership; retrying");
            }
        }
    }
}
