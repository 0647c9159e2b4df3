// Holding a thread busy in this process without a run (a merge or a revert works on its
// files) and the guard that frees it again: part of `execution::service`.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::sync::{Mutex, atomic::Ordering};

use knife_protocol::*;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::{ActiveRun, ExecutionService, Inner, lock};
use crate::error::RuntimeError;

/// A thread held busy in this process: by a run being created (`begin`), or without a
/// run by `reserve_idle`. Dropped armed, it frees the thread.
pub(super) struct Reservation {
    pub(super) inner: Arc<Inner>,
    pub(super) thread: ThreadId,
    pub(super) armed: bool,
}

impl ExecutionService {
    /// Marks idle `thread` busy in this process without a run (a revert works on
    /// its files): a message meanwhile answers `RunInProgress`. Dropping the guard
    /// frees it. A run whose turn already ended is waited for (it is writing its
    /// terminal state). Errors: `RunInProgress` when a run is active, `ShuttingDown`.
    pub(super) async fn reserve_idle(
        &self,
        thread: &ThreadId,
    ) -> Result<Reservation, RuntimeError> {
        self.wait_if_finishing(thread).await;
        let inner = &self.inner;
        let mut active = lock(&inner.active);
        if inner.closing.load(Ordering::SeqCst) {
            return Err(RuntimeError::ShuttingDown);
        }
        if let Some(run) = active.get(thread) {
            return Err(RuntimeError::RunInProgress {
                thread: thread.clone(),
                run: run
                    .run_id
                    .borrow()
                    .clone()
                    .unwrap_or_else(|| RunId::from("(a revert)")),
            });
        }
        let (_, done) = watch::channel(true);
        let (_, run_id) = watch::channel(None);
        active.insert(
            thread.clone(),
            ActiveRun {
                run_id,
                cancel: CancellationToken::new(),
                reason: Arc::new(Mutex::new(None)),
                done,
                finishing: Arc::new(AtomicBool::new(false)),
                session: Arc::new(Mutex::new(None)),
            },
        );
        Ok(Reservation {
            inner: inner.clone(),
            thread: thread.clone(),
            armed: true,
        })
    }
}

impl Reservation {
    pub(super) fn disarm(mut self) {
        self.armed = false;
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if self.armed {
            lock(&self.inner.active).remove(&self.thread);
        }
    }
}
