//! The provider session manager (SPEC.md MGR-01..48): owns every live provider
//! session — open (single-flight), share, idle release, pins, release, shutdown.
//!
//! # Design
//!
//! * One [`entry::Entry`] per live `ProviderSessionId` in a map; a replacement under
//!   the same id is a new `Arc`, and every background decision (idle release, pin,
//!   thread unload, release retry) re-checks the `Arc` it captured and the entry's
//!   idle generation before acting (ARCHITECTURE.md "Generations").
//! * Opens of one id are serialised by a per-id async lock (single-flight, MGR-02);
//!   attaches by a per-(session, thread) lock.
//! * Cancellation is dropping a future: `open` and attach hold guards whose `Drop`
//!   revokes a freshly minted MCP credential and closes the session scope on the
//!   manager's [`TaskTracker`] (MGR-04, MGR-05). A release, once started, runs in its
//!   own spawned task so a dropped caller never cuts it short.
//! * The event pump persists adapter events through the store, then offers them to
//!   subscribers (MGR-11); `turn.terminal` marks the turn idle.

mod detach;
mod entry;
mod handle;
mod health;
mod idle;
mod info;
pub mod metrics;
mod open;
mod pump;
mod release;
pub mod requests;
mod roster;
mod state;
mod stopper;
mod store;
mod watchdog;

pub use entry::SessionEventError;
pub use handle::SessionHandle;
pub use health::{AgentHealth, OOM_KILLED_MESSAGE};
pub use info::LiveSessionInfo;
pub use open::OpenRequest;
pub use pump::TOUCH_INTERVAL;
pub use stopper::ManagerStopper;
pub use store::{SessionStore, WriteKind};
pub use watchdog::STALLED_ERROR_TYPE;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use knife_protocol::*;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::adapter::ProviderAdapter;
use crate::clock::SharedClock;
pub use crate::error::{ProviderSessionCloseError, SessionError};
use crate::mcp::{CredentialRegistry, McpAccessPolicy, McpSlots};
use entry::{Entry, KeyedLocks};

/// Default idle window before an idle session is released (and an idle thread of a
/// shared runtime unloaded): 30 min (MGR-14, MGR-20).
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(30 * 60);
/// Default cap on deferring idle release for pending background work: 4 h (MGR-25).
pub const DEFAULT_MAX_IDLE_PIN: Duration = Duration::from_secs(4 * 60 * 60);
/// Time box for closing a session (runtime close + scope finalizers): 30 s (MGR-05,
/// MGR-33); shutdown shares one such box across all sessions (MGR-36).
pub const CLOSE_TIMEOUT: Duration = Duration::from_secs(30);
/// Time box for unloading one native thread: 10 s (MGR-12, MGR-14).
pub const UNLOAD_TIMEOUT: Duration = Duration::from_secs(10);
/// Time box of one `interrupt_turn` call into a runtime (the stuck-turn watchdog,
/// detach): a runtime that does not answer must not hang its caller.
pub const INTERRUPT_TIMEOUT: Duration = Duration::from_secs(10);
/// Default stuck-turn limit: a running turn with no adapter event for 15 min is
/// interrupted and failed (the stuck-turn watchdog, `watchdog.rs`); zero turns the watchdog off.
pub const DEFAULT_TURN_STALL_TIMEOUT: Duration = Duration::from_secs(15 * 60);
/// First retry of a failed release record, 1 s after the failure (MGR-38).
pub const RELEASE_RETRY_FIRST: Duration = Duration::from_secs(1);
/// Cap of the doubling release-record retry delay: 30 s (MGR-38).
pub const RELEASE_RETRY_MAX: Duration = Duration::from_secs(30);

/// Tuning of a [`SessionManager`]; `Default` uses the constants above.
#[derive(Clone, Debug)]
pub struct SessionManagerOptions {
    /// Idle window (clamped to at least 1 ms).
    pub idle_timeout: Duration,
    /// Cap on a pin past idleness.
    pub max_idle_pin: Duration,
    /// Close time box per session.
    pub close_timeout: Duration,
    /// Unload time box per thread.
    pub unload_timeout: Duration,
    /// Stuck-turn watchdog limit; `Duration::ZERO` = off.
    pub turn_stall_timeout: Duration,
    /// MCP credentials: registry and per-thread slots; `None` = sessions get no MCP
    /// credential and a thread's slot is cleared on open.
    pub mcp: Option<(Arc<CredentialRegistry>, Arc<McpSlots>)>,
    /// Decides each thread's MCP capabilities when its credential is prepared
    /// (MCP-02..05); `None` = [`crate::mcp::AgentAccess::default`] for every thread.
    pub mcp_access: Option<Arc<dyn McpAccessPolicy>>,
    /// Where the pumps hand live deltas (LIVE-01); the server's event streams read it.
    pub live: crate::live::LiveHub,
    /// Told about each `model-call.recorded` the pumps wrote (TURN-06); `None` = nobody.
    pub model_calls: Option<Arc<dyn ModelCallObserver>>,
}

