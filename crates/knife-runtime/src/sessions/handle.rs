//! The decorated runtime handle callers get from `open`: turns mark the session busy
//! (idle on failure or cancel), resumes are de-duplicated, events are broadcast.

use std::sync::Arc;

use futures::stream::BoxStream;
use knife_protocol::*;

use super::entry::{Entry, SessionEventError};
use super::metrics::{self, Outcome};

use super::{Inner, SessionError, idle, open};
use crate::adapter::{InterruptReason, SessionRuntime, StartTurnInput};

/// A live provider session as callers see it (SPEC.md MGR: `startTurn`, `steerTurn`,
/// `interruptTurn`, `resumeThread`, `events`, `subscribeEvents`, the session record).
/// Cheap to clone; all clones and every `get`/`open` of the same live session share
/// one runtime ([`SessionHandle::same_runtime`]).
#[derive(Clone)]
pub struct SessionHandle {
    inner: Arc<Inner>,
    entry: Arc<Entry>,
}

impl std::fmt::Debug for SessionHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionHandle")
            .field("provider_session_id", &self.entry.id)
            .finish()
    }
}

/// Marks a started turn idle again if its start failed or was cancelled: a stopped
/// start may never see its `turn.terminal` (MGR-22); only this turn's key is cleared (MGR-23).
struct BusyGuard {
    inner: Arc<Inner>,
    entry: Arc<Entry>,
    turn: ProviderTurnId,
    armed: bool,
}

impl Drop for BusyGuard {
    fn drop(&mut self) {
        if self.armed {
            idle::mark_idle(&self.inner, &self.entry, &self.turn);
        }
    }
}

impl SessionHandle {
    pub(crate) fn new(inner: Arc<Inner>, entry: Arc<Entry>) -> Self {
        Self { inner, entry }
    }

    /// The provider session's id.
    pub fn id(&self) -> &ProviderSessionId {
        &self.entry.id
    }

    /// The session record (status `ready` after open, then the adapter's updates).
    pub fn session(&self) -> ProviderSession {
        self.entry.record()
    }

    /// True when both handles wrap the same live runtime (same open, MGR-02, MGR-10).
    pub fn same_runtime(&self, other: &SessionHandle) -> bool {
        Arc::ptr_eq(&self.entry, &other.entry)
    }

    /// The workspace the session was opened in.
    pub fn cwd(&self) -> &std::path::Path {
        &self.entry.cwd
    }

    /// The adapter's runtime under this handle.
    pub fn runtime(&self) -> Arc<dyn SessionRuntime> {
        Arc::clone(&self.entry.runtime)
    }

    /// Threads attached to the session now, sorted.
    pub fn attached_threads(&self) -> Vec<ThreadId> {
        self.entry.state().attached_sorted()
    }

    /// Starts a turn: attaches the thread if needed, marks the session busy under the
    /// turn's provider turn id, and returns once the runtime accepted the turn (timed
    /// by `knife_provider_turn_duration_seconds`). A failed or cancelled start marks
    /// the turn idle again (MGR-22); otherwise its `turn.terminal` does (MGR-21).
    pub async fn start_turn(&self, input: StartTurnInput) -> Result<(), SessionError> {
        let model = input.model.clone().or_else(|| self.entry.record().model);
        let driver = self.entry.driver.clone();
        let metric = metrics::OpMetric::new(move |outcome| {
            metrics::turn_op(&driver, "send", model.as_deref(), outcome)
        });
        let result = self.start_turn_inner(input).await;
        metric.finish(result.is_ok());
        result
    }

    async fn start_turn_inner(&self, input: StartTurnInput) -> Result<(), SessionError> {
        open::ensure_attached(&self.inner, &self.entry, &input.thread_id).await?;
        if let Some((registry, _)) = &self.inner.options.mcp {
            // A turn proves the session holding the thread's credential is alive.
            registry.touch(&input.thread_id);
        }
        idle::hold_thread_loaded(&self.entry, &input.thread_id);
        if self.entry.state().is_removed() {
            return Err(SessionError::SessionGone(self.entry.id.clone()));
        }
        idle::mark_busy(
            &self.inner,
            &self.entry,
            &input.provider_turn_id,
            &input.thread_id,
            &input.run_id,
        );
        let mut guard = BusyGuard {
            inner: Arc::clone(&self.inner),
            entry: Arc::clone(&self.entry),
            turn: input.provider_turn_id.clone(),
            armed: true,
        };
        let started = tokio::time::Instant::now();
        self.entry.runtime.start_turn(input).await?;
        metrics::turn_duration(&self.entry.driver, "send", started.elapsed().as_secs_f64());
        guard.armed = false;
        Ok(())
    }

