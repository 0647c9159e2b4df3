// knife-mock-llm: the scripted OpenAI-compatible streaming mock LLM behind `knife mock-llm`,
// `knife demo`, the benches and the tests. Owns the config, the axum server, request recording,
// the per-request response choice and the demo script; it links no test fakes (issue 19 item 7).

//! A scripted OpenAI-compatible (Chat Completions) streaming server on loopback.
//!
//! [`MockLlm::start`] binds a TCP listener (default `127.0.0.1:0`) and serves:
//!
//! * `POST /v1/chat/completions` and `POST /chat/completions`: a streamed answer
//!   (`text/event-stream`, `data: {chunk}\n\n` events ending with `data: [DONE]\n\n`).
//!   The request's `stream` flag is ignored: the answer always streams.
//! * `POST /v1/messages` (and `/messages`): the same answers as an Anthropic
//!   Messages stream (`event: <type>` + `data:` framing: `message_start`, a
//!   signed `thinking` block, `ping`, a `text` block, `tool_use` blocks with
//!   `input_json_delta`s, `message_delta`, `message_stop`; ids `msg_mock_N`).
//! * `POST /v1/responses` (and `/responses`): the same answers as an OpenAI
//!   Responses stream (`response.created`, a `reasoning` item with a summary
//!   part, a `message` item, `function_call` items with argument deltas,
//!   `response.completed`, or `response.incomplete` for a scripted `length`;
//!   ids `resp_mock_N`).
//! * `POST /v1beta/models/<model>:streamGenerateContent` (Gemini, `?alt=sse`):
//!   the same answers as Gemini `GenerateContentResponse` chunks (text parts,
//!   `thought` parts, `functionCall` parts, `finishReason` + `usageMetadata` last);
//!   `:generateContent` gets them merged into one JSON body.
//! * `GET /v1/models` (and `/models`): a one-model list; `GET /healthz`: `ok`;
//!   `GET /_mock/requests`: the recorded model requests as JSON.
//!
//! A tool call with `mcp_server` set is an MCP tool call: its name is looked up
//! in the request's tool list, so codex gets a `namespace`d `function_call`,
//! Claude `mcp__<server>__<tool>`, opencode `<server>_<tool>`, Gemini CLI
//! `mcp_<server>_<tool>`. With [`Script::no_tools_text`] set, requests declaring
//! no tools (agents' title/summary side requests) get that text and do not use
//! up a scripted response.
//!
//! Every request (any path) is recorded ([`MockLlmHandle::requests`]). The three
//! model routes share one request counter, so a script serves whichever format
//! asks next ([`MockLlmHandle::model_requests`]; [`ApiFormat`] tells them apart).
//! Script, replay and HTTP-error responses work in every format; bench streams
//! are Chat Completions only (other formats get HTTP 400). What a model request
//! gets depends on the [`MockMode`]:
//!
//! * [`MockMode::Script`]: request N gets the script's response N (see below);
//!   when the script is exhausted, HTTP 500 with a JSON error saying so (or the
//!   last response again with `repeat_last = true`).
//! * [`MockMode::Replay`]: the exact bytes of a `.sse` file, for every request.
//! * [`MockMode::Bench`]: K text deltas of write-time markers, no delay ([`mod@bench`]).
//!
//! In every mode the body can be written in pieces of `split` bytes (each its own
//! HTTP chunk), with `chunk_delay` before every chunk but the first, and *gated*:
//! each chunk waits for a [`Gate::release`] so a test can stop a stream exactly
//! where it wants. A generated stream is: a role chunk, reasoning deltas
//! (`delta.reasoning_content`), text deltas (`delta.content`), tool-call deltas
//! (`delta.tool_calls[{index,id,type:"function",function:{name,arguments}}]`, the
//! arguments in up to 3 pieces), a chunk with `finish_reason` `stop` or
//! `tool_calls`, a usage chunk with `choices: []`, then `[DONE]`. Chunk ids are
//! `chatcmpl-mock-N` (N = the chat request's number, from 1), tool call ids
//! `call_1`, `call_2`, ... across the server's life, and `model` echoes the request.
//!
//! # Script format
//!
//! TOML (or JSON with the same shape, when the file name ends in `.json`); every
//! field is optional, unknown fields are errors, and each `[[response]]` must pick
//! exactly one kind (see [`ScriptResponse`]):
//!
//! ```toml
//! repeat_last = false                # serve the last response forever once exhausted
//!
//! [[response]]
//! text = "Hello there"               # streamed as delta.content pieces
//! deltas = 3                         # split into 3 pieces (default: one per word)
//! reasoning = "Think first."         # sent as delta.reasoning_content before the text
//! usage = { prompt_tokens = 12, completion_tokens = 3 }   # default: ~4 chars per token
//! stream_deltas_ms = 5               # delay between chunks for this response
//!
//! [[response]]
//! tool_calls = [{ name = "list", arguments = '{"path":"."}' }]   # ids call_1, call_2, ...
//!
//! [[response]]
//! status = 500                       # a plain HTTP response
//! body = '{"error":{"message":"boom","type":"server_error"}}'
//! headers = { "retry-after-ms" = "0" }
//!
//! [[response]]
//! raw = "data: garbage\n\n"          # raw SSE bytes (adversarial)
//!
//! [[response]]
//! text = "partial"
//! cut = true                         # close the connection mid-event, no [DONE]
//!
//! [[response]]
//! sse_file = "streams/answer.sse"    # bytes of a file, relative to the script file
//!
//! [[response]]
//! bench_deltas = 100                 # 100 write-time markers, no delay
//! ```
//!
//! Parse errors name the line and the field (`TOML parse error at line 3, column 1 ...
//! unknown field `txt``); validation errors name the response and the field
//! (`[[response]] #2 (field `raw`): `text` and `raw` cannot be combined`).
//!
//! # Example
//!
//! ```no_run
//! # async fn demo() -> Result<(), knife_mock_llm::MockLlmError> {
//! use knife_mock_llm::{MockLlm, MockLlmConfig, Script, ScriptResponse};
//! let script = Script::new(vec![ScriptResponse::text("Hello there")]);
//! let mock = MockLlm::start(MockLlmConfig::script(script)).await?;
//! let _endpoint = mock.base_url(); // "http://127.0.0.1:PORT/v1"
//! mock.shutdown().await;
//! # Ok(()) }
//! ```

