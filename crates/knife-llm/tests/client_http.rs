//! OpenAiChatClient over real loopback HTTP (a tiny axum server per test):
//! success stream, HTTP errors with retry-after, transport and stream failures.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use futures::StreamExt;
use knife_llm::openai_chat::{HttpTimeouts, OpenAiChatClient};
use knife_llm::{ChatMessage, LlmClient, LlmError, LlmEvent, LlmRequest, SseError};
use serde_json::{Value, json};

/// Every test is bounded by this (real time, loopback only).
const TEST_TIMEOUT: Duration = Duration::from_secs(10);

/// What the server saw of the last request.
#[derive(Clone, Default)]
struct Seen {
    body: Arc<Mutex<Option<Value>>>,
    auth: Arc<Mutex<Option<String>>>,
    /// Lets the `bodyerror` handler fail its body only after the client got the headers.
    release_body_error: Arc<tokio::sync::Notify>,
}

fn sse_response(chunks: Vec<Result<Bytes, std::io::Error>>) -> Response {
    Response::builder()
        .header(header::CONTENT_TYPE, "text/event-stream")
        .body(Body::from_stream(futures::stream::iter(chunks)))
        .unwrap()
}

/// The body in 5-byte pieces, so the client really sees many chunks.
fn chunked(bytes: &[u8]) -> Vec<Result<Bytes, std::io::Error>> {
    bytes
        .chunks(5)
        .map(|c| Ok(Bytes::copy_from_slice(c)))
        .collect()
}

fn fixture(rel: &str) -> Vec<u8> {
    common::load(rel).0
}

async fn ok_stream(State(seen): State<Seen>, headers: HeaderMap, body: Bytes) -> Response {
    *seen.body.lock().unwrap() = serde_json::from_slice(&body).ok();
    *seen.auth.lock().unwrap() = headers
        .get(header::AUTHORIZATION)
        .map(|v| v.to_str().unwrap().to_owned());
    sse_response(chunked(&fixture(
        "sse/chat-completions/tool-call-then-answer-2.sse",
    )))
}

async fn server_error() -> Response {
    let body = json!({"error": {"message": "The server had an error", "type": "server_error"}});
    (StatusCode::INTERNAL_SERVER_ERROR, axum::Json(body)).into_response()
}

async fn rate_limited_ms() -> Response {
    let mut response = (StatusCode::TOO_MANY_REQUESTS, "slow down").into_response();
    let headers = response.headers_mut();
    headers.insert("retry-after-ms", HeaderValue::from_static("1500"));
    headers.insert("retry-after", HeaderValue::from_static("9"));
    response
}

async fn rate_limited_secs() -> Response {
    let body = json!({"error": {"message": "Rate limit reached", "type": "requests"}});
    let mut response = (StatusCode::TOO_MANY_REQUESTS, axum::Json(body)).into_response();
    response
        .headers_mut()
        .insert("retry-after", HeaderValue::from_static("2"));
    response
}

async fn cut_mid_event() -> Response {
    sse_response(chunked(&fixture("adversarial/truncated-mid-event.sse")))
}

async fn garbage() -> Response {
    sse_response(vec![Ok(Bytes::from_static(
        b": keep-alive\n\ndata: this is not json\n\n",
    ))])
}

async fn body_error(State(seen): State<Seen>) -> Response {
    let release = seen.release_body_error;
    let first =
        futures::stream::once(async { Ok(Bytes::from_static(b"data: {\"choices\":[]}\n\n")) });
    // The error must come after the headers went out, or the client sees a
    // failed request instead of a failed body: wait for the test's signal.
    let failing = futures::stream::once(async move {
        release.notified().await;
        Err::<Bytes, _>(std::io::Error::other("upstream went away"))
    });
    Response::builder()
        .header(header::CONTENT_TYPE, "text/event-stream")
        .body(Body::from_stream(first.chain(failing)))
        .unwrap()
}

