//! `knife bench store`: append throughput by batch size and rebuild rate, on a
//! real SQLite file in a temp dir (WAL, synchronous=NORMAL as in production).

use std::time::Instant;

use knife_protocol::*;

pub async fn run(events: usize) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let store = knife_store_sqlite::open(dir.path().join("bench.db")).await?;
    let now = chrono::Utc::now();
    let thread_id = ThreadId::new();
    let run_id = RunId::for_thread(&thread_id, 1);
    println!("knife bench store: {events} events per batch size, ~300-byte turn-item snapshots");
    println!(
        "{:<12} {:>12} {:>14}",
        "batch size", "events/s", "µs per batch"
    );
    let mut n = 0u64;
    for batch in [1usize, 10, 100] {
        let batches = events.div_ceil(batch);
        let start = Instant::now();
        for _ in 0..batches {
            let mut chunk = Vec::with_capacity(batch);
            for _ in 0..batch {
                n += 1;
                let item = TurnItem {
                    id: TurnItemId::from(format!("item:bench:{}", n % 64)),
                    thread_id: thread_id.clone(),
                    run_id: Some(run_id.clone()),
                    provider_turn_id: None,
                    ordinal: n,
                    status: TurnItemStatus::Running,
                    started_at: Some(now),
                    completed_at: None,
                    updated_at: now,
                    kind: TurnItemKind::AssistantMessage {
                        text: "lorem ipsum dolor sit amet ".repeat(4),
                        streaming: true,
                    },
                };
                chunk.push(DomainEvent::new(now, EventBody::TurnItemUpdated(item)));
            }
            store.write(chunk).await?;
        }
        let secs = start.elapsed().as_secs_f64();
        let written = (batches * batch) as f64;
        println!(
            "{batch:<12} {:>12.0} {:>14.1}",
            written / secs,
            secs * 1e6 / batches as f64
        );
    }
    let stats = store.rebuild().await?;
    let secs = stats.elapsed.as_secs_f64().max(1e-9);
    println!(
        "{:<12} {:>12.0} {:>14}",
        "rebuild",
        stats.events as f64 / secs,
        format!("{} events", stats.events)
    );
    Ok(())
}
