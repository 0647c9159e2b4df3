//! The cluster's streams (SPEC.md SCALE-02, SCALE-03): live deltas of a run on one node
//! reach a subscriber on another, and three nodes streaming at once give every subscriber
//! the log's own sequence.

use super::*;

/// SCALE-03 for live deltas (issue 17 item 2): a run on node A streams its answer; a
/// WebSocket subscriber of the thread on node B (which runs nothing itself, so every
/// delta it gets came from A through the database) receives `delta` messages whose
/// offsets continue exactly what it shows (durable snapshots and appended chunks +
/// deltas: no text twice, none missing), some ahead of any durable state, and ends with
/// A's answer. Mid-stream, after an appended chunk (LIVE-03), it reconnects from its
/// last sequence: B's catch-up delta starts at the chunk's end, as A's would.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(knife_has_postgres),
    ignore = "needs PostgreSQL (Debian package postgresql, or KNIFE_PG_BIN)"
)]
async fn scale_03_live_deltas_of_a_run_on_node_a_reach_a_subscriber_on_node_b() {
    let answer: String = (0..60).map(|i| format!("word{i} ")).collect();
    let script = format!("[[response]]\ntext = \"{answer}\"\nstream_deltas_ms = 20\n");
    let mock = MockLlm::script(&script, &[]).await;
    let cluster = cluster().await;
    let db = cluster.fresh_database().await;
    let url = cluster.tcp_url(&db);
    let mut a = Server::start_with_config(&node_config(&mock.base_url(), &url, "node-a")).await;
    let b = Server::start_with_config(&node_config(&mock.base_url(), &url, "node-b")).await;
    let project = a.api.create_project(&a.project_dir()).await;
    let thread = a.api.create_thread(&project).await;
    let mut ws = subscribe_ws(&b, &thread, 0).await;
    loop {
        if let WsServerMessage::Subscribed { .. } = next_ws(&mut ws).await {
            break;
        }
    }
    let run = a.api.post_message(&thread, "answer").await;

    // Per (item, field): the durable text, and what the subscriber shows.
    let mut durable: BTreeMap<(TurnItemId, DeltaField), String> = BTreeMap::new();
    let mut shown: BTreeMap<(TurnItemId, DeltaField), String> = BTreeMap::new();
    let (mut deltas, mut ahead, mut chunks, mut after) = (0usize, 0usize, 0usize, 0u64);
    let mut reconnected = false;
    let mut items = DeltaItems::default();
    loop {
        if !reconnected && chunks >= 1 && deltas >= 5 && shown != durable {
            // Right after a delta past the last chunk (live text not yet durable, the
            // next chunk some ms away): drop the socket; what only deltas gave goes,
            // and B's catch-up delta must start where the chunks end.
            reconnected = true;
            drop(ws);
            shown = durable.clone();
            ws = subscribe_ws(&b, &thread, after).await;
            items.clear();
        }
        match next_ws(&mut ws).await {
            WsServerMessage::Event { event } => {
                after = event.sequence;
                let body = &event.event.body;
                if let EventBody::TurnItemAppended(c) = body {
                    chunks += 1;
                    let key = (c.item_id.clone(), c.field);
                    let d = durable.entry(key.clone()).or_default();
                    assert_eq!(c.offset, d.len() as u64, "chunk {c:?} after {d:?}");
                    d.push_str(&c.text);
                    let d = d.clone();
                    let s = shown.entry(key).or_default();
                    if d.len() >= s.len() {
                        assert!(d.starts_with(s.as_str()), "{d:?} vs {s:?}");
                        *s = d;
                    }
                }
                if let EventBody::TurnItemUpdated(item) = body {
                    for field in [DeltaField::Text, DeltaField::Reasoning] {
                        let Some(text) = field.durable_text(item) else {
                            continue;
                        };
                        let key = (item.id.clone(), field);
                        durable.insert(key.clone(), text.to_owned());
                        let s = shown.entry(key).or_default();
                        if text.len() >= s.len() {
                            assert!(text.starts_with(s.as_str()), "{text:?} vs {s:?}");
                            *s = text.to_owned();
                        } else {
                            assert!(s.starts_with(text), "{s:?} vs {text:?}");
                        }
                    }
                }
                if let EventBody::RunUpdated(r) = body
                    && r.id.as_str() == run
                    && r.status.is_terminal()
                {
                    assert_eq!(r.status, RunStatus::Completed, "{r:?}");
                    break;
                }
            }
            WsServerMessage::Delta(d) => {
                let d = items
                    .resolve(d)
                    .expect("a delta before its item's introduction");
                deltas += 1;
                let key = (d.item_id.clone(), d.field);
                if d.end() > durable.get(&key).map_or(0, String::len) as u64 {
                    ahead += 1;
                }
                let s = shown.entry(key).or_default();
                assert_eq!(
                    d.offset,
                    s.len() as u64,
                    "delta {d:?} does not continue the shown {s:?}"
                );
                s.push_str(&d.text);
            }
            WsServerMessage::Reset(r) => panic!("no reset expected: {r:?}"),
            WsServerMessage::Error { error } => panic!("websocket error: {error:?}"),
            WsServerMessage::Subscribed { .. } => {}
        }
    }
    eprintln!(
        "node B got {deltas} deltas from node A, {ahead} ahead of their snapshot, {chunks} chunks"
    );
    assert!(deltas >= 5, "deltas on node B: {deltas}");
    assert!(reconnected, "the stream ended before a chunk and 5 deltas");
    assert!(ahead >= 1, "no delta was ahead of the durable snapshots");
    let texts: Vec<&String> = shown
        .iter()
        .filter(|((_, f), t)| *f == DeltaField::Text && !t.is_empty())
        .map(|(_, t)| t)
        .collect();
    assert_eq!(texts.len(), 1, "{texts:?}");
    assert_eq!(texts[0].trim_end(), answer.trim_end());
    assert!(a.proc.terminate().await.success());
}

