//! A scripted fake of `codex app-server` (0.169.0 wire shapes, see
//! docs/2026-11-29-external-runtimes.md) for knife's codex lifecycle tests.
//!
//! Speaks JSON-RPC lines without the `"jsonrpc"` field on stdin/stdout: `initialize`,
//! `thread/start`, `thread/resume` (only threads this `CODEX_HOME` has seen; others get
//! codex's "no rollout found" error), `thread/fork` (of a thread it has seen: a new
//! thread file naming the source and `lastTurnId`), `thread/unsubscribe`, `turn/start`,
//! `turn/interrupt`, `turn/steer` (as codex: `expectedTurnId` must name the running
//! turn, else an error; the input is recorded as a `userMessage` item of that turn and
//! answered `{turnId}`). Threads are files `CODEX_HOME/fake-threads/<id>`. Every line read
//! is appended to `CODEX_HOME/fake-requests.jsonl`, so tests can check what knife sent.
//! Exits 0 at stdin EOF (unless a `hang` command ran). With `FAKE_CODEX_MUTE_INITIALIZE`
//! set it never answers `initialize` (a wedged handshake).
//!
//! A turn runs the script embedded in its text after the marker `FAKE_CODEX:` — a JSON
//! array of commands — or, without one, streams `Hello from fake codex.`:
//!
//! - `{"text": "…"}`: an agent message streamed word by word;
//! - `{"reasoning": "…"}`: a reasoning item;
//! - `{"approve_command": "touch x"}`: a command item that asks
//!   `item/commandExecution/requestApproval` and runs (`completed`) on `accept` /
//!   `acceptForSession`, else ends `declined`;
//! - `{"run_command": "make", "output": ["a\n", "b\n"], "pause_ms": N}`: a command item
//!   that runs without asking: each piece of `output` is one
//!   `item/commandExecution/outputDelta`, N ms apart (and N ms before the item
//!   completes); the completed item's `aggregatedOutput` is the pieces joined;
//! - `{"approve_patch": "src/lib.rs"}`: a file-change item on that path that asks
//!   `item/fileChange/requestApproval` and is `completed` on `accept`, else `declined`;
//! - `{"mcp_tool": "whoami"}`: an MCP tool call on server `knife` asked through
//!   `mcpServer/elicitation/request`; `accept` → result `called whoami`, else failed;
//! - `{"usage": [input, output]}`: adds to the thread's token usage;
//! - `{"sleep_ms": N}`;
//! - `{"write_file": {"path": "/abs/path", "content": "…"}}`: writes the file itself
//!   (an edit no knife tool sees: checkpoints must still catch it);
//! - `{"wait_interrupt": true}`: blocks until `turn/interrupt`;
//! - `{"wait_steer": true}`: blocks until a `turn/steer` arrives, then streams the
//!   agent message `steered: <its text>`;
//! - `{"end_on_steer": true}`: blocks until a `turn/steer` arrives and takes it, then
//!   ends the turn `completed` *before* answering that `turn/steer` (codex accepting
//!   input just as its turn finishes: the answer follows `turn/completed`);
//! - `{"refuse_steer": "message"}` (anywhere in the script): the turn refuses every
//!   `turn/steer` with that message (as codex refuses a turn that cannot take input);
//! - `{"deaf": true}`: blocks forever and ignores `turn/interrupt` (a wedged turn);
//! - `{"fail": "message"}`: ends the turn `failed`;
//! - `{"crash": N}`: writes to stderr and exits with status N at once;
//! - `{"malformed": true}`: prints a non-JSON line, an answer to an unknown id and a
//!   JSON array;
//! - `{"oversized": N}`: prints one line of N bytes;
//! - `{"hang": true}`: from now on ignores stdin EOF and SIGTERM (only SIGKILL ends it);
//! - `{"spawn_child": true}`: starts `sleep 600` in its process group (orphan check).
//!
//! A turn interrupted while it waits (or sleeps) ends with status `interrupted`.

use std::collections::HashMap;
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::{Notify, oneshot};

