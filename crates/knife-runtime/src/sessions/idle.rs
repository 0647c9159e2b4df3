//! Busy tracking, the per-session idle timer with pins for background work, and the
//! per-thread idle unload of shared runtimes (MGR-14, MGR-15, MGR-20..29).

use std::sync::Arc;

use knife_protocol::*;
use tokio::time::Instant;

use super::entry::Entry;
use super::state::BusyTurn;
use super::{Inner, ReleaseReason, release, watchdog};

/// Provider activity: restarts the idle window (no-op while busy) and ends a pin,
/// since progress shows the pinned work is alive (MGR-26).
pub(crate) fn touch(inner: &Arc<Inner>, entry: &Arc<Entry>) {
    entry.state().end_pin();
    schedule_idle_release(inner, entry);
}

/// (Re)arms the idle timer of `entry` unless it is busy or removed: a new generation
/// invalidates every decision of the previous timer (MGR-27).
pub(crate) fn schedule_idle_release(inner: &Arc<Inner>, entry: &Arc<Entry>) {
    entry.state().arm_idle(|generation| {
        inner
            .tasks
            .spawn(release_if_still_idle(
                Arc::clone(inner),
                Arc::clone(entry),
                generation,
            ))
            .abort_handle()
    });
}

/// Sleeps one idle window, then releases the session unless it turned busy, saw
/// activity (generation moved) or was replaced. Pending background work pins it one
/// more window at a time, at most `max_idle_pin` past idleness (MGR-24, MGR-25).
async fn release_if_still_idle(inner: Arc<Inner>, entry: Arc<Entry>, generation: u64) {
    loop {
        tokio::time::sleep(inner.options.idle_timeout).await;
        if !entry.state().still_idle_at(generation) {
            return;
        }
        // Probe failures count as "no pending work".
        let pending = entry
            .runtime
            .has_pending_background_work()
            .await
            .unwrap_or(false);
        // The session may have turned busy (or been replaced) while the probe ran:
        // that decision is stale and dropped (MGR-27, MGR-28).
        if pending {
            let Some(pinned_for) = entry.state().pin(generation) else {
                return;
            };
            if pinned_for < inner.options.max_idle_pin {
                tracing::debug!(
                    session = %entry.id,
                    pinned_for_ms = pinned_for.as_millis() as u64,
                    "idle release deferred: background work pending"
                );
                continue;
            }
            tracing::warn!(session = %entry.id, "idle pin expired; releasing despite pending background work");
        } else if !entry.state().still_idle_at(generation) {
            return;
        }
        let options = release::ReleaseOptions {
            only_if_generation: Some(generation),
            ..Default::default()
        };
        if let Err(e) = release::release_entry(
            &inner,
            Arc::clone(&entry),
            ReleaseReason::Idle,
            None,
            options,
        )
        .await
        {
            tracing::warn!(session = %entry.id, error = %e, "idle release failed");
        }
        return;
    }
}

/// Marks turn `turn` of `thread` running: cancels the idle timer and any pending
/// unload of the thread, drops a pin.
pub(crate) fn mark_busy(
    inner: &Arc<Inner>,
    entry: &Arc<Entry>,
    turn: &ProviderTurnId,
    thread: &ThreadId,
    run: &RunId,
) {
    let busy = BusyTurn {
        thread: thread.clone(),
        run: run.clone(),
    };
    entry.state().mark_busy(turn, busy, || {
        (!inner.options.turn_stall_timeout.is_zero()).then(|| {
            inner
                .tasks
                .spawn(watchdog::watch(Arc::clone(inner), Arc::clone(entry)))
                .abort_handle()
        })
    });
}

/// Marks turn `turn` ended (its `turn.terminal`, or a start that failed or was
/// cancelled, MGR-22). Clearing twice is harmless and never clears another turn
/// (MGR-23). Re-arms the idle timer and the thread's unload timer.
pub(crate) fn mark_idle(inner: &Arc<Inner>, entry: &Arc<Entry>, turn: &ProviderTurnId) {
    let thread = entry.state().mark_idle(turn);
    schedule_idle_release(inner, entry);
    if let Some(thread) = thread {
        schedule_thread_unload(inner, entry, &thread);
    }
}

/// Before a resume or a turn: the thread is in use, cancel its pending unload.
pub(crate) fn hold_thread_loaded(entry: &Arc<Entry>, thread: &ThreadId) {
    entry.state().hold_thread_loaded(thread);
}

/// Arms the idle unload of `thread` on a shared runtime that can unload threads and
/// knows the thread's native id (MGR-14). A shared runtime never goes idle while one
/// of its threads is in use, so its threads get the idle window one by one.
pub(crate) fn schedule_thread_unload(inner: &Arc<Inner>, entry: &Arc<Entry>, thread: &ThreadId) {
    if !entry.shared() || !entry.runtime.can_unload_threads() {
        return;
    }
    entry.state().arm_thread_unload(thread, |generation| {
        inner
            .tasks
            .spawn(unload_idle_thread(
                Arc::clone(inner),
                Arc::clone(entry),
                thread.clone(),
                generation,
            ))
            .abort_handle()
    });
}

/// After one idle window, unloads `thread` unless it was used meanwhile; a thread
/// with pending background work stays loaded and is checked again one window later
/// (MGR-15), at most `max_idle_pin` past its first deferral. The unload runs under the thread's attach lock, so a re-attach waits for
/// it and then reloads (MGR-13).
async fn unload_idle_thread(
    inner: Arc<Inner>,
    entry: Arc<Entry>,
    thread: ThreadId,
    generation: u64,
) {
    // Deferral for pending work is capped like the session pin (issue 5 item 7): a
    // probe that never clears cannot keep a thread loaded forever.
    let mut deferred_since: Option<Instant> = None;
    loop {
        tokio::time::sleep(inner.options.idle_timeout).await;
        let _lock = inner
            .attach_locks
            .lock(&(entry.id.clone(), thread.clone()))
            .await;
        let Some(native) = entry.state().unload_target(&thread, generation) else {
            return;
        };
        let pending = entry
            .runtime
            .has_pending_background_work_for_thread(&thread, &native)
            .await
            .unwrap_or(false);
        if pending {
            let now = Instant::now();
            let since = *deferred_since.get_or_insert(now);
            if now.duration_since(since) < inner.options.max_idle_pin {
                // Sleep the next window outside the lock.
                continue;
            }
            tracing::warn!(session = %entry.id, %thread, "thread unload deferral expired; unloading despite pending work");
        }
        if !entry.state().take_for_unload(&thread, generation) {
            return;
        }
        unload_now(&inner, &entry, &thread, &native).await;
        return;
    }
}

/// Calls the adapter's `unload_thread` under the unload time box; failures are logged.
pub(crate) async fn unload_now(inner: &Inner, entry: &Entry, thread: &ThreadId, native: &str) {
    match tokio::time::timeout(
        inner.options.unload_timeout,
        entry.runtime.unload_thread(thread, native),
    )
    .await
    {
        Ok(Ok(())) => {}
        Ok(Err(e)) => {
            tracing::warn!(session = %entry.id, %thread, error = %e, "thread unload failed")
        }
        Err(_) => tracing::warn!(session = %entry.id, %thread, "thread unload timed out"),
    }
}
