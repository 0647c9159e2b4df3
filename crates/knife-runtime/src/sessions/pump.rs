//! The event pump: the one consumer of a session's adapter stream. Persists each
//! batch through the store, then broadcasts it (MGR-11); tracks activity, idle turns,
//! status updates, native thread ids and listed background tasks; releases on end.

use std::sync::Arc;

use futures::StreamExt;
use futures::stream::BoxStream;
use knife_protocol::*;
use tracing::Instrument;

use super::entry::{CloseSubscribers, Entry};
use super::store::WriteKind;
use super::{Inner, ReleaseReason, idle, release};
use crate::adapter::AdapterError;
use crate::ingest;

/// Most events written in one transaction.
const MAX_BATCH: usize = 256;

/// Least time between two raises of a session row's last-seen time by its pump: the
/// reaper's threshold is minutes, so a fast stream costs one such write per 30 s.
pub const TOUCH_INTERVAL: std::time::Duration = std::time::Duration::from_secs(30);

pub(crate) fn start(
    inner: &Arc<Inner>,
    entry: &Arc<Entry>,
    events: BoxStream<'static, Result<AdapterEvent, AdapterError>>,
) {
    let inner = Arc::clone(inner);
    let entry = Arc::clone(entry);
    let tasks = inner.tasks.clone();
    // Every log line of the session's pump carries the session and its instance. Its own
    // root (no parent): a session outlives the run that opened it.
    let span = tracing::info_span!(
        parent: None,
        "provider_session",
        session = %entry.id,
        instance = %entry.instance,
        driver = %entry.driver,
    );
    tasks.spawn(async move { run(inner, entry, events).await }.instrument(span));
}

/// Session-scoped runtime-request artifacts (no run): persisted directly under the
/// request permit and not broadcast, since no run subscriber may exist yet (MGR-43).
fn is_session_scoped_request(event: &AdapterEvent) -> bool {
    match event {
        AdapterEvent::RuntimeRequestUpdated(r) => {
            r.provider_turn_id.is_none() && r.run_id.is_none()
        }
        AdapterEvent::NodeUpdated(n) => n.run_id.is_none() && n.runtime_request_id.is_some(),
        AdapterEvent::TurnItemUpdated(i) => i.run_id.is_none(),
        _ => false,
    }
}

async fn run(
    inner: Arc<Inner>,
    entry: Arc<Entry>,
    mut events: BoxStream<'static, Result<AdapterEvent, AdapterError>>,
) {
    let mut stopped_by_provider = false;
    // Two halves (LIVE-01): the reader hands each live delta to the hub the moment
    // the adapter emits it and queues everything else for the writer, which commits
    // in batches (every event already waiting in one transaction), then broadcasts.
    // Boxed: the channel's first block (32 slots) lives as long as the session, so
    // an idle session holds 32 pointers here, not 32 events (~12.5 KiB, LIVE-07).
    let (queue, queued) = tokio::sync::mpsc::unbounded_channel::<Box<Queued>>();
    let live = inner.options.live.clone();
    let read = async move {
        while let Some(item) = events.next().await {
            let mut generation = None;
            let item = match item {
                Ok(AdapterEvent::TurnItemDelta(delta)) => {
                    live.publish(delta);
                    continue;
                }
                Ok(AdapterEvent::TurnItemReset(reset)) => {
                    live.begin_reset(&reset);
                    Ok(AdapterEvent::TurnItemReset(reset))
                }
                Ok(AdapterEvent::TurnItemUpdated(item)) => {
                    generation = live.generation(&item.thread_id, &item.id);
                    Ok(AdapterEvent::TurnItemUpdated(item))
                }
                Ok(AdapterEvent::TurnItemAppended(chunk)) => {
                    generation = live.generation(&chunk.thread_id, &chunk.item_id);
                    Ok(AdapterEvent::TurnItemAppended(chunk))
                }
                other => other,
            };
            let failed = item.is_err();
            if queue.send(Box::new((item, generation))).is_err() || failed {
                break;
            }
        }
    };
    let failure = {
        let write = write_queued(&inner, &entry, queued, &mut stopped_by_provider);
        tokio::pin!(read);
        tokio::pin!(write);
        let mut reading = true;
        loop {
            tokio::select! {
                failure = &mut write => break failure,
                () = &mut read, if reading => reading = false,
            }
        }
    };
    if !inner.is_current(&entry) || inner.shutdown.is_cancelled() {
        return;
    }
    if failure.is_none() && stopped_by_provider {
        // The provider stopped on its own: subscribers drain what is queued (the
        // final terminal), then end; the session is released once (MGR-32).
        let options = release::ReleaseOptions {
            graceful: true,
            ..Default::default()
        };
        let _ = release::release_entry(&inner, entry, ReleaseReason::ManualShutdown, None, options)
            .await;
        return;
    }
    let cause = failure.unwrap_or_else(|| "Provider event stream ended unexpectedly.".to_owned());
    entry
        .subscribers()
        .close(CloseSubscribers::Fail(cause.clone()));
    if let Err(e) = release::release_entry(
        &inner,
        Arc::clone(&entry),
        ReleaseReason::RuntimeError,
        Some(cause),
        release::ReleaseOptions::default(),
    )
    .await
    {
        tracing::warn!(session = %entry.id, error = %e, "releasing a failed provider session failed");
    }
}

