//! `knife bench`: measured numbers for the store, live streaming, subscribers, the restart sweep and checkpoints.
//! Prints tables; nothing here asserts a speed (benchmarks measure, tests prove).

mod checkpoint;
mod cluster;
mod drain_adapter;
mod processor;
mod restart;
mod search;
mod store;
mod stream;
mod subscribers;

use std::process::ExitCode;

use clap::Subcommand;

/// `knife bench …`.
#[derive(Subcommand)]
pub enum BenchCommand {
    /// Events/s appended in batches of 1, 10 and 100; projection rebuild rate.
    Store {
        /// Events appended per batch size.
        #[arg(long, default_value_t = 20_000)]
        events: usize,
    },
    /// The built-in agent's stream processor on a synthetic stream: LlmEvents/s
    /// alone and with every event persisted (the 250 ms / 4 KiB flush policy).
    Processor {
        /// Text deltas in the burst stream.
        #[arg(long, default_value_t = 20_000)]
        deltas: usize,
    },
    /// N concurrent threads against mock-llm streaming K deltas each: added latency
    /// per delta (mock write → WebSocket receipt, p50/p99) and deltas/s.
    Stream {
        /// Concurrent threads.
        #[arg(long, default_value_t = 8)]
        threads: usize,
        /// Text deltas per stream.
        #[arg(long, default_value_t = 500)]
        deltas: usize,
    },
    /// LIVE-03: one turn at each of 200, 1,000 and 10,000 deltas (or `--deltas`):
    /// bytes sent to a WebSocket subscriber against the cap (3 × the answer's text +
    /// 300 bytes per delta), event payload bytes stored, SQLite WAL bytes appended and
    /// the process's disk writes, per turn.
    StreamBytes {
        /// Text deltas per turn, one turn each.
        #[arg(long, value_delimiter = ',', default_values_t = [200, 1_000, 10_000])]
        deltas: Vec<usize>,
        /// Milliseconds between the mock's deltas (0: as fast as the socket takes them;
        /// 5: the peer bench's paced stream, one delta per frame).
        #[arg(long, value_delimiter = ',', default_values_t = [0])]
        gap_ms: Vec<u64>,
    },
    /// Checkpoints (SPEC.md CHG-06): a generated tree of N files (plus an ignored
    /// `node_modules/`), K files changed per round: checkpoint and diff times, and the
    /// objects each checkpoint stored. Target: ≤ 300 ms per checkpoint.
    Checkpoint {
        /// Files in the generated tree.
        #[arg(long, default_value_t = 10_000)]
        files: usize,
        /// Files changed before each checkpoint.
        #[arg(long, default_value_t = 10)]
        changed: usize,
        /// Checkpoints measured.
        #[arg(long, default_value_t = 10)]
        rounds: usize,
    },
    /// LIVE-06: a `knife serve` child whose thread holds one big message, and W
    /// WebSocket + S SSE clients replaying it at once: the server's RSS before, at
    /// peak, once all caught up and after every client closed.
    Subscribers {
        /// WebSocket clients.
        #[arg(long, default_value_t = 500)]
        ws: usize,
        /// SSE clients.
        #[arg(long, default_value_t = 500)]
        sse: usize,
        /// Bytes of the thread's assistant message.
        #[arg(long, default_value_t = 2_000_000)]
        message_bytes: usize,
    },
    /// Full-text search (SPEC.md TURN-08): N completed turn items over many threads
    /// in a temp SQLite file, then timed searches: p50/p99 (target p99 <= 50 ms).
    Search {
        /// Completed turn items indexed.
        #[arg(long, default_value_t = 100_000)]
        items: usize,
        /// Searches timed.
        #[arg(long, default_value_t = 200)]
        queries: usize,
    },
    /// SCALE-10: three nodes on one PostgreSQL database append in batches at once:
    /// events/s of the three together, and cross-node delivery p50/p99 (from the
    /// append returning on one node to the event leaving an `after=N` stream on
    /// another). Targets: at least 20,000 events/s, p99 at most 50 ms. Without
    /// `--database` it starts a throwaway cluster (fsync on) from Debian's binaries.
    Cluster {
        /// A PostgreSQL server URL (`postgres://user:pw@host:port/db`); the bench creates
        /// (and drops) its own databases there.
        #[arg(long)]
        database: Option<String>,
        /// Events appended by the three nodes together.
        #[arg(long, default_value_t = 60_000)]
        events: usize,
        /// Events per append.
        #[arg(long, default_value_t = 100)]
        batch: usize,
        /// Concurrent appenders per node.
        #[arg(long, default_value_t = 2)]
        writers: usize,
        /// `synchronous_commit` settings to measure (one row each).
        #[arg(long, value_delimiter = ',', default_value = "on,off")]
        synchronous_commit: Vec<String>,
        /// Group-commit sizes to measure (appends of one node per transaction at most,
        /// `PgOptions::group_appends`; 1 = each append its own transaction): one row
        /// per size and `synchronous_commit` setting.
        #[arg(long, value_delimiter = ',', default_value = "64")]
        group_appends: Vec<usize>,
    },
    /// N claimed threads and a restart sweep over no-op drains: time from boot to the
    /// first drain of the last thread, and memory.
    Restart {
        /// Claimed threads.
        #[arg(long, default_value_t = 10_000)]
        threads: usize,
    },
}

pub async fn bench(cmd: BenchCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        BenchCommand::Store { events } => store::run(events).await?,
        BenchCommand::Processor { deltas } => processor::run(deltas).await?,
        BenchCommand::Stream { threads, deltas } => stream::run(threads, deltas).await?,
        BenchCommand::StreamBytes { deltas, gap_ms } => stream::run_bytes(&deltas, &gap_ms).await?,
        BenchCommand::Subscribers {
            ws,
            sse,
            message_bytes,
        } => subscribers::run(ws, sse, message_bytes).await?,
        BenchCommand::Restart { threads } => restart::run(threads).await?,
        BenchCommand::Cluster {
            database,
            events,
            batch,
            writers,
            synchronous_commit,
            group_appends,
        } => {
            cluster::run(cluster::ClusterBench {
                database,
                events,
                batch,
                group_appends,
                writers,
                synchronous_commit,
            })
            .await?
        }
        BenchCommand::Search { items, queries } => search::run(items, queries).await?,
        BenchCommand::Checkpoint {
            files,
            changed,
            rounds,
        } => checkpoint::run(files, changed, rounds).await?,
    }
    Ok(ExitCode::SUCCESS)
}

/// The `q`-quantile (0..=1) of sorted `values` (nearest rank); 0 when empty.
pub fn quantile(sorted: &[u64], q: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

#[cfg(test)]
mod tests {
    use super::quantile;

    #[test]
    fn quantiles_use_nearest_rank() {
        let v: Vec<u64> = (1..=100).collect();
        assert_eq!(quantile(&v, 0.5), 50);
        assert_eq!(quantile(&v, 0.99), 99);
        assert_eq!(quantile(&v, 1.0), 100);
        assert_eq!(quantile(&[], 0.5), 0);
    }
}
