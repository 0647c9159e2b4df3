//! JSON-RPC over a supervised child: `sh` scripts play the peer.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use knife_adapters::jsonrpc::{Incoming, RpcConnection, RpcError, RpcOptions};
use knife_adapters::process::{ChildProcess, ProcessSpec};
use serde_json::json;

async fn peer(
    script: &str,
) -> (
    RpcConnection,
    tokio::sync::mpsc::UnboundedReceiver<Incoming>,
) {
    let mut spec = ProcessSpec::new("sh", std::env::temp_dir(), "test: peer");
    spec.args = vec!["-c".into(), script.into()];
    spec.eof_grace = Duration::from_millis(200);
    spec.term_grace = Duration::from_millis(200);
    let (child, lines) = ChildProcess::spawn(spec, None).await.unwrap();
    RpcConnection::start(child, lines, RpcOptions::default())
}

#[tokio::test]
async fn answers_are_matched_by_id_in_any_order() {
    let (rpc, mut incoming) = peer(
        r#"read a; read b; echo '{"id":2,"result":"second"}'; echo '{"jsonrpc":"2.0","id":1,"result":"first"}';
           echo '{"method":"note","params":{"x":1}}'; echo '{"id":"s-1","method":"ask","params":{"q":2}}';
           read answer; echo "{\"method\":\"echo\",\"params\":$answer}"; echo "{\"method\":\"echo\",\"params\":$a}""#,
    )
    .await;
    let (first, second) = tokio::join!(rpc.request("one", json!({"n": 1})), async {
        // Make sure "one" is written first, so it gets id 1.
        tokio::time::sleep(Duration::from_millis(50)).await;
        rpc.request("two", json!(null)).await
    });
    assert_eq!(first.unwrap(), json!("first"));
    assert_eq!(second.unwrap(), json!("second"));
    assert_eq!(
        incoming.recv().await,
        Some(Incoming::Notification {
            method: "note".into(),
            params: json!({"x": 1})
        })
    );
    let Some(Incoming::Request { id, method, params }) = incoming.recv().await else {
        panic!("expected a server→client request");
    };
    assert_eq!(
        (id.clone(), method.as_str(), params),
        (json!("s-1"), "ask", json!({"q": 2}))
    );
    rpc.respond(&id, json!({"decision": "accept"})).unwrap();
    let Some(Incoming::Notification { params: echoed, .. }) = incoming.recv().await else {
        panic!("expected the echo");
    };
    assert_eq!(
        echoed,
        json!({"jsonrpc": "2.0", "id": "s-1", "result": {"decision": "accept"}})
    );
    let Some(Incoming::Notification { params: sent, .. }) = incoming.recv().await else {
        panic!("expected the echo of the first request");
    };
    assert_eq!(
        sent,
        json!({"jsonrpc": "2.0", "id": 1, "method": "one", "params": {"n": 1}})
    );
    assert_eq!(incoming.recv().await, None);
    assert_eq!(rpc.stats().malformed(), 0);
}

#[tokio::test]
async fn an_error_answer_is_a_remote_error() {
    let (rpc, _incoming) = peer(
        r#"read a; echo '{"id":1,"error":{"code":-32600,"message":"thread not found"}}'; sleep 5"#,
    )
    .await;
    let err = rpc.request("thread/resume", json!({})).await.unwrap_err();
    assert!(
        matches!(&err, RpcError::Remote { code: -32600, message, .. } if message == "thread not found"),
        "{err:?}"
    );
    assert!(err.to_string().contains("thread/resume failed"), "{err}");
}

#[tokio::test]
async fn a_request_times_out_and_its_late_answer_is_counted() {
    let (rpc, mut incoming) = peer(
        r#"read a; sleep 0.4; echo '{"id":1,"result":"late"}'; echo '{"method":"after"}'; sleep 5"#,
    )
    .await;
    let err = rpc
        .request_with_timeout("slow", json!({}), Duration::from_millis(100))
        .await
        .unwrap_err();
    assert!(matches!(err, RpcError::Timeout { .. }), "{err:?}");
    assert!(matches!(
        incoming.recv().await,
        Some(Incoming::Notification { .. })
    ));
    assert_eq!(rpc.stats().malformed(), 1);
}

#[tokio::test]
async fn a_child_exit_fails_waiting_requests_with_closed() {
    let (rpc, mut incoming) = peer("read a; echo bye >&2; exit 4").await;
    let err = rpc.request("turn/start", json!({})).await.unwrap_err();
    assert!(matches!(err, RpcError::Closed { .. }), "{err:?}");
    assert_eq!(incoming.recv().await, None);
    rpc.closed().await;
    let exit = rpc.child().wait_exit().await;
    assert_eq!(exit.status.and_then(|s| s.code()), Some(4));
    // Nothing can be sent any more.
    let after = rpc.request("again", json!({})).await.unwrap_err();
    assert!(
        matches!(after, RpcError::Closed { .. } | RpcError::Send(_)),
        "{after:?}"
    );
}

