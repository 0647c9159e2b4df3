//! `knife bench cluster` (SPEC.md SCALE-10): three nodes (three store handles, each with
//! its own pool and LISTEN connection) append in batches to one PostgreSQL database;
//! prints events/s of the three together and cross-node delivery p50/p99.
//!
//! Delivery is measured from the moment the append returned on the writing node
//! (after its COMMIT) to the moment the event came out of an `after=N` stream on each
//! of the two other nodes (NOTIFY wake-up, rows read from the table).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use futures::StreamExt;
use knife_protocol::*;
use knife_store::{Store, StreamFilter};
use knife_store_postgres::testing;

/// Nodes of the bench.
const NODES: usize = 3;

/// What one bench run does.
pub struct ClusterBench {
    /// Server URL; `None` = start a throwaway cluster (fsync on) from Debian's binaries.
    pub database: Option<String>,
    /// Events appended by all nodes together.
    pub events: usize,
    /// Events per append.
    pub batch: usize,
    /// Concurrent appenders per node.
    pub writers: usize,
    /// `synchronous_commit` values to measure, one row each.
    pub synchronous_commit: Vec<String>,
    /// Group-commit sizes to measure (`PgOptions::group_appends`), one row each.
    pub group_appends: Vec<usize>,
}

/// One row of the table.
struct Row {
    events: usize,
    elapsed: Duration,
    delivery_us: Vec<u64>,
}

pub async fn run(bench: ClusterBench) -> anyhow::Result<()> {
    let batch = bench.batch.max(1);
    let writers = bench.writers.max(1);
    let per_writer = bench
        .events
        .div_ceil(NODES * writers)
        .div_ceil(batch)
        .max(1);
    let total = per_writer * batch * NODES * writers;
    let (server, owned) = match &bench.database {
        Some(url) => (url.clone(), None),
        None => {
            eprintln!("starting a throwaway PostgreSQL cluster (fsync on) …");
            let cluster = testing::start_cluster(true)
                .await
                .map_err(|e| anyhow::anyhow!("{e}; or pass --database postgres://…"))?;
            (cluster.url("postgres"), Some(cluster))
        }
    };
    for sync in &bench.synchronous_commit {
        anyhow::ensure!(
            ["on", "off", "local", "remote_write", "remote_apply"].contains(&sync.as_str()),
            "--synchronous-commit {sync}: use on, off, local, remote_write or remote_apply"
        );
    }
    let location = knife_store_postgres::redact(&server);
    println!(
        "knife bench cluster: {NODES} nodes on {location}{}, {writers} appender(s) per node, \
         batch size {batch}, {total} events (~300-byte turn-item snapshots)",
        if owned.is_some() {
            " (throwaway cluster, fsync on)"
        } else {
            ""
        }
    );
    println!(
        "{:<20} {:>10} {:>8} {:>12} {:>12} {:>12} {:>12} {:>12}",
        "synchronous_commit",
        "batch size",
        "group",
        "events/s",
        "delivery p50",
        "delivery p99",
        "delivery max",
        "deliveries"
    );
    let groups = if bench.group_appends.is_empty() {
        vec![knife_store_postgres::PgOptions::default().group_appends]
    } else {
        bench.group_appends.clone()
    };
    let runs = bench
        .synchronous_commit
        .iter()
        .flat_map(|sync| groups.iter().map(move |group| (sync, (*group).max(1))));
    for (n, (sync, group)) in runs.enumerate() {
        let db = format!("knife_bench_{}_{n}", std::process::id());
        let url = testing::create_database(&server, &db, &[("synchronous_commit", sync.as_str())])
            .await
            .map_err(|e| anyhow::anyhow!(e))?;
        let options = knife_store_postgres::PgOptions {
            group_appends: group,
            ..knife_store_postgres::PgOptions::default()
        };
        let row = measure(&url, options, writers, per_writer, batch).await;
        if let Err(e) = testing::drop_database(&server, &db).await {
            eprintln!("warning: {e}");
        }
        let row = row?;
        let mut lat = row.delivery_us;
        lat.sort_unstable();
        let ms = |us: u64| format!("{:.1} ms", us as f64 / 1000.0);
        println!(
            "{:<20} {:>10} {:>8} {:>12.0} {:>12} {:>12} {:>12} {:>12}",
            sync,
            batch,
            group,
            row.events as f64 / row.elapsed.as_secs_f64().max(1e-9),
            ms(super::quantile(&lat, 0.5)),
            ms(super::quantile(&lat, 0.99)),
            ms(lat.last().copied().unwrap_or(0)),
            lat.len()
        );
    }
    Ok(())
}

