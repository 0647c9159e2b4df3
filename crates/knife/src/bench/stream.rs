//! `knife bench stream`: N threads stream K deltas each from the mock LLM through
//! the real server; a WebSocket client measures each delta's added latency from
//! the mock's write (time marker in the text) to the client's receipt (the first
//! message carrying it: a live delta, LIVE-01, or a snapshot), and the bytes per turn
//! that were sent to the client and stored as event payloads (LIVE-03), with the
//! process's disk writes (`/proc/self/io` `write_bytes`: WAL, checkpoints, all files)
//! and the SQLite WAL bytes the turn appended ([`WalMeter`]).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use anyhow::Context;
use futures::{SinkExt, StreamExt};
use knife_mock_llm::{MockLlm, MockLlmConfig, parse_write_times};
use knife_protocol::*;
use tokio_tungstenite::tungstenite::Message;

use crate::app::InProcessServer;
use crate::config::Config;

use super::quantile;

/// Bytes this process caused to be written to storage so far (`write_bytes` of
/// `/proc/self/io`; 0 where it cannot be read).
fn disk_write_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/io")
        .ok()
        .and_then(|io| {
            io.lines()
                .find_map(|l| l.strip_prefix("write_bytes:"))
                .and_then(|v| v.trim().parse().ok())
        })
        .unwrap_or(0)
}

fn unix_micros() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}

/// Counts the bytes SQLite appends to the WAL of a store file while it runs: a
/// read transaction pinned on the file keeps the WAL from being restarted (so no
/// frame is overwritten), and a passive checkpoint's answer gives the WAL's frame
/// count (`log`) before and after. Bytes = frames × (page size + 24-byte frame header).
struct WalMeter {
    pin: rusqlite::Connection,
    probe: rusqlite::Connection,
    frames_before: i64,
    frame_bytes: i64,
}

impl WalMeter {
    fn start(db: &std::path::Path) -> anyhow::Result<Self> {
        let pin = rusqlite::Connection::open(db)?;
        pin.execute_batch("BEGIN")?;
        let _: i64 = pin.query_row("SELECT count(*) FROM events", [], |r| r.get(0))?;
        let probe = rusqlite::Connection::open(db)?;
        probe.busy_timeout(Duration::from_secs(5))?;
        let page: i64 = probe.query_row("PRAGMA page_size", [], |r| r.get(0))?;
        let mut meter = Self {
            pin,
            probe,
            frames_before: 0,
            frame_bytes: page + 24,
        };
        meter.frames_before = meter.frames()?;
        Ok(meter)
    }

    fn frames(&self) -> anyhow::Result<i64> {
        Ok(self
            .probe
            .query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| r.get(1))?)
    }

    /// WAL bytes appended since [`Self::start`]; ends the pin.
    fn finish(self) -> anyhow::Result<u64> {
        let frames = self.frames()? - self.frames_before;
        self.pin.execute_batch("COMMIT")?;
        Ok(u64::try_from(frames.max(0) * self.frame_bytes).unwrap_or(0))
    }
}

/// What one run of the stream bench measured (totals over its threads).
pub struct Measured {
    pub threads: usize,
    pub latencies: Vec<u64>,
    pub elapsed: f64,
    pub answer_bytes: usize,
    pub delta_messages: usize,
    pub sent_bytes: usize,
    pub stored_bytes: usize,
    pub disk_bytes: u64,
    pub wal_bytes: u64,
    pub failed: usize,
}

impl Measured {
    /// `n` per turn (per thread).
    pub fn per_turn(&self, n: u64) -> f64 {
        n as f64 / self.threads.max(1) as f64
    }
}