/// Told about every model call a pump of this node recorded (`model-call.recorded`,
/// every driver: built-in agent step, codex token-usage report, ACP prompt result),
/// right after the event is durable, e.g. to count its tokens and cost in metrics as
/// the call happens (TURN-06). Must not block.
pub trait ModelCallObserver: Send + Sync + std::fmt::Debug {
    /// `call` as written.
    fn model_call_recorded(&self, call: &knife_protocol::ModelCall);
}

impl Default for SessionManagerOptions {
    fn default() -> Self {
        Self {
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            max_idle_pin: DEFAULT_MAX_IDLE_PIN,
            close_timeout: CLOSE_TIMEOUT,
            unload_timeout: UNLOAD_TIMEOUT,
            turn_stall_timeout: DEFAULT_TURN_STALL_TIMEOUT,
            mcp: None,
            mcp_access: None,
            live: crate::live::LiveHub::new(),
            model_calls: None,
        }
    }
}

/// Why a session is released (`release{reason}`; label of the release metric).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReleaseReason {
    /// Idle past the idle window (MGR-20).
    Idle,
    /// The runtime failed (stream error, failed persistence); projects `error`.
    RuntimeError,
    /// A user or the provider closed it (`close`, detach of an exclusive session).
    ManualShutdown,
    /// The server is shutting down (MGR-35).
    ServerShutdown,
}

impl ReleaseReason {
    /// `idle`, `runtime_error`, `manual_shutdown`, `server_shutdown`.
    pub fn as_str(self) -> &'static str {
        match self {
            ReleaseReason::Idle => "idle",
            ReleaseReason::RuntimeError => "runtime_error",
            ReleaseReason::ManualShutdown => "manual_shutdown",
            ReleaseReason::ServerShutdown => "server_shutdown",
        }
    }
}

pub(crate) struct Inner {
    pub store: Arc<dyn SessionStore>,
    pub clock: SharedClock,
    pub adapters: HashMap<ProviderInstanceId, Arc<dyn ProviderAdapter>>,
    pub options: SessionManagerOptions,
    pub entries: Mutex<HashMap<ProviderSessionId, Arc<Entry>>>,
    pub open_locks: KeyedLocks<ProviderSessionId>,
    pub attach_locks: KeyedLocks<(ProviderSessionId, ThreadId)>,
    pub tasks: TaskTracker,
    /// The release tasks in flight (also on `tasks`): shutdown waits for them, also
    /// those another caller started.
    pub releases: TaskTracker,
    pub shutdown: CancellationToken,
    pub health: AgentHealth,
}

impl Inner {
    pub fn entries(&self) -> MutexGuard<'_, HashMap<ProviderSessionId, Arc<Entry>>> {
        self.entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The live entry of `id`.
    pub fn entry(&self, id: &ProviderSessionId) -> Option<Arc<Entry>> {
        self.entries().get(id).cloned()
    }

    /// A snapshot of the live entries (the map lock is released before any `.await`).
    pub fn snapshot(&self) -> Vec<Arc<Entry>> {
        self.entries().values().cloned().collect()
    }

    /// True while `entry` is the live entry of its id (not removed, not replaced).
    pub fn is_current(&self, entry: &Arc<Entry>) -> bool {
        self.entries()
            .get(&entry.id)
            .is_some_and(|e| Arc::ptr_eq(e, entry))
    }
}

/// Owns every live provider session (SPEC.md MGR). Cheap to clone.
///
/// Call [`SessionManager::shutdown`] before dropping the last clone; background
/// tasks (idle timers, pumps, release retries) run on its [`TaskTracker`].
#[derive(Clone)]
pub struct SessionManager {
    pub(crate) inner: Arc<Inner>,
}

impl SessionManager {
    /// A manager over `adapters` (one per provider instance) writing through `store`.
    pub fn new(
        store: Arc<dyn SessionStore>,
        clock: SharedClock,
        adapters: HashMap<ProviderInstanceId, Arc<dyn ProviderAdapter>>,
        mut options: SessionManagerOptions,
    ) -> Self {
        options.idle_timeout = options.idle_timeout.max(Duration::from_millis(1));
        Self {
            inner: Arc::new(Inner {
                store,
                clock,
                adapters,
                options,
                entries: Mutex::default(),
                open_locks: KeyedLocks::default(),
                attach_locks: KeyedLocks::default(),
                tasks: TaskTracker::new(),
                releases: TaskTracker::new(),
                shutdown: CancellationToken::new(),
                health: AgentHealth::default(),
            }),
        }
    }

    /// The live hub the pumps hand deltas to (LIVE-01).
    pub fn live(&self) -> &crate::live::LiveHub {
        &self.inner.options.live
    }

    /// Agent health marks (OOM kills) the supervisor records and `open` clears (MGR-03).
    pub fn health(&self) -> &AgentHealth {
        &self.inner.health
    }