/// An adapter event on its way to the writer, with the live generation (read time)
/// of an item the live hub follows (see [`crate::live::LiveHub::generation`]).
type Queued = (Result<AdapterEvent, AdapterError>, Option<u32>);

/// A transcript item that will not change any more (its live text can go).
fn is_settled(item: &TurnItem) -> bool {
    !matches!(
        item.status,
        TurnItemStatus::Pending | TurnItemStatus::Running | TurnItemStatus::Waiting
    )
}

/// The writer half of the pump: commits queued events in batches (split at live
/// resets, which are released once what came before them is committed, LIVE-02).
/// Returns the failure that stopped it, `None` when the stream ended.
async fn write_queued(
    inner: &Arc<Inner>,
    entry: &Arc<Entry>,
    queued: tokio::sync::mpsc::UnboundedReceiver<Box<Queued>>,
    stopped_by_provider: &mut bool,
) -> Option<String> {
    let live = &inner.options.live;
    let mut chunks =
        tokio_stream::wrappers::UnboundedReceiverStream::new(queued).ready_chunks(MAX_BATCH);
    while let Some(chunk) = chunks.next().await {
        let mut ok = Vec::with_capacity(chunk.len());
        let mut settles = Vec::new();
        let mut failure = None;
        for queued in chunk {
            let (item, generation) = *queued;
            match item {
                Ok(AdapterEvent::TurnItemReset(reset)) => {
                    if let Err(e) =
                        commit(inner, entry, &mut ok, &mut settles, stopped_by_provider).await
                    {
                        return Some(e);
                    }
                    let after = inner
                        .store
                        .latest_sequence(&reset.thread_id)
                        .await
                        .unwrap_or(0);
                    live.finish_reset(reset, after);
                }
                Ok(event) => {
                    match (generation, &event) {
                        (Some(generation), AdapterEvent::TurnItemUpdated(item)) => {
                            settles.push((item.thread_id.clone(), item.id.clone(), generation));
                        }
                        (Some(generation), AdapterEvent::TurnItemAppended(chunk)) => {
                            settles.push((
                                chunk.thread_id.clone(),
                                chunk.item_id.clone(),
                                generation,
                            ));
                        }
                        _ => {}
                    }
                    ok.push(event);
                }
                Err(e) => {
                    failure = Some(e.to_string());
                    break;
                }
            }
        }
        if let Err(e) = commit(inner, entry, &mut ok, &mut settles, stopped_by_provider).await {
            return Some(e);
        }
        if failure.is_some() {
            return failure;
        }
    }
    None
}

