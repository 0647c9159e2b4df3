//! `knife bench subscribers` (LIVE-06): a `knife serve` child process on a data dir whose
//! thread holds one big assistant message; W WebSocket and S SSE clients replay it at
//! once. Prints the server process's RSS before, at its peak, once all caught up, and
//! after every client closed (from `/proc/<pid>/status`).

use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use futures::{SinkExt, StreamExt};
use knife_protocol::*;
use knife_runtime::commands::{create_project, create_thread};
use knife_runtime::{SharedClock, SystemClock};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::watch;
use tokio_tungstenite::tungstenite::Message;

/// Clients in their connect / handshake at once.
const CONNECTING: usize = 32;

/// `VmRSS` / `VmHWM` of process `pid` in MiB (0 when unknown).
fn proc_mib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<u64>().ok())
        })
        .map_or(0, |kb| kb / 1024)
}

/// Seeds `data` with a project at `root` and a thread holding one settled assistant
/// message of `bytes` bytes; returns the thread and its last sequence.
async fn seed(
    data: &std::path::Path,
    root: &std::path::Path,
    bytes: usize,
) -> anyhow::Result<(ThreadId, u64)> {
    std::fs::create_dir_all(data)?;
    let store = knife_store_sqlite::open(data.join(crate::app::DB_FILE)).await?;
    let clock: SharedClock = Arc::new(SystemClock);
    let (project, _) = create_project(
        &store,
        clock.as_ref(),
        CreateProjectRequest {
            root: root.display().to_string(),
            name: None,
        },
    )
    .await?;
    let instance = ProviderInstanceId::from("bench");
    let thread = create_thread(
        &store,
        clock.as_ref(),
        CreateThreadRequest {
            project_id: project.id,
            title: Some("bench subscribers".into()),
            provider_instance_id: None,
            model: None,
            parent_thread_id: None,
            worktree: None,
        },
        &instance,
        std::slice::from_ref(&instance),
    )
    .await?;
    let run = RunId::from(format!("run:{}:1", thread.id).as_str());
    let turn = ProviderTurnId::for_run(&run, 1);
    let now = clock.now();
    // Words and line breaks, as an answer looks (JSON escapes the line breaks).
    let text: String = "lorem ipsum dolor sit amet\n".repeat(bytes / 27 + 1)[..bytes].to_owned();
    let item = TurnItem {
        id: TurnItemId::of_turn(&turn, 1),
        thread_id: thread.id.clone(),
        run_id: Some(run),
        provider_turn_id: Some(turn),
        ordinal: TurnItem::ordinal_in_run(1, 1),
        status: TurnItemStatus::Completed,
        started_at: Some(now),
        completed_at: Some(now),
        updated_at: now,
        kind: TurnItemKind::AssistantMessage {
            text,
            streaming: false,
        },
    };
    store
        .write(vec![DomainEvent::new(
            now,
            EventBody::TurnItemUpdated(item),
        )])
        .await?;
    let high = store.latest_sequence(Some(&thread.id)).await?;
    Ok((thread.id, high))
}

