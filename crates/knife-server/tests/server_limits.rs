// The server loop's bounds over real loopback sockets (SPEC.md SEC-04, SEC-08): the
// header read timeout, the connection cap, 413 for bodies over the limit, field limits.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use knife_protocol::*;
use knife_server::ServerLimits;
use knife_store::Store;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

struct Server {
    dir: tempfile::TempDir,
    store: Store,
    addr: std::net::SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

/// `knife_server::serve` on 127.0.0.1:0 with `limits`, over a fresh store.
async fn serve(limits: ServerLimits) -> Server {
    let dir = tempfile::tempdir().unwrap();
    let store = support::open_store(dir.path()).await;
    let state = support::app_state(&store, HashMap::new());
    let (listener, addr) = support::loopback().await;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(knife_server::serve_with(
        listener,
        knife_server::router(state),
        limits,
        async move {
            let _ = stopped.await;
        },
    ));
    Server {
        dir,
        store,
        addr,
        stop: Some(stop),
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

impl Server {
    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    async fn thread(&self) -> Thread {
        support::project_thread(&self.store, &self.dir.path().join("proj"), None).await
    }
}

/// Reads until the peer closes or `limit` passes; returns what arrived and whether
/// the connection was closed.
async fn read_until_closed(socket: &mut TcpStream, limit: Duration) -> (String, bool) {
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        match tokio::time::timeout_at(deadline, socket.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return (String::from_utf8_lossy(&out).into(), true),
            Ok(Ok(n)) => out.extend_from_slice(&buf[..n]),
            Err(_) => return (String::from_utf8_lossy(&out).into(), false),
        }
    }
}

#[tokio::test]
async fn sec_04_a_connection_that_sends_no_complete_head_is_closed_after_the_header_timeout() {
    let s = serve(ServerLimits {
        header_read_timeout: Duration::from_millis(300),
        ..ServerLimits::default()
    })
    .await;
    // Silent: nothing at all.
    let mut idle = TcpStream::connect(s.addr).await.unwrap();
    // Slow: half a request head, never finished.
    let mut slow = TcpStream::connect(s.addr).await.unwrap();
    slow.write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        .await
        .unwrap();
    let started = Instant::now();
    let (_, closed) = read_until_closed(&mut idle, Duration::from_secs(5)).await;
    assert!(closed, "the idle connection is closed");
    let (_, closed) = read_until_closed(&mut slow, Duration::from_secs(5)).await;
    assert!(closed, "the slow connection is closed");
    assert!(
        started.elapsed() >= Duration::from_millis(250),
        "not before the timeout: {:?}",
        started.elapsed()
    );
    // A client that sends its head in time is answered.
    let ok = reqwest::get(s.url("/healthz")).await.unwrap();
    assert_eq!(ok.status(), 200);
}

#[tokio::test]
async fn sec_04_connections_past_the_cap_are_refused_at_once_and_freed_slots_serve_again() {
    let s = serve(ServerLimits {
        max_connections: 3,
        header_read_timeout: Duration::from_secs(30),
    })
    .await;
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(TcpStream::connect(s.addr).await.unwrap());
    }
    // The accept loop takes the held sockets' permits in order; give it a moment.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let started = Instant::now();
    let mut extra = TcpStream::connect(s.addr).await.unwrap();
    let (answer, closed) = read_until_closed(&mut extra, Duration::from_secs(5)).await;
    assert!(closed, "refused connections are closed");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "refused quickly (noisy machine): {:?}",
        started.elapsed()
    );
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer:?}");
    assert!(answer.contains("too_many_connections"), "{answer}");
    // Closing the held sockets frees their slots.
    drop(held);
    let mut served = false;
    for _ in 0..50 {
        if let Ok(r) = reqwest::get(s.url("/healthz")).await
            && r.status() == 200
        {
            served = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(served, "/healthz answers once connections are free again");
}

#[tokio::test]
async fn sec_04_a_declared_length_over_the_limit_is_answered_413_before_the_body() {
    let s = serve(ServerLimits::default()).await;
    let mut socket = TcpStream::connect(s.addr).await.unwrap();
    // 100 GB declared; not one byte of it is sent.
    socket
        .write_all(
            b"POST /api/projects HTTP/1.1\r\nHost: 127.0.0.1\r\ncontent-type: application/json\r\n\
              content-length: 100000000000\r\n\r\n",
        )
        .await
        .unwrap();
    let (answer, closed) = read_until_closed(&mut socket, Duration::from_secs(5)).await;
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer:?}");
    assert!(answer.contains("payload_too_large"), "{answer}");
    assert!(closed, "the connection is not held open for the body");
}