/// What `turn/steer` delivered to a running turn, and whether it refuses more.
#[derive(Default)]
struct SteerBox {
    texts: Mutex<Vec<String>>,
    arrived: Notify,
    refuse: Mutex<Option<String>>,
    /// `end_on_steer`: steers are answered only after the turn's `turn/completed`.
    answer_after_end: bool,
    /// The JSON-RPC ids of those steers, answered when the turn ends.
    unanswered: Mutex<Vec<Value>>,
}

struct Fake {
    home: PathBuf,
    out: Mutex<std::io::Stdout>,
    next_server_id: AtomicU64,
    next_id: AtomicU64,
    pending: Mutex<HashMap<u64, oneshot::Sender<Value>>>,
    /// Running turns: codex thread id → (turn id, interrupt signal).
    turns: Mutex<HashMap<String, (String, Arc<Notify>)>>,
    /// Steers of the running turns: codex thread id → its mailbox.
    steers: Mutex<HashMap<String, Arc<SteerBox>>>,
    /// Cumulative usage per thread: (input, output).
    usage: Mutex<HashMap<String, (u64, u64)>>,
    hang: AtomicBool,
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

impl Fake {
    fn write(&self, value: &Value) {
        if let Ok(mut out) = self.out.lock() {
            let _ = writeln!(out, "{value}");
            let _ = out.flush();
        }
    }

    fn raw(&self, line: &str) {
        if let Ok(mut out) = self.out.lock() {
            let _ = writeln!(out, "{line}");
            let _ = out.flush();
        }
    }

    fn notify(&self, method: &str, params: Value) {
        self.write(&json!({"method": method, "params": params, "emittedAtMs": now_ms()}));
    }

    fn result(&self, id: &Value, result: Value) {
        self.write(&json!({"id": id, "result": result}));
    }

    fn error(&self, id: &Value, message: &str) {
        self.write(&json!({"id": id, "error": {"code": -32600, "message": message}}));
    }

    fn fresh(&self, prefix: &str) -> String {
        format!(
            "{prefix}-{}-{}",
            std::process::id(),
            self.next_id.fetch_add(1, Ordering::SeqCst)
        )
    }

    /// Sends a server→client request and waits for the answer's `result`.
    async fn ask(&self, method: &str, params: Value) -> Value {
        let id = self.next_server_id.fetch_add(1, Ordering::SeqCst);
        let (tx, rx) = oneshot::channel();
        if let Ok(mut pending) = self.pending.lock() {
            pending.insert(id, tx);
        }
        self.write(&json!({"method": method, "id": id, "params": params}));
        rx.await.unwrap_or(Value::Null)
    }

    fn threads_dir(&self) -> PathBuf {
        self.home.join("fake-threads")
    }

