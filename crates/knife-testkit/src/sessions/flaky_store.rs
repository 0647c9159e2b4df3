//! A [`SessionStore`] over a real [`Store`] that fails, pauses or runs a hook before
//! chosen writes (the flaky-store scenarios of SPEC.md MGR-16, 17, 38..42, 47).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use futures::future::BoxFuture;
use knife_protocol::{
    DomainEvent, ProviderSessionId, ProviderThread, ProviderThreadId, ThreadId, ThreadProjection,
    Timestamp,
};
use knife_runtime::sessions::{SessionStore, WriteKind};
use knife_store::{RowGuard, Store, StoreError};
use tokio::sync::Semaphore;

/// A pause point: the writer signals `reached`, then waits for `resume`.
#[derive(Clone)]
pub struct Pause {
    reached: Arc<Semaphore>,
    resume: Arc<Semaphore>,
}

impl Default for Pause {
    fn default() -> Self {
        Self {
            reached: Arc::new(Semaphore::new(0)),
            resume: Arc::new(Semaphore::new(0)),
        }
    }
}

impl Pause {
    /// Waits until a write reached the pause point (one permit per write).
    pub async fn reached(&self) {
        if let Ok(permit) = self.reached.acquire().await {
            permit.forget();
        }
    }
    /// Lets one paused write go on.
    pub fn resume(&self) {
        self.resume.add_permits(1);
    }
}

type Hook = Box<dyn FnOnce() -> BoxFuture<'static, ()> + Send>;

#[derive(Default)]
struct Rules {
    /// Kinds whose writes fail, with how many more failures (`None` = until changed).
    fail: HashMap<WriteKind, Option<usize>>,
    pause: HashMap<WriteKind, Pause>,
    before: HashMap<WriteKind, Hook>,
    failures: HashMap<WriteKind, usize>,
    writes: HashMap<WriteKind, usize>,
}

/// The flaky store. Writes run on the blocking pool, so under paused tokio time the
/// clock does not auto-advance while a write is in flight (a store write is real I/O
/// on the writer thread; without this, timers would fire "during" every write).
#[derive(Clone)]
pub struct FlakyStore {
    store: Store,
    rules: Arc<Mutex<Rules>>,
}

impl FlakyStore {
    /// Wraps `store`; no rule is active.
    pub fn new(store: Store) -> Self {
        Self {
            store,
            rules: Arc::default(),
        }
    }

    /// The real store (for assertions).
    pub fn store(&self) -> &Store {
        &self.store
    }

    fn rules(&self) -> MutexGuard<'_, Rules> {
        self.rules
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Writes of `kind` fail (`times`: how many; `None` = until [`FlakyStore::heal`]).
    pub fn fail(&self, kind: WriteKind, times: Option<usize>) {
        self.rules().fail.insert(kind, times);
    }

    /// Writes of `kind` succeed again.
    pub fn heal(&self, kind: WriteKind) {
        self.rules().fail.remove(&kind);
    }

    /// Every write of `kind` pauses at the returned point until resumed.
    pub fn pause(&self, kind: WriteKind) -> Pause {
        let pause = Pause::default();
        self.rules().pause.insert(kind, pause.clone());
        pause
    }

    /// Writes of `kind` no longer pause.
    pub fn unpause(&self, kind: WriteKind) {
        self.rules().pause.remove(&kind);
    }

    /// Runs `hook` once, right before the next write of `kind`.
    pub fn before_next(
        &self,
        kind: WriteKind,
        hook: impl FnOnce() -> BoxFuture<'static, ()> + Send + 'static,
    ) {
        self.rules().before.insert(kind, Box::new(hook));
    }

    /// How many writes of `kind` failed.
    pub fn failures(&self, kind: WriteKind) -> usize {
        self.rules().failures.get(&kind).copied().unwrap_or(0)
    }

    /// How many writes of `kind` were attempted.
    pub fn writes(&self, kind: WriteKind) -> usize {
        self.rules().writes.get(&kind).copied().unwrap_or(0)
    }

    /// Applies the rules for one write of `kind`: hook, pause, then `Err` if it fails.
    async fn gate(&self, kind: WriteKind) -> Result<(), StoreError> {
        let (hook, pause) = {
            let mut rules = self.rules();
            *rules.writes.entry(kind).or_default() += 1;
            (rules.before.remove(&kind), rules.pause.get(&kind).cloned())
        };
        if let Some(hook) = hook {
            hook().await;
        }
        if let Some(pause) = pause {
            pause.reached.add_permits(1);
            if let Ok(permit) = pause.resume.acquire().await {
                permit.forget();
            }
        }
        let mut rules = self.rules();
        let fails = match rules.fail.get_mut(&kind) {
            None => false,
            Some(None) => true,
            Some(Some(0)) => false,
            Some(Some(n)) => {
                *n -= 1;
                true
            }
        };
        if fails {
            *rules.failures.entry(kind).or_default() += 1;
            return Err(StoreError::WriterGone);
        }
        Ok(())
    }
}

#[async_trait::async_trait]
impl SessionStore for FlakyStore {
    async fn write(
        &self,
        kind: WriteKind,
        events: Vec<DomainEvent>,
    ) -> Result<Vec<knife_protocol::StoredEvent>, StoreError> {
        self.gate(kind).await?;
        let store = self.store.clone();
        tokio::task::spawn_blocking(move || futures::executor::block_on(store.write(events)))
            .await
            .map_err(|_| StoreError::WriterGone)?
    }

    async fn write_if(
        &self,
        kind: WriteKind,
        guard: RowGuard,
        events: Vec<DomainEvent>,
    ) -> Result<bool, StoreError> {
        self.gate(kind).await?;
        let store = self.store.clone();
        tokio::task::spawn_blocking(move || {
            futures::executor::block_on(store.write_if(guard, events))
        })
        .await
        .map_err(|_| StoreError::WriterGone)?
        .map(|written| written.is_some())
    }

    async fn thread_projection(
        &self,
        thread: &ThreadId,
    ) -> Result<Option<ThreadProjection>, StoreError> {
        SessionStore::thread_projection(&self.store, thread).await
    }

    async fn provider_thread_versioned(
        &self,
        id: &ProviderThreadId,
    ) -> Result<Option<(ProviderThread, i64)>, StoreError> {
        self.store.provider_thread_versioned(id).await
    }

    async fn latest_sequence(&self, thread: &ThreadId) -> Result<u64, StoreError> {
        SessionStore::latest_sequence(&self.store, thread).await
    }

    async fn touch_session(&self, id: &ProviderSessionId, at: Timestamp) -> Result<(), StoreError> {
        let store = self.store.clone();
        let id = id.clone();
        tokio::task::spawn_blocking(move || {
            futures::executor::block_on(store.touch_provider_session(&id, at))
        })
        .await
        .map_err(|_| StoreError::WriterGone)?
    }
}
