//! The no-op provider adapter of `knife bench restart`: every turn completes at once with
//! no output. It measures the restart sweep, it does not test; the fakes tests use live in
//! knife-testkit, which the binary does not link (issue 19 item 7). Its sessions stream
//! through knife's [`EventSink`], as the external drivers' do.

use std::sync::{Arc, Mutex, PoisonError};

use futures::StreamExt;
use futures::stream::BoxStream;
use knife_protocol::*;
use knife_runtime::recording::{EventReceiver, EventSink};
use knife_runtime::*;
use tokio::sync::watch;

/// Adapter whose exclusive sessions end each turn `Completed` the moment it starts.
/// Clones share the count of turns started.
#[derive(Clone)]
pub struct DrainAdapter {
    started: Arc<watch::Sender<usize>>,
}

impl DrainAdapter {
    /// A new adapter with no turn started.
    pub fn new() -> Self {
        Self {
            started: Arc::new(watch::channel(0).0),
        }
    }

    /// Waits until `n` turns have started on this adapter's sessions.
    pub async fn wait_turns_started(&self, n: usize) {
        let _ = self.started.subscribe().wait_for(|c| *c >= n).await;
    }
}

#[async_trait::async_trait]
impl ProviderAdapter for DrainAdapter {
    fn driver(&self) -> &str {
        "bench-drain"
    }

    fn capabilities(&self) -> ProviderCapabilities {
        ProviderCapabilities {
            shared_sessions: false,
            steer: false,
            background_tasks_outlive_session: false,
        }
    }

    async fn open(
        &self,
        _input: OpenSessionInput,
        _options: OpenSessionOptions,
    ) -> Result<Arc<dyn SessionRuntime>, AdapterError> {
        let (events, rx) = EventSink::new();
        Ok(Arc::new(DrainSession {
            started: Arc::clone(&self.started),
            events,
            rx: Mutex::new(Some(rx)),
        }))
    }
}

struct DrainSession {
    started: Arc<watch::Sender<usize>>,
    events: EventSink,
    rx: Mutex<Option<EventReceiver>>,
}

#[async_trait::async_trait]
impl SessionRuntime for DrainSession {
    async fn start_turn(&self, input: StartTurnInput) -> Result<(), AdapterError> {
        if self.events.is_closed() {
            return Err(AdapterError::Closed);
        }
        self.started.send_modify(|n| *n += 1);
        self.events.send(AdapterEvent::TurnTerminal {
            thread_id: input.thread_id,
            run_id: input.run_id,
            provider_turn_id: input.provider_turn_id,
            outcome: TurnOutcome::Completed,
            usage: None,
        });
        Ok(())
    }

    async fn interrupt_turn(
        &self,
        _thread: &ThreadId,
        _reason: InterruptReason,
    ) -> Result<(), AdapterError> {
        Ok(())
    }

    async fn resume_thread(
        &self,
        _thread: &ThreadId,
        _native_thread_id: Option<String>,
    ) -> Result<(), AdapterError> {
        Ok(())
    }

    fn take_events(&self) -> Option<BoxStream<'static, Result<AdapterEvent, AdapterError>>> {
        let mut rx = self
            .rx
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()?;
        Some(futures::stream::poll_fn(move |cx| rx.poll_recv(cx)).boxed())
    }

    async fn close(&self) -> Result<(), AdapterError> {
        self.events.close();
        Ok(())
    }
}