/// Commits `events` (emptying it), then lets the live hub forget the items they
/// settled and the runs they ended.
async fn commit(
    inner: &Arc<Inner>,
    entry: &Arc<Entry>,
    events: &mut Vec<AdapterEvent>,
    settles: &mut Vec<(ThreadId, TurnItemId, u32)>,
    stopped_by_provider: &mut bool,
) -> Result<(), String> {
    if events.is_empty() {
        return Ok(());
    }
    let stored = handle_batch(inner, entry, events, stopped_by_provider).await?;
    let live = &inner.options.live;
    for (thread, item, generation) in settles.drain(..) {
        // The item's newest stored state (coalescing may have merged several): a
        // whole snapshot, or a chunk that moved one field's durable end (LIVE-03).
        let Some((sequence, newest)) = stored.iter().rev().find_map(|e| match &e.event.body {
            EventBody::TurnItemUpdated(i) if i.id == item => Some((e.sequence, Ok(i))),
            EventBody::TurnItemAppended(c) if c.item_id == item => Some((e.sequence, Err(c))),
            _ => None,
        }) else {
            continue;
        };
        match newest {
            Ok(snapshot) if is_settled(snapshot) => live.settled(&thread, &item, generation),
            Ok(snapshot) => {
                let lens = [
                    DeltaField::Text,
                    DeltaField::Reasoning,
                    DeltaField::Input,
                    DeltaField::Output,
                ]
                .into_iter()
                .filter_map(|f| f.durable_text(snapshot).map(|t| (f, t.len() as u64)))
                .collect();
                live.committed(&thread, &item, generation, sequence, lens);
            }
            Err(chunk) => live.committed_chunk(
                &thread,
                &item,
                generation,
                sequence,
                chunk.field,
                chunk.end(),
            ),
        }
    }
    for event in events.drain(..) {
        if let AdapterEvent::TurnTerminal {
            thread_id, run_id, ..
        } = event
        {
            live.end_run(&thread_id, &run_id);
        }
    }
    Ok(())
}

/// Persists one batch, then updates activity and broadcasts (after commit).
async fn handle_batch(
    inner: &Arc<Inner>,
    entry: &Arc<Entry>,
    events: &[AdapterEvent],
    stopped_by_provider: &mut bool,
) -> Result<Vec<StoredEvent>, String> {
    let now = inner.clock.now();
    // Any event is a sign of life for the stuck-turn watchdog.
    let attached: Vec<ThreadId> = {
        let mut st = entry.state();
        st.saw_event();
        st.attached_sorted()
    };
    let mut batch = Vec::new();
    let mut requests = Vec::new();
    for event in events {
        observe(entry, event);
        if let AdapterEvent::ProviderSessionUpdated(session) = event {
            if session.status == SessionStatus::Stopped {
                *stopped_by_provider = true;
            }
            if inner.is_current(entry) {
                entry.set_record(session.clone());
                for thread in &attached {
                    batch.push(
                        DomainEvent::new(now, EventBody::ProviderSessionUpdated(session.clone()))
                            .with_thread(thread),
                    );
                }
            }
            continue;
        }
        let Some(body) = ingest::to_domain(event) else {
            continue;
        };
        if is_session_scoped_request(event) {
            requests.push(DomainEvent::new(now, body));
            continue;
        }
        let thread = event_thread(event).or_else(|| attached.first().cloned());
        match thread {
            Some(thread) => ingest::push_coalesced(&mut batch, &thread, now, body),
            None => batch.push(DomainEvent::new(now, body)),
        }
    }
    if !requests.is_empty() {
        let _permit = entry.request_permit.lock().await;
        if inner.is_current(entry) {
            inner
                .store
                .write(WriteKind::PumpRequests, requests)
                .await
                .map_err(|e| format!("Failed to persist a runtime request: {e}"))?;
        }
    }
    let mut stored = Vec::new();
    if !batch.is_empty() {
        let written = batch.len() as u64;
        stored = inner
            .store
            .write(WriteKind::Pump, batch)
            .await
            .map_err(|e| format!("Failed to persist provider events: {e}"))?;
        ::metrics::counter!("knife_adapter_events_total").increment(written);
        if let Some(observer) = &inner.options.model_calls {
            for e in &stored {
                if let EventBody::ModelCallRecorded(call) = &e.event.body {
                    observer.model_call_recorded(call);
                }
            }
        }
    }
    // Activity: any non-terminal event restarts the idle window once per batch (no
    // task churn on fast streams; a no-op while a turn runs); each terminal marks its
    // turn idle.
    if events
        .iter()
        .any(|e| !matches!(e, AdapterEvent::TurnTerminal { .. }))
    {
        idle::touch(inner, entry);
    }
    for event in events {
        if let AdapterEvent::TurnTerminal {
            provider_turn_id, ..
        } = event
        {
            idle::mark_idle(inner, entry, provider_turn_id);
        }
    }
    {
        let mut subscribers = entry.subscribers();
        for event in events.iter().filter(|e| !is_session_scoped_request(e)) {
            subscribers.broadcast(event);
        }
    }
    touch_row(inner, entry, now).await;
    Ok(stored)
}