#![deny(missing_docs)]

/// Bench stream support: write-time markers `⟨t:<unix µs>⟩` in text deltas and their parser.
pub mod bench;
mod body;
mod chunks;
/// The scripted model and sample project of `knife demo`.
pub mod demo;
mod formats;
mod gate;
mod gemini;
mod invariants;
mod mcp_names;
mod script;
mod server;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub use bench::{BenchStream, parse_write_times, write_time_marker};
pub use formats::ApiFormat;
pub use gate::Gate;
pub use script::{Script, ScriptError, ScriptResponse, ToolCallSpec, UsageSpec};

use server::Shared;

/// What the chat endpoints answer.
#[derive(Debug, Clone)]
pub enum MockMode {
    /// Scripted responses, one per chat request, in order.
    Script(Script),
    /// The exact bytes of a `.sse` body, for every chat request.
    Replay(Replay),
    /// A bench stream for every chat request.
    Bench(BenchStream),
}

/// Where replayed bytes come from.
#[derive(Debug, Clone)]
pub enum Replay {
    /// A file, read once when the server starts.
    File(PathBuf),
    /// Bytes in memory.
    Bytes(Bytes),
}

/// How to run a [`MockLlm`].
#[derive(Debug, Clone)]
pub struct MockLlmConfig {
    /// Address to bind; default `127.0.0.1:0` (a free port).
    pub listen: SocketAddr,
    /// What the chat endpoints answer.
    pub mode: MockMode,
    /// Write every body in pieces of this many bytes, each its own HTTP chunk
    /// (`None`: one chunk per SSE event, or the whole replayed/raw body at once).
    /// Applies within each event of a generated stream. Must not be 0.
    pub split: Option<usize>,
    /// Sleep before every HTTP chunk but the first (default 0); a script
    /// response's `stream_deltas_ms` overrides it. Bench streams ignore it (a
    /// `bench_deltas` response only waits its own `stream_deltas_ms`).
    pub chunk_delay: Duration,
    /// Hold every HTTP body chunk until [`Gate::release`]d (default false).
    pub gated: bool,
    /// `model` of the chunks when the request has none, and of `/v1/models`.
    pub model: String,
}

