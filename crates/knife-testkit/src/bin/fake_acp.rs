//! `fake_acp`: a scripted ACP (Agent Client Protocol v1) agent over stdio, for the
//! `acp` driver's lifecycle tests. It speaks JSON-RPC 2.0, one message per line, and
//! is written against the protocol's JSON directly (not knife's types), so a test
//! through it checks knife's wire format too.
//!
//! Capabilities: `loadSession: true`, `mcpCapabilities.http: true`, and
//! `sessionCapabilities.resume` when `FAKE_ACP_RESUME=1`.
//!
//! A prompt whose text is not a JSON object is echoed: `echo #<n>: <text>` in
//! three chunks, where `n` counts the prompts of the session including the ones
//! loaded with `session/load` (so a test sees the agent kept its memory). A prompt
//! that is a JSON object `{"steps": [...]}` runs its steps in order:
//!
//! | step | effect |
//! | --- | --- |
//! | `{"text": "…"}` / `{"thought": "…"}` | one `agent_message_chunk` / `agent_thought_chunk` |
//! | `{"tool": {"id", "title", "kind", "input"}, "permission": bool, "output": "…"}` | `tool_call`; with `permission`, a `session/request_permission` (options `always`/allow_always, `once`/allow_once, `reject`/reject_once) and the call runs only when an allow option is chosen; then `tool_call_update` completed (or failed `rejected`) |
//! | `{"garbage": "…"}` | writes that raw line to stdout |
//! | `{"sleep_ms": N}` | waits |
//! | `{"write_file": {"path": "/abs/path", "content": "…"}}` | writes the file itself (an edit no knife tool sees) |
//! | `{"hang": true}` | stays busy until `session/cancel`, then ends the turn `cancelled` |
//! | `{"deaf": true}` | stays busy and ignores `session/cancel` |
//! | `{"crash": N}` | writes `fake_acp: crashing with N` to stderr and exits with status N |
//! | `{"stop": "max_tokens"}` | ends the turn with that stop reason |
//!
//! With `FAKE_ACP_MODELS=a,b` the agent offers those models (ACP `models` in the
//! `session/new|load|resume` answers, the first current) and takes `session/set_model`
//! (an unknown model id is an invalid-params error); its echo then names the session's
//! model: `echo #<n> (<model>): <text>`.
//!
//! Sessions persist in `FAKE_ACP_STATE_DIR` (one file per session with its prompts)
//! when set, so a new process can `session/load` them. Every message received is
//! appended to `FAKE_ACP_LOG` (JSON lines) when set, after a first line `{"pid": N}`.

use std::collections::HashMap;
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

type Pending = Arc<Mutex<HashMap<u64, oneshot::Sender<Value>>>>;

#[derive(Clone)]
struct Agent {
    out: mpsc::UnboundedSender<String>,
    pending: Pending,
    next_id: Arc<AtomicU64>,
    /// Prompts of each session (text), in order.
    sessions: Arc<Mutex<HashMap<String, Vec<String>>>>,
    /// Cancel token of the running prompt of each session.
    running: Arc<Mutex<HashMap<String, CancellationToken>>>,
    state_dir: Option<PathBuf>,
    /// Models offered (`FAKE_ACP_MODELS`), none when unset.
    models: Option<Vec<String>>,
    /// The current model of each session (when models are offered).
    current: Arc<Mutex<HashMap<String, String>>>,
}

