//! The store seam of the session manager: the handful of reads and writes it makes,
//! labelled by purpose so tests can fail, pause or hook chosen writes.

use knife_protocol::{
    DomainEvent, ProviderSessionId, ProviderThread, ProviderThreadId, StoredEvent, ThreadId,
    ThreadProjection, Timestamp,
};
use knife_store::{EntityKind, RowGuard, Store, StoreError};

/// Why the manager writes (lets test wrappers pick the writes they fail or pause).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WriteKind {
    /// `provider-session.attached` of a thread joining a session (open, attach).
    Attach,
    /// `provider-session.detached` of a thread leaving a session.
    Detach,
    /// The terminal status of a released session (`stopped` / `error`, MGR-30, MGR-38).
    ReleaseStatus,
    /// Settlement of a released session's runtime requests (MGR-41).
    ReleaseRequests,
    /// Events the pump persists from the adapter stream (status updates included).
    Pump,
    /// Session-scoped runtime-request artifacts the pump persists outside any run (MGR-43).
    PumpRequests,
    /// The compare-and-set clear of a provider thread's background roster (MGR-44..47).
    RosterClear,
}

/// What the session manager needs from the store. Implemented by [`knife_store::Store`];
/// tests wrap it (knife-testkit's flaky store).
#[async_trait::async_trait]
pub trait SessionStore: Send + Sync + 'static {
    /// Appends `events` in one transaction (see [`Store::write`]); returns them as stored
    /// (with their sequences).
    async fn write(
        &self,
        kind: WriteKind,
        events: Vec<DomainEvent>,
    ) -> Result<Vec<StoredEvent>, StoreError>;
    /// Compare-and-set append (see [`Store::write_if`]); `Ok(false)` when the guarded
    /// row moved and nothing was written.
    async fn write_if(
        &self,
        kind: WriteKind,
        guard: RowGuard,
        events: Vec<DomainEvent>,
    ) -> Result<bool, StoreError>;
    /// The thread's projection, `None` when the thread does not exist.
    async fn thread_projection(
        &self,
        thread: &ThreadId,
    ) -> Result<Option<ThreadProjection>, StoreError>;
    /// The provider thread row and its version (for compare-and-set), read in that
    /// order: version first, so a row newer than the version fails the later CAS.
    async fn provider_thread_versioned(
        &self,
        id: &ProviderThreadId,
    ) -> Result<Option<(ProviderThread, i64)>, StoreError>;
    /// The highest committed sequence of `thread`'s events (0 = none); the pump names
    /// it in a live reset (LIVE-02). The default answers 0 (deliver at once).
    async fn latest_sequence(&self, thread: &ThreadId) -> Result<u64, StoreError> {
        let _ = thread;
        Ok(0)
    }
    /// Raises the session row's last-seen time to `at` (operational, not an event; the
    /// reaper reads it, REAP-01). The default does nothing.
    async fn touch_session(&self, id: &ProviderSessionId, at: Timestamp) -> Result<(), StoreError> {
        let _ = (id, at);
        Ok(())
    }
}

#[async_trait::async_trait]
impl SessionStore for Store {
    async fn latest_sequence(&self, thread: &ThreadId) -> Result<u64, StoreError> {
        // Through the backend: `Store::latest_sequence` would name this trait method.
        knife_store::EventFeed::latest_sequence(&**self, Some(thread)).await
    }

    async fn write(
        &self,
        _kind: WriteKind,
        events: Vec<DomainEvent>,
    ) -> Result<Vec<StoredEvent>, StoreError> {
        Store::write(self, events).await
    }

    async fn write_if(
        &self,
        _kind: WriteKind,
        guard: RowGuard,
        events: Vec<DomainEvent>,
    ) -> Result<bool, StoreError> {
        Ok(Store::write_if(self, guard, events).await?.is_some())
    }

    async fn thread_projection(
        &self,
        thread: &ThreadId,
    ) -> Result<Option<ThreadProjection>, StoreError> {
        Store::thread_projection(self, thread).await
    }

    async fn provider_thread_versioned(
        &self,
        id: &ProviderThreadId,
    ) -> Result<Option<(ProviderThread, i64)>, StoreError> {
        let Some(version) = self
            .row_version(EntityKind::ProviderThread, id.as_str())
            .await?
        else {
            return Ok(None);
        };
        Ok(self
            .get_provider_thread(id)
            .await?
            .map(|thread| (thread, version)))
    }

    async fn touch_session(&self, id: &ProviderSessionId, at: Timestamp) -> Result<(), StoreError> {
        self.touch_provider_session(id, at).await
    }
}
