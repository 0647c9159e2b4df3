//! Session scopes: the finalizers of everything an adapter spawned for one provider
//! session, run (time-boxed) when the open fails, is cancelled, or the session ends.

use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;

/// A set of async finalizers (stop a process, close a socket) owned by one provider
/// session. Cheap to clone; all clones share the set.
///
/// The manager closes the scope when an open fails or is cancelled (MGR-04, MGR-05)
/// and when the session is released (MGR-33); closing runs every finalizer
/// concurrently. A finalizer added after the scope closed runs at once (spawned), so
/// a process spawned by an open that lost the race with its cancel is still stopped.
#[derive(Clone, Default)]
pub struct SessionScope {
    inner: Arc<Mutex<ScopeState>>,
}

#[derive(Default)]
struct ScopeState {
    closed: bool,
    finalizers: Vec<BoxFuture<'static, ()>>,
}

impl fmt::Debug for SessionScope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (closed, pending) = self
            .inner
            .lock()
            .map(|s| (s.closed, s.finalizers.len()))
            .unwrap_or((true, 0));
        f.debug_struct("SessionScope")
            .field("closed", &closed)
            .field("pending_finalizers", &pending)
            .finish()
    }
}

impl SessionScope {
    /// An open scope with no finalizers.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers `finalizer`, run when the scope closes. On a closed scope it is
    /// spawned at once (must be called inside a tokio runtime then).
    pub fn add_finalizer(&self, finalizer: impl Future<Output = ()> + Send + 'static) {
        let mut state = match self.inner.lock() {
            Ok(state) => state,
            Err(poisoned) => poisoned.into_inner(),
        };
        if state.closed {
            drop(state);
            tokio::spawn(finalizer);
        } else {
            state.finalizers.push(Box::pin(finalizer));
        }
    }

    /// True once [`SessionScope::close_within`] was called.
    pub fn is_closed(&self) -> bool {
        self.inner.lock().map(|s| s.closed).unwrap_or(true)
    }

    /// Closes the scope: runs every finalizer concurrently in a spawned task and waits
    /// at most `limit` for them. Returns `true` when they all finished in time; on
    /// `false` they keep running in the background (a wedged finalizer never blocks
    /// the caller past `limit`, MGR-05, MGR-33). Idempotent: later calls return `true`.
    pub async fn close_within(&self, limit: Duration) -> bool {
        let finalizers = {
            let mut state = match self.inner.lock() {
                Ok(state) => state,
                Err(poisoned) => poisoned.into_inner(),
            };
            state.closed = true;
            std::mem::take(&mut state.finalizers)
        };
        if finalizers.is_empty() {
            return true;
        }
        // Spawned so the finalizers finish even when this caller gives up or is dropped.
        let task = tokio::spawn(futures::future::join_all(finalizers));
        tokio::time::timeout(limit, task).await.is_ok()
    }
}