impl Agent {
    /// The `models` field of a session answer, or none.
    fn models_of(&self, session: &str) -> Value {
        let Some(models) = &self.models else {
            return Value::Null;
        };
        let current = lock(&self.current)
            .entry(session.to_owned())
            .or_insert_with(|| models[0].clone())
            .clone();
        let available: Vec<Value> = models
            .iter()
            .map(|m| json!({"modelId": m, "name": m}))
            .collect();
        json!({"currentModelId": current, "availableModels": available})
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

impl Agent {
    fn write(&self, message: Value) {
        let _ = self.out.send(message.to_string());
    }

    fn respond(&self, id: &Value, result: Value) {
        self.write(json!({"jsonrpc": "2.0", "id": id, "result": result}));
    }

    fn error(&self, id: &Value, code: i64, message: &str) {
        self.write(
            json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}}),
        );
    }

    fn update(&self, session: &str, update: Value) {
        self.write(json!({"jsonrpc": "2.0", "method": "session/update",
            "params": {"sessionId": session, "update": update}}));
    }

    async fn request(&self, method: &str, params: Value) -> Option<Value> {
        let id = self.next_id.fetch_add(1, Ordering::SeqCst);
        let (tx, rx) = oneshot::channel();
        lock(&self.pending).insert(id, tx);
        self.write(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        rx.await.ok()
    }

    fn save(&self, session: &str) {
        let Some(dir) = &self.state_dir else { return };
        let prompts = lock(&self.sessions)
            .get(session)
            .cloned()
            .unwrap_or_default();
        let _ = std::fs::write(dir.join(session), json!(prompts).to_string());
    }

    fn load(&self, session: &str) -> Option<Vec<String>> {
        let dir = self.state_dir.as_ref()?;
        let text = std::fs::read_to_string(dir.join(session)).ok()?;
        serde_json::from_str(&text).ok()
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let (out_tx, mut out_rx) = mpsc::unbounded_channel::<String>();
    let writer = tokio::spawn(async move {
        while let Some(line) = out_rx.recv().await {
            let mut stdout = std::io::stdout().lock();
            if writeln!(stdout, "{line}")
                .and_then(|_| stdout.flush())
                .is_err()
            {
                break;
            }
        }
    });
    let log = std::env::var_os("FAKE_ACP_LOG").map(PathBuf::from);
    if let Some(path) = &log
        && let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
    {
        let _ = writeln!(f, "{}", json!({"pid": std::process::id()}));
    }
    let agent = Agent {
        out: out_tx,
        pending: Arc::default(),
        next_id: Arc::new(AtomicU64::new(0)),
        sessions: Arc::default(),
        running: Arc::default(),
        state_dir: std::env::var_os("FAKE_ACP_STATE_DIR").map(PathBuf::from),
        models: std::env::var("FAKE_ACP_MODELS")
            .ok()
            .map(|v| v.split(',').map(str::to_owned).collect::<Vec<_>>())
            .filter(|m| !m.is_empty()),
        current: Arc::default(),
    };
    let resume = std::env::var("FAKE_ACP_RESUME").is_ok_and(|v| v == "1");
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        if let Some(path) = &log
            && let Ok(mut f) = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
        {
            let _ = writeln!(f, "{line}");
        }
        let Ok(message) = serde_json::from_str::<Value>(&line) else {
            continue;
        };
        let id = message.get("id").cloned().filter(|v| !v.is_null());
        let method = message
            .get("method")
            .and_then(Value::as_str)
            .map(str::to_owned);
        let params = message.get("params").cloned().unwrap_or(Value::Null);
        match (id, method) {
            (Some(id), None) => {
                // An answer to one of our requests.
                if let Some(n) = id.as_u64()
                    && let Some(tx) = lock(&agent.pending).remove(&n)
                {
                    let _ = tx.send(message.get("result").cloned().unwrap_or(Value::Null));
                }
            }
            (Some(id), Some(method)) => handle_request(&agent, id, &method, params, resume),
            (None, Some(method)) if method == "session/cancel" => {
                let session = params["sessionId"].as_str().unwrap_or_default();
                if let Some(token) = lock(&agent.running).get(session) {
                    token.cancel();
                }
            }
            _ => {}
        }
    }
    // stdin closed: exit at once, as real agents do.
    drop(agent);
    let _ = tokio::time::timeout(Duration::from_millis(200), writer).await;
}