impl MockLlmConfig {
    /// Default config (loopback, free port, no split, no delay, not gated) for a mode.
    pub fn new(mode: MockMode) -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            mode,
            split: None,
            chunk_delay: Duration::ZERO,
            gated: false,
            model: "mock-model".to_owned(),
        }
    }

    /// Serves a script.
    pub fn script(script: Script) -> Self {
        Self::new(MockMode::Script(script))
    }

    /// Replays a `.sse` file (read at start) for every request.
    pub fn replay_file(path: impl Into<PathBuf>) -> Self {
        Self::new(MockMode::Replay(Replay::File(path.into())))
    }

    /// Replays bytes for every request.
    pub fn replay_bytes(bytes: impl Into<Bytes>) -> Self {
        Self::new(MockMode::Replay(Replay::Bytes(bytes.into())))
    }

    /// Streams `deltas` write-time markers for every request.
    pub fn bench(deltas: usize) -> Self {
        Self::new(MockMode::Bench(BenchStream { deltas }))
    }

    /// Sets [`MockLlmConfig::split`] (bytes per HTTP chunk).
    #[must_use]
    pub fn with_split(mut self, bytes: usize) -> Self {
        self.split = Some(bytes);
        self
    }

    /// Sets [`MockLlmConfig::chunk_delay`].
    #[must_use]
    pub fn with_chunk_delay(mut self, delay: Duration) -> Self {
        self.chunk_delay = delay;
        self
    }

    /// Sets [`MockLlmConfig::gated`] to true.
    #[must_use]
    pub fn gated(mut self) -> Self {
        self.gated = true;
        self
    }

    /// Sets [`MockLlmConfig::listen`].
    #[must_use]
    pub fn with_listen(mut self, addr: SocketAddr) -> Self {
        self.listen = addr;
        self
    }
}

/// The mock could not start.
#[derive(Debug, thiserror::Error)]
pub enum MockLlmError {
    /// The listen address could not be bound.
    #[error("mock-llm cannot listen on {addr}: {source} (pick another --listen address or port 0)")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The replay file could not be read.
    #[error("mock-llm cannot read replay file {path}: {source}")]
    ReadReplay {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The script is invalid.
    #[error(transparent)]
    Script(#[from] ScriptError),
    /// A config value is out of range.
    #[error("mock-llm config: {0}")]
    Config(String),
}

/// One request the mock received (any path). Serialised (field names as here)
/// by the `GET /_mock/requests` route.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct RecordedRequest {
    /// `GET`, `POST`, ...
    pub method: String,
    /// The path, without the query string (e.g. `/v1/chat/completions`).
    pub path: String,
    /// Every header, names lower-case (the last value when repeated).
    pub headers: BTreeMap<String, String>,
    /// The body parsed as JSON, or `None` when it is empty or not JSON.
    pub body: Option<serde_json::Value>,
    /// The body as text (lossy UTF-8).
    pub body_text: String,
}

impl RecordedRequest {
    /// A header's value by (case-insensitive) name.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .get(&name.to_ascii_lowercase())
            .map(String::as_str)
    }

    /// Whether this is a chat completions request.
    pub fn is_chat(&self) -> bool {
        self.method == "POST" && server::is_chat_path(&self.path)
    }

    /// The wire format of a model request (`POST` to a chat completions,
    /// messages or responses path), `None` for any other request.
    pub fn format(&self) -> Option<ApiFormat> {
        if self.method != "POST" {
            return None;
        }
        ApiFormat::from_path(&self.path)
    }

    /// Whether this is a model request of any format (they share the script order).
    pub fn is_model_request(&self) -> bool {
        self.format().is_some()
    }
}

/// Starts mock LLM servers.
#[derive(Debug)]
pub struct MockLlm;

