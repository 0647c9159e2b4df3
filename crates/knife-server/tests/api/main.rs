// The HTTP API over a real store on a tempdir, served on loopback: every error is JSON
// (404/405/400, WebSocket errors), token access rules, and one project per folder.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../support/mod.rs"]
mod support;
mod threads;

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use futures::{SinkExt, StreamExt};
use knife_protocol::*;
use knife_server::AppState;
use knife_store::Store;
use reqwest::StatusCode;
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

const TOKEN: &str = "s3cret-token";

struct Server {
    dir: tempfile::TempDir,
    store: Store,
    base: String,
    http: reqwest::Client,
    _task: tokio::task::JoinHandle<()>,
}

/// Serves `knife_server::router` on 127.0.0.1:0 over a fresh store, with no adapters.
async fn serve(token: Option<&str>) -> Server {
    let dir = tempfile::tempdir().unwrap();
    let store = support::open_store(dir.path()).await;
    let state = AppState {
        // As `knife serve` fills it from the config; `default` is set by the route.
        providers: Arc::from([
            ProviderInstanceInfo {
                id: ProviderInstanceId::from("zed"),
                driver: "codex".into(),
                model: None,
                default: false,
            },
            ProviderInstanceInfo {
                id: ProviderInstanceId::from("fake"),
                driver: "openai-chat".into(),
                model: Some("m1".into()),
                default: false,
            },
        ]),
        api_token: token.map(Arc::from),
        ..support::app_state(&store, HashMap::new())
    };
    let (listener, addr) = support::loopback().await;
    let task = support::serve_on(listener, state);
    Server {
        dir,
        store,
        base: format!("http://{addr}"),
        http: reqwest::Client::new(),
        _task: task,
    }
}

impl Server {
    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    fn ws_url(&self, query: &str) -> String {
        format!("{}/api/ws{query}", self.base.replacen("http", "ws", 1))
    }

    /// A project and a thread written through the commands (the server has no adapter
    /// to offer as a provider instance, so the thread is created below the API).
    async fn thread(&self) -> Thread {
        support::project_thread(&self.store, &self.dir.path().join("proj"), None).await
    }
}

/// Asserts a JSON error answer `{"error":{"code","message"}}`; returns the message.
async fn json_error(resp: reqwest::Response, status: StatusCode, code: &str) -> String {
    assert_eq!(resp.status(), status, "{:?}", resp.url().path());
    let ct = resp
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    assert!(ct.starts_with("application/json"), "content-type {ct:?}");
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["code"], code, "{body}");
    let message = body["error"]["message"].as_str().unwrap().to_owned();
    assert!(!message.is_empty());
    message
}

#[tokio::test]
async fn events_with_after_not_a_number_is_a_json_400() {
    let s = serve(None).await;
    let t = s.thread().await;
    let resp = s
        .http
        .get(s.url(&format!("/api/threads/{}/events?after=abc", t.id)))
        .send()
        .await
        .unwrap();
    let message = json_error(resp, StatusCode::BAD_REQUEST, "invalid_request").await;
    assert!(message.contains("after"), "{message}");
}

#[tokio::test]
async fn events_with_unknown_type_is_a_json_400_listing_the_valid_types() {
    let s = serve(None).await;
    let t = s.thread().await;
    let resp = s
        .http
        .get(s.url(&format!("/api/threads/{}/events?type=bogus", t.id)))
        .send()
        .await
        .unwrap();
    let message = json_error(resp, StatusCode::BAD_REQUEST, "invalid_request").await;
    assert!(message.contains("bogus"), "{message}");
    for t in EVENT_TYPES {
        assert!(message.contains(t), "{message} lacks {t}");
    }

    // A valid type streams (replay of this thread's `thread.created`).
    let resp = s
        .http
        .get(s.url(&format!("/api/threads/{}/events?type=thread.created", t.id)))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let mut body = resp.bytes_stream();
    let chunk = tokio::time::timeout(Duration::from_secs(5), body.next())
        .await
        .expect("a replayed event")
        .unwrap()
        .unwrap();
    let text = String::from_utf8_lossy(&chunk);
    assert!(text.contains("event: thread.created"), "{text}");
}