fn handle_request(agent: &Agent, id: Value, method: &str, params: Value, resume: bool) {
    match method {
        "initialize" => {
            let mut session_caps = json!({});
            if resume {
                session_caps["resume"] = json!({});
            }
            agent.respond(
                &id,
                json!({
                    "protocolVersion": 1,
                    "agentCapabilities": {"loadSession": true,
                        "mcpCapabilities": {"http": true, "sse": false},
                        "sessionCapabilities": session_caps},
                    "authMethods": [],
                    "agentInfo": {"name": "fake_acp", "version": "1"}
                }),
            );
        }
        "session/new" => {
            static NEXT: AtomicU64 = AtomicU64::new(1);
            let session = format!(
                "fake-{}-{}",
                std::process::id(),
                NEXT.fetch_add(1, Ordering::SeqCst)
            );
            lock(&agent.sessions).insert(session.clone(), Vec::new());
            agent.save(&session);
            let mut answer = json!({"sessionId": session});
            let models = agent.models_of(&session);
            if !models.is_null() {
                answer["models"] = models;
            }
            agent.respond(&id, answer);
        }
        "session/load" | "session/resume" => {
            let session = params["sessionId"].as_str().unwrap_or_default().to_owned();
            let Some(prompts) = agent.load(&session) else {
                agent.error(&id, -32002, &format!("session {session} not found"));
                return;
            };
            if method == "session/load" {
                for (n, prompt) in prompts.iter().enumerate() {
                    agent.update(
                        &session,
                        json!({"sessionUpdate": "user_message_chunk",
                        "content": {"type": "text", "text": prompt}}),
                    );
                    agent.update(
                        &session,
                        json!({"sessionUpdate": "agent_message_chunk",
                        "content": {"type": "text", "text": format!("echo #{}: {prompt}", n + 1)}}),
                    );
                }
            }
            lock(&agent.sessions).insert(session.clone(), prompts);
            let models = agent.models_of(&session);
            agent.respond(
                &id,
                if models.is_null() {
                    json!({})
                } else {
                    json!({"models": models})
                },
            );
        }
        "session/set_model" => {
            let session = params["sessionId"].as_str().unwrap_or_default().to_owned();
            let model = params["modelId"].as_str().unwrap_or_default().to_owned();
            match &agent.models {
                Some(models) if models.contains(&model) => {
                    lock(&agent.current).insert(session, model);
                    agent.respond(&id, json!({}));
                }
                Some(_) => agent.error(&id, -32602, &format!("unknown model {model}")),
                None => agent.error(&id, -32601, "method not found: session/set_model"),
            }
        }
        "session/prompt" => {
            let session = params["sessionId"].as_str().unwrap_or_default().to_owned();
            let text: String = params["prompt"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|b| b["text"].as_str())
                .collect();
            let n = {
                let mut sessions = lock(&agent.sessions);
                let Some(prompts) = sessions.get_mut(&session) else {
                    drop(sessions);
                    agent.error(&id, -32002, &format!("session {session} not found"));
                    return;
                };
                prompts.push(text.clone());
                prompts.len()
            };
            agent.save(&session);
            let token = CancellationToken::new();
            lock(&agent.running).insert(session.clone(), token.clone());
            let agent = agent.clone();
            tokio::spawn(async move {
                let stop = run_prompt(&agent, &session, &text, n, &token).await;
                lock(&agent.running).remove(&session);
                agent.respond(
                    &id,
                    json!({"stopReason": stop,
                    "usage": {"inputTokens": 10, "outputTokens": n, "totalTokens": 10 + n}}),
                );
            });
        }
        other => agent.error(&id, -32601, &format!("method not found: {other}")),
    }
}