/// The sequence a frame starts with: `{"type":"event","event":{"sequence":N` (WS).
fn ws_sequence(text: &str) -> Option<u64> {
    let head = text.get(..text.len().min(80))?;
    let rest = head.split("\"sequence\":").nth(1)?;
    rest.split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

pub async fn run(ws: usize, sse: usize, message_bytes: usize) -> anyhow::Result<()> {
    let tmp = tempfile::tempdir()?;
    let root = tmp.path().join("project");
    std::fs::create_dir_all(&root)?;
    let data = tmp.path().join("data");
    let (thread, high) = seed(&data, &root, message_bytes).await?;
    let config = tmp.path().join("knife.toml");
    std::fs::write(
        &config,
        "default_provider = \"bench\"\n\n[providers.bench]\ndriver = \"openai-chat\"\n\
         base_url = \"http://127.0.0.1:9/v1\"\nmodel = \"m\"\n",
    )?;
    let mut child = tokio::process::Command::new(std::env::current_exe()?)
        .env("XDG_CONFIG_HOME", tmp.path())
        .current_dir(tmp.path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .arg("serve")
        .arg("--config")
        .arg(&config)
        .args(["--listen", "127.0.0.1:0", "--data-dir"])
        .arg(&data)
        .spawn()
        .context("starting knife serve")?;
    let pid = child.id().context("the server has no pid")?;
    let stdout = child.stdout.take().context("no stdout")?;
    let mut lines = BufReader::new(stdout).lines();
    let addr = loop {
        let line = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
            .await
            .context("knife serve did not start")??
            .context("knife serve exited")?;
        if let Some(rest) = line.split("listening on http://").nth(1) {
            break rest
                .split_whitespace()
                .next()
                .unwrap_or_default()
                .to_owned();
        }
    };
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    tokio::time::sleep(Duration::from_millis(500)).await;
    let baseline = proc_mib(pid, "VmRSS");
    println!(
        "knife bench subscribers: {ws} WebSocket + {sse} SSE clients, one {:.2} MB message \
         (server pid {pid})",
        message_bytes as f64 / 1e6
    );

    let peak = Arc::new(AtomicU64::new(baseline));
    let (stop_tx, stop_rx) = watch::channel(false);
    let sampler = {
        let peak = Arc::clone(&peak);
        let mut stop = stop_rx.clone();
        tokio::spawn(async move {
            loop {
                peak.fetch_max(proc_mib(pid, "VmRSS"), Ordering::Relaxed);
                tokio::select! {
                    () = tokio::time::sleep(Duration::from_millis(20)) => {}
                    _ = stop.changed() => return,
                }
            }
        })
    };
    let (release_tx, release_rx) = watch::channel(false);
    let received = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let mut clients = Vec::new();
    // Clients connect a few dozen at a time (as a crowd of browsers would), then all
    // replay at once.
    let connecting = Arc::new(tokio::sync::Semaphore::new(CONNECTING));
    for _ in 0..ws {
        let (addr, thread, received) = (addr.clone(), thread.clone(), Arc::clone(&received));
        let done = Arc::clone(&done);
        let connecting = Arc::clone(&connecting);
        let mut release = release_rx.clone();
        clients.push(tokio::spawn(async move {
            let permit = connecting.acquire().await?;
            let (mut socket, _) = tokio_tungstenite::connect_async(format!("ws://{addr}/api/ws"))
                .await
                .context("WebSocket connect")?;
            drop(permit);
            let sub = serde_json::to_string(&WsClientMessage::Subscribe {
                thread_id: thread,
                after: 0,
            })?;
            socket.send(Message::Text(sub.into())).await?;
            let mut complete = false;
            while let Some(msg) = socket.next().await {
                if let Message::Text(t) = msg? {
                    received.fetch_add(t.len() as u64, Ordering::Relaxed);
                    if ws_sequence(&t) == Some(high) {
                        complete = true;
                        break;
                    }
                    if t.starts_with(r#"{"type":"error""#) {
                        anyhow::bail!("{t}");
                    }
                }
            }
            anyhow::ensure!(complete, "the WebSocket closed before the last event");
            let at = started.elapsed();
            done.fetch_add(1, Ordering::Relaxed);
            let _ = release.wait_for(|r| *r).await;
            let _ = socket.close(None).await;
            anyhow::Ok(at)
        }));
    }
    for _ in 0..sse {
        let url = format!("http://{addr}/api/threads/{thread}/events?after=0");
        let received = Arc::clone(&received);
        let done = Arc::clone(&done);
        let connecting = Arc::clone(&connecting);
        let mut release = release_rx.clone();
        clients.push(tokio::spawn(async move {
            let permit = connecting.acquire().await?;
            let resp = reqwest::get(url).await?.error_for_status()?;
            drop(permit);
            let mut body = resp.bytes_stream();
            let needle = format!("id: {high}\n");
            let mut tail = String::new();
            let mut in_last = false;
            let mut complete = false;
            while let Some(chunk) = body.next().await {
                let chunk = chunk?;
                received.fetch_add(chunk.len() as u64, Ordering::Relaxed);
                if in_last {
                    // The last event's frame ends with an empty line.
                    if chunk.ends_with(b"\n\n") {
                        complete = true;
                        break;
                    }
                    continue;
                }
                // Only the frame heads matter: look for the last event's `id:` line.
                let head = String::from_utf8_lossy(&chunk[..chunk.len().min(256)]);
                tail.push_str(&head);
                if tail.contains(&needle) {
                    in_last = true;
                    if chunk.ends_with(b"\n\n") && chunk.len() > message_bytes {
                        complete = true;
                        break;
                    }
                    continue;
                }
                let keep = tail.len().saturating_sub(32);
                tail = tail.split_off(tail.floor_char_boundary(keep));
            }
            anyhow::ensure!(complete, "the SSE stream ended before the last event");
            let at = started.elapsed();
            done.fetch_add(1, Ordering::Relaxed);
            let _ = release.wait_for(|r| *r).await;
            drop(body);
            anyhow::Ok(at)
        }));
    }
    // Every client has the whole message (or failed): how long, and the RSS now.
    let clients_n = clients.len();
    while done.load(Ordering::Relaxed) < clients_n
        && clients.iter().any(|c| !c.is_finished())
        && started.elapsed() < Duration::from_secs(300)
    {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let all_in = started.elapsed();
    let rss_caught_up = proc_mib(pid, "VmRSS");
    release_tx.send_replace(true);
    let mut caught_up = Vec::new();
    let mut failed = 0;
    let mut errors = std::collections::BTreeSet::new();
    for c in clients {
        match c.await {
            Ok(Ok(at)) => caught_up.push(at),
            Ok(Err(e)) => {
                failed += 1;
                errors.insert(format!("{e:#}"));
            }
            Err(e) => {
                failed += 1;
                errors.insert(e.to_string());
            }
        }
    }
    for e in errors.iter().take(3) {
        println!("client error: {e:.300}");
    }
    let peak_during = peak.load(Ordering::Relaxed);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let after = proc_mib(pid, "VmRSS");
    stop_tx.send_replace(true);
    let _ = sampler.await;
    let hwm = proc_mib(pid, "VmHWM");
    caught_up.sort();
    let last = caught_up.last().copied().unwrap_or(all_in);
    println!(
        "{:<48} {:>10}",
        "clients caught up (of which failed)",
        format!("{} ({failed})", caught_up.len())
    );
    println!(
        "{:<48} {:>10.3}",
        "last client had the whole message, s",
        last.as_secs_f64()
    );
    println!(
        "{:<48} {:>10.1}",
        "bytes received by all clients, MB",
        received.load(Ordering::Relaxed) as f64 / 1e6
    );
    println!("{:<48} {:>10}", "server RSS before, MiB", baseline);
    println!(
        "{:<48} {:>10}",
        "server RSS peak while replaying, MiB", peak_during
    );
    println!(
        "{:<48} {:>10}",
        "server RSS once all caught up, MiB", rss_caught_up
    );
    println!(
        "{:<48} {:>10}",
        "server RSS 3 s after all closed, MiB", after
    );
    println!("{:<48} {:>10}", "server VmHWM, MiB", hwm);
    child.start_kill()?;
    let _ = child.wait().await;
    Ok(())
}