/// `mcp.tool_called` was missing from the type filter's list (it answered 400);
/// the filter now takes it and streams only that type.
#[tokio::test]
async fn events_filtered_by_mcp_tool_called_stream_the_mcp_audit_events() {
    let s = serve(None).await;
    let t = s.thread().await;
    let call = McpToolCall {
        thread_id: t.id.clone(),
        tool: "thread_send_message".into(),
        arguments: "{}".into(),
        target_thread_id: None,
        ok: true,
        error: None,
    };
    s.store
        .write(vec![DomainEvent::new(
            chrono::Utc::now(),
            EventBody::McpToolCalled(call),
        )])
        .await
        .unwrap();
    let resp = s
        .http
        .get(s.url(&format!(
            "/api/threads/{}/events?type=mcp.tool_called",
            t.id
        )))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let mut body = resp.bytes_stream();
    let chunk = tokio::time::timeout(Duration::from_secs(5), body.next())
        .await
        .expect("a replayed event")
        .unwrap()
        .unwrap();
    let text = String::from_utf8_lossy(&chunk);
    assert!(text.contains("event: mcp.tool_called"), "{text}");
    assert!(!text.contains("event: thread.created"), "{text}");
}

#[tokio::test]
async fn unsupported_method_is_a_json_405_with_allow() {
    let s = serve(None).await;
    let t = s.thread().await;
    let resp = s
        .http
        .put(s.url(&format!("/api/threads/{}", t.id)))
        .send()
        .await
        .unwrap();
    let allow = resp
        .headers()
        .get("allow")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    assert!(allow.contains("GET"), "Allow: {allow:?}");
    let message = json_error(resp, StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed").await;
    assert!(message.contains("PUT"), "{message}");
    assert!(
        allow.contains("DELETE") && allow.contains("PATCH"),
        "Allow: {allow:?}"
    );

    // Outside /api too.
    let resp = s.http.post(s.url("/healthz")).send().await.unwrap();
    json_error(resp, StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed").await;
}

#[tokio::test]
async fn unknown_paths_are_json_404_inside_and_outside_api() {
    let s = serve(None).await;
    // `/` is the web page (see the_web_page_is_served_…); `/ui` alone is no asset.
    for path in ["/nope", "/ui", "/api/nope", "/api/threads/x/y/z"] {
        let resp = s.http.get(s.url(path)).send().await.unwrap();
        json_error(resp, StatusCode::NOT_FOUND, "not_found").await;
    }
    let resp = s
        .http
        .get(s.url("/api/threads/thread_missing"))
        .send()
        .await
        .unwrap();
    let message = json_error(resp, StatusCode::NOT_FOUND, "not_found").await;
    assert!(message.contains("GET /api/threads"), "{message}");
}

async fn ws_next(
    ws: &mut (impl StreamExt<Item = Result<Message, tokio_tungstenite::tungstenite::Error>> + Unpin),
) -> Value {
    loop {
        let msg = tokio::time::timeout(Duration::from_secs(5), ws.next())
            .await
            .expect("a WebSocket message within 5 s")
            .unwrap()
            .unwrap();
        if let Message::Text(text) = msg {
            return serde_json::from_str(&text).unwrap();
        }
    }
}

#[tokio::test]
async fn websocket_subscribe_to_unknown_thread_answers_not_found() {
    let s = serve(None).await;
    let t = s.thread().await;
    let (mut ws, _) = tokio_tungstenite::connect_async(s.ws_url(""))
        .await
        .unwrap();

    let subscribe = json!({"type": "subscribe", "thread_id": "thread_missing", "after": 0});
    ws.send(Message::Text(subscribe.to_string().into()))
        .await
        .unwrap();
    let answer = ws_next(&mut ws).await;
    assert_eq!(answer["type"], "error", "{answer}");
    assert_eq!(answer["error"]["code"], "not_found", "{answer}");
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap()
            .contains("thread_missing")
    );

    // The socket stays usable: a known thread subscribes and replays.
    let subscribe = json!({"type": "subscribe", "thread_id": t.id, "after": 0});
    ws.send(Message::Text(subscribe.to_string().into()))
        .await
        .unwrap();
    let answer = ws_next(&mut ws).await;
    assert_eq!(answer["type"], "subscribed", "{answer}");
    let answer = ws_next(&mut ws).await;
    assert_eq!(answer["type"], "event", "{answer}");
    assert_eq!(answer["event"]["type"], "thread.created", "{answer}");
}

#[tokio::test]
async fn with_a_token_api_and_metrics_need_the_header_and_healthz_is_open() {
    let s = serve(Some(TOKEN)).await;
    let t = s.thread().await;
    let protected = [
        "/api/projects".to_owned(),
        "/api/threads".to_owned(),
        format!("/api/threads/{}", t.id),
        "/metrics".to_owned(),
    ];
    for path in &protected {
        let resp = s.http.get(s.url(path)).send().await.unwrap();
        json_error(resp, StatusCode::UNAUTHORIZED, "unauthorized").await;
        let resp = s
            .http
            .get(s.url(path))
            .bearer_auth("wrong")
            .send()
            .await
            .unwrap();
        json_error(resp, StatusCode::UNAUTHORIZED, "unauthorized").await;
        let resp = s
            .http
            .get(s.url(path))
            .bearer_auth(TOKEN)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::OK, "{path} with the header");
        // The query form is refused everywhere but /api/ws.
        let sep = if path.contains('?') { '&' } else { '?' };
        let resp = s
            .http
            .get(s.url(&format!("{path}{sep}token={TOKEN}")))
            .send()
            .await
            .unwrap();
        json_error(resp, StatusCode::UNAUTHORIZED, "unauthorized").await;
    }
    // SSE too: header yes, query no.
    let events = format!("/api/threads/{}/events", t.id);
    let resp = s
        .http
        .get(s.url(&format!("{events}?token={TOKEN}")))
        .send()
        .await
        .unwrap();
    json_error(resp, StatusCode::UNAUTHORIZED, "unauthorized").await;
    let resp = s
        .http
        .get(s.url(&events))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    drop(resp);

    let resp = s.http.get(s.url("/healthz")).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(resp.text().await.unwrap(), "ok");
}

