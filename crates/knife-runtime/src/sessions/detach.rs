//! `detach`: a thread leaves a session (archive, delete, workspace change). Shared
//! runtimes interrupt and unload the thread and stay up; exclusive ones are released.

use knife_protocol::*;

use super::store::WriteKind;
use super::{INTERRUPT_TIMEOUT, ReleaseReason, SessionError, SessionManager, idle, release};
use crate::adapter::InterruptReason;

impl SessionManager {
    /// Detaches `thread` from session `id` (MGR-12):
    ///
    /// * shared session: interrupts the thread's running provider turns, then unloads
    ///   each native thread persisted for it on this session (10 s box each) while the
    ///   runtime stays up; with no thread left the session goes idle and is released
    ///   after one idle window;
    /// * exclusive session with no thread left: released (`manual_shutdown`, `detail`).
    ///
    /// A plain detach keeps the thread's MCP credential (the live process may still
    /// use it); `revoke_mcp_credential` (archive, delete) revokes every credential of
    /// the thread, even when the session is already gone. Persists
    /// `provider-session.detached` for the thread.
    ///
    /// Errors: [`SessionError::Close`] from the release of an exclusive session;
    /// [`SessionError::Store`] when the detached event cannot be written.
    pub async fn detach(
        &self,
        id: &ProviderSessionId,
        thread: &ThreadId,
        detail: Option<String>,
        revoke_mcp_credential: bool,
    ) -> Result<(), SessionError> {
        let inner = &self.inner;
        let entry = inner.entry(id);
        let mut native_ids = Vec::new();
        if let Some(entry) = entry.as_ref().filter(|e| e.shared()) {
            // Ignore read errors: detaching must not fail on a projection read.
            if let Ok(Some(projection)) = inner.store.thread_projection(thread).await {
                let mine: Vec<&ProviderThread> = projection
                    .provider_threads
                    .iter()
                    .filter(|p| p.provider_session_id.as_ref() == Some(id))
                    .collect();
                native_ids = mine.iter().filter_map(|p| p.native_id.clone()).collect();
                let running = projection.provider_turns.iter().any(|t| {
                    t.provider_session_id == *id && t.status == ProviderTurnStatus::Running
                });
                if running {
                    // Time-boxed: a runtime that does not answer must not hang the detach.
                    match tokio::time::timeout(
                        INTERRUPT_TIMEOUT,
                        entry.runtime.interrupt_turn(thread, InterruptReason::User),
                    )
                    .await
                    {
                        Ok(Ok(())) => {}
                        Ok(Err(e)) => {
                            tracing::warn!(session = %id, %thread, error = %e, "interrupt on detach failed");
                        }
                        Err(_) => {
                            tracing::warn!(session = %id, %thread, "the runtime did not answer the interrupt on detach");
                        }
                    }
                }
            }
        }
        let was_attached = entry
            .as_ref()
            .is_some_and(|entry| entry.state().detach(thread, revoke_mcp_credential));
        if revoke_mcp_credential && let Some((registry, slots)) = &inner.options.mcp {
            registry.revoke_thread(thread);
            slots.clear(thread);
        }
        let Some(entry) = entry.filter(|_| was_attached) else {
            return Ok(());
        };
        let event = DomainEvent::new(
            inner.clock.now(),
            EventBody::ProviderSessionDetached {
                provider_session_id: id.clone(),
                detached_at: inner.clock.now(),
                reason: detail.clone(),
            },
        )
        .with_thread(thread);
        inner.store.write(WriteKind::Detach, vec![event]).await?;

        let remaining = entry.state().attached_count();
        if !entry.shared() {
            if remaining == 0 {
                release::release_entry(
                    inner,
                    entry,
                    ReleaseReason::ManualShutdown,
                    detail,
                    release::ReleaseOptions::default(),
                )
                .await?;
            }
            return Ok(());
        }
        if entry.runtime.can_unload_threads() && !native_ids.is_empty() {
            let _lock = inner
                .attach_locks
                .lock(&(entry.id.clone(), thread.clone()))
                .await;
            let reattached = entry.state().is_attached(thread);
            if inner.is_current(&entry) && !reattached {
                for native in &native_ids {
                    idle::unload_now(inner, &entry, thread, native).await;
                }
            }
        }
        idle::schedule_idle_release(inner, &entry);
        Ok(())
    }
}
