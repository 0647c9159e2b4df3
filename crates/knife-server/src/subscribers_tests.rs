//! Unit tests of the subscriber bounds (paused time for the stall).
#![allow(clippy::unwrap_used, clippy::expect_used)]
use super::*;
use knife_protocol::*;

fn limits(queue: usize, total: usize) -> SubscriberLimits {
    SubscriberLimits {
        queue_bytes: queue,
        total_bytes: total,
        stall: Duration::from_millis(100),
        replays: 1,
        frame_cache_bytes: 1 << 20,
    }
}

fn overflow(reason: &str) -> Bytes {
    Bytes::from(format!("closed: {reason}"))
}

#[tokio::test(start_paused = true)]
async fn live_06_a_subscriber_that_never_reads_is_closed_at_its_bound() {
    let subs = Subscribers::new(limits(1000, 1 << 20));
    let (tx, mut rx) = subs.queue();
    // 10 frames of 100 bytes fill the bound; the 11th waits, then overflows.
    for _ in 0..10 {
        tx.push(Bytes::from(vec![b'x'; 100]), overflow)
            .await
            .unwrap();
    }
    assert_eq!(subs.held_bytes(), 1000);
    let started = tokio::time::Instant::now();
    let err = tx.push(Bytes::from(vec![b'x'; 100]), overflow).await;
    assert!(matches!(err, Err(PushError::Overflow)), "{err:?}");
    assert!(started.elapsed() >= Duration::from_millis(100));
    assert_eq!(subs.held_bytes(), 1000, "nothing queued past the bound");
    let mut frames = Vec::new();
    while let Ok(frame) = rx.rx.try_recv() {
        frames.push(frame);
    }
    let last = frames.pop().unwrap();
    let reason = last.close.clone().unwrap();
    assert!(
        reason.contains("fell behind") && reason.contains("after ="),
        "{reason}"
    );
    assert!(last.bytes.starts_with(b"closed: "));
    assert_eq!(frames.len(), 10);
    drop(frames);
    assert_eq!(subs.held_bytes(), 0, "written frames give their bytes back");
}

#[tokio::test(start_paused = true)]
async fn live_06_a_reader_makes_room_and_a_big_frame_goes_alone() {
    let subs = Subscribers::new(limits(1000, 1 << 20));
    let (tx, mut rx) = subs.queue();
    tx.push(Bytes::from(vec![b'x'; 600]), overflow)
        .await
        .unwrap();
    let reader = tokio::spawn(async move {
        let mut got = Vec::new();
        while let Some(frame) = rx.next().await {
            got.push(frame.bytes.len());
            if got.len() == 3 {
                break;
            }
        }
        got
    });
    // Larger than the bound: waits for an empty queue, takes it all, is delivered.
    tx.push(Bytes::from(vec![b'y'; 5000]), overflow)
        .await
        .unwrap();
    tx.push(Bytes::from(vec![b'z'; 10]), overflow)
        .await
        .unwrap();
    assert_eq!(reader.await.unwrap(), vec![600, 5000, 10]);
}

#[tokio::test(start_paused = true)]
async fn live_06_the_total_budget_bounds_all_subscribers_together() {
    let subs = Subscribers::new(limits(1000, 1500));
    let (a, mut ra) = subs.queue();
    let (b, _rb) = subs.queue();
    a.push(Bytes::from(vec![b'x'; 1000]), overflow)
        .await
        .unwrap();
    b.push(Bytes::from(vec![b'x'; 500]), overflow)
        .await
        .unwrap();
    // b has room of its own, but the total is spent: it waits (not closed: it is not
    // b's fault) until a's frame is written.
    let pending = tokio::time::timeout(
        Duration::from_secs(1),
        b.push(Bytes::from(vec![b'x'; 100]), overflow),
    )
    .await;
    assert!(pending.is_err(), "waits for the total budget");
    assert!(subs.peak_bytes() <= 1500);
    let written = ra.next().await.unwrap();
    drop(written);
    b.push(Bytes::from(vec![b'x'; 100]), overflow)
        .await
        .unwrap();
    assert!(subs.peak_bytes() <= 1500);
    assert_eq!(subs.held_bytes(), 600);
}

fn stored(sequence: u64, text: &str) -> StoredEvent {
    StoredEvent {
        sequence,
        event: DomainEvent::new(
            chrono::Utc::now(),
            EventBody::ThreadStatusChanged {
                thread_id: ThreadId::from(text),
                run_id: None,
                status: AgentStatus::Idle,
            },
        ),
    }
}

#[test]
fn live_06_frames_are_encoded_once_and_shared() {
    let subs = Subscribers::default();
    let ev = stored(7, "t");
    let a = subs.encoded(&ev);
    let b = subs.encoded(&ev);
    assert!(
        Arc::ptr_eq(&a, &b),
        "the second subscriber reuses the encoding"
    );
    let ws = a.ws();
    assert_eq!(
        ws.as_ptr(),
        b.ws().as_ptr(),
        "one buffer for every subscriber"
    );
    let expected = serde_json::to_string(&WsServerMessage::Event {
        event: Box::new(ev.clone()),
    })
    .unwrap();
    assert_eq!(std::str::from_utf8(&ws).unwrap(), expected);
    let sse = String::from_utf8(a.sse().to_vec()).unwrap();
    assert!(sse.starts_with(&format!(
        "id: 7\nevent: {}\ndata: {{",
        ev.event.event_type()
    )));
    assert!(sse.ends_with("}\n\n"));
}

/// Polls until `subs` has run `n` trims (the trim itself runs on a blocking thread).
async fn trims_reach(subs: &Subscribers, n: u64) {
    for _ in 0..1000 {
        if subs.trims() >= n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{} trims, expected {n}", subs.trims());
}

/// LIVE-06: freed memory is trimmed once the replays are idle for `TRIM_AFTER`: not
/// while one replays or waits for a slot, once for a burst, and again after the next.
#[tokio::test(start_paused = true)]
async fn live_06_freed_memory_is_trimmed_once_the_replays_are_idle() {
    let subs = Subscribers::new(limits(1000, 1 << 20));
    let first = subs.replay_slot().await.unwrap();
    // A second subscriber waits for the one slot (limits: 1 replay at a time).
    let waiting = tokio::spawn({
        let subs = subs.clone();
        async move {
            let slot = subs.replay_slot().await.unwrap();
            tokio::time::sleep(Duration::from_secs(2)).await;
            drop(slot);
        }
    });
    tokio::task::yield_now().await;
    drop(first);
    tokio::time::sleep(TRIM_AFTER * 3).await;
    assert_eq!(subs.trims(), 0, "trimmed while a replay ran");
    waiting.await.unwrap();
    trims_reach(&subs, 1).await;
    tokio::time::sleep(TRIM_AFTER * 3).await;
    assert_eq!(subs.trims(), 1, "one trim per idle burst");
    // A replay that ends within the wait of the trim it scheduled: still one trim.
    for _ in 0..3 {
        drop(subs.replay_slot().await.unwrap());
    }
    trims_reach(&subs, 2).await;
    tokio::time::sleep(TRIM_AFTER * 3).await;
    assert_eq!(subs.trims(), 2);
}