#[tokio::test]
async fn with_a_token_the_websocket_takes_the_header_or_the_query() {
    let s = serve(Some(TOKEN)).await;

    let err = tokio_tungstenite::connect_async(s.ws_url(""))
        .await
        .unwrap_err();
    match err {
        tokio_tungstenite::tungstenite::Error::Http(resp) => {
            assert_eq!(resp.status(), 401);
        }
        other => panic!("expected HTTP 401, got {other}"),
    }
    let err = tokio_tungstenite::connect_async(s.ws_url("?token=wrong"))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, tokio_tungstenite::tungstenite::Error::Http(r) if r.status() == 401),
        "{err}"
    );

    let (mut ws, _) = tokio_tungstenite::connect_async(s.ws_url(&format!("?token={TOKEN}")))
        .await
        .unwrap();
    ws.close(None).await.unwrap();

    let mut request = s.ws_url("").into_client_request().unwrap();
    request
        .headers_mut()
        .insert("authorization", format!("Bearer {TOKEN}").parse().unwrap());
    let (mut ws, _) = tokio_tungstenite::connect_async(request).await.unwrap();
    ws.close(None).await.unwrap();
}

#[tokio::test]
async fn the_websocket_token_in_the_query_is_percent_decoded() {
    // What the web page sends: `?token=${encodeURIComponent(token)}`; base64 tokens
    // hold `+`, `/` and `=`.
    let token = "a+b/c=d e";
    let s = serve(Some(token)).await;
    let (mut ws, _) = tokio_tungstenite::connect_async(s.ws_url("?token=a%2Bb%2Fc%3Dd%20e"))
        .await
        .unwrap();
    ws.close(None).await.unwrap();
    let err = tokio_tungstenite::connect_async(s.ws_url("?token=a%2Bb"))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, tokio_tungstenite::tungstenite::Error::Http(r) if r.status() == 401),
        "{err}"
    );
}