#[tokio::test]
async fn sec_04_a_streamed_body_over_the_limit_is_answered_413() {
    let s = serve(ServerLimits::default()).await;
    let t = s.thread().await;
    // Chunked (no Content-Length): the limit applies while reading.
    let chunk = bytes::Bytes::from(vec![b' '; 64 * 1024]);
    let chunks = (0..(limits::BODY_MAX_BYTES / chunk.len() + 4))
        .map(move |_| Ok::<_, std::io::Error>(chunk.clone()));
    let body = reqwest::Body::wrap_stream(futures::stream::iter(chunks));
    let resp = reqwest::Client::new()
        .post(s.url(&format!("/api/threads/{}/messages", t.id)))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 413);
    let v: Value = resp.json().await.unwrap();
    assert_eq!(v["error"]["code"], "payload_too_large", "{v}");
}

#[tokio::test]
async fn sec_08_fields_over_their_documented_limits_get_400() {
    let s = serve(ServerLimits::default()).await;
    let t = s.thread().await;
    let http = reqwest::Client::new();
    let post = |path: String, body: Value| http.post(s.url(&path)).json(&body).send();

    let big = "x".repeat(limits::MESSAGE_MAX_BYTES + 1);
    let resp = post(
        format!("/api/threads/{}/messages", t.id),
        json!({"text": big}),
    )
    .await
    .unwrap();
    assert_eq!(resp.status(), 400);
    let v: Value = resp.json().await.unwrap();
    assert_eq!(v["error"]["code"], "invalid_request");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("limit is 1048576 bytes"),
        "{v}"
    );

    let root = s.dir.path().join("named");
    std::fs::create_dir_all(&root).unwrap();
    let resp = post(
        "/api/projects".into(),
        json!({"root": root.display().to_string(), "name": "n".repeat(201)}),
    )
    .await
    .unwrap();
    assert_eq!(resp.status(), 400);
    let resp = post(
        "/api/projects".into(),
        json!({"root": format!("/{}", "a".repeat(5000))}),
    )
    .await
    .unwrap();
    assert_eq!(resp.status(), 400);
    let resp = post(
        "/api/threads".into(),
        json!({"project_id": t.project_id, "model": "m".repeat(201)}),
    )
    .await
    .unwrap();
    assert_eq!(resp.status(), 400);
    // Nothing of it reached the log.
    assert_eq!(s.store.list_projects().await.unwrap().len(), 1);
}

#[tokio::test]
async fn sec_06_project_roots_of_slash_home_or_system_trees_are_refused() {
    let s = serve(ServerLimits::default()).await;
    let http = reqwest::Client::new();
    for root in ["/", "/etc", "/usr/share", "/proc", "/root"] {
        let resp = http
            .post(s.url("/api/projects"))
            .json(&json!({"root": root}))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 400, "{root}");
        let v: Value = resp.json().await.unwrap();
        let message = v["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("system tree")
                || message.contains("home directory")
                || message.contains("whole filesystem"),
            "{root}: {message}"
        );
    }
    if let Some(home) = std::env::var_os("HOME").filter(|h| std::path::Path::new(h).is_dir()) {
        let resp = http
            .post(s.url("/api/projects"))
            .json(&json!({"root": home.to_string_lossy()}))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 400, "$HOME itself");
    }
    assert!(s.store.list_projects().await.unwrap().is_empty());
}
