// The mock LLM's axum routes: request recording and the answer of each route.
// Owns which response a chat request gets (script order, exhaustion, replay, bench).

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::RecordedRequest;
use super::bench::BenchStream;
use super::body::{BodyPlan, Unit, body_stream};
use super::chunks::{ChunkCtx, DONE, event, rough_tokens, stream_events};
use super::formats::{ApiFormat, anthropic_events, responses_events};
use super::gate::Gate;
use super::gemini;
use super::mcp_names::{declares_tools, resolve_response};
use super::script::{Kind, Script, ScriptResponse, UsageSpec};

/// The validated mode.
#[derive(Debug)]
pub(crate) enum Mode {
    Script(Script),
    Replay(Bytes),
    Bench(BenchStream),
}

/// State shared by the handlers and the handle.
#[derive(Debug)]
pub(crate) struct Shared {
    mode: Mode,
    split: Option<usize>,
    chunk_delay: Duration,
    model: String,
    gate: Gate,
    cancel: CancellationToken,
    /// Recorded requests and the model request count (every format), under one
    /// lock so the script order matches the recording order. A std mutex: never
    /// held across `.await`.
    log: Mutex<Log>,
    /// Generated tool call ids: `call_1`, `call_2`, ...
    calls: AtomicU64,
}

#[derive(Debug, Default)]
struct Log {
    requests: Vec<RecordedRequest>,
    chats: usize,
}

impl Shared {
    pub(crate) fn new(
        mode: Mode,
        split: Option<usize>,
        chunk_delay: Duration,
        model: String,
        gate: Gate,
        cancel: CancellationToken,
    ) -> Self {
        Self {
            mode,
            split,
            chunk_delay,
            model,
            gate,
            cancel,
            log: Mutex::new(Log::default()),
            calls: AtomicU64::new(0),
        }
    }

    pub(crate) fn requests(&self) -> Vec<RecordedRequest> {
        self.log
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .requests
            .clone()
    }

    /// Records a request; returns the model request number (from 1, counted
    /// across all formats) for model requests that use up a scripted response
    /// (`counts`; side requests answered by `no_tools_text` do not).
    fn record(&self, request: RecordedRequest, counts: bool) -> Option<usize> {
        let mut log = self.log.lock().unwrap_or_else(PoisonError::into_inner);
        let number = (counts && request.is_model_request()).then(|| {
            log.chats += 1;
            log.chats
        });
        log.requests.push(request);
        number
    }

    fn next_call_id(&self) -> String {
        format!("call_{}", self.calls.fetch_add(1, Ordering::Relaxed) + 1)
    }

    fn stream(&self, plan: BodyPlan) -> Body {
        Body::from_stream(body_stream(plan, self.gate.clone(), self.cancel.clone()))
    }
}

pub(crate) fn is_chat_path(path: &str) -> bool {
    matches!(path, "/v1/chat/completions" | "/chat/completions")
}

/// Every path goes through one handler so every request is recorded.
pub(crate) fn router(shared: Arc<Shared>) -> Router {
    Router::new().fallback(handle).with_state(shared)
}

async fn handle(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let body_json = serde_json::from_slice::<Value>(&body).ok();
    let recorded = RecordedRequest {
        method: method.to_string(),
        path: uri.path().to_owned(),
        headers: headers
            .iter()
            .map(|(k, v)| {
                (
                    k.as_str().to_owned(),
                    String::from_utf8_lossy(v.as_bytes()).into_owned(),
                )
            })
            .collect(),
        body: body_json.clone(),
        body_text: String::from_utf8_lossy(&body).into_owned(),
    };
    let path = recorded.path.clone();
    let format = recorded.format();
    let side_text = match &shared.mode {
        Mode::Script(script) if format.is_some() && !declares_tools(body_json.as_ref()) => {
            script.no_tools_text.clone()
        }
        _ => None,
    };
    let number = shared.record(recorded, side_text.is_none());
    match (method, path.as_str(), format, number) {
        (Method::POST, _, Some(format), _) if side_text.is_some() => {
            let response = ScriptResponse::text(side_text.unwrap_or_default());
            let request = Request {
                format,
                path: &path,
                body: body_json.as_ref(),
            };
            let ctx = request.ctx(&shared, 0);
            scripted(&shared, &ctx, request, &response).await
        }
        (Method::POST, _, Some(format), Some(number)) => {
            let request = Request {
                format,
                path: &path,
                body: body_json.as_ref(),
            };
            chat(&shared, number, request).await
        }
        (Method::GET, "/v1/models" | "/models", ..) => axum::Json(json!({
            "object": "list",
            "data": [{"id": shared.model, "object": "model", "created": 0, "owned_by": "knife-mock"}],
        }))
        .into_response(),
        (Method::GET, "/healthz", ..) => "ok".into_response(),
        // Debugging and out-of-process tests: every model request so far, in order.
        (Method::GET, "/_mock/requests", ..) => axum::Json(
            shared
                .requests()
                .into_iter()
                .filter(RecordedRequest::is_model_request)
                .collect::<Vec<_>>(),
        )
        .into_response(),
        (method, path, ..) => error_response(
            StatusCode::NOT_FOUND,
            &format!(
                "mock-llm has no route {method} {path}; use POST /v1/chat/completions, \
                 POST /v1/messages, POST /v1/responses, \
                 POST /v1beta/models/<model>:streamGenerateContent, GET /v1/models, GET /healthz or GET /_mock/requests"
            ),
            "not_found",
        ),
    }
}

