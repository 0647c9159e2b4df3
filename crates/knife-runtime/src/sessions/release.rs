//! Releasing a session (idle, close, close_instance, detach, pump failure, shutdown):
//! remove the entry, end subscribers, close under the time box, revoke credentials,
//! persist the terminal status and settle requests, retrying failed records (MGR-30..40).

use std::sync::Arc;
use std::time::Duration;

use knife_protocol::*;

use super::entry::{CloseSubscribers, Entry};
use super::metrics::{self, Outcome};
use super::requests::{self, SettleCause};
use super::store::WriteKind;
use super::{
    Inner, ProviderSessionCloseError, RELEASE_RETRY_FIRST, RELEASE_RETRY_MAX, ReleaseReason,
    SessionError, open, roster,
};

/// How [`release_entry`] behaves.
#[derive(Clone, Debug, Default)]
pub(crate) struct ReleaseOptions {
    /// Release only if the entry is idle at this idle generation (the idle timer's
    /// decision, re-checked atomically with the removal, MGR-27).
    pub only_if_generation: Option<u64>,
    /// Subscribers drain what is queued, then end without error (MGR-32).
    pub graceful: bool,
}

/// What a release persists; kept by its retries (each release owns its own, MGR-40).
#[derive(Clone)]
struct ReleaseRecords {
    entry: Arc<Entry>,
    session: ProviderSession,
    threads: Vec<ThreadId>,
    cause: SettleCause,
    released_at: Timestamp,
}

/// Releases `entry` if it is still the live entry of its id. Returns `Ok(false)`
/// when there was nothing to do (already released, replaced, or the idle decision
/// was stale). Runs in its own task on the tracker: dropping the caller never cuts a
/// release short.
pub(crate) async fn release_entry(
    inner: &Arc<Inner>,
    entry: Arc<Entry>,
    reason: ReleaseReason,
    detail: Option<String>,
    options: ReleaseOptions,
) -> Result<bool, SessionError> {
    let task = inner.tasks.spawn(inner.releases.track_future(release_task(
        Arc::clone(inner),
        entry,
        reason,
        detail,
        options,
    )));
    match task.await {
        Ok(result) => result,
        Err(e) => Err(SessionError::Close(ProviderSessionCloseError {
            provider_session_id: ProviderSessionId::from("unknown"),
            reason: reason.as_str(),
            message: format!("the release task failed: {e}"),
        })),
    }
}

async fn release_task(
    inner: Arc<Inner>,
    entry: Arc<Entry>,
    reason: ReleaseReason,
    detail: Option<String>,
    options: ReleaseOptions,
) -> Result<bool, SessionError> {
    // Acquire: remove the entry under the request permit. `released_at` is read inside
    // the permit: a request the pump is persisting lands before it and is settled; a
    // replacement's requests come after it and are not (MGR-39, MGR-42).
    let released_at = {
        let _permit = entry.request_permit.lock().await;
        let mut entries = inner.entries();
        if !entries
            .get(&entry.id)
            .is_some_and(|e| Arc::ptr_eq(e, &entry))
        {
            return Ok(false);
        }
        if !entry.state().take_for_release(options.only_if_generation) {
            return Ok(false);
        }
        entries.remove(&entry.id);
        inner.clock.now()
    };

    let failure_text = detail
        .clone()
        .unwrap_or_else(|| format!("Provider session released: {}.", reason.as_str()));
    entry.subscribers().close(if options.graceful {
        CloseSubscribers::Graceful
    } else if reason == ReleaseReason::ServerShutdown {
        CloseSubscribers::Discard
    } else {
        CloseSubscribers::Fail(failure_text)
    });

    // Close the runtime and the scope under one time box (MGR-33).
    let limit = inner.options.close_timeout;
    let close = async {
        let closed = entry.runtime.close().await;
        let scope_done = entry.scope.close_within(limit).await;
        (closed, scope_done)
    };
    let close_error = match tokio::time::timeout(limit, close).await {
        Ok((Ok(()), true)) => None,
        Ok((Err(e), _)) => Some(e.to_string()),
        Ok((Ok(()), false)) | Err(_) => {
            tracing::warn!(session = %entry.id, timeout_s = limit.as_secs(), "provider session close timed out");
            None
        }
    };

    // Credentials are revoked whatever happens next (MGR-38).
    let credentials = entry.state().take_credentials();
    for (thread, id) in &credentials {
        open::revoke_unless_held(&inner, thread, id, &entry);
    }

    let mut session = entry.record();
    session.updated_at = released_at;
    if reason == ReleaseReason::RuntimeError {
        session.status = SessionStatus::Error;
        session.last_error = Some(detail.unwrap_or_else(|| "Provider runtime failed.".into()));
    } else {
        session.status = SessionStatus::Stopped;
        session.last_error = None;
    }
    let threads = entry.state().threads_seen_sorted();
    let records = ReleaseRecords {
        entry: Arc::clone(&entry),
        session,
        threads,
        cause: SettleCause::from(reason),
        released_at,
    };
    let written = write_release_records(&inner, &records, false).await;

    if !entry.capabilities.background_tasks_outlive_session {
        roster::clear_roster(&inner, &entry, &records.threads).await;
    }

    let outcome = if written.is_err() || close_error.is_some() {
        Outcome::Failure
    } else {
        Outcome::Success
    };
    metrics::session_op(&entry.driver, "release", Some(reason.as_str()), outcome);

    if let Err(message) = written {
        let retry = records.clone();
        let retry_inner = Arc::clone(&inner);
        inner
            .tasks
            .spawn(async move { retry_release_records(retry_inner, retry).await });
        return Err(ProviderSessionCloseError {
            provider_session_id: entry.id.clone(),
            reason: reason.as_str(),
            message,
        }
        .into());
    }
    if let Some(message) = close_error {
        return Err(ProviderSessionCloseError {
            provider_session_id: entry.id.clone(),
            reason: reason.as_str(),
            message,
        }
        .into());
    }
    Ok(true)
}

