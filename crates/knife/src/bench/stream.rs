//! `knife bench stream`: N threads stream K deltas each from the mock LLM through
//! the real server; a WebSocket client measures each delta's added latency from
//! the mock's write (time marker in the text) to the client's receipt (the first
//! message carrying it: a live delta, LIVE-01, or a snapshot), and the bytes per turn
//! that were sent to the client and stored as event payloads (LIVE-03), with the
//! process's disk writes (`/proc/self/io` `write_bytes`: WAL, checkpoints, all files).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use anyhow::Context;
use futures::{SinkExt, StreamExt};
use knife_protocol::*;
use knife_testkit::mock_llm::{MockLlm, MockLlmConfig, parse_write_times};
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

pub async fn run(threads: usize, deltas: usize) -> anyhow::Result<()> {
    let tmp = tempfile::tempdir()?;
    let mock = MockLlm::start(MockLlmConfig::bench(deltas)).await?;
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
    let mut latencies = Vec::with_capacity(threads * deltas);
    let mut finished = 0;
    let mut failed = 0;
    let mut sent_bytes = 0usize;
    let mut delta_messages = 0usize;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(300);
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
    let per_turn = |n: usize| n as f64 / threads.max(1) as f64;
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
        quantile(&latencies, 0.50) as f64 / 1000.0
    );
    println!(
        "{:<28} {:>12.2}",
        "latency p99 (ms)",
        quantile(&latencies, 0.99) as f64 / 1000.0
    );
    println!("{:<28} {:>12.2}", "wall time (s)", elapsed);
    println!(
        "{:<28} {:>12.0}",
        "answer text bytes/turn",
        per_turn(answer_bytes)
    );
    println!(
        "{:<28} {:>12.0}",
        "delta messages/turn",
        per_turn(delta_messages)
    );
    println!(
        "{:<28} {:>12.0}",
        "bytes sent/turn (WS)",
        per_turn(sent_bytes)
    );
    println!(
        "{:<28} {:>12.0}",
        "payload bytes stored/turn",
        per_turn(stored_bytes)
    );
    println!(
        "{:<28} {:>12.0}",
        "disk bytes written/turn",
        per_turn(usize::try_from(written).unwrap_or(usize::MAX))
    );
    if failed > 0 {
        println!("{failed} run(s) did not complete");
    }
    server.stop().await?;
    mock.shutdown().await;
    Ok(())
}
