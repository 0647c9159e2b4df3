// Stream tests: replay-then-live with concurrent writers (no gap, no duplicate),
// thread and type filters, and recovery of a stream that lags behind the live feed.

use super::ContractOptions;
use super::StoreFactory;
use super::fixtures::*;
use crate::{Store, StreamFilter};
use futures::StreamExt;
use knife_protocol::*;
use std::time::Duration;

/// Guard against a hung stream; not a sleep (tests finish as soon as events arrive).
const DEADLINE: Duration = Duration::from_secs(60);

/// Item `n` of thread `t{n % 3}` — three threads interleaved.
fn item_event(n: u64) -> DomainEvent {
    let thread = format!("t{}", n % 3);
    ev(EventBody::TurnItemUpdated(turn_item(
        &thread,
        1,
        n,
        &format!("item {n}"),
    )))
}

async fn collect(store: &Store, filter: StreamFilter, count: usize) -> Vec<StoredEvent> {
    let stream = store.stream(filter);
    tokio::time::timeout(DEADLINE, stream.take(count).collect::<Vec<_>>())
        .await
        .expect("stream stalled: an event is missing")
        .into_iter()
        .collect::<Result<Vec<_>, _>>()
        .unwrap()
}

pub async fn three_streams_see_every_event_once_in_order_while_a_writer_appends(
    factory: &dyn StoreFactory,
) {
    let (_dir, store) = temp_store(factory).await;
    let mut n = 0_u64;
    // History before the streams start: 60 events in batches of 3.
    for _ in 0..20 {
        let batch = (0..3)
            .map(|_| {
                n += 1;
                item_event(n)
            })
            .collect();
        store.write(batch).await.unwrap();
    }
    let latest = store.latest_sequence(None).await.unwrap();
    assert_eq!(latest, 60);
    // Batches of 1..=4 events appended while the streams run.
    let batch_sizes: Vec<u64> = (0..300).map(|i| 1 + (i * 7) % 4).collect();
    let total = latest + batch_sizes.iter().sum::<u64>();

    let afters = [0, latest / 2, latest];
    // Collected on purpose: every reader must be spawned before the writer starts.
    #[allow(clippy::needless_collect)]
    let readers: Vec<_> = afters
        .iter()
        .map(|&after| {
            // `stream` subscribes now; the consumer runs concurrently with the writer.
            let stream = store.stream(StreamFilter::after(after));
            let count = usize::try_from(total - after).unwrap();
            tokio::spawn(async move {
                tokio::time::timeout(DEADLINE, stream.take(count).collect::<Vec<_>>()).await
            })
        })
        .collect();
    let writer = {
        let store = store.clone();
        tokio::spawn(async move {
            let mut n = n;
            for size in batch_sizes {
                let batch = (0..size)
                    .map(|_| {
                        n += 1;
                        item_event(n)
                    })
                    .collect();
                store.write(batch).await.unwrap();
                tokio::task::yield_now().await;
            }
        })
    };
    writer.await.unwrap();
    assert_eq!(store.latest_sequence(None).await.unwrap(), total);
    let all = store
        .read_events(&StreamFilter::after(0), 10_000)
        .await
        .unwrap();
    assert_eq!(all.len(), usize::try_from(total).unwrap());

    for (reader, after) in readers.into_iter().zip(afters) {
        let got: Vec<StoredEvent> = reader
            .await
            .unwrap()
            .expect("stream stalled: an event is missing")
            .into_iter()
            .collect::<Result<_, _>>()
            .unwrap();
        let seqs: Vec<u64> = got.iter().map(|e| e.sequence).collect();
        let expected: Vec<u64> = (after + 1..=total).collect();
        assert_eq!(
            seqs, expected,
            "stream after {after}: gap, duplicate or disorder"
        );
        // The exact stored events, not just their numbers.
        assert_eq!(got.as_slice(), &all[usize::try_from(after).unwrap()..]);
    }
}

pub async fn stream_filters_by_thread_and_by_event_type_across_replay_and_live(
    factory: &dyn StoreFactory,
) {
    let (_dir, store) = temp_store(factory).await;
    let mut written = Vec::new();
    for n in 1..=30 {
        let mut batch = vec![item_event(n)];
        if n % 5 == 0 {
            batch.push(ev(EventBody::RunUpdated(run(
                &format!("t{}", n % 3),
                1,
                RunStatus::Running,
            ))));
        }
        written.extend(store.write(batch).await.unwrap());
    }
    let by_thread = StreamFilter::thread(ThreadId::from("t1"), 0);
    let by_type = StreamFilter {
        event_type: Some("run.updated".into()),
        ..StreamFilter::default()
    };
    let both = StreamFilter {
        thread_id: Some(ThreadId::from("t2")),
        event_type: Some("turn-item.updated".into()),
        after: 10,
    };
    let filters = [by_thread, by_type, both];
    let streams: Vec<_> = filters.iter().map(|f| store.stream(f.clone())).collect();
    // Live part, after the streams subscribed.
    for n in 31..=60 {
        let mut batch = vec![item_event(n)];
        if n % 5 == 0 {
            batch.push(ev(EventBody::RunUpdated(run(
                &format!("t{}", n % 3),
                2,
                RunStatus::Completed,
            ))));
        }
        written.extend(store.write(batch).await.unwrap());
    }
    for (filter, stream) in filters.iter().zip(streams) {
        let expected: Vec<StoredEvent> = written
            .iter()
            .filter(|e| e.sequence > filter.after && filter.matches(e))
            .cloned()
            .collect();
        assert!(!expected.is_empty());
        let got: Vec<StoredEvent> =
            tokio::time::timeout(DEADLINE, stream.take(expected.len()).collect::<Vec<_>>())
                .await
                .expect("filtered stream stalled")
                .into_iter()
                .collect::<Result<_, _>>()
                .unwrap();
        assert_eq!(got, expected, "filter {filter:?}");
        // read_events applies the same filter.
        assert_eq!(store.read_events(filter, 1000).await.unwrap(), expected);
    }
}

