// Bounded subscribers over real loopback sockets (LIVE-06): a WebSocket or SSE client
// that stops reading is closed with a reason once its bounded queue stays full, the
// server never holds more than its budget, and the client resumes from its last sequence.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures::{SinkExt, StreamExt};
use knife_protocol::*;
use knife_runtime::*;
use knife_server::{AppState, SubscriberLimits, Subscribers};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;

/// Events in the thread, and the bytes of text each carries (well past what the
/// loopback socket buffers absorb).
const EVENTS: usize = 1500;
const EVENT_TEXT: usize = 16 * 1024;

struct Server {
    _dir: tempfile::TempDir,
    base: String,
    subscribers: Subscribers,
    thread: ThreadId,
    /// The thread's last sequence.
    high: u64,
    _task: tokio::task::JoinHandle<()>,
}

fn limits() -> SubscriberLimits {
    SubscriberLimits {
        queue_bytes: 64 * 1024,
        total_bytes: 1024 * 1024,
        stall: Duration::from_millis(300),
        replays: 2,
        frame_cache_bytes: 4 * 1024 * 1024,
    }
}

/// The router on 127.0.0.1:0 over a store holding one thread with [`EVENTS`] big events.
async fn serve() -> Server {
    let dir = tempfile::tempdir().unwrap();
    let store = support::open_store(dir.path()).await;
    let clock: SharedClock = Arc::new(SystemClock);
    let thread = support::project_thread(&store, &dir.path().join("proj"), None).await;
    let text = "x".repeat(EVENT_TEXT);
    for _ in 0..EVENTS / 100 {
        let batch = (0..100)
            .map(|_| {
                DomainEvent::new(
                    clock.now(),
                    EventBody::ThreadErrorRaised {
                        thread_id: thread.id.clone(),
                        run_id: None,
                        error: AgentError {
                            name: "Bench".into(),
                            message: text.clone(),
                        },
                    },
                )
            })
            .collect();
        store.write(batch).await.unwrap();
    }
    let high = store.latest_sequence(Some(&thread.id)).await.unwrap();
    let subscribers = Subscribers::new(limits());
    let state = AppState {
        default_instance: thread.provider_instance_id.clone(),
        subscribers: subscribers.clone(),
        ..support::app_state(&store, HashMap::new())
    };
    let (listener, addr) = support::loopback().await;
    let task = support::serve_on(listener, state);
    Server {
        _dir: dir,
        base: format!("http://{addr}"),
        subscribers,
        thread: thread.id,
        high,
        _task: task,
    }
}

async fn ws_subscribe(
    s: &Server,
    after: u64,
) -> tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>> {
    let url = format!("{}/api/ws", s.base.replacen("http", "ws", 1));
    let (mut ws, _) = tokio_tungstenite::connect_async(url).await.unwrap();
    let sub = serde_json::to_string(&WsClientMessage::Subscribe {
        thread_id: s.thread.clone(),
        after,
    })
    .unwrap();
    ws.send(Message::Text(sub.into())).await.unwrap();
    ws
}

/// Waits (bounded) until the server has closed a subscriber for falling behind: the
/// client reads nothing meanwhile, however long the loaded machine takes to fill its queue.
async fn wait_for_overflow(s: &Server) {
    let closed = tokio::time::timeout(Duration::from_secs(30), async {
        while s.subscribers.overflowed() == 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(closed.is_ok(), "no subscriber was closed within 30 s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_06_a_websocket_client_that_stops_reading_is_closed_with_a_reason_and_resumes() {
    let s = serve().await;
    let mut ws = ws_subscribe(&s, 0).await;
    // The client reads nothing until the server has closed it.
    wait_for_overflow(&s).await;
    let mut seqs = Vec::new();
    let mut overflow = None;
    let mut close = None;
    while let Some(msg) = tokio::time::timeout(Duration::from_secs(10), ws.next())
        .await
        .unwrap()
    {
        match msg {
            Ok(Message::Text(t)) => match serde_json::from_str::<WsServerMessage>(&t).unwrap() {
                WsServerMessage::Event { event } => seqs.push(event.sequence),
                WsServerMessage::Error { error } => overflow = Some(error),
                _ => {}
            },
            Ok(Message::Close(frame)) => {
                close = frame;
                break;
            }
            Ok(_) => {}
            Err(_) => break,
        }
    }
    let error = overflow.expect("an error message says why the subscriber is closed");
    assert_eq!(error.code, "subscriber_overflow");
    assert!(
        error.message.contains("fell behind") && error.message.contains("after ="),
        "{}",
        error.message
    );
    let close = close.expect("a close frame");
    assert_eq!(close.code, CloseCode::Again);
    assert!(
        seqs.last().copied().unwrap_or(0) < s.high,
        "closed before the whole history was sent"
    );
    assert!(
        s.subscribers.peak_bytes() <= limits().total_bytes,
        "the server never queued past its budget: {}",
        s.subscribers.peak_bytes()
    );
    // Resume from the last sequence received: the rest, no gap, no duplicate.
    let last = seqs.last().copied().unwrap_or(0);
    let mut ws = ws_subscribe(&s, last).await;
    let mut rest = Vec::new();
    while rest.last().copied().unwrap_or(last) < s.high {
        let msg = tokio::time::timeout(Duration::from_secs(10), ws.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        if let Message::Text(t) = msg
            && let WsServerMessage::Event { event } = serde_json::from_str(&t).unwrap()
        {
            rest.push(event.sequence);
        }
    }
    let mut all = seqs.clone();
    all.extend(&rest);
    assert!(
        all.windows(2).all(|w| w[0] < w[1]),
        "in order, no event twice"
    );
    assert_eq!(
        all.len(),
        EVENTS + 1,
        "thread.created and every event: none missing"
    );
    // The server gives a frame's bytes back once its write completed, which may be just
    // after the client read it: close, then wait (bounded) for the budget to drain.
    drop(ws);
    let drained = tokio::time::timeout(Duration::from_secs(10), async {
        while s.subscribers.held_bytes() != 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(
        drained.is_ok(),
        "closed subscribers hold nothing, yet {} bytes are held",
        s.subscribers.held_bytes()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_06_an_sse_client_that_stops_reading_is_closed_with_a_reason() {
    let s = serve().await;
    let resp = reqwest::get(format!(
        "{}/api/threads/{}/events?after=0",
        s.base, s.thread
    ))
    .await
    .unwrap();
    assert_eq!(resp.status(), 200);
    wait_for_overflow(&s).await;
    let mut body = resp.bytes_stream();
    let mut text = String::new();
    while let Some(chunk) = tokio::time::timeout(Duration::from_secs(10), body.next())
        .await
        .unwrap()
    {
        text.push_str(std::str::from_utf8(&chunk.unwrap()).unwrap());
    }
    let frames: Vec<&str> = text.split("\n\n").filter(|f| !f.is_empty()).collect();
    let last = frames.last().unwrap();
    assert!(last.starts_with("event: error\ndata: "), "{last:.200}");
    assert!(
        last.contains("fell behind") && last.contains("after ="),
        "{last}"
    );
    let seqs: Vec<u64> = frames
        .iter()
        .filter_map(|f| f.strip_prefix("id: "))
        .filter_map(|f| f.split('\n').next()?.parse().ok())
        .collect();
    assert!(
        seqs.last().copied().unwrap_or(0) < s.high,
        "closed before the whole history"
    );
    assert!(seqs.windows(2).all(|w| w[0] < w[1]));
    assert!(s.subscribers.peak_bytes() <= limits().total_bytes);
}
