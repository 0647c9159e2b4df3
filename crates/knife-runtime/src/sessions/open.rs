//! `open` (single-flight per provider session, workspace check, exclusive vs shared)
//! and thread attach with its MCP credential, each undone by a drop guard if cancelled.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use knife_protocol::*;

use super::entry::Entry;
use super::metrics;
use super::state::EntryState;
use super::store::WriteKind;
use super::{Inner, SessionError, SessionHandle, SessionManager, idle, pump, release};
use crate::adapter::{OpenSessionInput, OpenSessionOptions};
use crate::error::{ProviderSessionOpenError, ProviderWorkspaceMissingError};
use crate::mcp::{
    AgentAccess, CredentialId, CredentialRequest, McpSessionConfig, Reservation, capabilities_for,
};
use crate::scope::SessionScope;

/// What to open: provider session `provider_session_id` (the caller picks it,
/// e.g. [`ProviderSessionId::exclusive`] or [`ProviderSessionId::shared`]) for
/// `thread_id` on `provider_instance_id`, working in `cwd`.
#[derive(Clone, Debug)]
pub struct OpenRequest {
    /// The session to open or join; single-flight per id (MGR-02).
    pub provider_session_id: ProviderSessionId,
    /// The thread the session serves (attached on open).
    pub thread_id: ThreadId,
    /// The configured provider instance whose adapter opens the session.
    pub provider_instance_id: ProviderInstanceId,
    /// The workspace; must be an existing directory (MGR-07, MGR-08): the project
    /// root or the thread's worktree (CHG-07).
    pub cwd: PathBuf,
    /// The project root when `cwd` is a thread's worktree: its settings apply
    /// ([`crate::adapter::OpenSessionInput::project_root`]). `None`: `cwd`'s own.
    pub project_root: Option<PathBuf>,
    /// Model override; `None` = the instance's default.
    pub model: Option<String>,
    /// Native thread the adapter activates at spawn (MGR-09).
    pub native_thread_id: Option<String>,
    /// Item-identity version passed to the adapter (MGR-09).
    pub item_identity_version: Option<u8>,
}

impl OpenRequest {
    /// A request with no model override, native thread or identity version.
    pub fn new(
        provider_session_id: ProviderSessionId,
        thread_id: ThreadId,
        provider_instance_id: ProviderInstanceId,
        cwd: impl Into<PathBuf>,
    ) -> Self {
        Self {
            provider_session_id,
            thread_id,
            provider_instance_id,
            cwd: cwd.into(),
            project_root: None,
            model: None,
            native_thread_id: None,
            item_identity_version: None,
        }
    }
}

/// MGR-07: a directory is present; NotFound or a non-directory is missing; any other
/// stat error counts as present (the open itself will say what is wrong).
async fn check_workspace(cwd: &Path) -> Result<(), ProviderWorkspaceMissingError> {
    match tokio::fs::metadata(cwd).await {
        Ok(meta) if meta.is_dir() => Ok(()),
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Ok(()),
        _ => Err(ProviderWorkspaceMissingError {
            path: cwd.display().to_string(),
        }),
    }
}

