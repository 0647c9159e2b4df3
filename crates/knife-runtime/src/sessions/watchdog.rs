//! The stuck-turn watchdog (issue 5 item 7): a running turn whose runtime sends no
//! event for `turn_stall_timeout` is interrupted and ended with a clear error.

use std::sync::Arc;

use knife_protocol::*;

use super::entry::Entry;
use super::state::Stall;
use super::{INTERRUPT_TIMEOUT, Inner, ReleaseReason, idle, release};
use crate::adapter::InterruptReason;

/// `RunError::error_type` of a turn the watchdog ended.
pub const STALLED_ERROR_TYPE: &str = "provider.stalled";

/// Runs while the session is busy. When no adapter event arrived for the stall limit,
/// every running turn is interrupted (failures logged), subscribers get a synthetic
/// `TurnTerminal { Failed { provider.stalled } }` for it, and it is marked idle. A
/// later terminal from the runtime for the same turn is a duplicate consumers ignore.
pub(crate) async fn watch(inner: Arc<Inner>, entry: Arc<Entry>) {
    let limit = inner.options.turn_stall_timeout;
    loop {
        // A limit too large to represent never fires.
        let Some(deadline) = entry.state().stall_deadline(limit) else {
            return;
        };
        tokio::time::sleep_until(deadline).await;
        let stalled = match entry.state().stalled_turns(limit) {
            Stall::Over => return,
            Stall::Alive => continue,
            Stall::Stalled(turns) => turns,
        };
        let minutes = limit.as_secs() / 60;
        let message = if minutes > 0 {
            format!(
                "The provider sent nothing for {minutes} min, so knife stopped the turn. \
                 Send the message again to retry; if it keeps happening, check the provider."
            )
        } else {
            format!(
                "The provider sent nothing for {} s, so knife stopped the turn. \
                 Send the message again to retry; if it keeps happening, check the provider.",
                limit.as_secs()
            )
        };
        let mut unresponsive = false;
        for (turn, busy) in stalled {
            tracing::warn!(session = %entry.id, thread = %busy.thread, %turn, "turn stalled; interrupting it");
            match tokio::time::timeout(
                INTERRUPT_TIMEOUT,
                entry
                    .runtime
                    .interrupt_turn(&busy.thread, InterruptReason::User),
            )
            .await
            {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    tracing::warn!(session = %entry.id, error = %e, "interrupting a stalled turn failed");
                }
                Err(_) => {
                    tracing::warn!(session = %entry.id, timeout_s = INTERRUPT_TIMEOUT.as_secs(), "the runtime did not answer the interrupt of a stalled turn");
                    unresponsive = true;
                }
            }
            let terminal = AdapterEvent::TurnTerminal {
                thread_id: busy.thread.clone(),
                run_id: busy.run.clone(),
                provider_turn_id: turn.clone(),
                outcome: TurnOutcome::Failed {
                    error: RunError::new(STALLED_ERROR_TYPE, message.clone()),
                },
                usage: None,
            };
            entry.subscribers().broadcast(&terminal);
            idle::mark_idle(&inner, &entry, &turn);
        }
        // A runtime that does not even answer an interrupt is released when it serves
        // one thread only (as execution's `release_unresponsive` does), so the next
        // message gets a fresh one. A shared runtime stays for the other threads.
        if unresponsive && !entry.shared() {
            let detail = format!(
                "The provider runtime did not answer an interrupt within {} s after its \
                 turn stalled; knife closed it. The next message starts a new one.",
                INTERRUPT_TIMEOUT.as_secs()
            );
            let (inner2, entry2) = (Arc::clone(&inner), Arc::clone(&entry));
            // Its own task: the release aborts this watchdog.
            inner.tasks.spawn(async move {
                if let Err(e) = release::release_entry(
                    &inner2,
                    entry2,
                    ReleaseReason::RuntimeError,
                    Some(detail),
                    release::ReleaseOptions::default(),
                )
                .await
                {
                    tracing::warn!(error = %e, "could not release an unresponsive provider session");
                }
            });
            return;
        }
    }
}