pub async fn a_lagging_stream_recovers_from_the_table_without_gap_or_duplicate(
    factory: &dyn StoreFactory,
) {
    // A live feed of 4 events: any stream not polled during 100 writes lags.
    let (_dir, store) = temp_store_with(
        factory,
        ContractOptions {
            live_capacity: Some(4),
        },
    )
    .await;
    let mut stream = store.stream(StreamFilter::after(0));
    for n in 1..=10 {
        store.write(vec![item_event(n)]).await.unwrap();
    }
    let mut seen = Vec::new();
    for _ in 0..5 {
        seen.push(stream.next().await.unwrap().unwrap().sequence);
    }
    // Now in the middle of the replay/live handover; write far past the feed capacity.
    for n in 11..=110 {
        store
            .write(vec![item_event(n), item_event(1000 + n)])
            .await
            .unwrap();
    }
    while seen.len() < 210 {
        let next = tokio::time::timeout(DEADLINE, stream.next())
            .await
            .expect("lagging stream stalled");
        seen.push(next.unwrap().unwrap().sequence);
    }
    assert_eq!(seen, (1..=210).collect::<Vec<u64>>());
    // And it keeps following live commits afterwards.
    let stored = store.write(vec![item_event(5000)]).await.unwrap();
    let next = tokio::time::timeout(DEADLINE, stream.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(next, stored[0]);
}

pub async fn a_stream_created_before_writes_and_polled_later_misses_nothing(
    factory: &dyn StoreFactory,
) {
    let (_dir, store) = temp_store(factory).await;
    store.write(vec![item_event(1)]).await.unwrap();
    let latest = store.latest_sequence(None).await.unwrap();
    // Starts at the then-latest sequence: only what comes after.
    let stream = store.stream(StreamFilter::after(latest));
    let stored = store
        .write(vec![item_event(2), item_event(3)])
        .await
        .unwrap();
    let got = collect(&store, StreamFilter::after(latest), 2).await;
    assert_eq!(got, stored);
    let got: Vec<StoredEvent> = stream.take(2).map(Result::unwrap).collect().await;
    assert_eq!(got, stored);
}

pub async fn concurrent_writers_are_serialized_and_a_thread_stream_sees_its_events_once(
    factory: &dyn StoreFactory,
) {
    let (_dir, store) = temp_store(factory).await;
    let t1 = store.stream(StreamFilter::thread(ThreadId::from("t1"), 0));
    let all = store.stream(StreamFilter::after(0));
    let writers: Vec<_> = (0..3_u64)
        .map(|w| {
            let store = store.clone();
            tokio::spawn(async move {
                for i in 0..50_u64 {
                    // Ids unique across writers; writer 0 writes to t1 and t2, the others elsewhere too.
                    let n = w * 1000 + i * 3 + 1;
                    let batch = vec![item_event(n + w), item_event(n + w + 100_000)];
                    store.write(batch).await.unwrap();
                }
            })
        })
        .collect();
    for w in writers {
        w.await.unwrap();
    }
    let written = store
        .read_events(&StreamFilter::after(0), 10_000)
        .await
        .unwrap();
    assert_eq!(written.len(), 300);
    assert_eq!(
        written.iter().map(|e| e.sequence).collect::<Vec<_>>(),
        (1..=300).collect::<Vec<u64>>()
    );
    let got_all: Vec<StoredEvent> =
        tokio::time::timeout(DEADLINE, all.take(300).collect::<Vec<_>>())
            .await
            .unwrap()
            .into_iter()
            .collect::<Result<_, _>>()
            .unwrap();
    assert_eq!(got_all, written);
    let expected_t1: Vec<StoredEvent> = written
        .iter()
        .filter(|e| e.event.thread_id == Some(ThreadId::from("t1")))
        .cloned()
        .collect();
    assert!(!expected_t1.is_empty());
    let got_t1: Vec<StoredEvent> =
        tokio::time::timeout(DEADLINE, t1.take(expected_t1.len()).collect::<Vec<_>>())
            .await
            .unwrap()
            .into_iter()
            .collect::<Result<_, _>>()
            .unwrap();
    assert_eq!(got_t1, expected_t1);
}