impl SessionManager {
    /// Opens provider session `request.provider_session_id` for `request.thread_id`,
    /// or joins it when it is live (MGR-01..10).
    ///
    /// * The workspace is checked first, also before reusing a live session
    ///   (MGR-07, MGR-08): [`SessionError::WorkspaceMissing`], nothing touched.
    /// * Opens of one id are single-flight (MGR-02); different ids open concurrently.
    /// * A live exclusive session refuses a second thread with [`SessionError::Open`] (MGR-06).
    /// * The thread's MCP credential is minted before the adapter spawns anything;
    ///   a failed or cancelled open revokes it and closes the session scope
    ///   (time-boxed, on the manager's tracker; MGR-04, MGR-05).
    /// * On success `provider-session.attached` (status `ready`) is persisted for the
    ///   thread, the event pump starts and the idle timer is armed.
    pub async fn open(&self, request: OpenRequest) -> Result<SessionHandle, SessionError> {
        let inner = &self.inner;
        if inner.shutdown.is_cancelled() {
            return Err(SessionError::ShuttingDown);
        }
        let adapter = inner
            .adapters
            .get(&request.provider_instance_id)
            .cloned()
            .ok_or_else(|| SessionError::InstanceNotFound(request.provider_instance_id.clone()))?;
        check_workspace(&request.cwd).await?;
        let id = request.provider_session_id.clone();
        let thread = request.thread_id.clone();
        let _open_lock = inner.open_locks.lock(&id).await;

        if let Some(entry) = inner.entry(&id) {
            match ensure_attached(inner, &entry, &thread).await {
                // Released while the attach waited: open a fresh session below.
                Err(SessionError::SessionGone(_)) => {}
                Err(e) => return Err(e),
                Ok(_) => {
                    idle::touch(inner, &entry);
                    // A due idle release may have removed the entry before the touch
                    // (it does not take the open lock). Re-checked after the touch:
                    // either the release saw the new generation and backs off, or
                    // the entry is gone and a fresh session is opened (we still hold
                    // the open lock, so no other open races this one).
                    if !entry.state().is_removed() {
                        return Ok(SessionHandle::new(Arc::clone(inner), entry));
                    }
                    tracing::debug!(session = %id, %thread, "the session was released while it was being opened; opening a fresh one");
                }
            }
        }

        let driver = adapter.driver().to_owned();
        let prepared = prepare_mcp(inner, &thread, &request.provider_instance_id, &id).await?;
        // The previous session's health mark must not explain this session's failures.
        inner.health.clear(&thread);
        let scope = SessionScope::new();
        let mut guard = OpenGuard {
            inner: Arc::clone(inner),
            thread: thread.clone(),
            issued: prepared
                .as_ref()
                .filter(|p| p.issued)
                .map(|p| p.config.credential_id.clone()),
            scope: Some(scope.clone()),
        };
        let input = OpenSessionInput {
            provider_session_id: id.clone(),
            provider_instance_id: request.provider_instance_id.clone(),
            thread_id: thread.clone(),
            cwd: request.cwd.clone(),
            project_root: request.project_root.clone(),
            model: request.model.clone(),
            native_thread_id: request.native_thread_id.clone(),
        };
        let options = OpenSessionOptions {
            item_identity_version: request.item_identity_version,
            mcp: prepared.as_ref().map(|p| p.config.clone()),
            scope: scope.clone(),
        };
        let metric_driver = driver.clone();
        let metric = metrics::OpMetric::new(move |outcome| {
            metrics::session_op(&metric_driver, "open", None, outcome)
        });
        let opened = tokio::select! {
            // The error below already says "could not open provider session X":
            // keep only the adapter's reason of an `Open` failure.
            opened = adapter.open(input, options) => opened.map_err(|e| e.open_reason()),
            // Shutdown stops opens still in their handshake (MGR-35); the guard
            // then closes whatever the adapter spawned.
            _ = inner.shutdown.cancelled() => Err("the server is shutting down".to_owned()),
        };
        let runtime = match opened {
            Ok(runtime) => runtime,
            Err(message) => {
                metric.finish(false);
                return Err(ProviderSessionOpenError {
                    provider_session_id: id,
                    message,
                }
                .into());
            }
        };
        let Some(events) = runtime.take_events() else {
            metric.finish(false);
            return Err(ProviderSessionOpenError {
                provider_session_id: id,
                message: "the adapter's runtime has no event stream (already taken)".into(),
            }
            .into());
        };
        metric.finish(true);

        let now = inner.clock.now();
        let record = ProviderSession {
            id: id.clone(),
            driver: driver.clone(),
            provider_instance_id: request.provider_instance_id.clone(),
            status: SessionStatus::Ready,
            cwd: request.cwd.display().to_string(),
            model: request.model.clone(),
            capabilities: adapter.capabilities(),
            created_at: now,
            updated_at: now,
            last_error: None,
        };
        let state = EntryState::opened(
            &thread,
            request.native_thread_id.clone(),
            prepared.as_ref().map(|p| p.config.credential_id.clone()),
        );
        let entry = Arc::new(Entry {
            id: id.clone(),
            instance: request.provider_instance_id.clone(),
            driver,
            capabilities: adapter.capabilities(),
            cwd: request.cwd.clone(),
            runtime,
            scope,
            record: std::sync::Mutex::new(record.clone()),
            state: std::sync::Mutex::new(state),
            subscribers: std::sync::Mutex::default(),
            request_permit: tokio::sync::Mutex::new(()),
        });
        {
            // Checked under the map lock: `shutdown` cancels, then snapshots the map, so
            // an entry is either refused here or released by the shutdown (MGR-35).
            let mut entries = inner.entries();
            if inner.shutdown.is_cancelled() {
                drop(entries);
                let runtime = Arc::clone(&entry.runtime);
                let limit = inner.options.close_timeout;
                inner.tasks.spawn(async move {
                    let _ = tokio::time::timeout(limit, runtime.close()).await;
                });
                return Err(SessionError::ShuttingDown);
            }
            entries.insert(id.clone(), Arc::clone(&entry));
        }
        // The entry now owns the credential and the scope (its release cleans both).
        guard.disarm();
        drop(prepared);

        let mut attach_guard = EntryOpenGuard {
            inner: Arc::clone(inner),
            entry: Some(Arc::clone(&entry)),
        };
        let event =
            DomainEvent::new(now, EventBody::ProviderSessionAttached(record)).with_thread(&thread);
        if let Err(e) = inner.store.write(WriteKind::Attach, vec![event]).await {
            attach_guard.entry = None;
            let _ = release::release_entry(
                inner,
                Arc::clone(&entry),
                super::ReleaseReason::RuntimeError,
                Some("Failed to persist the provider-session attachment.".into()),
                release::ReleaseOptions::default(),
            )
            .await;
            return Err(e.into());
        }
        attach_guard.entry = None;
        pump::start(inner, &entry, events);
        idle::schedule_idle_release(inner, &entry);
        Ok(SessionHandle::new(Arc::clone(inner), entry))
    }
}