/// Writes the terminal session status (one `provider-session.updated` per thread,
/// unless `replaced`: a replacement owns the status now) and settles the session's
/// requests. Both writes run even if the other fails; the error names what failed.
async fn write_release_records(
    inner: &Inner,
    records: &ReleaseRecords,
    replaced: bool,
) -> Result<(), String> {
    let mut failures = Vec::new();
    if !replaced {
        let now = inner.clock.now();
        let events: Vec<_> = if records.threads.is_empty() {
            vec![DomainEvent::new(
                now,
                EventBody::ProviderSessionUpdated(records.session.clone()),
            )]
        } else {
            records
                .threads
                .iter()
                .map(|t| {
                    DomainEvent::new(
                        now,
                        EventBody::ProviderSessionUpdated(records.session.clone()),
                    )
                    .with_thread(t)
                })
                .collect()
        };
        if let Err(e) = inner.store.write(WriteKind::ReleaseStatus, events).await {
            failures.push(format!("recording the session status failed: {e}"));
        }
    }
    {
        let _permit = records.entry.request_permit.lock().await;
        if let Err(e) = requests::expire_requests_of_session(
            inner.store.as_ref(),
            &records.session.id,
            &records.threads,
            records.released_at,
            inner.clock.now(),
            records.cause,
        )
        .await
        {
            failures.push(format!("settling its runtime requests failed: {e}"));
        }
    }
    if failures.is_empty() {
        Ok(())
    } else {
        Err(failures.join("; "))
    }
}

/// Retries `records` 1 s after the failure, then with a doubling delay capped at 30 s,
/// until they land (MGR-38). Each attempt holds the id's open lock and first checks
/// whether a replacement owns the id: then only the requests are settled (MGR-39).
async fn retry_release_records(inner: Arc<Inner>, records: ReleaseRecords) {
    let mut delay = RELEASE_RETRY_FIRST;
    loop {
        tokio::time::sleep(delay).await;
        let result = {
            let _lock = inner.open_locks.lock(&records.session.id).await;
            let replaced = inner.entries().contains_key(&records.session.id);
            write_release_records(&inner, &records, replaced).await
        };
        match result {
            Ok(()) => return,
            Err(message) => {
                tracing::warn!(session = %records.session.id, %message, "retrying release records");
                delay = next_delay(delay);
            }
        }
    }
}

fn next_delay(delay: Duration) -> Duration {
    (delay * 2).min(RELEASE_RETRY_MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_delay_doubles_up_to_thirty_seconds() {
        let mut d = RELEASE_RETRY_FIRST;
        let mut seen = vec![d.as_secs()];
        for _ in 0..6 {
            d = next_delay(d);
            seen.push(d.as_secs());
        }
        assert_eq!(seen, vec![1, 2, 4, 8, 16, 30, 30]);
    }
}
