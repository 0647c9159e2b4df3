//! AnthropicClient and OpenAiResponsesClient over real loopback HTTP (a tiny
//! axum server per test): request shape and headers, recorded streams, HTTP
//! errors with JSON bodies and retry-after, in-stream errors, early ends.
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
use knife_llm::anthropic::{ANTHROPIC_VERSION, AnthropicClient, DEFAULT_MAX_TOKENS};
use knife_llm::openai_responses::OpenAiResponsesClient;
use knife_llm::{
    ChatMessage, FinishReason, LlmClient, LlmError, LlmEvent, LlmRequest, SseError, ToolSpec,
};
use serde_json::{Value, json};

/// Every test is bounded by this (real time, loopback only).
const TEST_TIMEOUT: Duration = Duration::from_secs(10);

/// What the server saw of the last request.
#[derive(Clone, Default)]
struct Seen {
    body: Arc<Mutex<Option<Value>>>,
    headers: Arc<Mutex<HeaderMap>>,
}

fn record(seen: &Seen, headers: HeaderMap, body: &Bytes) {
    *seen.body.lock().unwrap() = serde_json::from_slice(body).ok();
    *seen.headers.lock().unwrap() = headers;
}

/// An SSE response of `bytes` in 5-byte HTTP chunks.
fn sse(bytes: &[u8]) -> Response {
    let chunks: Vec<Result<Bytes, std::io::Error>> = bytes
        .chunks(5)
        .map(|c| Ok(Bytes::copy_from_slice(c)))
        .collect();
    Response::builder()
        .header(header::CONTENT_TYPE, "text/event-stream")
        .body(Body::from_stream(futures::stream::iter(chunks)))
        .unwrap()
}

fn fixture(rel: &str) -> Vec<u8> {
    common::load(rel).0
}

fn json_error(status: u16, body: Value, headers: &[(&'static str, &'static str)]) -> Response {
    let mut response = (StatusCode::from_u16(status).unwrap(), axum::Json(body)).into_response();
    for (k, v) in headers {
        response
            .headers_mut()
            .insert(*k, HeaderValue::from_static(v));
    }
    response
}

async fn anthropic_ok(State(seen): State<Seen>, headers: HeaderMap, body: Bytes) -> Response {
    record(&seen, headers, &body);
    sse(&fixture("sse/anthropic-messages/tool-no-args.sse"))
}

async fn anthropic_overloaded() -> Response {
    json_error(
        529,
        json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
        &[("retry-after", "3")],
    )
}

async fn anthropic_error_event() -> Response {
    sse(concat!(
        "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_e\",\"model\":\"claude\",\"usage\":{\"input_tokens\":3,\"output_tokens\":1}}}\n\n",
        "event: ping\ndata: {\"type\":\"ping\"}\n\n",
        "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n",
    ).as_bytes())
}

/// The text fixture cut in the middle of its last content delta.
async fn anthropic_cut() -> Response {
    let bytes = fixture("sse/anthropic-messages/text.sse");
    let text = String::from_utf8(bytes).unwrap();
    let at = text.find("there anything").unwrap();
    sse(&text.as_bytes()[..at])
}

/// Complete events, but the stream stops before `message_delta` / `message_stop`.
async fn anthropic_no_stop() -> Response {
    let text = String::from_utf8(fixture("sse/anthropic-messages/text.sse")).unwrap();
    let at = text.find("event: message_delta").unwrap();
    sse(&text.as_bytes()[..at])
}

async fn responses_ok(State(seen): State<Seen>, headers: HeaderMap, body: Bytes) -> Response {
    record(&seen, headers, &body);
    sse(&fixture("sse/responses/reasoning-summary.sse"))
}

async fn responses_quota() -> Response {
    json_error(
        429,
        json!({"error": {"message": "You exceeded your current quota", "type": "insufficient_quota",
                         "param": null, "code": "insufficient_quota"}}),
        &[("retry-after-ms", "250")],
    )
}

async fn responses_quota_event() -> Response {
    sse(&fixture("sse/responses/error-insufficient-quota.sse"))
}

async fn responses_cut() -> Response {
    let text = String::from_utf8(fixture("sse/responses/custom-tool-freeform-3.sse")).unwrap();
    let at = text.find("response.output_text.done").unwrap();
    sse(&text.as_bytes()[..at])
}