/// Undoes a failed or cancelled open before its entry exists: revokes the freshly
/// issued credential and clears the slot at once (synchronously, so it happens even
/// if the close hangs), then closes the scope on the tracker under the close box.
struct OpenGuard {
    inner: Arc<Inner>,
    thread: ThreadId,
    issued: Option<CredentialId>,
    scope: Option<SessionScope>,
}

impl OpenGuard {
    fn disarm(&mut self) {
        self.issued = None;
        self.scope = None;
    }
}

impl Drop for OpenGuard {
    fn drop(&mut self) {
        if let (Some(id), Some((registry, slots))) = (self.issued.take(), &self.inner.options.mcp) {
            registry.revoke(&id);
            slots.clear_if(&self.thread, &id);
        }
        if let Some(scope) = self.scope.take() {
            let limit = self.inner.options.close_timeout;
            self.inner.tasks.spawn(async move {
                if !scope.close_within(limit).await {
                    tracing::warn!(
                        timeout_s = limit.as_secs(),
                        "a cancelled provider session open did not stop within its time box"
                    );
                }
            });
        }
    }
}

/// Releases an entry whose `attached` write was cancelled (MGR-04: no entry stays behind).
struct EntryOpenGuard {
    inner: Arc<Inner>,
    entry: Option<Arc<Entry>>,
}

impl Drop for EntryOpenGuard {
    fn drop(&mut self) {
        if let Some(entry) = self.entry.take() {
            let inner = Arc::clone(&self.inner);
            self.inner.tasks.spawn(async move {
                let _ = release::release_entry(
                    &inner,
                    entry,
                    super::ReleaseReason::ManualShutdown,
                    Some("The provider session start was interrupted.".into()),
                    release::ReleaseOptions::default(),
                )
                .await;
            });
        }
    }
}

/// A credential prepared for a thread, reserved until dropped.
pub(crate) struct Prepared {
    pub config: McpSessionConfig,
    pub issued: bool,
    _reservation: Reservation,
}

/// Reuses the thread's credential when it still resolves to the same thread, instance
/// and capabilities (a runtime that keeps its token across re-attach gets the same one,
/// MCP-06), else revokes the thread's credentials and issues a new one into the slot
/// (MCP-09). The kept credential is reserved *before* the access check awaits, so a
/// cancelled check drops the reservation and leaves nothing holding it (MCP-11).
pub(crate) async fn prepare_mcp(
    inner: &Inner,
    thread: &ThreadId,
    instance: &ProviderInstanceId,
    session: &ProviderSessionId,
) -> Result<Option<Prepared>, SessionError> {
    let Some((registry, slots)) = &inner.options.mcp else {
        return Ok(None);
    };
    let existing = slots
        .get(thread)
        .map(|c| (registry.reserve(&c.credential_id), c));
    let access = match &inner.options.mcp_access {
        Some(policy) => policy.access(thread).await,
        None => AgentAccess::default(),
    };
    let capabilities = capabilities_for(access);
    if let Some((reservation, mut existing)) = existing {
        let reusable = registry.resolve(existing.token()).is_some_and(|s| {
            &s.thread_id == thread
                && &s.provider_instance_id == instance
                && s.capabilities == capabilities
        });
        if reusable {
            existing.provider_session_id = Some(session.clone());
            slots.set(existing.clone());
            return Ok(Some(Prepared {
                config: existing,
                issued: false,
                _reservation: reservation,
            }));
        }
    }
    registry.revoke_thread(thread);
    let config = registry
        .issue_for(CredentialRequest {
            thread_id: thread.clone(),
            provider_instance_id: instance.clone(),
            provider_session_id: Some(session.clone()),
            capabilities,
        })
        .map_err(|e| ProviderSessionOpenError {
            provider_session_id: session.clone(),
            message: e.to_string(),
        })?;
    slots.set(config.clone());
    let reservation = registry.reserve(&config.credential_id);
    Ok(Some(Prepared {
        config,
        issued: true,
        _reservation: reservation,
    }))
}