/// Sends one chunk, then keeps the connection open and silent.
async fn silent_after_first_chunk() -> Response {
    let first = futures::stream::once(async {
        Ok::<_, std::io::Error>(Bytes::from_static(b": hello\n\n"))
    });
    Response::builder()
        .header(header::CONTENT_TYPE, "text/event-stream")
        .body(Body::from_stream(first.chain(futures::stream::pending())))
        .unwrap()
}

/// Never sends the response headers.
async fn never_answers() -> Response {
    futures::future::pending().await
}

async fn start_server() -> (SocketAddr, Seen) {
    let seen = Seen::default();
    let app = Router::new()
        .route("/ok/v1/chat/completions", post(ok_stream))
        .route("/500/v1/chat/completions", post(server_error))
        .route("/429ms/v1/chat/completions", post(rate_limited_ms))
        .route("/429s/v1/chat/completions", post(rate_limited_secs))
        .route("/cut/v1/chat/completions", post(cut_mid_event))
        .route("/garbage/v1/chat/completions", post(garbage))
        .route("/bodyerror/v1/chat/completions", post(body_error))
        .route(
            "/silent/v1/chat/completions",
            post(silent_after_first_chunk),
        )
        .route("/noanswer/v1/chat/completions", post(never_answers))
        .with_state(seen.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    // The server task lives as long as the test runtime.
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (addr, seen)
}

fn request() -> LlmRequest {
    LlmRequest {
        model: "gpt-4o-mini".into(),
        messages: vec![ChatMessage::User { text: "hi".into() }],
        tools: vec![],
        max_output_tokens: Some(64),
        temperature: None,
    }
}

fn client(addr: SocketAddr, prefix: &str, key: Option<&str>) -> OpenAiChatClient {
    OpenAiChatClient::new(format!("http://{addr}/{prefix}/v1"), key.map(str::to_owned))
}

/// Runs the request and collects the whole stream.
async fn collect(client: &OpenAiChatClient) -> Result<Vec<Result<LlmEvent, LlmError>>, LlmError> {
    let stream = client.stream(request()).await?;
    Ok(stream.collect().await)
}

async fn run(client: OpenAiChatClient) -> Result<Vec<Result<LlmEvent, LlmError>>, LlmError> {
    tokio::time::timeout(TEST_TIMEOUT, collect(&client))
        .await
        .expect("test timed out")
}

#[tokio::test]
async fn client_streams_a_200_sse_response() {
    let (addr, seen) = start_server().await;
    let items = run(client(addr, "ok", Some("sk-test"))).await.unwrap();
    let text: String = items
        .iter()
        .filter_map(|e| match e {
            Ok(LlmEvent::TextDelta { text, .. }) => Some(text.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(text, "The capital of the UK is London.");
    let Some(Ok(LlmEvent::StepFinish {
        raw_reason,
        usage,
        response_id,
        ..
    })) = items.last()
    else {
        panic!("no StepFinish: {items:?}");
    };
    assert_eq!(raw_reason.as_deref(), Some("stop"));
    assert_eq!(usage.as_ref().unwrap().total_tokens, 87);
    assert_eq!(
        response_id.as_deref(),
        Some("chatcmpl-Dx0Xq5Xx9rHB2ehcHZCRDsnuymUXc")
    );
    assert!(items.iter().all(Result::is_ok));

    let body = seen.body.lock().unwrap().clone().unwrap();
    assert_eq!(body["stream"], true);
    assert_eq!(body["stream_options"]["include_usage"], true);
    assert_eq!(body["max_tokens"], 64);
    assert_eq!(
        body["messages"][0],
        json!({"role": "user", "content": "hi"})
    );
    assert_eq!(seen.auth.lock().unwrap().as_deref(), Some("Bearer sk-test"));
}

#[tokio::test]
async fn client_without_key_sends_no_authorization() {
    let (addr, seen) = start_server().await;
    run(client(addr, "ok", None)).await.unwrap();
    assert_eq!(*seen.auth.lock().unwrap(), None);
}

#[tokio::test]
async fn client_http_500_with_json_body() {
    let (addr, _) = start_server().await;
    let err = run(client(addr, "500", None)).await.unwrap_err();
    let LlmError::Http {
        status,
        retry_after,
        body,
        message,
    } = err
    else {
        panic!("expected Http, got {err:?}");
    };
    assert_eq!(status, 500);
    assert_eq!(retry_after, None);
    assert_eq!(message, "The server had an error");
    assert_eq!(body.unwrap()["error"]["type"], "server_error");
}

#[tokio::test]
async fn client_http_429_retry_after_ms() {
    let (addr, _) = start_server().await;
    let err = run(client(addr, "429ms", None)).await.unwrap_err();
    assert!(
        matches!(&err, LlmError::Http { status: 429, retry_after: Some(d), body: None, message }
            if *d == Duration::from_millis(1500) && message == "slow down"),
        "{err:?}"
    );
}

#[tokio::test]
async fn client_http_429_retry_after_seconds() {
    let (addr, _) = start_server().await;
    let err = run(client(addr, "429s", None)).await.unwrap_err();
    assert!(
        matches!(&err, LlmError::Http { status: 429, retry_after: Some(d), message, .. }
            if *d == Duration::from_secs(2) && message == "Rate limit reached"),
        "{err:?}"
    );
}

#[tokio::test]
async fn client_connection_refused_is_transport() {
    // Bind then drop a listener: the port is (almost certainly) closed now.
    let addr = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap()
    };
    let err = run(client(addr, "ok", None)).await.unwrap_err();
    assert!(matches!(&err, LlmError::Transport(_)), "{err:?}");
}

#[tokio::test]
async fn client_stream_cut_mid_event_is_ended_early() {
    let (addr, _) = start_server().await;
    let items = run(client(addr, "cut", None)).await.unwrap();
    assert_eq!(
        items.last(),
        Some(&Err(LlmError::Stream(SseError::EndedEarly)))
    );
    assert!(
        !items
            .iter()
            .any(|e| matches!(e, Ok(LlmEvent::StepFinish { .. })))
    );
    assert_eq!(items.iter().filter(|e| e.is_err()).count(), 1);
}

#[tokio::test]
async fn client_garbage_data_is_decode_error() {
    let (addr, _) = start_server().await;
    let items = run(client(addr, "garbage", None)).await.unwrap();
    assert!(
        matches!(&items[..], [Err(LlmError::Decode { data, .. })] if data == "this is not json"),
        "{items:?}"
    );
}

#[tokio::test]
async fn client_body_error_mid_stream_is_transport() {
    let (addr, seen) = start_server().await;
    let client = client(addr, "bodyerror", None);
    let items = tokio::time::timeout(TEST_TIMEOUT, async {
        let stream = client.stream(request()).await.unwrap();
        // Headers are in: now let the server break the body.
        seen.release_body_error.notify_one();
        stream.collect::<Vec<_>>().await
    })
    .await
    .expect("test timed out");
    assert!(
        matches!(
            &items[..],
            [Err(LlmError::Stream(SseError::ConnectionLost(_)))]
        ),
        "{items:?}"
    );
}

fn short_timeouts(addr: SocketAddr, prefix: &str) -> OpenAiChatClient {
    let timeouts = HttpTimeouts {
        connect: Duration::from_secs(5),
        idle: Duration::from_millis(300),
    };
    OpenAiChatClient::with_timeouts(format!("http://{addr}/{prefix}/v1"), None, timeouts)
}

#[tokio::test]
async fn client_silent_stream_times_out_instead_of_hanging() {
    let (addr, _) = start_server().await;
    let items = run(short_timeouts(addr, "silent")).await.unwrap();
    assert!(
        matches!(&items[..], [Err(LlmError::Timeout { after })] if *after == Duration::from_millis(300)),
        "{items:?}"
    );
    let message = items[0].as_ref().unwrap_err().to_string();
    assert!(message.contains("idle_timeout_secs"), "{message}");
}

#[tokio::test]
async fn client_endpoint_that_never_answers_times_out() {
    let (addr, _) = start_server().await;
    let err = run(short_timeouts(addr, "noanswer")).await.unwrap_err();
    assert!(matches!(err, LlmError::Timeout { .. }), "{err:?}");
}