pub async fn run(threads: usize, deltas: usize) -> anyhow::Result<()> {
    let m = measure(threads, deltas, Duration::ZERO).await?;
    let Measured {
        latencies, elapsed, ..
    } = &m;
    let elapsed = *elapsed;
    let per_turn = |n: usize| m.per_turn(n as u64);
    println!(
        "knife bench stream: {threads} threads × {deltas} deltas (mock → server → store → WebSocket)"
    );
    println!("{:<28} {:>12}", "deltas received", latencies.len());
    println!(
        "{:<28} {:>12.0}",
        "deltas/s",
        latencies.len() as f64 / elapsed
    );
    println!(
        "{:<28} {:>12.2}",
        "latency p50 (ms)",
        quantile(latencies, 0.50) as f64 / 1000.0
    );
    println!(
        "{:<28} {:>12.2}",
        "latency p99 (ms)",
        quantile(latencies, 0.99) as f64 / 1000.0
    );
    println!("{:<28} {:>12.2}", "wall time (s)", elapsed);
    println!(
        "{:<28} {:>12.0}",
        "answer text bytes/turn",
        per_turn(m.answer_bytes)
    );
    println!(
        "{:<28} {:>12.0}",
        "delta messages/turn",
        per_turn(m.delta_messages)
    );
    println!(
        "{:<28} {:>12.0}",
        "bytes sent/turn (WS)",
        per_turn(m.sent_bytes)
    );
    println!(
        "{:<28} {:>12.0}",
        "payload bytes stored/turn",
        per_turn(m.stored_bytes)
    );
    println!(
        "{:<28} {:>12.0}",
        "WAL bytes written/turn",
        m.per_turn(m.wal_bytes)
    );
    println!(
        "{:<28} {:>12.0}",
        "disk bytes written/turn",
        m.per_turn(m.disk_bytes)
    );
    if m.failed > 0 {
        println!("{} run(s) did not complete", m.failed);
    }
    Ok(())
}

/// `knife bench stream-bytes` (LIVE-03): one turn each at `sizes` deltas and each of
/// `gaps_ms` between the mock's deltas; prints the answer's text, bytes sent to a WebSocket subscriber against the cap (3 × text +
/// 300 bytes per delta), event payload bytes stored, WAL bytes and disk bytes.
pub async fn run_bytes(sizes: &[usize], gaps_ms: &[u64]) -> anyhow::Result<()> {
    println!("knife bench stream-bytes: one turn per size (mock → server → store → WebSocket)");
    println!(
        "{:>6} {:>8} {:>10} {:>8} {:>12} {:>12} {:>6} {:>12} {:>8} {:>12} {:>12}",
        "gap ms",
        "deltas",
        "text B",
        "msgs",
        "sent B",
        "cap B",
        "ok",
        "stored B",
        "stored/x",
        "WAL B",
        "disk B"
    );
    for &gap in gaps_ms {
        for &k in sizes {
            let m = measure(1, k, Duration::from_millis(gap)).await?;
            let text = m.answer_bytes as u64;
            let cap = 3 * text + 300 * k as u64;
            let sent = m.sent_bytes as u64;
            println!(
                "{:>6} {:>8} {:>10} {:>8} {:>12} {:>12} {:>6} {:>12} {:>8.2} {:>12} {:>12}",
                gap,
                k,
                text,
                m.delta_messages,
                sent,
                cap,
                if sent <= cap { "yes" } else { "NO" },
                m.stored_bytes,
                m.stored_bytes as f64 / text.max(1) as f64,
                m.wal_bytes,
                m.disk_bytes
            );
            if m.failed > 0 {
                println!("{} run(s) did not complete", m.failed);
            }
        }
    }
    Ok(())
}

