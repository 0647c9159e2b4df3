//! A deliberately minimal provider session manager: one exclusive session per
//! thread, opened for a run and closed when the run ends. The session-manager
//! issue replaces it (single-flight, sharing, idle release, pins: SPEC.md MGR).

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use futures::stream::BoxStream;
use knife_protocol::*;
use knife_store::Store;

use crate::adapter::*;
use crate::clock::SharedClock;
use crate::error::*;

/// Time box for closing a provider session (ARCHITECTURE.md "Time boxes").
pub const CLOSE_TIMEOUT: Duration = Duration::from_secs(30);

/// A session opened for one thread, with its event stream.
pub struct OpenedSession {
    pub session: ProviderSession,
    pub runtime: Arc<dyn SessionRuntime>,
    pub events: BoxStream<'static, Result<AdapterEvent, AdapterError>>,
}

/// Opens and closes provider sessions through the configured adapters.
#[derive(Clone)]
pub struct SessionManager {
    store: Store,
    clock: SharedClock,
    adapters: Arc<HashMap<ProviderInstanceId, Arc<dyn ProviderAdapter>>>,
}

impl SessionManager {
    /// A manager over `adapters`, one per configured provider instance.
    pub fn new(
        store: Store,
        clock: SharedClock,
        adapters: HashMap<ProviderInstanceId, Arc<dyn ProviderAdapter>>,
    ) -> Self {
        Self {
            store,
            clock,
            adapters: Arc::new(adapters),
        }
    }

    /// Ids of the configured provider instances, sorted.
    pub fn instances(&self) -> Vec<ProviderInstanceId> {
        let mut ids: Vec<_> = self.adapters.keys().cloned().collect();
        ids.sort();
        ids
    }

    /// The adapter of `instance`, or [`RuntimeError::ProviderInstanceNotFound`].
    pub fn adapter(
        &self,
        instance: &ProviderInstanceId,
    ) -> Result<Arc<dyn ProviderAdapter>, RuntimeError> {
        self.adapters
            .get(instance)
            .cloned()
            .ok_or_else(|| RuntimeError::ProviderInstanceNotFound {
                instance: instance.clone(),
                known: self
                    .instances()
                    .iter()
                    .map(|i| i.to_string())
                    .collect::<Vec<_>>()
                    .join(", "),
            })
    }

    /// Opens the exclusive session of `thread` on `instance` in `cwd`.
    ///
    /// Checks the workspace first (MGR-07: nothing is opened or projected when it is
    /// missing), then persists `provider-session.attached` (starting), opens the
    /// adapter and persists `ready`, or `error` with the adapter's message.
    pub async fn open(
        &self,
        thread: &ThreadId,
        instance: &ProviderInstanceId,
        cwd: &Path,
        model: Option<String>,
    ) -> Result<OpenedSession, RuntimeError> {
        let adapter = self.adapter(instance)?;
        if !tokio::fs::metadata(cwd)
            .await
            .map(|m| m.is_dir())
            .unwrap_or(false)
        {
            return Err(ProviderWorkspaceMissingError {
                path: cwd.display().to_string(),
            }
            .into());
        }
        let id = ProviderSessionId::exclusive(instance, thread);
        let now = self.clock.now();
        let mut session = ProviderSession {
            id: id.clone(),
            driver: adapter.driver().to_owned(),
            provider_instance_id: instance.clone(),
            status: SessionStatus::Starting,
            cwd: cwd.display().to_string(),
            model: model.clone(),
            capabilities: adapter.capabilities(),
            created_at: now,
            updated_at: now,
            last_error: None,
        };
        self.write_session(thread, EventBody::ProviderSessionAttached(session.clone()))
            .await?;
        let input = OpenSessionInput {
            provider_session_id: id.clone(),
            provider_instance_id: instance.clone(),
            thread_id: thread.clone(),
            cwd: cwd.to_path_buf(),
            model,
            native_thread_id: None,
        };
        let opened = adapter.open(input).await.and_then(|runtime| {
            let events = runtime.take_events().ok_or(AdapterError::Closed)?;
            Ok((runtime, events))
        });
        match opened {
            Ok((runtime, events)) => {
                session.status = SessionStatus::Ready;
                session.updated_at = self.clock.now();
                self.write_session(thread, EventBody::ProviderSessionUpdated(session.clone()))
                    .await?;
                Ok(OpenedSession {
                    session,
                    runtime,
                    events,
                })
            }
            Err(e) => {
                session.status = SessionStatus::Error;
                session.last_error = Some(e.to_string());
                session.updated_at = self.clock.now();
                self.write_session(thread, EventBody::ProviderSessionUpdated(session))
                    .await?;
                Err(ProviderSessionOpenError {
                    provider_session_id: id,
                    message: e.to_string(),
                }
                .into())
            }
        }
    }

    /// Closes `runtime` (time-boxed to [`CLOSE_TIMEOUT`]) and persists `stopped`, or
    /// `error` when the close failed or timed out. The status is persisted either way.
    pub async fn release(
        &self,
        thread: &ThreadId,
        mut session: ProviderSession,
        runtime: Arc<dyn SessionRuntime>,
    ) -> Result<(), RuntimeError> {
        let outcome = tokio::time::timeout(CLOSE_TIMEOUT, runtime.close()).await;
        session.updated_at = self.clock.now();
        match outcome {
            Ok(Ok(())) => session.status = SessionStatus::Stopped,
            Ok(Err(e)) => {
                session.status = SessionStatus::Error;
                session.last_error = Some(e.to_string());
            }
            Err(_) => {
                session.status = SessionStatus::Error;
                session.last_error = Some(format!(
                    "close did not finish within {} s",
                    CLOSE_TIMEOUT.as_secs()
                ));
            }
        }
        self.write_session(thread, EventBody::ProviderSessionUpdated(session))
            .await
    }

    async fn write_session(&self, thread: &ThreadId, body: EventBody) -> Result<(), RuntimeError> {
        let event = DomainEvent::new(self.clock.now(), body).with_thread(thread);
        self.store.write(vec![event]).await?;
        Ok(())
    }
}