async fn start_server() -> (SocketAddr, Seen) {
    let seen = Seen::default();
    let app = Router::new()
        .route("/ok/v1/messages", post(anthropic_ok))
        .route("/529/v1/messages", post(anthropic_overloaded))
        .route("/errorevent/v1/messages", post(anthropic_error_event))
        .route("/cut/v1/messages", post(anthropic_cut))
        .route("/nostop/v1/messages", post(anthropic_no_stop))
        .route("/ok/v1/responses", post(responses_ok))
        .route("/429/v1/responses", post(responses_quota))
        .route("/errorevent/v1/responses", post(responses_quota_event))
        .route("/cut/v1/responses", post(responses_cut))
        .with_state(seen.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    // The server task lives as long as the test runtime.
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (addr, seen)
}

fn request() -> LlmRequest {
    LlmRequest {
        model: "test-model".into(),
        messages: vec![
            ChatMessage::System {
                text: "be brief".into(),
            },
            ChatMessage::User { text: "hi".into() },
        ],
        tools: vec![ToolSpec {
            name: "updateIssueList".into(),
            description: "Update the list".into(),
            parameters: json!({"type": "object", "properties": {}}),
        }],
        max_output_tokens: None,
        temperature: None,
    }
}

async fn run(client: &dyn LlmClient) -> Result<Vec<Result<LlmEvent, LlmError>>, LlmError> {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let stream = client.stream(request()).await?;
        Ok(stream.collect().await)
    })
    .await
    .expect("test timed out")
}

fn anthropic(addr: SocketAddr, case: &str, key: Option<&str>) -> AnthropicClient {
    AnthropicClient::new(format!("http://{addr}/{case}/v1"), key.map(str::to_owned))
}

fn responses(addr: SocketAddr, case: &str, key: Option<&str>) -> OpenAiResponsesClient {
    OpenAiResponsesClient::new(format!("http://{addr}/{case}/v1"), key.map(str::to_owned))
}

