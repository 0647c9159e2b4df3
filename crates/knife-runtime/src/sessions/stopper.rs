//! The reaper's [`SessionStopper`] over the session manager (REAP-01/02): an idle live
//! session is released (or, when shared with other threads, the thread is detached;
//! a thread no longer attached only loses its binding); a busy or pinned one is
//! skipped; a persisted row with no live session behind it is marked `stopped`.

use knife_protocol::*;
use knife_store::Store;

use super::{ReleaseReason, SessionManager, release};
use crate::clock::SharedClock;
use crate::error::RuntimeError;
use crate::reaper::{SessionStopper, StopOutcome};

/// Stops stale sessions for the [`crate::reaper::Reaper`] through a [`SessionManager`].
#[derive(Clone)]
pub struct ManagerStopper {
    manager: SessionManager,
    store: Store,
    clock: SharedClock,
}

impl ManagerStopper {
    /// A stopper releasing through `manager` and writing orphan rows to `store`.
    pub fn new(manager: SessionManager, store: Store, clock: SharedClock) -> Self {
        Self {
            manager,
            store,
            clock,
        }
    }
}

/// Why the reaper stopped a session (the release's detail).
const REAPED: &str = "Stopped by the session reaper: no activity within the inactivity threshold.";

/// What the stopper does with a live session, decided under the entry's state lock.
enum Plan {
    /// The thread is no longer attached: only its binding is settled.
    Settle,
    /// Busy or pinned: kept.
    Skip,
    /// One thread of several: detached, the session stays for the others.
    Detach,
    /// Released if still idle at this idle generation.
    Release(u64),
}

#[async_trait::async_trait]
impl SessionStopper for ManagerStopper {
    /// * live, `thread` no longer attached → only the thread's binding is settled
    ///   (`provider-session.detached`); the session, serving others, is untouched;
    /// * live and busy (a running turn of `thread`, or any running turn when it is the
    ///   only thread) or pinned by pending background work → skipped (REAP-02);
    /// * live and serving other threads too → `thread` is detached (its MCP credential
    ///   revoked), the session stays for the others;
    /// * live otherwise → released with reason `idle` (persists `stopped`) only if it
    ///   is still idle at the generation seen, re-checked atomically with the entry's
    ///   removal (a turn that starts meanwhile makes it a skip);
    /// * not live → the persisted row is written `stopped` for `thread` (a row a
    ///   runtime left behind). Already `stopped` rows are left alone.
    ///
    /// Errors: the release's or the write's ([`RuntimeError::Session`], `Store`).
    async fn stop_session(
        &self,
        thread: &ThreadId,
        session: &ProviderSessionId,
    ) -> Result<StopOutcome, RuntimeError> {
        let inner = &self.manager.inner;
        if let Some(entry) = inner.entry(session) {
            let plan = {
                let st = entry.state();
                if !st.is_attached(thread) {
                    Plan::Settle
                } else if st.attached_count() > 1 {
                    if st.thread_busy(thread) {
                        Plan::Skip
                    } else {
                        Plan::Detach
                    }
                } else if st.is_busy() || st.is_pinned() {
                    Plan::Skip
                } else {
                    Plan::Release(st.idle_generation())
                }
            };
            return match plan {
                Plan::Skip => Ok(StopOutcome::Skipped),
                Plan::Settle => {
                    let now = self.clock.now();
                    self.store
                        .write(vec![
                            DomainEvent::new(
                                now,
                                EventBody::ProviderSessionDetached {
                                    provider_session_id: session.clone(),
                                    detached_at: now,
                                    reason: Some(REAPED.to_owned()),
                                },
                            )
                            .with_thread(thread),
                        ])
                        .await?;
                    Ok(StopOutcome::Stopped)
                }
                Plan::Detach => {
                    self.manager
                        .detach(session, thread, Some(REAPED.to_owned()), true)
                        .await?;
                    Ok(StopOutcome::Stopped)
                }
                Plan::Release(generation) => {
                    let released = release::release_entry(
                        inner,
                        entry,
                        ReleaseReason::Idle,
                        Some(REAPED.to_owned()),
                        release::ReleaseOptions {
                            only_if_generation: Some(generation),
                            ..Default::default()
                        },
                    )
                    .await?;
                    Ok(if released {
                        StopOutcome::Stopped
                    } else {
                        StopOutcome::Skipped
                    })
                }
            };
        }
        let Some(mut row) = self.store.get_provider_session(session).await? else {
            return Ok(StopOutcome::Stopped);
        };
        if row.status == SessionStatus::Stopped {
            return Ok(StopOutcome::Stopped);
        }
        let now = self.clock.now();
        row.status = SessionStatus::Stopped;
        row.updated_at = now;
        self.store
            .write(vec![
                DomainEvent::new(now, EventBody::ProviderSessionUpdated(row)).with_thread(thread),
            ])
            .await?;
        Ok(StopOutcome::Stopped)
    }
}