/// Revokes credential `id` of `thread` unless an open in flight reserved it or another
/// live entry (not `except`) is attached to the thread or records the same id.
pub(crate) fn revoke_unless_held(
    inner: &Inner,
    thread: &ThreadId,
    id: &CredentialId,
    except: &Arc<Entry>,
) {
    let Some((registry, slots)) = &inner.options.mcp else {
        return;
    };
    if registry.is_reserved(id) {
        return;
    }
    let held = inner
        .entries()
        .values()
        .any(|e| !Arc::ptr_eq(e, except) && e.state().holds_credential(thread, id));
    if !held {
        registry.revoke(id);
        slots.clear_if(thread, id);
    }
}

/// Attaches `thread` to `entry` if it is not attached yet: exclusive check, health
/// mark cleared (a joining thread gets a new runtime, MGR-03), MCP credential
/// prepared, `provider-session.attached` persisted. Returns whether it attached.
/// Serialised per (session, thread); a cancelled attach undoes only itself
/// (MGR-16, MGR-17).
pub(crate) async fn ensure_attached(
    inner: &Arc<Inner>,
    entry: &Arc<Entry>,
    thread: &ThreadId,
) -> Result<bool, SessionError> {
    let _lock = inner
        .attach_locks
        .lock(&(entry.id.clone(), thread.clone()))
        .await;
    {
        let mut st = entry.state();
        if st.is_removed() {
            return Err(SessionError::SessionGone(entry.id.clone()));
        }
        if st.is_attached(thread) {
            return Ok(false);
        }
        if !entry.shared() && st.attached_count() > 0 {
            return Err(ProviderSessionOpenError {
                provider_session_id: entry.id.clone(),
                message: format!(
                    "Provider {} does not support attaching multiple app threads to one \
                     session; use one session per thread for this provider instance.",
                    entry.driver
                ),
            }
            .into());
        }
        st.attach(thread);
    }
    inner.health.clear(thread);
    let mut guard = AttachGuard {
        inner: Arc::clone(inner),
        entry: Arc::clone(entry),
        thread: thread.clone(),
        credential: None,
        armed: true,
    };
    let prepared = prepare_mcp(inner, thread, &entry.instance, &entry.id).await?;
    if let Some(p) = &prepared {
        entry
            .state()
            .record_credential(thread, p.config.credential_id.clone());
        guard.credential = Some((p.config.credential_id.clone(), p.issued));
    }
    // Stamped now: the attach is activity, and the record's last-seen time must not
    // fall back to when the session was opened (the reaper reads it).
    let now = inner.clock.now();
    let mut record = entry.record();
    record.updated_at = now;
    entry.set_record(record.clone());
    let event =
        DomainEvent::new(now, EventBody::ProviderSessionAttached(record)).with_thread(thread);
    inner.store.write(WriteKind::Attach, vec![event]).await?;
    guard.armed = false;
    Ok(true)
}

/// Undoes one attach: only this call's attachment, and its credential only when this
/// call issued it and nobody else holds it.
struct AttachGuard {
    inner: Arc<Inner>,
    entry: Arc<Entry>,
    thread: ThreadId,
    credential: Option<(CredentialId, bool)>,
    armed: bool,
}

impl Drop for AttachGuard {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        self.entry
            .state()
            .undo_attach(&self.thread, self.credential.as_ref().map(|(id, _)| id));
        if let Some((id, true)) = &self.credential {
            revoke_unless_held(&self.inner, &self.thread, id, &self.entry);
        }
    }
}
