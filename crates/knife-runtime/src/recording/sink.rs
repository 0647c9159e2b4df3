//! Where a [`super::TurnRecorder`] sends its events: the [`RecordSink`] seam, and
//! the [`EventSink`] an external driver's session streams its adapter events through.

use std::sync::{Arc, Mutex};

use crate::AdapterError;
use knife_protocol::AdapterEvent;
use tokio::sync::mpsc;

/// Sender of a session's adapter event stream; cheap to clone. [`EventSink::close`]
/// ends the stream (for every clone).
#[derive(Clone, Debug)]
pub struct EventSink {
    tx: Arc<Mutex<Option<mpsc::UnboundedSender<Boxed>>>>,
}

type EventSender = mpsc::UnboundedSender<Result<AdapterEvent, AdapterError>>;

/// What the stream of an [`EventSink`] queues: the event boxed, so a queue slot is one
/// pointer. A tokio unbounded channel allocates its first block of 32 slots when it is
/// created: unboxed (~400 bytes an event) that is ~12.5 KiB per session held for as
/// long as the session lives, 125 MiB for 10,000 idle sessions (LIVE-07).
type Boxed = Box<Result<AdapterEvent, AdapterError>>;

/// Receives a recorder's events, in order. Sending never blocks: the session's
/// stream is unbounded (the pump drains it at once; a gone receiver drops events).
pub trait RecordSink: Send + Sync {
    /// Emits `event` (dropped quietly when the stream has ended).
    fn send(&self, event: AdapterEvent);
}

impl RecordSink for EventSink {
    fn send(&self, event: AdapterEvent) {
        EventSink::send(self, event);
    }
}

/// A plain sender (the built-in agent's turn tasks each hold a clone, so the
/// session's stream ends when the session and its last turn are gone).
impl RecordSink for EventSender {
    fn send(&self, event: AdapterEvent) {
        // The receiver is gone only when the session's stream was dropped; the turn
        // then has nobody to report to and finishes quietly.
        let _ = mpsc::UnboundedSender::send(self, Ok(event));
    }
}

/// The receiving end of an [`EventSink`]: the events in order, then `None` once every
/// clone of the sink is closed or dropped.
#[derive(Debug)]
pub struct EventReceiver {
    rx: mpsc::UnboundedReceiver<Boxed>,
}

impl EventReceiver {
    /// Polls for the next event (as `tokio::sync::mpsc::UnboundedReceiver::poll_recv`).
    pub fn poll_recv(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<AdapterEvent, AdapterError>>> {
        self.rx.poll_recv(cx).map(|event| event.map(|e| *e))
    }

    /// The next event already queued, without waiting (as
    /// `tokio::sync::mpsc::UnboundedReceiver::try_recv`).
    pub fn try_recv(
        &mut self,
    ) -> Result<Result<AdapterEvent, AdapterError>, mpsc::error::TryRecvError> {
        self.rx.try_recv().map(|e| *e)
    }

    /// Waits for the next event; `None` once the stream has ended.
    pub async fn recv(&mut self) -> Option<Result<AdapterEvent, AdapterError>> {
        self.rx.recv().await.map(|e| *e)
    }
}

impl EventSink {
    /// A sink and the receiver of its stream.
    pub fn new() -> (EventSink, EventReceiver) {
        let (tx, rx) = mpsc::unbounded_channel();
        (
            EventSink {
                tx: Arc::new(Mutex::new(Some(tx))),
            },
            EventReceiver { rx },
        )
    }

    /// Emits `event`; a no-op once closed.
    pub fn send(&self, event: AdapterEvent) {
        if let Ok(tx) = self.tx.lock()
            && let Some(tx) = tx.as_ref()
        {
            let _ = tx.send(Box::new(Ok(event)));
        }
    }

    /// Ends the stream with `error` (the manager releases the session with
    /// `runtime_error` and the error text in `lastError`).
    pub fn fail(&self, error: AdapterError) {
        if let Ok(mut tx) = self.tx.lock()
            && let Some(tx) = tx.take()
        {
            let _ = tx.send(Box::new(Err(error)));
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