    fn log(&self, line: &str) {
        let path = self.home.join("fake-requests.jsonl");
        if let Ok(mut file) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
        {
            let _ = writeln!(file, "{line}");
        }
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let home = std::env::var_os("CODEX_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("fake-codex-home"));
    let _ = std::fs::create_dir_all(home.join("fake-threads"));
    let fake = Arc::new(Fake {
        home,
        out: Mutex::new(std::io::stdout()),
        next_server_id: AtomicU64::new(0),
        next_id: AtomicU64::new(1),
        pending: Mutex::new(HashMap::new()),
        turns: Mutex::new(HashMap::new()),
        steers: Mutex::new(HashMap::new()),
        usage: Mutex::new(HashMap::new()),
        hang: AtomicBool::new(false),
    });
    eprintln!(
        "fake codex app-server starting (pid {})",
        std::process::id()
    );
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        fake.log(&line);
        let Ok(message) = serde_json::from_str::<Value>(&line) else {
            continue; // codex ignores lines it cannot parse
        };
        handle(&fake, message);
    }
    if fake.hang.load(Ordering::SeqCst) {
        loop {
            tokio::time::sleep(Duration::from_secs(3600)).await;
        }
    }
}

fn handle(fake: &Arc<Fake>, message: Value) {
    let id = message.get("id").cloned().filter(|v| !v.is_null());
    let method = message.get("method").and_then(Value::as_str);
    let params = message.get("params").cloned().unwrap_or(Value::Null);
    let (Some(id), Some(method)) = (id.clone(), method) else {
        // An answer to one of our requests (or a notification such as `initialized`).
        if let (Some(id), Some(result)) = (id.and_then(|i| i.as_u64()), message.get("result")) {
            let waiter = fake.pending.lock().ok().and_then(|mut p| p.remove(&id));
            if let Some(waiter) = waiter {
                let _ = waiter.send(result.clone());
            }
        }
        return;
    };
    match method {
        "initialize" if std::env::var_os("FAKE_CODEX_MUTE_INITIALIZE").is_some() => {}
        "initialize" => fake.result(
            &id,
            json!({"userAgent": "fake-codex/0.169.0", "codexHome": fake.home.display().to_string(),
                   "platformFamily": "unix", "platformOs": "linux"}),
        ),
        "thread/start" => {
            let thread = fake.fresh("thr");
            let _ = std::fs::write(fake.threads_dir().join(&thread), params.to_string());
            let info = json!({"id": thread, "status": {"type": "idle"}, "cwd": params.get("cwd")});
            fake.result(
                &id,
                json!({"thread": info, "model": "mock-model", "cwd": params.get("cwd")}),
            );
            fake.notify("thread/started", json!({"thread": info}));
        }
        "thread/resume" => {
            let thread = params
                .get("threadId")
                .and_then(Value::as_str)
                .unwrap_or_default();
            if thread.is_empty() || !fake.threads_dir().join(thread).is_file() {
                fake.error(&id, &format!("no rollout found for thread id {thread}"));
                return;
            }
            fake.notify(
                "thread/status/changed",
                json!({"threadId": thread, "status": {"type": "idle"}}),
            );
            fake.result(
                &id,
                json!({"thread": {"id": thread, "status": {"type": "idle"}}}),
            );
        }
        "thread/fork" => {
            let source = params
                .get("threadId")
                .and_then(Value::as_str)
                .unwrap_or_default();
            if source.is_empty() || !fake.threads_dir().join(source).is_file() {
                fake.error(&id, &format!("no rollout found for thread id {source}"));
                return;
            }
            let thread = fake.fresh("thr");
            let record = json!({"forkedFrom": source, "lastTurnId": params.get("lastTurnId"), "params": params});
            let _ = std::fs::write(fake.threads_dir().join(&thread), record.to_string());
            let info = json!({"id": thread, "status": {"type": "idle"}, "cwd": params.get("cwd")});
            fake.result(
                &id,
                json!({"thread": info, "model": "mock-model", "cwd": params.get("cwd")}),
            );
            fake.notify("thread/started", json!({"thread": info}));
        }
        "thread/unsubscribe" => fake.result(&id, json!({"status": "unsubscribed"})),
        "turn/start" => {
            let thread = params
                .get("threadId")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            let text = params
                .pointer("/input/0/text")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            let turn = fake.fresh("turn");
            let interrupt = Arc::new(Notify::new());
            if let Ok(mut turns) = fake.turns.lock() {
                turns.insert(thread.clone(), (turn.clone(), Arc::clone(&interrupt)));
            }
            let refuse = script_of(&text).iter().find_map(|c| {
                c.get("refuse_steer")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
            });
            let answer_after_end = script_of(&text)
                .iter()
                .any(|c| c.get("end_on_steer").is_some());
            if let Ok(mut steers) = fake.steers.lock() {
                let mailbox = SteerBox {
                    refuse: Mutex::new(refuse),
                    answer_after_end,
                    ..SteerBox::default()
                };
                steers.insert(thread.clone(), Arc::new(mailbox));
            }
            fake.result(
                &id,
                json!({"turn": {"id": turn, "status": "inProgress", "items": []}}),
            );
            let fake = Arc::clone(fake);
            tokio::spawn(async move { run_turn(fake, thread, turn, text, interrupt).await });
        }
        "turn/interrupt" => {
            let thread = params
                .get("threadId")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let running = fake.turns.lock().ok().and_then(|t| t.get(thread).cloned());
            match running {
                Some((_, signal)) => {
                    signal.notify_one();
                    fake.result(&id, json!({}));
                }
                None => fake.error(&id, "no active turn to interrupt"),
            }
        }
        "turn/steer" => steer(fake, &id, &params),
        other => fake.error(&id, &format!("Invalid request: unknown variant `{other}`")),
    }
}

/// `turn/steer`: the running turn of `threadId` must be `expectedTurnId`.
fn steer(fake: &Arc<Fake>, id: &Value, params: &Value) {
    let thread = params
        .get("threadId")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let expected = params
        .get("expectedTurnId")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let text = params
        .pointer("/input/0/text")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let running = fake.turns.lock().ok().and_then(|t| t.get(thread).cloned());
    let mailbox = fake.steers.lock().ok().and_then(|s| s.get(thread).cloned());
    let (Some((turn, _)), Some(mailbox)) = (running, mailbox) else {
        fake.error(id, "no active turn to steer");
        return;
    };
    if turn != expected {
        fake.error(
            id,
            &format!("expected active turn id `{expected}` but found `{turn}`"),
        );
        return;
    }
    if let Some(why) = mailbox.refuse.lock().ok().and_then(|r| r.clone()) {
        fake.error(id, &why);
        return;
    }
    let ids = json!({"threadId": thread, "turnId": turn});
    let user = fake.fresh("user");
    let item =
        json!({"type": "userMessage", "id": user, "content": [{"type": "text", "text": text}]});
    fake.notify(
        "item/started",
        with(&ids, json!({"item": item, "startedAtMs": now_ms()})),
    );
    fake.notify(
        "item/completed",
        with(&ids, json!({"item": item, "completedAtMs": now_ms()})),
    );
    if mailbox.answer_after_end {
        if let Ok(mut ids) = mailbox.unanswered.lock() {
            ids.push(id.clone());
        }
    } else {
        fake.result(id, json!({"turnId": turn}));
    }
    if let Ok(mut texts) = mailbox.texts.lock() {
        texts.push(text);
    }
    mailbox.arrived.notify_one();
}

fn script_of(text: &str) -> Vec<Value> {
    match text.split_once("FAKE_CODEX:") {
        Some((_, rest)) => serde_json::Deserializer::from_str(rest.trim())
            .into_iter::<Vec<Value>>()
            .next()
            .and_then(Result::ok)
            .unwrap_or_default(),
        None => vec![json!({"text": "Hello from fake codex."})],
    }
}

enum End {
    Completed,
    Interrupted,
    Failed(String),
}

async fn run_turn(
    fake: Arc<Fake>,
    thread: String,
    turn: String,
    text: String,
    interrupt: Arc<Notify>,
) {
    let ids = json!({"threadId": thread, "turnId": turn});
    let mailbox = fake
        .steers
        .lock()
        .ok()
        .and_then(|s| s.get(&thread).cloned());
    fake.notify(
        "thread/status/changed",
        json!({"threadId": thread, "status": {"type": "active", "activeFlags": []}}),
    );
    fake.notify(
        "turn/started",
        json!({"threadId": thread, "turn": {"id": turn, "status": "inProgress", "items": []}}),
    );
    let user = fake.fresh("user");
    let user_item =
        json!({"type": "userMessage", "id": user, "content": [{"type": "text", "text": text}]});
    fake.notify(
        "item/started",
        with(&ids, json!({"item": user_item, "startedAtMs": now_ms()})),
    );
    fake.notify(
        "item/completed",
        with(&ids, json!({"item": user_item, "completedAtMs": now_ms()})),
    );
    let mut end = End::Completed;
    for command in script_of(&text) {
        if command.get("deaf").is_some() {
            // Never ends, and ignores turn/interrupt.
            std::future::pending::<()>().await;
        }
        let step = tokio::select! {
            step = run_command(&fake, &thread, &ids, &command) => step,
            _ = interrupt.notified() => Some(End::Interrupted),
        };
        if let Some(stop) = step {
            end = stop;
            break;
        }
    }
    if let Ok(mut turns) = fake.turns.lock() {
        turns.remove(&thread);
    }
    if let Ok(mut steers) = fake.steers.lock() {
        steers.remove(&thread);
    }
    let (status, error) = match end {
        End::Completed => ("completed", Value::Null),
        End::Interrupted => ("interrupted", Value::Null),
        End::Failed(message) => ("failed", json!({"message": message})),
    };
    fake.notify(
        "thread/status/changed",
        json!({"threadId": thread, "status": {"type": "idle"}}),
    );
    fake.notify(
        "turn/completed",
        json!({"threadId": thread, "turn": {"id": turn, "status": status, "error": error, "items": []}}),
    );
    // `end_on_steer`: the steers this turn took are answered only now.
    let late = mailbox
        .and_then(|m| {
            m.unanswered
                .lock()
                .ok()
                .map(|mut ids| std::mem::take(&mut *ids))
        })
        .unwrap_or_default();
    for id in late {
        fake.result(&id, json!({"turnId": turn}));
    }
}

fn with(ids: &Value, extra: Value) -> Value {
    let mut merged = ids.clone();
    if let (Some(target), Value::Object(more)) = (merged.as_object_mut(), extra) {
        target.extend(more);
    }
    merged
}

/// Runs one command; `Some(end)` stops the turn.
async fn run_command(fake: &Arc<Fake>, thread: &str, ids: &Value, command: &Value) -> Option<End> {
    let mailbox = || fake.steers.lock().ok().and_then(|s| s.get(thread).cloned());
    if command.get("refuse_steer").is_some() {
        return None;
    }
    if command.get("end_on_steer").is_some() {
        let mailbox = mailbox()?;
        loop {
            let arrived = mailbox.arrived.notified();
            if mailbox
                .texts
                .lock()
                .ok()
                .and_then(|mut t| t.pop())
                .is_some()
            {
                return Some(End::Completed);
            }
            arrived.await;
        }
    }
    if command.get("wait_steer").is_some() {
        let mailbox = mailbox()?;
        let text = loop {
            let arrived = mailbox.arrived.notified();
            if let Some(text) = mailbox.texts.lock().ok().and_then(|mut t| t.pop()) {
                break text;
            }
            arrived.await;
        };
        let say = json!({"text": format!("steered: {text}")});
        return Box::pin(run_command(fake, thread, ids, &say)).await;
    }
    if let Some(text) = command.get("text").and_then(Value::as_str) {
        let item = fake.fresh("msg");
        fake.notify(
            "item/started",
            with(ids, json!({"item": {"type": "agentMessage", "id": item, "text": ""}, "startedAtMs": now_ms()})),
        );
        for (i, word) in text.split_inclusive(' ').enumerate() {
            if i > 0 {
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            fake.notify(
                "item/agentMessage/delta",
                with(ids, json!({"itemId": item, "delta": word})),
            );
        }
        fake.notify(
            "item/completed",
            with(ids, json!({"item": {"type": "agentMessage", "id": item, "text": text}, "completedAtMs": now_ms()})),
        );
    } else if let Some(text) = command.get("reasoning").and_then(Value::as_str) {
        let item = fake.fresh("rs");
        fake.notify(
            "item/started",
            with(ids, json!({"item": {"type": "reasoning", "id": item, "summary": [], "content": []}, "startedAtMs": now_ms()})),
        );
        fake.notify(
            "item/reasoning/textDelta",
            with(
                ids,
                json!({"itemId": item, "delta": text, "contentIndex": 0}),
            ),
        );
        fake.notify(
            "item/completed",
            with(ids, json!({"item": {"type": "reasoning", "id": item, "summary": [], "content": [text]}, "completedAtMs": now_ms()})),
        );
    } else if let Some(cmd) = command.get("approve_command").and_then(Value::as_str) {
        let item = fake.fresh("call");
        let started = json!({"type": "commandExecution", "id": item, "command": cmd, "cwd": "/work",
                             "status": "inProgress", "commandActions": [], "aggregatedOutput": null, "exitCode": null});
        fake.notify(
            "item/started",
            with(ids, json!({"item": started, "startedAtMs": now_ms()})),
        );
        fake.notify("thread/status/changed", json!({"threadId": thread, "status": {"type": "active", "activeFlags": ["waitingOnApproval"]}}));
        let answer = fake
            .ask(
                "item/commandExecution/requestApproval",
                with(
                    ids,
                    json!({"itemId": item, "command": cmd, "cwd": "/work", "startedAtMs": now_ms(),
                                 "availableDecisions": ["accept", "cancel"]}),
                ),
            )
            .await;
        let decision = answer
            .get("decision")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        fake.notify("serverRequest/resolved", json!({"threadId": thread, "requestId": fake.next_server_id.load(Ordering::SeqCst) - 1}));
        let ran = decision == "accept" || decision == "acceptForSession";
        let done = json!({"type": "commandExecution", "id": item, "command": cmd, "cwd": "/work",
                          "status": if ran { "completed" } else { "declined" }, "commandActions": [],
                          "aggregatedOutput": if ran { format!("ran: {cmd} ({decision})") } else { String::new() },
                          "exitCode": if ran { Some(0) } else { None }});
        fake.notify(
            "item/completed",
            with(ids, json!({"item": done, "completedAtMs": now_ms()})),
        );
        if decision == "cancel" {
            return Some(End::Interrupted);
        }
    } else if let Some(cmd) = command.get("run_command").and_then(Value::as_str) {
        let item = fake.fresh("call");
        let pieces: Vec<&str> = command
            .get("output")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let pause = Duration::from_millis(
            command
                .get("pause_ms")
                .and_then(Value::as_u64)
                .unwrap_or_default(),
        );
        let started = json!({"type": "commandExecution", "id": item, "command": cmd, "cwd": "/work",
                             "status": "inProgress", "commandActions": [], "aggregatedOutput": null, "exitCode": null});
        fake.notify(
            "item/started",
            with(ids, json!({"item": started, "startedAtMs": now_ms()})),
        );
        for (i, piece) in pieces.iter().enumerate() {
            if i > 0 {
                tokio::time::sleep(pause).await;
            }
            fake.notify(
                "item/commandExecution/outputDelta",
                with(ids, json!({"itemId": item, "delta": piece})),
            );
        }
        tokio::time::sleep(pause).await;
        let done = json!({"type": "commandExecution", "id": item, "command": cmd, "cwd": "/work",
                          "status": "completed", "commandActions": [],
                          "aggregatedOutput": pieces.concat(), "exitCode": 0});
        fake.notify(
            "item/completed",
            with(ids, json!({"item": done, "completedAtMs": now_ms()})),
        );
    } else if let Some(path) = command.get("approve_patch").and_then(Value::as_str) {
        let item = fake.fresh("patch");
        let changes = json!([{"path": path, "kind": {"type": "update", "move_path": null}, "diff": "@@ -1 +1 @@\n-a\n+b\n"}]);
        let started =
            json!({"type": "fileChange", "id": item, "changes": changes, "status": "inProgress"});
        fake.notify(
            "item/started",
            with(ids, json!({"item": started, "startedAtMs": now_ms()})),
        );
        let answer = fake
            .ask(
                "item/fileChange/requestApproval",
                with(ids, json!({"itemId": item, "startedAtMs": now_ms(), "reason": null, "grantRoot": null})),
            )
            .await;
        let decision = answer
            .get("decision")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let applied = decision == "accept" || decision == "acceptForSession";
        let done = json!({"type": "fileChange", "id": item, "changes": changes,
                          "status": if applied { "completed" } else { "declined" }});
        fake.notify(
            "item/completed",
            with(ids, json!({"item": done, "completedAtMs": now_ms()})),
        );
    } else if let Some(tool) = command.get("mcp_tool").and_then(Value::as_str) {
        let item = fake.fresh("call_mcp");
        let started = json!({"type": "mcpToolCall", "id": item, "server": "knife", "tool": tool,
                             "status": "inProgress", "arguments": {}, "result": null, "error": null});
        fake.notify(
            "item/started",
            with(ids, json!({"item": started, "startedAtMs": now_ms()})),
        );
        let answer = fake
            .ask(
                "mcpServer/elicitation/request",
                json!({"threadId": thread, "turnId": ids["turnId"], "serverName": "knife", "mode": "form",
                       "_meta": {"codex_approval_kind": "mcp_tool_call", "persist": ["session", "always"],
                                 "tool_name": tool, "tool_params": {}},
                       "message": format!("Allow the knife MCP server to run tool \"{tool}\"?"),
                       "requestedSchema": {"type": "object", "properties": {}}}),
            )
            .await;
        let accepted = answer.get("action").and_then(Value::as_str) == Some("accept");
        let done = if accepted {
            json!({"type": "mcpToolCall", "id": item, "server": "knife", "tool": tool, "status": "completed",
                   "arguments": {}, "result": {"content": [{"type": "text", "text": format!("called {tool}")}]}, "error": null})
        } else {
            json!({"type": "mcpToolCall", "id": item, "server": "knife", "tool": tool, "status": "failed",
                   "arguments": {}, "result": null, "error": {"message": "user rejected MCP tool call"}})
        };
        fake.notify(
            "item/completed",
            with(ids, json!({"item": done, "completedAtMs": now_ms()})),
        );
    } else if let Some([input, output]) = command
        .get("usage")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_u64).collect::<Vec<_>>())
        .as_deref()
    {
        let (total_in, total_out) = {
            let mut usage = fake
                .usage
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let entry = usage.entry(thread.to_owned()).or_default();
            entry.0 += input;
            entry.1 += output;
            *entry
        };
        let breakdown = |i: u64, o: u64| {
            json!({"totalTokens": i + o, "inputTokens": i, "cachedInputTokens": 0,
                                              "outputTokens": o, "reasoningOutputTokens": 0})
        };
        fake.notify(
            "thread/tokenUsage/updated",
            with(ids, json!({"tokenUsage": {"total": breakdown(total_in, total_out), "last": breakdown(*input, *output)}})),
        );
    } else if let Some(ms) = command.get("sleep_ms").and_then(Value::as_u64) {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    } else if let Some(file) = command.get("write_file") {
        // Like codex applying a patch on its own (no knife tool involved).
        let path = file["path"].as_str().unwrap_or_default();
        let _ = std::fs::write(path, file["content"].as_str().unwrap_or_default());
    } else if command.get("wait_interrupt").is_some() {
        std::future::pending::<()>().await;
    } else if let Some(message) = command.get("fail").and_then(Value::as_str) {
        return Some(End::Failed(message.to_owned()));
    } else if let Some(code) = command.get("crash").and_then(Value::as_i64) {
        eprintln!("fake codex crashing with status {code}");
        std::process::exit(i32::try_from(code).unwrap_or(1));
    } else if command.get("malformed").is_some() {
        fake.raw("this is not json");
        fake.raw(r#"{"id": 987654, "result": {}}"#);
        fake.raw("[1, 2, 3]");
    } else if let Some(bytes) = command.get("oversized").and_then(Value::as_u64) {
        fake.raw(&"x".repeat(usize::try_from(bytes).unwrap_or(0)));
    } else if command.get("hang").is_some() {
        fake.hang.store(true, Ordering::SeqCst);
        // A registered handler replaces SIGTERM's default action: the process lives on.
        if let Ok(mut term) =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        {
            tokio::spawn(async move {
                while term.recv().await.is_some() {
                    eprintln!("fake codex ignoring SIGTERM");
                }
            });
        }
    } else if command.get("spawn_child").is_some() {
        match std::process::Command::new("sleep").arg("600").spawn() {
            Ok(child) => eprintln!("fake codex started child {}", child.id()),
            Err(e) => eprintln!("fake codex could not start a child: {e}"),
        }
    }
    None
}
