//! The reaper's [`SessionStopper`] over the session manager (REAP-01): a live session
//! is released (or, when shared with other threads, the thread is detached); a
//! persisted row with no live session behind it is marked `stopped`.

use knife_protocol::*;
use knife_store::Store;

use super::{ReleaseReason, SessionManager};
use crate::clock::SharedClock;
use crate::error::RuntimeError;
use crate::reaper::SessionStopper;

/// Stops stale sessions for the [`crate::reaper::Reaper`] through a [`SessionManager`].
#[derive(Clone)]
pub struct ManagerStopper {
    manager: SessionManager,
    store: Store,
    clock: SharedClock,
}

impl ManagerStopper {
    /// A stopper releasing through `manager` and writing orphan rows to `store`.
    pub fn new(manager: SessionManager, store: Store, clock: SharedClock) -> Self {
        Self {
            manager,
            store,
            clock,
        }
    }
}

/// Why the reaper stopped a session (the release's detail).
const REAPED: &str = "Stopped by the session reaper: no activity within the inactivity threshold.";

#[async_trait::async_trait]
impl SessionStopper for ManagerStopper {
    /// * live and serving other threads too → `thread` is detached (its MCP credential
    ///   revoked), the session stays for the others;
    /// * live otherwise → released with reason `idle` (persists `stopped`);
    /// * not live → the persisted row is written `stopped` for `thread` (a row a
    ///   runtime left behind). Already `stopped` rows are left alone.
    ///
    /// Errors: the release's or the write's ([`RuntimeError::Session`], `Store`).
    async fn stop_session(
        &self,
        thread: &ThreadId,
        session: &ProviderSessionId,
    ) -> Result<(), RuntimeError> {
        if let Some(handle) = self.manager.get(session) {
            let attached = handle.attached_threads();
            if attached.len() > 1 && attached.contains(thread) {
                self.manager
                    .detach(session, thread, Some(REAPED.to_owned()), true)
                    .await?;
            } else {
                self.manager
                    .release(session, ReleaseReason::Idle, Some(REAPED.to_owned()))
                    .await?;
            }
            return Ok(());
        }
        let Some(mut row) = self.store.get_provider_session(session).await? else {
            return Ok(());
        };
        if row.status == SessionStatus::Stopped {
            return Ok(());
        }
        let now = self.clock.now();
        row.status = SessionStatus::Stopped;
        row.updated_at = now;
        self.store
            .write(vec![
                DomainEvent::new(now, EventBody::ProviderSessionUpdated(row)).with_thread(thread),
            ])
            .await?;
        Ok(())
    }
}
