//! One [`Entry`] per live provider session (its runtime, record, state and
//! subscribers), plus the keyed async locks. The state itself lives in `state.rs`.

use std::collections::HashMap;
use std::hash::Hash;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use futures::StreamExt;
use futures::stream::BoxStream;
use knife_protocol::*;
use tokio::sync::mpsc;

use super::state::EntryState;
use crate::adapter::SessionRuntime;
use crate::scope::SessionScope;

/// One live provider session. Compared by `Arc` identity: a replacement opened under
/// the same id is a different entry, so background decisions holding the old `Arc`
/// never touch it (MGR-28, MGR-39).
pub(crate) struct Entry {
    pub id: ProviderSessionId,
    pub instance: ProviderInstanceId,
    pub driver: String,
    pub capabilities: ProviderCapabilities,
    pub cwd: PathBuf,
    pub runtime: Arc<dyn SessionRuntime>,
    pub scope: SessionScope,
    /// The session record as last persisted (status updates from the adapter replace it).
    pub record: Mutex<ProviderSession>,
    /// Attached threads, busy turns, generations, timers (private; see `state.rs`).
    pub state: Mutex<EntryState>,
    pub subscribers: Mutex<Subscribers>,
    /// Orders the pump's persistence of session-scoped requests against the release
    /// cutoff: a request written before the release takes this permit is settled by it.
    pub request_permit: tokio::sync::Mutex<()>,
}

impl Entry {
    /// The mutable state (a poisoned lock still holds valid state).
    pub fn state(&self) -> MutexGuard<'_, EntryState> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The current session record.
    pub fn record(&self) -> ProviderSession {
        self.record
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Replaces the session record.
    pub fn set_record(&self, session: ProviderSession) {
        *self
            .record
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = session;
    }

    /// The subscriber set.
    pub fn subscribers(&self) -> MutexGuard<'_, Subscribers> {
        self.subscribers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Whether the session serves several threads (MGR-06, MGR-10).
    pub fn shared(&self) -> bool {
        self.capabilities.shared_sessions
    }
}

/// What a subscriber queue carries.
pub(crate) enum Signal {
    Event(Box<AdapterEvent>),
    Failure(String),
}

/// One subscriber's queue; `discard` makes its stream end without draining (server
/// shutdown drops buffered events, MGR-37).
pub(crate) struct Subscriber {
    pub tx: mpsc::UnboundedSender<Signal>,
    pub discard: Arc<AtomicBool>,
}

/// The subscribers of one session (broadcast: each has its own unbounded queue).
#[derive(Default)]
pub(crate) struct Subscribers {
    pub next_id: u64,
    pub closed: bool,
    pub queues: HashMap<u64, Subscriber>,
}

/// Error item of a subscriber stream: the session failed or was released (MGR-31).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the provider session's event stream failed: {0}")]
pub struct SessionEventError(pub String);

impl Subscribers {
    /// A new subscriber stream; already ended when the session is gone.
    pub fn subscribe(&mut self) -> BoxStream<'static, Result<AdapterEvent, SessionEventError>> {
        let (tx, rx) = mpsc::unbounded_channel();
        let discard = Arc::new(AtomicBool::new(false));
        if !self.closed {
            self.next_id += 1;
            self.queues.insert(
                self.next_id,
                Subscriber {
                    tx,
                    discard: Arc::clone(&discard),
                },
            );
        }
        let stream = tokio_stream_from(rx);
        stream
            .take_while(move |_| {
                let keep = !discard.load(Ordering::SeqCst);
                async move { keep }
            })
            .scan(false, |failed, signal| {
                // After a failure item the stream ends.
                if *failed {
                    return futures::future::ready(None);
                }
                let item = match signal {
                    Signal::Event(e) => Ok(*e),
                    Signal::Failure(message) => {
                        *failed = true;
                        Err(SessionEventError(message))
                    }
                };
                futures::future::ready(Some(item))
            })
            .boxed()
    }

    /// Offers `event` to every subscriber (after the pump committed it, MGR-11).
    pub fn broadcast(&mut self, event: &AdapterEvent) {
        self.queues
            .retain(|_, s| s.tx.send(Signal::Event(Box::new(event.clone()))).is_ok());
    }

    /// Ends every stream: `Graceful` drains what is queued, `Discard` drops it,
    /// `Fail` delivers what is queued then one error.
    pub fn close(&mut self, how: CloseSubscribers) {
        self.closed = true;
        for (_, sub) in self.queues.drain() {
            match &how {
                CloseSubscribers::Graceful => {}
                CloseSubscribers::Discard => sub.discard.store(true, Ordering::SeqCst),
                CloseSubscribers::Fail(message) => {
                    let _ = sub.tx.send(Signal::Failure(message.clone()));
                }
            }
        }
    }
}

/// How [`Subscribers::close`] ends the streams.
pub(crate) enum CloseSubscribers {
    Graceful,
    Discard,
    Fail(String),
}

fn tokio_stream_from<T: Send + 'static>(
    mut rx: mpsc::UnboundedReceiver<T>,
) -> BoxStream<'static, T> {
    futures::stream::poll_fn(move |cx| rx.poll_recv(cx)).boxed()
}

/// Async mutexes per key in a ref-counted map: an unused key's lock is dropped.
pub(crate) struct KeyedLocks<K> {
    locks: Mutex<HashMap<K, Arc<tokio::sync::Mutex<()>>>>,
}

impl<K> Default for KeyedLocks<K> {
    fn default() -> Self {
        Self {
            locks: Mutex::default(),
        }
    }
}

/// Guard of one key's lock; removes the key's mutex when nobody else uses it.
pub(crate) struct KeyedGuard<'a, K: Eq + Hash + Clone> {
    owner: &'a KeyedLocks<K>,
    key: K,
    guard: Option<tokio::sync::OwnedMutexGuard<()>>,
}

impl<K: Eq + Hash + Clone> KeyedLocks<K> {
    /// Waits for `key`'s lock. Cancel-safe: dropping the future gives up the wait.
    pub async fn lock(&self, key: &K) -> KeyedGuard<'_, K> {
        let mutex = Arc::clone(
            self.locks
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .entry(key.clone())
                .or_default(),
        );
        let mut guard = KeyedGuard {
            owner: self,
            key: key.clone(),
            guard: None,
        };
        guard.guard = Some(mutex.lock_owned().await);
        guard
    }
}

impl<K: Eq + Hash + Clone> Drop for KeyedGuard<'_, K> {
    fn drop(&mut self) {
        drop(self.guard.take());
        let mut locks = self
            .owner
            .locks
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // Only the map holds it now: nobody waits or holds it.
        if locks
            .get(&self.key)
            .is_some_and(|m| Arc::strong_count(m) == 1)
        {
            locks.remove(&self.key);
        }
    }
}