/// Three nodes on `url`: subscribers on each, then every appender at once.
async fn measure(
    url: &str,
    options: knife_store_postgres::PgOptions,
    writers: usize,
    batches: usize,
    batch: usize,
) -> anyhow::Result<Row> {
    let mut nodes = Vec::new();
    for _ in 0..NODES {
        nodes.push(
            knife_store_postgres::open_with(url, options)
                .await
                .context("opening a bench node")?,
        );
    }
    // Warm up each node's connections (prepared statements), outside the figures.
    for (i, node) in nodes.iter().enumerate() {
        for w in 0..writers {
            node.write(batch_of(i, w, 0, batch)).await?;
        }
    }
    let start_seq = nodes[0].latest_sequence(None).await?;
    let total = NODES * writers * batches * batch;
    // Subscribers: every node follows the log from here, noting when each event came.
    let mut subscribers = Vec::new();
    for node in &nodes {
        let mut stream = node.stream(StreamFilter::after(start_seq));
        subscribers.push(tokio::spawn(async move {
            let mut seen: Vec<(u64, Instant)> = Vec::with_capacity(total);
            while seen.len() < total {
                match tokio::time::timeout(Duration::from_secs(60), stream.next()).await {
                    Ok(Some(Ok(ev))) => seen.push((ev.sequence, Instant::now())),
                    _ => break,
                }
            }
            seen
        }));
    }
    let begin = Instant::now();
    let mut appenders = Vec::new();
    for (i, node) in nodes.iter().enumerate() {
        for w in 0..writers {
            let node: Store = node.clone();
            appenders.push(tokio::spawn(async move {
                let mut committed: Vec<(u64, u64, Instant)> = Vec::with_capacity(batches);
                for b in 1..=batches {
                    let stored = node.write(batch_of(i, w, b, batch)).await?;
                    let at = Instant::now();
                    if let (Some(first), Some(last)) = (stored.first(), stored.last()) {
                        committed.push((first.sequence, last.sequence, at));
                    }
                }
                anyhow::Ok((i, committed))
            }));
        }
    }
    // Sequence -> (writing node, when its append returned).
    let mut commits: HashMap<u64, (usize, Instant)> = HashMap::with_capacity(total);
    for appender in appenders {
        let (node, committed) = appender.await??;
        for (first, last, at) in committed {
            for seq in first..=last {
                commits.insert(seq, (node, at));
            }
        }
    }
    let elapsed = begin.elapsed();
    let commits = Arc::new(commits);
    let mut delivery_us = Vec::with_capacity(total * (NODES - 1));
    for (reader, subscriber) in subscribers.into_iter().enumerate() {
        let seen = subscriber.await?;
        anyhow::ensure!(
            seen.len() == total,
            "node {reader} saw {} of {total} events within 60 s",
            seen.len()
        );
        for (seq, at) in seen {
            if let Some((writer, committed)) = commits.get(&seq)
                && *writer != reader
            {
                delivery_us.push(u64::try_from(
                    at.saturating_duration_since(*committed).as_micros(),
                )?);
            }
        }
    }
    Ok(Row {
        events: total,
        elapsed,
        delivery_us,
    })
}

/// Batch `b` of appender `w` of node `node`: streaming snapshots of 64 items of the
/// appender's own thread.
fn batch_of(node: usize, w: usize, b: usize, size: usize) -> Vec<DomainEvent> {
    let now = chrono::Utc::now();
    let thread_id = ThreadId::from(format!("thread:bench:{node}:{w}").as_str());
    let run_id = RunId::for_thread(&thread_id, 1);
    (0..size)
        .map(|k| {
            let n = (b * size + k) as u64;
            // An item keeps its ordinal across its snapshots, as a streamed item does.
            let item = TurnItem {
                id: TurnItemId::from(format!("item:bench:{node}:{w}:{}", n % 64)),
                thread_id: thread_id.clone(),
                run_id: Some(run_id.clone()),
                provider_turn_id: None,
                ordinal: n % 64,
                status: TurnItemStatus::Running,
                started_at: Some(now),
                completed_at: None,
                updated_at: now,
                kind: TurnItemKind::AssistantMessage {
                    text: "lorem ipsum dolor sit amet ".repeat(4),
                    streaming: true,
                },
            };
            DomainEvent::new(now, EventBody::TurnItemUpdated(item))
        })
        .collect()
}