fn error_response(status: StatusCode, message: &str, kind: &str) -> Response {
    (
        status,
        axum::Json(json!({"error": {"message": message, "type": kind, "code": kind}})),
    )
        .into_response()
}

fn unix_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

fn sse_response(body: Body, extra: &BTreeMap<String, String>) -> Response {
    let mut response = Response::new(body);
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    add_headers(&mut response, extra);
    response
}

fn add_headers(response: &mut Response, extra: &BTreeMap<String, String>) {
    for (name, value) in extra {
        match (
            HeaderName::try_from(name.as_str()),
            HeaderValue::try_from(value.as_str()),
        ) {
            (Ok(name), Ok(value)) => {
                response.headers_mut().insert(name, value);
            }
            _ => tracing::warn!(%name, %value, "mock-llm: skipping an invalid scripted header"),
        }
    }
}

/// One model request: its format, path (Gemini names the model there) and body.
#[derive(Debug, Clone, Copy)]
struct Request<'a> {
    format: ApiFormat,
    path: &'a str,
    body: Option<&'a Value>,
}

impl Request<'_> {
    /// The shared fields of the answer to request number `number` (0 for a
    /// side request): id, time and the model (the body's `model`, the Gemini
    /// path's model, else the server's).
    fn ctx(&self, shared: &Shared, number: usize) -> ChunkCtx {
        let model = self
            .body
            .and_then(|r| r.get("model"))
            .and_then(Value::as_str)
            .or_else(|| match self.format {
                ApiFormat::Gemini => gemini::model_from_path(self.path),
                _ => None,
            })
            .unwrap_or(&shared.model)
            .to_owned();
        ChunkCtx {
            id: self.format.response_id(number),
            created: unix_secs(),
            model,
        }
    }

    /// Rough prompt tokens: the conversation field's JSON length / 4.
    fn prompt_tokens(&self) -> u64 {
        let chars = self
            .body
            .and_then(|r| r.get(self.format.conversation_field()))
            .map_or(0, |m| m.to_string().chars().count());
        rough_tokens(chars)
    }
}

/// The answer of model request number `number` (from 1).
async fn chat(shared: &Shared, number: usize, request: Request<'_>) -> Response {
    let format = request.format;
    let ctx = request.ctx(shared, number);
    let prompt_tokens = request.prompt_tokens();
    match &shared.mode {
        Mode::Replay(bytes) => sse_response(
            shared.stream(BodyPlan {
                units: VecDeque::from([Unit::Bytes(bytes.clone())]),
                split: shared.split,
                delay: shared.chunk_delay,
                cut: false,
            }),
            &BTreeMap::new(),
        ),
        Mode::Bench(_) if format != ApiFormat::ChatCompletions => bench_format_error(),
        Mode::Bench(bench) => sse_response(
            shared.stream(bench_plan(
                &ctx,
                bench.deltas,
                prompt_tokens,
                shared.split,
                Duration::ZERO,
            )),
            &BTreeMap::new(),
        ),
        Mode::Script(script) => {
            let response = match script.responses.get(number - 1) {
                Some(r) => r,
                None => match script.responses.last() {
                    Some(last) if script.repeat_last => last,
                    _ => {
                        let message = format!(
                            "mock-llm script exhausted after {n} response{s} (this is model \
                             request #{number}); add [[response]] entries or set \
                             repeat_last = true",
                            n = script.responses.len(),
                            s = if script.responses.len() == 1 { "" } else { "s" },
                        );
                        // Logged too: the client only sees an HTTP 500 and may retry it.
                        tracing::warn!("{message}");
                        return error_response(
                            StatusCode::INTERNAL_SERVER_ERROR,
                            &message,
                            "mock_script_exhausted",
                        );
                    }
                },
            };
            scripted(shared, &ctx, request, response).await
        }
    }
}

/// Bench streams are Chat Completions chunks; other formats get a 400 saying so.
fn bench_format_error() -> Response {
    error_response(
        StatusCode::BAD_REQUEST,
        "mock-llm bench streams speak Chat Completions only; use POST /v1/chat/completions \
         (driver openai-chat)",
        "mock_bench_format",
    )
}

