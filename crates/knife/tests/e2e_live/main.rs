// Process tests of live deltas (LIVE-01, LIVE-02) through the real binary: deltas on
// the WebSocket and SSE ahead of their snapshots, and a client that checks every
// offset across a forced reconnect mid-stream and across a retried attempt (deltas.rs);
// the bytes a turn sends and stores (LIVE-03, bytes.rs); tool output (bash, codex
// commands) streaming while the tool runs (tool_output.rs). Here: the checking client
// and the WebSocket helpers they share.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod bytes;
#[path = "../common/mod.rs"]
mod common;
mod deltas;
mod tool_output;

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use common::*;
use futures::{SinkExt, StreamExt};
use knife_protocol::*;
use serde_json::json;
use tokio_tungstenite::tungstenite::Message;

const FIELDS: [DeltaField; 4] = [
    DeltaField::Text,
    DeltaField::Reasoning,
    DeltaField::Input,
    DeltaField::Output,
];

fn words(prefix: &str, n: usize) -> String {
    (0..n).map(|i| format!("{prefix}{i} ")).collect()
}

/// A client following the contract of docs/2026-12-01-live-deltas.md, checking it.
#[derive(Default)]
struct Client {
    /// Last durable sequence seen.
    after: u64,
    /// Per (item, field): the text as of the durable events.
    durable: HashMap<(TurnItemId, DeltaField), String>,
    /// Per (item, field): what the client shows (durable state + live deltas).
    shown: HashMap<(TurnItemId, DeltaField), String>,
    settled: HashSet<TurnItemId>,
    deltas: usize,
    /// Deltas whose text was not yet in any durable event when they arrived.
    ahead: usize,
    resets: usize,
    /// `turn-item.appended` events seen.
    chunks: usize,
    /// The items the stream's deltas introduced (slim deltas name only their item).
    items: DeltaItems,
    /// Deltas that introduced their item (the rest came slim), and the items deltas named.
    introductions: usize,
    delta_items: HashSet<TurnItemId>,
    fields: HashSet<DeltaField>,
    /// Per (item, field): deltas, deltas ahead of the durable text, appended chunks.
    stats: HashMap<(TurnItemId, DeltaField), FieldStats>,
}

/// What a [`Client`] counted of one (item, field).
#[derive(Clone, Copy, Debug, Default)]
struct FieldStats {
    deltas: usize,
    ahead: usize,
    chunks: usize,
}

impl Client {
    fn event(&mut self, ev: &StoredEvent) {
        assert!(ev.sequence > self.after, "event {} twice", ev.sequence);
        self.after = ev.sequence;
        if let EventBody::TurnItemAppended(chunk) = &ev.event.body {
            self.chunk(chunk);
            return;
        }
        let EventBody::TurnItemUpdated(item) = &ev.event.body else {
            return;
        };
        let settled = !matches!(
            item.status,
            TurnItemStatus::Pending | TurnItemStatus::Running | TurnItemStatus::Waiting
        );
        for field in FIELDS {
            let Some(text) = field.durable_text(item) else {
                continue;
            };
            let key = (item.id.clone(), field);
            self.durable.insert(key.clone(), text.to_owned());
            let shown = self.shown.entry(key).or_default();
            if settled || text.len() >= shown.len() {
                if !settled && !item.status.eq(&TurnItemStatus::Cancelled) {
                    assert!(
                        text.starts_with(shown.as_str()),
                        "durable text {text:?} does not continue the shown {shown:?}"
                    );
                }
                *shown = text.to_owned();
            } else {
                assert!(
                    shown.starts_with(text),
                    "shown {shown:?} does not extend the durable {text:?}"
                );
            }
        }
        if settled {
            self.settled.insert(item.id.clone());
        }
    }