/// SCALE-02 over HTTP: three `knife serve` nodes on one database each run a streaming
/// turn at the same time (one thread per node, all appending at once). A WebSocket
/// subscriber on every node follows all three threads from `after=0`; for each thread
/// every node delivers exactly the thread's events of the log, in sequence order, up to
/// its run's end: the identical sequence on each node, no gap, no duplicate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(knife_has_postgres),
    ignore = "needs PostgreSQL (Debian package postgresql, or KNIFE_PG_BIN)"
)]
async fn scale_02_three_serving_nodes_streaming_at_once_give_every_subscriber_the_same_sequence() {
    let answer: String = (0..40).map(|i| format!("token{i} ")).collect();
    let script = format!(
        "[[response]]\ntext = \"{answer}\"\nstream_deltas_ms = 15\n\n\
         [[response]]\ntext = \"{answer}\"\nstream_deltas_ms = 15\n\n\
         [[response]]\ntext = \"{answer}\"\nstream_deltas_ms = 15\n"
    );
    let mock = MockLlm::script(&script, &[]).await;
    let cluster = cluster().await;
    let db = cluster.fresh_database().await;
    let url = cluster.tcp_url(&db);
    let mut nodes = Vec::new();
    for n in 0..3 {
        let config = node_config(&mock.base_url(), &url, &format!("node-{n}"));
        nodes.push(Server::start_with_config(&config).await);
    }
    let project = nodes[0].api.create_project(&nodes[0].project_dir()).await;
    let mut threads = Vec::new();
    for node in &nodes {
        threads.push(node.api.create_thread(&project).await);
    }
    let mut subscribers = Vec::new();
    for node in &nodes {
        use futures::SinkExt;
        let mut ws = subscribe_ws(node, &threads[0], 0).await;
        for thread in &threads[1..] {
            let msg = serde_json::json!({"type": "subscribe", "thread_id": thread, "after": 0});
            ws.send(tokio_tungstenite::tungstenite::Message::Text(
                msg.to_string().into(),
            ))
            .await
            .unwrap();
        }
        // Subscriptions replay from `after=0`: the messages are read below.
        subscribers.push(ws);
    }
    // Each node runs its own thread's turn: three appenders at once.
    let mut runs = Vec::new();
    for (node, thread) in nodes.iter().zip(&threads) {
        runs.push(node.api.post_message(thread, "stream").await);
    }
    // Per node, per thread: the sequences delivered up to the thread's run end.
    let mut seen: Vec<BTreeMap<String, Vec<u64>>> = Vec::new();
    for ws in &mut subscribers {
        let mut by_thread: BTreeMap<String, Vec<u64>> = BTreeMap::new();
        let mut ended = 0;
        while ended < runs.len() {
            let WsServerMessage::Event { event } = next_ws(ws).await else {
                continue;
            };
            let thread = event.event.thread_id.as_ref().unwrap().to_string();
            let list = by_thread.entry(thread).or_default();
            assert!(
                list.last().is_none_or(|last| *last < event.sequence),
                "sequence {} after {list:?}: out of order or twice",
                event.sequence
            );
            list.push(event.sequence);
            if let EventBody::RunUpdated(r) = &event.event.body
                && runs.contains(&r.id.to_string())
                && r.status.is_terminal()
            {
                assert_eq!(r.status, RunStatus::Completed, "{r:?}");
                ended += 1;
            }
        }
        seen.push(by_thread);
    }
    let store = knife_store_postgres::open(&cluster.url(&db)).await.unwrap();
    for thread in &threads {
        let end = store
            .read_events(
                &StreamFilter::thread(ThreadId::from(thread.as_str()), 0),
                100_000,
            )
            .await
            .unwrap();
        // The log's own events of the thread, up to the shortest delivered prefix end
        // (events after the run's end may still be on their way).
        let delivered: Vec<&Vec<u64>> = seen.iter().map(|s| &s[thread]).collect();
        let upto = delivered.iter().map(|d| *d.last().unwrap()).min().unwrap();
        let log: Vec<u64> = end
            .iter()
            .map(|e| e.sequence)
            .filter(|s| *s <= upto)
            .collect();
        assert!(log.len() > 10, "{log:?}");
        for (n, d) in delivered.iter().enumerate() {
            let prefix: Vec<u64> = d.iter().copied().filter(|s| *s <= upto).collect();
            assert_eq!(prefix, log, "node-{n}'s subscriber for {thread}");
        }
    }
    for node in &mut nodes {
        assert!(node.proc.terminate().await.success());
    }
}