#[tokio::test]
async fn malformed_messages_are_counted_and_never_stop_the_reader() {
    let (rpc, mut incoming) = peer(
        r#"echo 'not json'; echo '[1,2]'; echo '{"id":99,"result":1}'; echo '{"id":1}'; echo '{"method":"ok"}'"#,
    )
    .await;
    assert_eq!(
        incoming.recv().await,
        Some(Incoming::Notification {
            method: "ok".into(),
            params: json!(null)
        })
    );
    assert_eq!(incoming.recv().await, None);
    assert_eq!(rpc.stats().malformed(), 4);
}

#[tokio::test]
async fn the_version_field_can_be_left_out() {
    let mut spec = ProcessSpec::new("sh", std::env::temp_dir(), "test: peer");
    spec.args = vec![
        "-c".into(),
        r#"read a; echo "{\"method\":\"echo\",\"params\":$a}""#.into(),
    ];
    let (child, lines) = ChildProcess::spawn(spec, None).await.unwrap();
    let options = RpcOptions {
        version_field: false,
        ..RpcOptions::default()
    };
    let (rpc, mut incoming) = RpcConnection::start(child, lines, options);
    rpc.notify("initialized", json!({})).unwrap();
    let Some(Incoming::Notification { params, .. }) = incoming.recv().await else {
        panic!("no echo");
    };
    assert_eq!(params, json!({"method": "initialized", "params": {}}));
}

/// The peer exits but a process it started in another session keeps its stdout open:
/// the connection still closes (waiters fail with `Closed`) soon after the exit, not
/// when that process lets go.
#[tokio::test]
async fn an_exit_closes_the_connection_even_when_stdout_stays_open() {
    let (rpc, _incoming) = peer("setsid sleep 5 & read line; exit 4").await;
    let started = std::time::Instant::now();
    let err = rpc
        .request_with_timeout("ask", json!(null), Duration::from_secs(4))
        .await
        .unwrap_err();
    assert!(matches!(err, RpcError::Closed { .. }), "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    assert!(rpc.is_closed());
    let exit = rpc.child().wait_exit().await;
    assert_eq!(exit.status_text(), "exit status 4");
}

async fn strict_peer(script: &str) -> RpcConnection {
    let mut spec = ProcessSpec::new("sh", std::env::temp_dir(), "test: peer");
    spec.args = vec!["-c".into(), script.into()];
    spec.eof_grace = Duration::from_millis(200);
    spec.term_grace = Duration::from_millis(200);
    let (child, lines) = ChildProcess::spawn(spec, None).await.unwrap();
    let options = RpcOptions {
        strict_handshake: true,
        ..RpcOptions::default()
    };
    RpcConnection::start(child, lines, options).0
}

/// With the handshake rule, output that is not the first answer fails the request at
/// once (not after its timeout) and quotes the line; the connection is closed.
#[tokio::test]
async fn a_peer_that_is_not_json_rpc_fails_the_first_request_at_once() {
    for (script, what, quoted) in [
        (
            "cat",
            "a request (`initialize`",
            r#"\"method\":\"initialize\""#,
        ),
        ("echo hello; sleep 5", "not JSON", r#""hello""#),
        (
            "read a; echo '{\"status\":\"ready\"}'; sleep 5",
            "not a JSON-RPC message",
            "ready",
        ),
        (
            "read a; echo '{\"method\":\"note\"}'; sleep 5",
            "a notification (`note`)",
            "note",
        ),
        (
            "read a; echo '{\"id\":7,\"result\":1}'; sleep 5",
            "request 7, which knife never sent",
            "7",
        ),
    ] {
        let rpc = strict_peer(script).await;
        let started = std::time::Instant::now();
        let err = rpc
            .request_with_timeout("initialize", json!({"x": 1}), Duration::from_secs(4))
            .await
            .unwrap_err();
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{script}: {:?}",
            started.elapsed()
        );
        let RpcError::NotJsonRpc { what: w, line, .. } = &err else {
            panic!("{script}: {err:?}");
        };
        assert!(w.contains(what), "{script}: {err}");
        assert!(line.contains(quoted), "{script}: {err}");
        assert!(err.to_string().contains("its first output was"), "{err}");
        rpc.closed().await;
        // Later requests get the same error.
        let again = rpc.request("again", json!(null)).await.unwrap_err();
        assert!(matches!(again, RpcError::NotJsonRpc { .. }), "{again:?}");
    }
}

/// A long line is quoted cut; after the first answer, the rule no longer applies.
#[tokio::test]
async fn the_handshake_rule_ends_with_the_first_answer() {
    let rpc = strict_peer(&format!("echo {}; sleep 5", "x".repeat(500))).await;
    let err = rpc.request("initialize", json!(null)).await.unwrap_err();
    let RpcError::NotJsonRpc { line, .. } = &err else {
        panic!("{err:?}");
    };
    assert!(
        line.chars().count() < 130 && line.ends_with("…\""),
        "{line}"
    );

    let rpc = strict_peer(
        r#"read a; echo '{"id":1,"result":{}}'; echo 'log line'; read b; echo '{"id":2,"result":2}'; sleep 5"#,
    )
    .await;
    rpc.request("initialize", json!(null)).await.unwrap();
    assert_eq!(rpc.request("next", json!(null)).await.unwrap(), json!(2));
    assert_eq!(rpc.stats().malformed(), 1);
}