/// Runs `threads` turns of `deltas` deltas each (`gap` between the mock's deltas) and
/// measures them.
pub async fn measure(threads: usize, deltas: usize, gap: Duration) -> anyhow::Result<Measured> {
    let tmp = tempfile::tempdir()?;
    let mock = MockLlm::start(MockLlmConfig::bench(deltas).with_chunk_delay(gap)).await?;
    let config = Config::single_instance("bench", mock.base_url(), "mock-model");
    let server = InProcessServer::start(&config, &tmp.path().join("data")).await?;
    let addr = server.addr;
    let client = server.client()?;
    let root = tmp.path().join("project");
    std::fs::create_dir_all(&root)?;
    let project: Project = client
        .post(
            "/api/projects",
            &CreateProjectRequest {
                root: root.display().to_string(),
                name: None,
            },
        )
        .await?;
    let mut thread_ids = Vec::new();
    for i in 0..threads {
        let req = CreateThreadRequest {
            project_id: project.id.clone(),
            title: Some(format!("bench {i}")),
            provider_instance_id: None,
            model: None,
            parent_thread_id: None,
            worktree: None,
        };
        let t: Thread = client.post("/api/threads", &req).await?;
        thread_ids.push(t.id);
    }
    let (mut ws, _) = tokio_tungstenite::connect_async(format!("ws://{addr}/api/ws"))
        .await
        .context("WebSocket connect")?;
    for t in &thread_ids {
        let sub = serde_json::to_string(&WsClientMessage::Subscribe {
            thread_id: t.clone(),
            after: 0,
        })?;
        ws.send(Message::Text(sub.into())).await?;
    }
    let written_before = disk_write_bytes();
    let wal = WalMeter::start(&tmp.path().join("data").join(crate::app::DB_FILE))?;
    let start = Instant::now();
    for t in &thread_ids {
        let _: PostMessageResponse = client
            .post(
                &format!("/api/threads/{t}/messages"),
                &PostMessageRequest {
                    text: "go".into(),
                    model: None,
                    mode: MessageMode::Queue,
                },
            )
            .await?;
    }
    let mut seen: HashMap<TurnItemId, usize> = HashMap::new();
    // Continuing deltas name their item by the connection's short `ref`.
    let mut items = DeltaItems::default();
    let mut latencies = Vec::with_capacity(threads * deltas);
    let mut finished = 0;
    let mut failed = 0;
    let mut sent_bytes = 0usize;
    let mut delta_messages = 0usize;
    // 300 s plus twice the mock's own pacing (a 50 ms × 10,000-delta turn streams for
    // 500 s).
    let pacing = gap.saturating_mul(u32::try_from(deltas).unwrap_or(u32::MAX));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(300) + pacing * 2;
    while finished < threads {
        let msg = tokio::time::timeout_at(deadline, ws.next())
            .await
            .context("bench timed out")?;
        let Some(msg) = msg else {
            anyhow::bail!("the WebSocket closed early")
        };
        let Message::Text(text) = msg? else { continue };
        let received = unix_micros();
        sent_bytes += text.len();
        let event = match serde_json::from_str::<WsServerMessage>(&text)? {
            WsServerMessage::Event { event } => event,
            WsServerMessage::Delta(d) if d.field == DeltaField::Text => {
                let d = items.resolve(d)?;
                delta_messages += 1;
                // Deltas continue the text: each marker is new the first time.
                let times = parse_write_times(&d.text);
                *seen.entry(d.item_id.clone()).or_default() += times.len();
                for t in &times {
                    latencies.push(received.saturating_sub(*t));
                }
                continue;
            }
            _ => continue,
        };
        match &event.event.body {
            EventBody::TurnItemUpdated(TurnItem {
                id,
                kind: TurnItemKind::AssistantMessage { text, .. },
                ..
            }) => {
                let times = parse_write_times(text);
                let before = seen.get(id).copied().unwrap_or(0);
                for t in times.iter().skip(before) {
                    latencies.push(received.saturating_sub(*t));
                }
                seen.insert(id.clone(), before.max(times.len()));
            }
            EventBody::RunUpdated(run) if run.status.is_terminal() => {
                finished += 1;
                if run.status != RunStatus::Completed {
                    failed += 1;
                }
            }
            _ => {}
        }
    }
    let elapsed = start.elapsed().as_secs_f64();
    latencies.sort_unstable();
    let written = disk_write_bytes().saturating_sub(written_before);
    // Event payload bytes stored for the threads (their whole log), and the answers' text.
    let mut stored_bytes = 0usize;
    let mut answer_bytes = 0usize;
    for t in &thread_ids {
        let mut filter = knife_store::StreamFilter {
            thread_id: Some(t.clone()),
            after: 0,
            event_type: None,
        };
        loop {
            let page = server.store.read_events(&filter, 1000).await?;
            let Some(last) = page.last() else { break };
            filter.after = last.sequence;
            for ev in &page {
                stored_bytes += serde_json::to_string(&ev.event.body)?.len();
            }
        }
        let p = server
            .store
            .thread_projection(t)
            .await?
            .context("bench thread vanished")?;
        answer_bytes += p
            .turn_items
            .iter()
            .map(|i| match &i.kind {
                TurnItemKind::AssistantMessage { text, .. } => text.len(),
                _ => 0,
            })
            .sum::<usize>();
    }
    let wal_bytes = wal.finish()?;
    server.stop().await?;
    mock.shutdown().await;
    Ok(Measured {
        threads,
        latencies,
        elapsed,
        answer_bytes,
        delta_messages,
        sent_bytes,
        stored_bytes,
        disk_bytes: written,
        wal_bytes,
        failed,
    })
}
