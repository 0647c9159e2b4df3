//! `knife bench processor`: the built-in agent's stream processor on a synthetic
//! model stream (no HTTP): LlmEvents processed per second, alone and with every
//! adapter event written to a real SQLite store the way the execution pump does
//! (ready events in one transaction, ≤ 256, consecutive snapshots coalesced), so
//! the difference is the per-event persistence cost of the 250 ms / 4 KiB policy.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::{FutureExt, StreamExt};
use knife_agent::{BuiltinAgentAdapter, BuiltinAgentConfig};
use knife_llm::{FinishReason, LlmClient, LlmError, LlmEvent, LlmRequest, LlmStream, Usage};
use knife_protocol::*;
use knife_runtime::ingest::{push_coalesced, to_domain};
use knife_runtime::{Clock, OpenSessionInput, ProviderAdapter, StartTurnInput, SystemClock};
use knife_store::Store;

/// Most events written in one transaction (as the execution pump).
const MAX_BATCH: usize = 256;
/// Text of one synthetic delta (8 bytes, about two tokens).
const DELTA: &str = "lorem ip";

/// A model that streams one text part of `deltas` deltas, `gap` apart.
struct Synthetic {
    deltas: usize,
    gap: Option<Duration>,
}

#[async_trait::async_trait]
impl LlmClient for Synthetic {
    async fn stream(&self, _request: LlmRequest) -> Result<LlmStream, LlmError> {
        let id = "text-0".to_owned();
        let mut events = Vec::with_capacity(self.deltas + 3);
        events.push(LlmEvent::TextStart { id: id.clone() });
        for _ in 0..self.deltas {
            events.push(LlmEvent::TextDelta {
                id: id.clone(),
                text: DELTA.to_owned(),
            });
        }
        events.push(LlmEvent::TextEnd { id });
        events.push(LlmEvent::StepFinish {
            reason: FinishReason::Stop,
            raw_reason: None,
            usage: Some(Usage::default()),
            response_id: None,
            model: None,
        });
        let gap = self.gap;
        Ok(futures::stream::iter(events)
            .then(move |e| async move {
                if let Some(gap) = gap {
                    tokio::time::sleep(gap).await;
                }
                Ok(e)
            })
            .boxed())
    }
}

/// What one measured turn did.
struct Measured {
    llm_events: usize,
    adapter_events: usize,
    transactions: usize,
    stored: usize,
    elapsed: Duration,
}

/// Runs one turn of `deltas` deltas; with `store`, persists like the pump.
async fn measure(
    deltas: usize,
    gap: Option<Duration>,
    flush: Duration,
    store: Option<&Store>,
    root: &std::path::Path,
) -> anyhow::Result<Measured> {
    let llm = Arc::new(Synthetic { deltas, gap });
    let mut config = BuiltinAgentConfig::new(ProviderInstanceId::from("bench"), "bench", llm);
    config.flush_interval = flush;
    let adapter = BuiltinAgentAdapter::new(config);
    let thread_id = ThreadId::new();
    let session = adapter
        .open(
            OpenSessionInput {
                provider_session_id: ProviderSessionId::from("provider-session:bench"),
                provider_instance_id: ProviderInstanceId::from("bench"),
                thread_id: thread_id.clone(),
                cwd: root.to_path_buf(),
                project_root: None,
                model: None,
                native_thread_id: None,
            },
            knife_runtime::OpenSessionOptions::default(),
        )
        .await?;
    let mut events = session
        .take_events()
        .ok_or_else(|| anyhow::anyhow!("the session's event stream was already taken"))?;
    let run_id = RunId::for_thread(&thread_id, 1);
    let start = Instant::now();
    session
        .start_turn(StartTurnInput {
            provider_turn_id: ProviderTurnId::for_run(&run_id, 1),
            thread_id: thread_id.clone(),
            run_id,
            run_ordinal: 1,
            attempt: 1,
            text: "go".into(),
            history: Vec::new(),
            model: None,
            cwd: None,
            budget: None,
        })
        .await?;
    let clock = SystemClock;
    let (mut adapter_events, mut transactions, mut stored) = (0, 0, 0);
    let mut done = false;
    while !done {
        let Some(first) = events.next().await else {
            anyhow::bail!("the agent's event stream ended before the turn did");
        };
        let mut next = Some(first);
        let mut batch = Vec::new();
        while let Some(event) = next.take() {
            let event = event?;
            adapter_events += 1;
            if matches!(event, AdapterEvent::TurnTerminal { .. }) {
                done = true;
                break;
            }
            if let Some(body) = to_domain(&event) {
                push_coalesced(&mut batch, &thread_id, clock.now(), body);
            }
            if batch.len() >= MAX_BATCH {
                break;
            }
            next = events.next().now_or_never().flatten();
        }
        if let (Some(store), false) = (store, batch.is_empty()) {
            stored += batch.len();
            transactions += 1;
            store.write(batch).await?;
        }
    }
    let elapsed = start.elapsed();
    session.close().await?;
    Ok(Measured {
        llm_events: deltas + 3,
        adapter_events,
        transactions,
        stored,
        elapsed,
    })
}

pub async fn run(deltas: usize) -> anyhow::Result<()> {
    let tmp = tempfile::tempdir()?;
    let root = tmp.path().join("project");
    std::fs::create_dir_all(&root)?;
    let store = knife_store_sqlite::open(tmp.path().join("bench.db")).await?;
    println!(
        "knife bench processor: one text part of {deltas} deltas ({} bytes each) through the built-in agent",
        DELTA.len()
    );
    println!(
        "{:<34} {:>14} {:>10} {:>8} {:>10} {:>12}",
        "scenario", "LlmEvents/s", "snapshots", "writes", "stored", "µs/LlmEvent"
    );
    let flush = Duration::from_millis(50);
    let bare = measure(deltas, None, flush, None, &root).await?;
    let persisted = measure(deltas, None, flush, Some(&store), &root).await?;
    let row = |name: &str, m: &Measured| {
        println!(
            "{name:<34} {:>14.0} {:>10} {:>8} {:>10} {:>12.2}",
            m.llm_events as f64 / m.elapsed.as_secs_f64().max(1e-9),
            m.adapter_events,
            m.transactions,
            m.stored,
            m.elapsed.as_secs_f64() * 1e6 / m.llm_events as f64,
        )
    };
    row("burst, processor only", &bare);
    row("burst, processor + store", &persisted);
    let overhead = persisted.elapsed.saturating_sub(bare.elapsed).as_secs_f64() * 1e6
        / persisted.llm_events as f64;
    println!("persistence overhead per LlmEvent (burst): {overhead:.2} µs");

    // A paced model (a 1 ms sleep before each event; the timer makes it ~2 ms):
    // what the flush window costs in writes. Capped so the bench stays short.
    let paced = deltas.min(2000);
    for flush_ms in [50u64, 250] {
        let m = measure(
            paced,
            Some(Duration::from_millis(1)),
            Duration::from_millis(flush_ms),
            Some(&store),
            &root,
        )
        .await?;
        row(
            &format!("paced 1 ms sleeps, {flush_ms} ms first window"),
            &m,
        );
    }
    println!(
        "snapshots = adapter events emitted (turn, status, item snapshots); writes = store transactions"
    );
    Ok(())
}