    /// Appended durable text (LIVE-03): continues the durable text exactly.
    fn chunk(&mut self, c: &TurnItemAppend) {
        self.chunks += 1;
        let key = (c.item_id.clone(), c.field);
        self.stats.entry(key.clone()).or_default().chunks += 1;
        let durable = self.durable.entry(key.clone()).or_default();
        assert_eq!(
            c.offset,
            durable.len() as u64,
            "chunk {c:?} does not continue the durable text {durable:?}"
        );
        durable.push_str(&c.text);
        let durable = durable.clone();
        let shown = self.shown.entry(key).or_default();
        if durable.len() >= shown.len() {
            assert!(
                durable.starts_with(shown.as_str()),
                "durable text {durable:?} does not continue the shown {shown:?}"
            );
            *shown = durable;
        } else {
            assert!(
                shown.starts_with(&durable),
                "shown {shown:?} does not extend the durable {durable:?}"
            );
        }
    }

    fn delta(&mut self, m: &DeltaMessage) {
        if m.introduces() {
            self.introductions += 1;
        }
        let d = &self
            .items
            .resolve(m.clone())
            .expect("a slim delta before the delta introducing its item");
        self.deltas += 1;
        self.delta_items.insert(d.item_id.clone());
        self.fields.insert(d.field);
        let key = (d.item_id.clone(), d.field);
        let durable = self.durable.get(&key).map_or(0, String::len) as u64;
        let stats = self.stats.entry(key.clone()).or_default();
        stats.deltas += 1;
        if d.end() > durable {
            self.ahead += 1;
            stats.ahead += 1;
        }
        let shown = self.shown.entry(key).or_default();
        assert_eq!(
            d.offset,
            shown.len() as u64,
            "delta {d:?} does not continue the shown text {shown:?} (text twice or missing)"
        );
        shown.push_str(&d.text);
    }

    fn reset(&mut self, r: &ItemReset) {
        self.resets += 1;
        self.items.forget(&r.item_id);
        self.shown.retain(|(id, _), _| id != &r.item_id);
        self.settled.remove(&r.item_id);
    }

    /// A reconnect: what only deltas gave is dropped; the catch-up delta re-sends it.
    fn reconnect(&mut self) {
        self.shown = self.durable.clone();
        self.items.clear();
    }

    fn text_of(&self, field: DeltaField) -> Vec<String> {
        let mut v: Vec<_> = self
            .shown
            .iter()
            .filter(|((_, f), t)| *f == field && !t.is_empty())
            .map(|(_, t)| t.clone())
            .collect();
        v.sort();
        v
    }
}

type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

async fn subscribe(server: &Server, thread: &str, after: u64) -> Ws {
    let url = format!("ws://{}/api/ws", server.proc.addr);
    let (mut ws, _) = tokio_tungstenite::connect_async(url.as_str())
        .await
        .unwrap();
    let msg = json!({"type": "subscribe", "thread_id": thread, "after": after});
    ws.send(Message::Text(msg.to_string().into()))
        .await
        .unwrap();
    ws
}

/// Reads one server message (30 s box).
async fn next(ws: &mut Ws) -> WsServerMessage {
    loop {
        let msg = tokio::time::timeout(Duration::from_secs(30), ws.next())
            .await
            .expect("no websocket message within 30 s")
            .expect("websocket closed")
            .expect("websocket error");
        if let Message::Text(t) = msg {
            return serde_json::from_str(&t).unwrap();
        }
    }
}

/// Feeds `client` until run `run` ends (or `stop` says so after a delta); true when the run ended.
async fn follow(
    ws: &mut Ws,
    client: &mut Client,
    run: &str,
    mut stop: impl FnMut(&Client) -> bool,
) -> bool {
    loop {
        match next(ws).await {
            WsServerMessage::Subscribed { .. } => {}
            WsServerMessage::Event { event } => {
                client.event(&event);
                if let EventBody::RunUpdated(r) = &event.event.body
                    && r.id.as_str() == run
                    && r.status.is_terminal()
                {
                    assert_eq!(r.status, RunStatus::Completed, "{r:?}");
                    return true;
                }
            }
            WsServerMessage::Delta(d) => {
                client.delta(&d);
                if stop(client) {
                    return false;
                }
            }
            WsServerMessage::Reset(r) => client.reset(&r),
            WsServerMessage::Error { error } => panic!("websocket error: {error:?}"),
        }
    }
}