impl MockLlm {
    /// Binds `config.listen` and serves in a background task until
    /// [`MockLlmHandle::shutdown`] or drop of the handle.
    ///
    /// Errors: [`MockLlmError::Bind`], [`MockLlmError::ReadReplay`],
    /// [`MockLlmError::Script`] (a response with no or several kinds) and
    /// [`MockLlmError::Config`] (`split = Some(0)`).
    pub async fn start(config: MockLlmConfig) -> Result<MockLlmHandle, MockLlmError> {
        if config.split == Some(0) {
            return Err(MockLlmError::Config(
                "split must be at least 1 byte".to_owned(),
            ));
        }
        let mode = match config.mode {
            MockMode::Script(script) => {
                script.validate_all()?;
                server::Mode::Script(script)
            }
            MockMode::Replay(Replay::Bytes(bytes)) => server::Mode::Replay(bytes),
            MockMode::Replay(Replay::File(path)) => match tokio::fs::read(&path).await {
                Ok(bytes) => server::Mode::Replay(Bytes::from(bytes)),
                Err(source) => return Err(MockLlmError::ReadReplay { path, source }),
            },
            MockMode::Bench(bench) => server::Mode::Bench(bench),
        };
        let listener = tokio::net::TcpListener::bind(config.listen)
            .await
            .map_err(|source| MockLlmError::Bind {
                addr: config.listen,
                source,
            })?;
        let addr = listener.local_addr().map_err(|source| MockLlmError::Bind {
            addr: config.listen,
            source,
        })?;
        let cancel = CancellationToken::new();
        let gate = Gate::new(config.gated);
        let shared = Arc::new(Shared::new(
            mode,
            config.split,
            config.chunk_delay,
            config.model,
            gate.clone(),
            cancel.clone(),
        ));
        let app = server::router(shared.clone());
        let signal = cancel.clone();
        // Spawned, not awaited: the handle owns the server's life through `cancel`.
        let task = tokio::spawn(async move {
            let served = axum::serve(listener, app)
                .with_graceful_shutdown(async move { signal.cancelled().await })
                .await;
            if let Err(e) = served {
                tracing::warn!(error = %e, "mock-llm server stopped with an error");
            }
        });
        Ok(MockLlmHandle {
            addr,
            shared,
            gate,
            cancel,
            task: Some(task),
        })
    }
}

/// A running mock LLM. Dropping it stops the server (open streams are aborted).
#[derive(Debug)]
pub struct MockLlmHandle {
    addr: SocketAddr,
    shared: Arc<Shared>,
    gate: Gate,
    cancel: CancellationToken,
    task: Option<JoinHandle<()>>,
}

impl MockLlmHandle {
    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The OpenAI-style base URL: `http://127.0.0.1:PORT/v1`.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// Every request received so far (any path), in arrival order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.shared.requests()
    }

    /// Model requests of every format (chat completions, messages, responses)
    /// received so far, in arrival order.
    pub fn model_requests(&self) -> Vec<RecordedRequest> {
        self.requests()
            .into_iter()
            .filter(RecordedRequest::is_model_request)
            .collect()
    }

    /// Chat completions requests received so far.
    pub fn chat_requests(&self) -> Vec<RecordedRequest> {
        self.requests()
            .into_iter()
            .filter(RecordedRequest::is_chat)
            .collect()
    }

    /// [`RecordedRequest::tool_call_violations`] of every chat request so far,
    /// each prefixed with the request's number (from 1); empty when all are fine.
    pub fn tool_call_violations(&self) -> Vec<String> {
        self.chat_requests()
            .iter()
            .enumerate()
            .flat_map(|(i, r)| {
                r.tool_call_violations()
                    .into_iter()
                    .map(move |v| format!("chat request #{}: {v}", i + 1))
            })
            .collect()
    }

    /// The gate holding body chunks (open unless the config was `gated`).
    pub fn gate(&self) -> Gate {
        self.gate.clone()
    }

    /// Stops accepting connections, aborts open streams and waits (at most 5 s)
    /// for the server task to end.
    pub async fn shutdown(mut self) {
        self.cancel.cancel();
        if let Some(task) = self.task.take() {
            // Time box: streams end on cancel, so this is quick unless a client stalls.
            let abort = task.abort_handle();
            if tokio::time::timeout(Duration::from_secs(5), task)
                .await
                .is_err()
            {
                abort.abort();
            }
        }
    }
}

impl Drop for MockLlmHandle {
    fn drop(&mut self) {
        // Streams select on the token and end; axum's graceful shutdown then
        // lets the spawned server task finish on its own.
        self.cancel.cancel();
    }
}
