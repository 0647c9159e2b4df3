// The inbound half of live deltas across nodes (issue 17 item 2): feeds the other nodes'
// relayed deltas and resets into this node's live hub, and this node's durable feed too.

//! [`start`] runs one task per node when the store has other nodes
//! ([`knife_store::LiveRelay::relayed_live`] is `Some`; SQLite: none, nothing runs). It
//! hands every relayed message to [`LiveHub::apply_relayed`] and every durable event of
//! the node's own feed to [`LiveHub::observe_durable`] (which retires mirrored items
//! once their settled snapshot or their run's end is committed), and sweeps mirrored
//! items idle for [`crate::live::MIRROR_IDLE`]. The outbound half is
//! [`LiveHub::relay_to`].

use std::time::Duration;

use futures::StreamExt;
use knife_store::{Store, StreamFilter};
use tokio::sync::broadcast::error::RecvError;
use tokio_util::sync::CancellationToken;

use crate::live::{LiveHub, MIRROR_IDLE};

/// Pause before following the durable feed again after a failed read.
const RETRY: Duration = Duration::from_secs(1);

/// Relays `hub`'s own messages through `store` and mirrors the other nodes' until
/// `stop` is cancelled. `None` when the store has no other nodes (nothing to run).
pub fn start(
    hub: LiveHub,
    store: Store,
    stop: CancellationToken,
) -> Option<tokio::task::JoinHandle<()>> {
    hub.relay_to(store.clone());
    let mut relayed = store.relayed_live()?;
    Some(tokio::spawn(async move {
        let mut durable = None;
        let mut sweep = tokio::time::interval(MIRROR_IDLE / 10);
        loop {
            if durable.is_none() {
                match store.latest_sequence(None).await {
                    Ok(head) => durable = Some(store.stream(StreamFilter::after(head))),
                    Err(e) => {
                        tracing::warn!(error = %e, "live relay: cannot follow the log; retrying");
                        tokio::select! {
                            () = stop.cancelled() => return,
                            () = tokio::time::sleep(RETRY) => continue,
                        }
                    }
                }
            }
            let Some(feed) = durable.as_mut() else {
                continue;
            };
            tokio::select! {
                () = stop.cancelled() => return,
                message = relayed.recv() => match message {
                    Ok(message) => hub.apply_relayed(&message),
                    // Missed messages leave gaps the durable snapshots close.
                    Err(RecvError::Lagged(_)) => {}
                    Err(RecvError::Closed) => return,
                },
                event = feed.next() => match event {
                    Some(Ok(event)) => hub.observe_durable(&event),
                    Some(Err(e)) => {
                        tracing::warn!(error = %e, "live relay: the log feed failed; following it again");
                        durable = None;
                    }
                    None => durable = None,
                },
                _ = sweep.tick() => hub.sweep_mirrors(MIRROR_IDLE),
            }
        }
    }))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use knife_protocol::*;
    use knife_store::RelayedLive;

    fn thread() -> ThreadId {
        ThreadId::from("thread:t")
    }

    fn run() -> RunId {
        RunId::for_thread(&thread(), 1)
    }

    fn delta(offset: u64, text: &str) -> RelayedLive {
        RelayedLive::Delta {
            delta: ItemDelta {
                thread_id: thread(),
                run_id: Some(run()),
                item_id: TurnItemId::from("item:a"),
                ordinal: 1,
                field: DeltaField::Text,
                offset,
                text: text.to_owned(),
            },
            generation: 0,
        }
    }

    fn snapshot(sequence: u64, text: &str, status: TurnItemStatus) -> StoredEvent {
        let item = TurnItem {
            id: TurnItemId::from("item:a"),
            thread_id: thread(),
            run_id: Some(run()),
            provider_turn_id: None,
            ordinal: 1,
            status,
            started_at: None,
            completed_at: None,
            updated_at: chrono::Utc::now(),
            kind: TurnItemKind::AssistantMessage {
                text: text.to_owned(),
                streaming: true,
            },
        };
        StoredEvent {
            sequence,
            event: DomainEvent::new(chrono::Utc::now(), EventBody::TurnItemUpdated(item)),
        }
    }

    fn texts(rx: &mut tokio::sync::broadcast::Receiver<crate::live::LiveMessage>) -> Vec<String> {
        let mut out = Vec::new();
        while let Ok(m) = rx.try_recv() {
            if let crate::live::LiveMessage::Delta { delta, .. } = m {
                out.push(format!("{}:{}", delta.offset, delta.text));
            }
        }
        out
    }

    /// Mirrored deltas (issue 17 item 2): served to this node's subscribers in order; a
    /// delta past a gap (a node that joined mid-stream) waits until a durable snapshot
    /// closes the gap; the item leaves the hub with its settled snapshot.
    #[test]
    fn scale_03_mirrored_deltas_heal_a_gap_from_a_snapshot_and_leave_with_the_settled_one() {
        let hub = LiveHub::new();
        let mut rx = hub.subscribe(&thread());
        hub.apply_relayed(&delta(6, "world")); // "hello " never arrived here
        hub.apply_relayed(&delta(11, "!"));
        assert!(texts(&mut rx).is_empty(), "nothing past a gap");
        hub.observe_durable(&snapshot(5, "hello ", TurnItemStatus::Running));
        assert_eq!(
            texts(&mut rx),
            ["6:world!"],
            "the held text, once the gap closed"
        );
        hub.apply_relayed(&delta(12, " more"));
        assert_eq!(texts(&mut rx), ["12: more"]);
        let item = &hub.snapshot(&thread())[0];
        assert_eq!(item.fields[&DeltaField::Text], "hello world! more");
        assert_eq!(item.durable_at(5)[&DeltaField::Text], 6);
        hub.observe_durable(&snapshot(6, "hello world! more", TurnItemStatus::Completed));
        assert_eq!(hub.live_items(&thread()), 0, "settled: gone");
    }

    /// LIVE-03 on a mirror: appended chunks of a mirrored item give its catch-up
    /// offsets (a subscriber that reconnects after a chunk is not sent its text again)
    /// and close a gap before held deltas, as snapshots do.
    #[test]
    fn scale_03_mirrored_items_follow_appended_chunks() {
        let hub = LiveHub::new();
        let mut rx = hub.subscribe(&thread());
        hub.apply_relayed(&delta(0, "hello "));
        hub.observe_durable(&snapshot(5, "", TurnItemStatus::Running));
        hub.observe_durable(&chunk(6, 0, "hello "));
        assert_eq!(texts(&mut rx), ["0:hello "]);
        let item = &hub.snapshot(&thread())[0];
        assert_eq!(item.durable_at(5)[&DeltaField::Text], 0);
        assert_eq!(item.durable_at(6)[&DeltaField::Text], 6, "the chunk's end");
        // "world" was lost on the way; "!" waits past the gap until a chunk closes it.
        hub.apply_relayed(&delta(11, "!"));
        assert!(texts(&mut rx).is_empty(), "nothing past a gap");
        hub.observe_durable(&chunk(7, 6, "world"));
        assert_eq!(
            texts(&mut rx),
            ["11:!"],
            "the held text, once a chunk closed the gap"
        );
        assert_eq!(
            hub.snapshot(&thread())[0].fields[&DeltaField::Text],
            "hello world!"
        );
        // A chunk of an attempt before the item's last reset changes nothing.
        hub.apply_relayed(&RelayedLive::Reset {
            reset: ItemReset {
                thread_id: thread(),
                item_id: TurnItemId::from("item:a"),
            },
            generation: 1,
            after_sequence: 8,
        });
        hub.observe_durable(&chunk(8, 12, " stale"));
        assert!(hub.snapshot(&thread())[0].fields.is_empty());
    }

    fn chunk(sequence: u64, offset: u64, text: &str) -> StoredEvent {
        let body = EventBody::TurnItemAppended(knife_protocol::TurnItemAppend {
            thread_id: thread(),
            run_id: None,
            item_id: TurnItemId::from("item:a"),
            ordinal: 1,
            field: DeltaField::Text,
            offset,
            text: text.to_owned(),
            updated_at: chrono::Utc::now(),
        });
        StoredEvent {
            sequence,
            event: DomainEvent::new(chrono::Utc::now(), body),
        }
    }

    /// Bounded memory: a mirrored item leaves with its run's end, or after the idle
    /// limit when its node died and nobody wrote its end; a stale generation's delta
    /// is ignored.
    #[test]
    fn scale_03_mirrored_items_leave_with_their_run_or_when_idle() {
        let hub = LiveHub::new();
        hub.apply_relayed(&delta(0, "a"));
        assert_eq!(hub.live_items(&thread()), 1);
        let mut ended = knife_store::contract::fixtures::run("thread:t", 1, RunStatus::Completed);
        ended.thread_id = thread();
        hub.observe_durable(&StoredEvent {
            sequence: 9,
            event: DomainEvent::new(chrono::Utc::now(), EventBody::RunUpdated(ended)),
        });
        assert_eq!(hub.live_items(&thread()), 0);

        hub.apply_relayed(&RelayedLive::Reset {
            reset: ItemReset {
                thread_id: thread(),
                item_id: TurnItemId::from("item:a"),
            },
            generation: 2,
            after_sequence: 10,
        });
        hub.apply_relayed(&delta(0, "old attempt")); // generation 0 < 2
        assert!(hub.snapshot(&thread())[0].fields.is_empty());
        hub.observe_durable(&snapshot(10, "old", TurnItemStatus::Completed));
        assert_eq!(hub.live_items(&thread()), 1, "a snapshot before the reset");
        hub.sweep_mirrors(Duration::ZERO);
        assert_eq!(hub.live_items(&thread()), 0, "idle: gone");
    }
}