    /// Hands `steer` to the running turn of `thread` (counts as activity; TURN-01).
    pub async fn steer_turn(
        &self,
        thread: &ThreadId,
        steer: crate::adapter::SteerInput,
    ) -> Result<(), SessionError> {
        idle::touch(&self.inner, &self.entry);
        let result = self.entry.runtime.steer_turn(thread, steer).await;
        self.count("steer", result.is_ok());
        Ok(result?)
    }

    /// Asks the running turn of `thread` to stop (counts as activity).
    pub async fn interrupt_turn(
        &self,
        thread: &ThreadId,
        reason: InterruptReason,
    ) -> Result<(), SessionError> {
        idle::touch(&self.inner, &self.entry);
        let result = self.entry.runtime.interrupt_turn(thread, reason).await;
        self.count("interrupt", result.is_ok());
        Ok(result?)
    }

    /// Answers runtime request `request` with `answer` (counts as activity; metric
    /// operation `runtime-request-response`).
    pub async fn respond_to_runtime_request(
        &self,
        request: &RuntimeRequestId,
        answer: RequestAnswer,
    ) -> Result<(), SessionError> {
        idle::touch(&self.inner, &self.entry);
        let result = self
            .entry
            .runtime
            .respond_to_runtime_request(request, answer)
            .await;
        self.count("runtime-request-response", result.is_ok());
        Ok(result?)
    }

    fn count(&self, operation: &'static str, ok: bool) {
        let outcome = if ok {
            Outcome::Success
        } else {
            Outcome::Failure
        };
        let model = self.entry.record().model;
        metrics::turn_op(&self.entry.driver, operation, model.as_deref(), outcome);
    }

    /// Loads `thread`'s native conversation on this session, attaching the thread if
    /// needed. De-duplicated (MGR-10): a repeat with the same native thread and model
    /// does not reach the adapter; a different model does; after a detach or an idle
    /// unload it reaches the adapter again. Waits for an unload of the thread in flight
    /// (MGR-13).
    pub async fn resume_thread(
        &self,
        thread: &ThreadId,
        native_thread_id: Option<String>,
        model: Option<String>,
    ) -> Result<(), SessionError> {
        open::ensure_attached(&self.inner, &self.entry, thread).await?;
        idle::hold_thread_loaded(&self.entry, thread);
        let key = serde_json::json!({
            "native_thread_id": native_thread_id,
            "model": model,
        })
        .to_string();
        // Serialised with unloads of this thread: an unload in flight finishes first.
        let _lock = self
            .inner
            .attach_locks
            .lock(&(self.entry.id.clone(), thread.clone()))
            .await;
        if self.entry.state().is_loaded(thread, &key) {
            return Ok(());
        }
        self.entry
            .runtime
            .resume_thread(thread, native_thread_id.clone())
            .await?;
        self.entry
            .state()
            .mark_loaded(thread, key, native_thread_id);
        Ok(())
    }

    /// A new subscription to the session's adapter events: every subscriber gets every
    /// event, after the pump persisted it (MGR-11). The stream ends when the session is
    /// released: empty on shutdown (MGR-37), after the queued events when the provider
    /// stopped (MGR-32), with one error when the session failed (MGR-31).
    pub fn subscribe_events(&self) -> BoxStream<'static, Result<AdapterEvent, SessionEventError>> {
        self.entry.subscribers().subscribe()
    }

    /// Same as [`SessionHandle::subscribe_events`] (each call is an independent copy).
    pub fn events(&self) -> BoxStream<'static, Result<AdapterEvent, SessionEventError>> {
        self.subscribe_events()
    }
}