async fn run_prompt(
    agent: &Agent,
    session: &str,
    text: &str,
    n: usize,
    token: &CancellationToken,
) -> String {
    let script: Option<Value> = serde_json::from_str(text).ok().filter(Value::is_object);
    let Some(script) = script else {
        let model = lock(&agent.current).get(session).cloned();
        let reply = match model {
            Some(model) => format!("echo #{n} ({model}): {text}"),
            None => format!("echo #{n}: {text}"),
        };
        let third = reply.len().div_ceil(3).max(1);
        let chars: Vec<char> = reply.chars().collect();
        for chunk in chars.chunks(third) {
            let part: String = chunk.iter().collect();
            agent.update(
                session,
                json!({"sessionUpdate": "agent_message_chunk",
                "content": {"type": "text", "text": part}}),
            );
        }
        return "end_turn".into();
    };
    let steps = script["steps"].as_array().cloned().unwrap_or_default();
    for step in steps {
        if token.is_cancelled() {
            return "cancelled".into();
        }
        if let Some(t) = step["text"].as_str() {
            agent.update(
                session,
                json!({"sessionUpdate": "agent_message_chunk",
                "content": {"type": "text", "text": t}}),
            );
        } else if let Some(t) = step["thought"].as_str() {
            agent.update(
                session,
                json!({"sessionUpdate": "agent_thought_chunk",
                "content": {"type": "text", "text": t}}),
            );
        } else if let Some(line) = step["garbage"].as_str() {
            let _ = agent.out.send(line.to_owned());
        } else if let Some(file) = step.get("write_file") {
            // An edit the agent makes itself (no knife tool sees it).
            let path = file["path"].as_str().unwrap_or_default();
            let _ = std::fs::write(path, file["content"].as_str().unwrap_or_default());
        } else if let Some(ms) = step["sleep_ms"].as_u64() {
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(ms)) => {}
                _ = token.cancelled() => return "cancelled".into(),
            }
        } else if step["hang"].as_bool() == Some(true) {
            token.cancelled().await;
            return "cancelled".into();
        } else if step["deaf"].as_bool() == Some(true) {
            std::future::pending::<()>().await;
        } else if let Some(code) = step["crash"].as_i64() {
            eprintln!("fake_acp: crashing with {code}");
            // Let the queued output reach stdout first.
            tokio::time::sleep(Duration::from_millis(50)).await;
            std::process::exit(i32::try_from(code).unwrap_or(1));
        } else if let Some(stop) = step["stop"].as_str() {
            return stop.to_owned();
        } else if step["tool"].is_object()
            && let Some(stop) = run_tool(agent, session, &step, token).await
        {
            return stop;
        }
    }
    "end_turn".into()
}

/// One tool call; `Some(stop)` ends the turn.
async fn run_tool(
    agent: &Agent,
    session: &str,
    step: &Value,
    token: &CancellationToken,
) -> Option<String> {
    let tool = &step["tool"];
    let call = tool["id"].as_str().unwrap_or("call-1");
    let title = tool["title"].as_str().unwrap_or("tool");
    let kind = tool["kind"].as_str().unwrap_or("execute");
    agent.update(
        session,
        json!({"sessionUpdate": "tool_call", "toolCallId": call,
        "title": title, "kind": kind, "status": "pending", "rawInput": tool["input"]}),
    );
    if step["permission"].as_bool() == Some(true) {
        let asked = agent.request(
            "session/request_permission",
            json!({
                "sessionId": session,
                "toolCall": {"toolCallId": call, "title": title, "kind": kind},
                "options": [
                    {"optionId": "always", "name": "Always allow", "kind": "allow_always"},
                    {"optionId": "once", "name": "Allow", "kind": "allow_once"},
                    {"optionId": "reject", "name": "Reject", "kind": "reject_once"}
                ]
            }),
        );
        let answer = tokio::select! {
            answer = asked => answer.unwrap_or(Value::Null),
            // Cancelled while asking: the client answers `cancelled` too; stop here.
            _ = token.cancelled() => return Some("cancelled".into()),
        };
        match answer["outcome"]["optionId"].as_str() {
            Some("once" | "always") => {}
            Some(_) => {
                agent.update(session, json!({"sessionUpdate": "tool_call_update",
                    "toolCallId": call, "status": "failed",
                    "content": [{"type": "content", "content": {"type": "text", "text": "rejected"}}]}));
                return None;
            }
            None => return Some("cancelled".into()),
        }
    }
    agent.update(
        session,
        json!({"sessionUpdate": "tool_call_update", "toolCallId": call,
        "status": "in_progress"}),
    );
    let output = step["output"].as_str().unwrap_or("ok");
    agent.update(
        session,
        json!({"sessionUpdate": "tool_call_update", "toolCallId": call,
        "status": "completed",
        "content": [{"type": "content", "content": {"type": "text", "text": output}}]}),
    );
    None
}