#[tokio::test]
async fn the_web_page_is_served_with_a_strict_content_security_policy() {
    // The page is public even when the API needs a token: it holds no data.
    let s = serve(Some(TOKEN)).await;
    let resp = s.http.get(s.url("/")).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let header = |r: &reqwest::Response, name: &str| {
        r.headers()
            .get(name)
            .map(|v| v.to_str().unwrap().to_owned())
            .unwrap_or_default()
    };
    assert!(header(&resp, "content-type").starts_with("text/html"));
    let csp = header(&resp, "content-security-policy");
    assert!(csp.contains("script-src 'self'"), "{csp}");
    assert!(!csp.contains("unsafe-inline"), "{csp}");
    let html = resp.text().await.unwrap();
    assert!(html.contains("src=\"/ui/app.js\""), "{html}");

    for (path, mime) in [
        ("/ui/app.js", "text/javascript"),
        ("/ui/style.css", "text/css"),
    ] {
        let resp = s.http.get(s.url(path)).send().await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK, "{path}");
        assert!(header(&resp, "content-type").starts_with(mime), "{path}");
        assert_eq!(header(&resp, "x-content-type-options"), "nosniff");
        assert!(!resp.text().await.unwrap().is_empty());
    }
    let resp = s.http.get(s.url("/ui/secrets.js")).send().await.unwrap();
    let message = json_error(resp, StatusCode::NOT_FOUND, "not_found").await;
    assert!(message.contains("secrets.js"), "{message}");
    let resp = s.http.get(s.url("/ui/../knife.db")).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn latest_event_sequence_is_the_log_end_and_needs_the_token() {
    let s = serve(Some(TOKEN)).await;
    let resp = s
        .http
        .get(s.url("/api/events/latest"))
        .send()
        .await
        .unwrap();
    json_error(resp, StatusCode::UNAUTHORIZED, "unauthorized").await;
    let latest = |s: &Server| {
        let req = s.http.get(s.url("/api/events/latest")).bearer_auth(TOKEN);
        async move {
            let resp = req.send().await.unwrap();
            assert_eq!(resp.status(), StatusCode::OK);
            resp.json::<LatestSequenceResponse>()
                .await
                .unwrap()
                .sequence
        }
    };
    assert_eq!(latest(&s).await, 0);
    let t = s.thread().await;
    let end = s.store.latest_sequence(None).await.unwrap();
    assert!(end >= 2, "project and thread events: {end}");
    assert_eq!(latest(&s).await, end);
    // Subscribing from there replays nothing of the thread's past.
    let mut request = s.ws_url("").into_client_request().unwrap();
    request
        .headers_mut()
        .insert("authorization", format!("Bearer {TOKEN}").parse().unwrap());
    let (mut ws, _) = tokio_tungstenite::connect_async(request).await.unwrap();
    let sub = json!({"type": "subscribe", "thread_id": t.id, "after": end});
    ws.send(Message::Text(sub.to_string().into()))
        .await
        .unwrap();
    let first = ws.next().await.unwrap().unwrap();
    let first: Value = serde_json::from_str(first.to_text().unwrap()).unwrap();
    assert_eq!(first["type"], "subscribed");
    let next = tokio::time::timeout(Duration::from_millis(300), ws.next()).await;
    assert!(next.is_err(), "replayed an old event: {next:?}");
}

