//! The [`EventSink`] a driver session sends its adapter events into (re-exported by
//! [`crate::record`], which records turns into it).

use std::sync::{Arc, Mutex};

use knife_protocol::AdapterEvent;
use knife_runtime::AdapterError;
use tokio::sync::mpsc;

/// Sender of a session's adapter event stream; cheap to clone. [`EventSink::close`]
/// ends the stream (for every clone).
#[derive(Clone, Debug)]
pub struct EventSink {
    tx: Arc<Mutex<Option<EventSender>>>,
}

type EventSender = mpsc::UnboundedSender<Result<AdapterEvent, AdapterError>>;

/// The receiving end of an [`EventSink`].
pub type EventReceiver = mpsc::UnboundedReceiver<Result<AdapterEvent, AdapterError>>;

impl EventSink {
    /// A sink and the receiver of its stream.
    pub fn new() -> (EventSink, EventReceiver) {
        let (tx, rx) = mpsc::unbounded_channel();
        (
            EventSink {
                tx: Arc::new(Mutex::new(Some(tx))),
            },
            rx,
        )
    }

    /// Emits `event`; a no-op once closed.
    pub fn send(&self, event: AdapterEvent) {
        if let Ok(tx) = self.tx.lock()
            && let Some(tx) = tx.as_ref()
        {
            let _ = tx.send(Ok(event));
        }
    }

    /// Ends the stream with `error` (the manager releases the session with
    /// `runtime_error` and the error text in `lastError`).
    pub fn fail(&self, error: AdapterError) {
        if let Ok(mut tx) = self.tx.lock()
            && let Some(tx) = tx.take()
        {
            let _ = tx.send(Err(error));
        }
    }

    /// Ends the stream without error. Idempotent.
    pub fn close(&self) {
        if let Ok(mut tx) = self.tx.lock() {
            tx.take();
        }
    }

    /// True once closed or failed.
    pub fn is_closed(&self) -> bool {
        self.tx.lock().map(|tx| tx.is_none()).unwrap_or(true)
    }
}
