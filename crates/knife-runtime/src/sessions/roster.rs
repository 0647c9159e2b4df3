//! Clearing the background-task roster of a released session's provider threads when
//! its tasks end with its process (MGR-44..47), by compare-and-set on each row.

use std::collections::HashSet;
use std::sync::Arc;

use knife_protocol::*;
use knife_store::{EntityKind, RowGuard};

use super::Inner;
use super::entry::Entry;
use super::store::WriteKind;

/// Attempts per provider thread before the clear gives up (an update won each time).
pub const ROSTER_CLEAR_ATTEMPTS: usize = 3;

/// Removes, from every provider thread of `threads` bound to `entry`'s session, the
/// pending background tasks this runtime listed (tasks a replacement reported are
/// kept, MGR-46). Each write is a compare-and-set on the row's version: an update
/// that lands between read and write wins and the clear re-reads (MGR-47). Failures
/// are logged.
pub(crate) async fn clear_roster(inner: &Inner, entry: &Arc<Entry>, threads: &[ThreadId]) {
    for thread in threads {
        let projection = match inner.store.thread_projection(thread).await {
            Ok(Some(p)) => p,
            Ok(None) => continue,
            Err(e) => {
                tracing::warn!(%thread, error = %e, "could not read provider threads to clear their roster");
                continue;
            }
        };
        for provider_thread in projection.provider_threads.iter().filter(|p| {
            p.provider_session_id.as_ref() == Some(&entry.id)
                && !p.pending_background_tasks.is_empty()
        }) {
            clear_one(inner, entry, &provider_thread.id).await;
        }
    }
}

async fn clear_one(inner: &Inner, entry: &Arc<Entry>, id: &ProviderThreadId) {
    let listed: HashSet<String> = entry.state().listed_tasks(id);
    for _ in 0..ROSTER_CLEAR_ATTEMPTS {
        let (mut row, version) = match inner.store.provider_thread_versioned(id).await {
            Ok(Some(found)) => found,
            Ok(None) => return,
            Err(e) => {
                tracing::warn!(provider_thread = %id, error = %e, "could not read a provider thread's roster");
                return;
            }
        };
        let before = row.pending_background_tasks.len();
        row.pending_background_tasks
            .retain(|t| !listed.contains(&t.task_id));
        if row.pending_background_tasks.len() == before {
            return;
        }
        row.updated_at = inner.clock.now();
        let event = DomainEvent::new(row.updated_at, EventBody::ProviderThreadUpdated(row));
        let guard = RowGuard::new(EntityKind::ProviderThread, id.as_str(), Some(version));
        match inner
            .store
            .write_if(WriteKind::RosterClear, guard, vec![event])
            .await
        {
            Ok(true) => return,
            // Someone updated the row since we read it: their update wins; re-read.
            Ok(false) => continue,
            Err(e) => {
                tracing::warn!(provider_thread = %id, error = %e, "could not clear a provider thread's roster");
                return;
            }
        }
    }
    tracing::info!(provider_thread = %id, "gave up clearing a roster that keeps changing");
}