#[tokio::test]
async fn sessions_list_is_empty_and_closing_an_unknown_session_is_a_json_404() {
    let s = serve(None).await;
    let resp = s.http.get(s.url("/api/sessions")).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body, json!([]));
    let resp = s
        .http
        .post(s.url("/api/sessions/provider-session:x:nope/close"))
        .send()
        .await
        .unwrap();
    let message = json_error(resp, StatusCode::NOT_FOUND, "not_found").await;
    assert!(message.contains("provider-session:x:nope"), "{message}");
    // Behind the token like every other /api route.
    let s = serve(Some("secret")).await;
    let resp = s.http.get(s.url("/api/sessions")).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn another_web_page_cannot_use_knife_through_the_browser() {
    let s = serve(None).await;
    let host = s.base.trim_start_matches("http://").to_owned();
    let get = |origin: Option<&str>| {
        let mut req = s.http.get(s.url("/api/projects"));
        if let Some(o) = origin {
            req = req.header("origin", o);
        }
        req.send()
    };
    // The page's own origin, and clients that send none (curl, the CLI, MCP).
    assert_eq!(get(None).await.unwrap().status(), StatusCode::OK);
    let own = format!("http://{host}");
    assert_eq!(get(Some(&own)).await.unwrap().status(), StatusCode::OK);
    // A foreign page (or a sandboxed one: `null`) gets 403 with what to do.
    for foreign in ["http://evil.example", "null", "http://127.0.0.1:1"] {
        let message = json_error(
            get(Some(foreign)).await.unwrap(),
            StatusCode::FORBIDDEN,
            "forbidden",
        )
        .await;
        assert!(message.contains("cross-site request refused"), "{message}");
        assert!(message.contains(&own), "{message}");
    }
    // The WebSocket, which CORS does not cover: the handshake is refused.
    let mut req = s.ws_url("").into_client_request().unwrap();
    req.headers_mut()
        .insert("origin", "http://evil.example".parse().unwrap());
    let err = tokio_tungstenite::connect_async(req).await.unwrap_err();
    assert!(
        matches!(&err, tokio_tungstenite::tungstenite::Error::Http(r) if r.status() == 403),
        "{err}"
    );
    let mut req = s.ws_url("").into_client_request().unwrap();
    req.headers_mut().insert("origin", own.parse().unwrap());
    let (mut ws, _) = tokio_tungstenite::connect_async(req).await.unwrap();
    ws.close(None).await.unwrap();
}

#[tokio::test]
async fn without_a_token_only_loopback_host_names_are_answered() {
    // DNS rebinding: a foreign name resolving to 127.0.0.1 would make a foreign page
    // same-origin with the tokenless API.
    let s = serve(None).await;
    let port = s.base.rsplit(':').next().unwrap().to_owned();
    let with_host = |host: String| {
        s.http
            .get(s.url("/api/projects"))
            .header("host", host)
            .send()
    };
    for ok in [
        format!("localhost:{port}"),
        format!("127.0.0.1:{port}"),
        format!("[::1]:{port}"),
    ] {
        assert_eq!(
            with_host(ok.clone()).await.unwrap().status(),
            StatusCode::OK,
            "{ok}"
        );
    }
    let resp = with_host(format!("rebind.evil.example:{port}"))
        .await
        .unwrap();
    let message = json_error(resp, StatusCode::FORBIDDEN, "forbidden").await;
    assert!(message.contains("rebind.evil.example"), "{message}");
    assert!(message.contains("api_token_env"), "{message}");
    // Nothing at all is answered under a foreign name, the page included.
    let resp = s
        .http
        .get(s.url("/"))
        .header("host", "rebind.evil.example")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::FORBIDDEN);

    // With a token, any name is served (a rebinding page has no token).
    let s = serve(Some(TOKEN)).await;
    let resp = s
        .http
        .get(s.url("/api/projects"))
        .header("host", "knife.example.com")
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
}

/// `GET /api/providers` lists the configured instances sorted by id, marks the default
/// one, and needs the token like every `/api` route.
/// `GET /api/openapi.json` serves the generated OpenAPI 3.1 document: the one checked in
/// under docs/api/ (tests/openapi.rs keeps that copy in step with the code).
#[tokio::test]
async fn the_api_document_is_served_at_api_openapi_json() {
    let s = serve(None).await;
    let resp = s.http.get(s.url("/api/openapi.json")).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let served: Value = resp.json().await.unwrap();
    assert_eq!(served["openapi"], "3.1.0");
    let checked_in: Value = serde_json::from_str(
        &std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../docs/api/openapi.json"
        ))
        .unwrap(),
    )
    .unwrap();
    assert_eq!(served, checked_in);
}