fn bench_plan(
    ctx: &ChunkCtx,
    deltas: usize,
    prompt_tokens: u64,
    split: Option<usize>,
    delay: Duration,
) -> BodyPlan {
    let shared_ctx = Arc::new(ctx.clone());
    let mut units = VecDeque::with_capacity(deltas + 4);
    units.push_back(Unit::Bytes(event(
        &ctx.chunk(json!({"role": "assistant", "content": ""}), None),
    )));
    units.extend((0..deltas).map(|_| Unit::BenchDelta(shared_ctx.clone())));
    units.push_back(Unit::Bytes(event(&ctx.chunk(json!({}), Some("stop")))));
    units.push_back(Unit::Bytes(event(&ctx.usage_chunk(UsageSpec {
        prompt_tokens,
        completion_tokens: deltas as u64 * 6,
    }))));
    units.push_back(Unit::Bytes(Bytes::from_static(DONE)));
    BodyPlan {
        units,
        split,
        delay,
        cut: false,
    }
}

async fn scripted(
    shared: &Shared,
    ctx: &ChunkCtx,
    request: Request<'_>,
    response: &ScriptResponse,
) -> Response {
    let format = request.format;
    let prompt_tokens = request.prompt_tokens();
    let delay = response
        .stream_deltas_ms
        .map_or(shared.chunk_delay, Duration::from_millis);
    let plan = |units: VecDeque<Unit>| BodyPlan {
        units,
        split: shared.split,
        delay,
        cut: response.cut,
    };
    // Validated at start, so an error here means the script was changed since:
    // answer with the validation message rather than panic.
    let kind = match response.kind() {
        Ok(kind) => kind,
        Err((field, message)) => {
            return error_response(
                StatusCode::INTERNAL_SERVER_ERROR,
                &format!("mock-llm script response (field `{field}`): {message}"),
                "mock_script_invalid",
            );
        }
    };
    match kind {
        Kind::Stream => {
            let resolved = resolve_response(format, request.body, response);
            let response = &resolved;
            if format == ApiFormat::Gemini && gemini::is_unary(request.path) {
                let mut out =
                    axum::Json(gemini::gemini_unary(ctx, response, prompt_tokens)).into_response();
                add_headers(&mut out, &response.headers);
                return out;
            }
            let next_call_id = || shared.next_call_id();
            let events = match format {
                ApiFormat::ChatCompletions => {
                    stream_events(ctx, response, prompt_tokens, next_call_id)
                }
                ApiFormat::AnthropicMessages => {
                    anthropic_events(ctx, response, prompt_tokens, next_call_id)
                }
                ApiFormat::Responses => {
                    responses_events(ctx, response, prompt_tokens, next_call_id)
                }
                ApiFormat::Gemini => gemini::gemini_events(ctx, response, prompt_tokens),
            };
            let units = events.events.into_iter().map(Unit::Bytes).collect();
            sse_response(shared.stream(plan(units)), &response.headers)
        }
        Kind::Body => {
            let status = StatusCode::from_u16(response.status.unwrap_or(200))
                .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            let body = response.body.clone().unwrap_or_else(|| {
                let message = format!("mock-llm scripted HTTP {}", status.as_u16());
                match format {
                    ApiFormat::AnthropicMessages => json!({"type": "error", "error": {
                        "type": "api_error", "message": message,
                    }}),
                    ApiFormat::Gemini => json!({"error": {
                        "code": status.as_u16(), "message": message, "status": "INTERNAL",
                    }}),
                    _ => json!({"error": {"message": message, "type": "server_error"}}),
                }
                .to_string()
            });
            let mut out = Response::new(Body::from(body));
            *out.status_mut() = status;
            out.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            add_headers(&mut out, &response.headers);
            out
        }
        Kind::Raw => {
            let raw = Bytes::from(response.raw.clone().unwrap_or_default());
            sse_response(
                shared.stream(plan(VecDeque::from([Unit::Bytes(raw)]))),
                &response.headers,
            )
        }
        Kind::SseFile => {
            let path = response.sse_file.clone().unwrap_or_default();
            match tokio::fs::read(&path).await {
                Ok(bytes) => sse_response(
                    shared.stream(plan(VecDeque::from([Unit::Bytes(Bytes::from(bytes))]))),
                    &response.headers,
                ),
                Err(e) => error_response(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    &format!("mock-llm cannot read sse_file {}: {e}", path.display()),
                    "mock_script_invalid",
                ),
            }
        }
        Kind::Bench if format != ApiFormat::ChatCompletions => bench_format_error(),
        Kind::Bench => {
            let deltas = response.bench_deltas.unwrap_or(0);
            let delay = response
                .stream_deltas_ms
                .map_or(Duration::ZERO, Duration::from_millis);
            sse_response(
                shared.stream(bench_plan(ctx, deltas, prompt_tokens, shared.split, delay)),
                &response.headers,
            )
        }
    }
}