/// Raises the session row's last-seen time, at most once per [`TOUCH_INTERVAL`]
/// (REAP-01: a session with a live runtime is not stale). Failures are logged only.
async fn touch_row(inner: &Arc<Inner>, entry: &Arc<Entry>, now: Timestamp) {
    if !entry.state().touch_due(TOUCH_INTERVAL) {
        return;
    }
    if let Err(e) = inner.store.touch_session(&entry.id, now).await {
        tracing::warn!(session = %entry.id, error = %e, "could not record the provider session's activity");
    }
}

/// Learns native thread ids and the background tasks this runtime lists.
fn observe(entry: &Entry, event: &AdapterEvent) {
    if let AdapterEvent::ProviderThreadUpdated(pt) = event
        && pt.provider_session_id.as_ref() == Some(&entry.id)
    {
        let mut st = entry.state();
        if let (Some(thread), Some(native)) = (&pt.app_thread_id, &pt.native_id) {
            st.learn_native_id(thread, native.clone());
        }
        st.list_tasks(
            &pt.id,
            pt.pending_background_tasks
                .iter()
                .map(|t| t.task_id.clone()),
        );
    }
}

fn event_thread(event: &AdapterEvent) -> Option<ThreadId> {
    match event {
        AdapterEvent::ProviderThreadUpdated(p) => p.app_thread_id.clone(),
        AdapterEvent::ProviderTurnUpdated(t) => Some(t.thread_id.clone()),
        AdapterEvent::ModelCallRecorded(c) => Some(c.thread_id.clone()),
        AdapterEvent::NodeUpdated(n) => Some(n.thread_id.clone()),
        AdapterEvent::TurnItemUpdated(i) => Some(i.thread_id.clone()),
        AdapterEvent::TurnItemAppended(c) => Some(c.thread_id.clone()),
        AdapterEvent::RuntimeRequestUpdated(r) => Some(r.thread_id.clone()),
        AdapterEvent::TurnTerminal { thread_id, .. }
        | AdapterEvent::AgentStatusChanged { thread_id, .. }
        | AdapterEvent::AgentErrorRaised { thread_id, .. } => Some(thread_id.clone()),
        AdapterEvent::TurnItemDelta(d) => Some(d.thread_id.clone()),
        AdapterEvent::TurnItemReset(r) => Some(r.thread_id.clone()),
        AdapterEvent::ProviderSessionUpdated(_) => None,
    }
}