fn text_of(items: &[Result<LlmEvent, LlmError>]) -> String {
    items
        .iter()
        .filter_map(|e| match e {
            Ok(LlmEvent::TextDelta { text, .. }) => Some(text.as_str()),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn anthropic_client_streams_and_sends_the_messages_request() {
    let (addr, seen) = start_server().await;
    let items = run(&anthropic(addr, "ok", Some("sk-ant-test")))
        .await
        .unwrap();
    assert!(items.iter().all(Result::is_ok), "{items:?}");
    assert_eq!(text_of(&items), "I'll update the issue list for you.");
    assert!(items.iter().any(|e| matches!(e,
        Ok(LlmEvent::ToolCall { name, arguments, .. }) if name == "updateIssueList" && arguments == "{}")));
    assert!(matches!(
        items.last(),
        Some(Ok(LlmEvent::StepFinish {
            reason: FinishReason::ToolCalls,
            ..
        }))
    ));

    let headers = seen.headers.lock().unwrap().clone();
    assert_eq!(headers["x-api-key"], "sk-ant-test");
    assert_eq!(headers["anthropic-version"], ANTHROPIC_VERSION);
    assert!(headers.get(header::AUTHORIZATION).is_none());
    let body = seen.body.lock().unwrap().clone().unwrap();
    assert_eq!(body["stream"], true);
    assert_eq!(body["max_tokens"], DEFAULT_MAX_TOKENS);
    assert_eq!(body["system"], "be brief");
    assert_eq!(
        body["messages"],
        json!([{"role": "user", "content": [{"type": "text", "text": "hi"}]}])
    );
    assert_eq!(body["tools"][0]["input_schema"]["type"], "object");
}

#[tokio::test]
async fn anthropic_client_http_529_keeps_the_error_type_and_retry_after() {
    let (addr, _) = start_server().await;
    let err = run(&anthropic(addr, "529", None)).await.unwrap_err();
    let LlmError::Http {
        status,
        retry_after,
        body,
        message,
    } = &err
    else {
        panic!("expected Http, got {err:?}");
    };
    assert_eq!(*status, 529);
    assert_eq!(*retry_after, Some(Duration::from_secs(3)));
    assert_eq!(message, "Overloaded");
    assert_eq!(
        knife_llm::error_code(body.as_ref().unwrap()).as_deref(),
        Some("overloaded_error")
    );
}

#[tokio::test]
async fn anthropic_client_error_event_is_a_typed_provider_error() {
    let (addr, _) = start_server().await;
    let items = run(&anthropic(addr, "errorevent", None)).await.unwrap();
    assert!(
        matches!(&items[..], [Err(LlmError::Provider { code: Some(code), message, .. })]
            if code == "overloaded_error" && message == "Overloaded"),
        "{items:?}"
    );
}

#[tokio::test]
async fn anthropic_client_stream_ending_early() {
    let (addr, _) = start_server().await;
    let items = run(&anthropic(addr, "cut", None)).await.unwrap();
    assert_eq!(
        items.last(),
        Some(&Err(LlmError::Stream(SseError::EndedEarly)))
    );
    assert!(text_of(&items).starts_with("Hello! I"));
    let items = run(&anthropic(addr, "nostop", None)).await.unwrap();
    assert_eq!(
        items.last(),
        Some(&Err(LlmError::Stream(SseError::Incomplete)))
    );
    assert_eq!(items.iter().filter(|e| e.is_err()).count(), 1);
}

#[tokio::test]
async fn responses_client_streams_and_sends_the_responses_request() {
    let (addr, seen) = start_server().await;
    let items = run(&responses(addr, "ok", Some("sk-test"))).await.unwrap();
    assert!(items.iter().all(Result::is_ok), "{items:?}");
    assert!(text_of(&items).starts_with("Here are some general guidelines"));
    let reasoning_parts = items
        .iter()
        .filter(|e| matches!(e, Ok(LlmEvent::ReasoningStart { .. })))
        .count();
    assert_eq!(reasoning_parts, 2);
    let Some(Ok(LlmEvent::StepFinish { reason, usage, .. })) = items.last() else {
        panic!("{items:?}")
    };
    assert_eq!(*reason, FinishReason::Stop);
    assert_eq!(usage.as_ref().unwrap().reasoning_tokens, 256);

    let headers = seen.headers.lock().unwrap().clone();
    assert_eq!(headers[header::AUTHORIZATION], "Bearer sk-test");
    let body = seen.body.lock().unwrap().clone().unwrap();
    assert_eq!(body["stream"], true);
    assert_eq!(body["store"], false);
    assert_eq!(body["instructions"], "be brief");
    assert_eq!(body["input"], json!([{"role": "user", "content": "hi"}]));
    assert_eq!(body["tools"][0]["type"], "function");
    assert_eq!(body["tools"][0]["name"], "updateIssueList");
}

#[tokio::test]
async fn responses_client_http_429_keeps_the_code_and_retry_after_ms() {
    let (addr, _) = start_server().await;
    let err = run(&responses(addr, "429", None)).await.unwrap_err();
    let LlmError::Http {
        status,
        retry_after,
        body,
        message,
    } = &err
    else {
        panic!("expected Http, got {err:?}");
    };
    assert_eq!(*status, 429);
    assert_eq!(*retry_after, Some(Duration::from_millis(250)));
    assert_eq!(message, "You exceeded your current quota");
    assert_eq!(
        knife_llm::error_code(body.as_ref().unwrap()).as_deref(),
        Some("insufficient_quota")
    );
}

#[tokio::test]
async fn responses_client_error_event_then_failed_is_one_provider_error() {
    let (addr, _) = start_server().await;
    let items = run(&responses(addr, "errorevent", None)).await.unwrap();
    assert!(
        matches!(&items[..], [Err(LlmError::Provider { code: Some(code), .. })]
            if code == "insufficient_quota"),
        "{items:?}"
    );
}

#[tokio::test]
async fn responses_client_stream_ending_early() {
    let (addr, _) = start_server().await;
    let items = run(&responses(addr, "cut", None)).await.unwrap();
    assert_eq!(
        items.last(),
        Some(&Err(LlmError::Stream(SseError::EndedEarly)))
    );
    assert!(text_of(&items).starts_with("I tried querying"));
    assert!(
        !items
            .iter()
            .any(|e| matches!(e, Ok(LlmEvent::StepFinish { .. })))
    );
}