    /// The handle of live session `id`, if any. No side effect (does not touch the
    /// idle timer).
    pub fn get(&self, id: &ProviderSessionId) -> Option<SessionHandle> {
        self.inner
            .entry(id)
            .map(|entry| SessionHandle::new(Arc::clone(&self.inner), entry))
    }

    /// Whether session `id` is live; never delays or resets idle release (MGR-29).
    pub fn is_live(&self, id: &ProviderSessionId) -> bool {
        self.inner.entries().contains_key(id)
    }

    /// Number of background tasks still running on the manager's tracker (pumps, idle
    /// timers, releases, retries, cleanups of cancelled opens). For diagnostics.
    pub fn background_tasks(&self) -> usize {
        self.inner.tasks.len()
    }

    /// Ids of the live sessions, sorted.
    pub fn live_sessions(&self) -> Vec<ProviderSessionId> {
        let mut ids: Vec<_> = self.inner.entries().keys().cloned().collect();
        ids.sort();
        ids
    }

    /// Releases session `id` with `reason` (MGR-30): closes the runtime (time-boxed),
    /// revokes its MCP credentials, persists `stopped` (`error` with
    /// `last_error = detail` for [`ReleaseReason::RuntimeError`]) and settles its
    /// runtime requests. No-op when `id` is not live.
    ///
    /// Errors: [`SessionError::Close`] when the close or the status write failed (the
    /// write is retried in the background, MGR-38).
    pub async fn release(
        &self,
        id: &ProviderSessionId,
        reason: ReleaseReason,
        detail: Option<String>,
    ) -> Result<(), SessionError> {
        let Some(entry) = self.inner.entry(id) else {
            return Ok(());
        };
        release::release_entry(
            &self.inner,
            entry,
            reason,
            detail,
            release::ReleaseOptions::default(),
        )
        .await
        .map(drop)
    }

    /// `release(id, manual_shutdown)` (MGR-30).
    pub async fn close(&self, id: &ProviderSessionId) -> Result<(), SessionError> {
        self.release(id, ReleaseReason::ManualShutdown, None).await
    }

    /// Releases every live session of `instance` concurrently (MGR-34); returns the
    /// first failure.
    pub async fn close_instance(&self, instance: &ProviderInstanceId) -> Result<(), SessionError> {
        let entries = self.inner.snapshot();
        let detail = format!("Provider instance {instance} logged out.");
        let results =
            futures::future::join_all(entries.into_iter().filter(|e| &e.instance == instance).map(
                |entry| {
                    release::release_entry(
                        &self.inner,
                        entry,
                        ReleaseReason::ManualShutdown,
                        Some(detail.clone()),
                        release::ReleaseOptions::default(),
                    )
                },
            ))
            .await;
        results
            .into_iter()
            .find(Result::is_err)
            .unwrap_or(Ok(true))?;
        Ok(())
    }

    /// Whether [`Self::shutdown`] has begun (opens are refused from then on).
    pub fn is_shutting_down(&self) -> bool {
        self.inner.shutdown.is_cancelled()
    }

    /// Stops the manager (MGR-35..37): refuses new opens, stops opens in flight
    /// (their scopes are closed), and releases every live session with
    /// `server_shutdown` in parallel under one shared [`CLOSE_TIMEOUT`] box; subscriber
    /// streams end empty, without error. Failures are logged. Idempotent; every call
    /// returns only once the releases in flight (also those of an earlier call, or of
    /// the idle timer) have written their records or the box ran out, so a process
    /// that exits after it loses no release record.
    pub async fn shutdown(&self) {
        self.inner.shutdown.cancel();
        let deadline = tokio::time::Instant::now() + self.inner.options.close_timeout;
        let entries = self.inner.snapshot();
        let releases = futures::future::join_all(entries.into_iter().map(|entry| {
            release::release_entry(
                &self.inner,
                entry,
                ReleaseReason::ServerShutdown,
                None,
                release::ReleaseOptions::default(),
            )
        }));
        match tokio::time::timeout_at(deadline, releases).await {
            Ok(results) => {
                for result in results {
                    if let Err(e) = result {
                        tracing::warn!(error = %e, "a provider session failed to release on shutdown");
                    }
                }
            }
            Err(_) => tracing::warn!(
                timeout_s = self.inner.options.close_timeout.as_secs(),
                "provider sessions did not release within the shutdown time box"
            ),
        }
        // Releases started elsewhere (an earlier shutdown call took their entries out
        // of the map, so the snapshot above did not see them).
        self.inner.releases.close();
        if tokio::time::timeout_at(deadline, self.inner.releases.wait())
            .await
            .is_err()
        {
            tracing::warn!(
                in_flight = self.inner.releases.len(),
                "provider session releases still running at the end of the shutdown time box"
            );
        }
        self.inner.tasks.close();
    }
}
