// Process-test harness: spawns the real `knife` binary (serve, mock-llm, CLI) on temp dirs.
// Owns readiness (stdout "listening on" + /healthz polling), stderr capture and small API helpers.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use knife_protocol::{EventBody, Run, StoredEvent, ThreadProjection};
use reqwest::StatusCode;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::oneshot;

/// How long a process may take to print its "listening on" line and answer /healthz.
pub const READY_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a run may take to reach a terminal status in these tests.
pub const RUN_TIMEOUT: Duration = Duration::from_secs(15);
/// How long a one-shot CLI command may take (a bound that only detects a hang: `knife run
/// --provider opencode` starts the peer's Node runtime, which took over 20 s on a loaded
/// 2-core machine).
pub const CLI_TIMEOUT: Duration = Duration::from_secs(60);

/// Env vars of the binary that would leak the developer's setup into a test.
const SCRUBBED_ENV: &[&str] = &[
    "KNIFE_CONFIG",
    "KNIFE_LISTEN",
    "KNIFE_DATA_DIR",
    "KNIFE_SERVER",
    "KNIFE_API_TOKEN",
    "KNIFE_DEFAULT_PROVIDER",
    "KNIFE_MODEL",
    "OPENAI_BASE_URL",
    "OPENAI_API_KEY",
    "RUST_LOG",
];

/// The real binary under test.
pub fn knife_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_knife"))
}

/// A fake peer binary of knife-testkit (`fake_codex`, `fake_acp`) beside `knife`, built
/// (once per test process, a no-op when fresh) so a run of this package alone never
/// starts a stale one: `cargo test --workspace` builds it too, `-p knife` does not.
#[allow(dead_code)] // not every test binary starts a fake peer
pub fn fake_peer_bin(name: &str) -> PathBuf {
    static BUILT: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    let path = knife_bin().with_file_name(name);
    let mut built = BUILT
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if !built.iter().any(|b| b == name) {
        let status = std::process::Command::new(env!("CARGO"))
            .args(["build", "--quiet", "-p", "knife-testkit", "--bin", name])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .status()
            .expect("run cargo build for a fake peer");
        assert!(status.success(), "building {name} failed");
        built.push(name.to_owned());
    }
    assert!(path.is_file(), "{} is missing", path.display());
    path
}

/// A fixture file path (checked to exist), under `knife_testkit::fixtures_dir()`.
pub fn fixture(rel: &str) -> PathBuf {
    let path = knife_testkit::fixtures_dir().join(rel);
    assert!(
        path.is_file(),
        "fixture {} is missing; set KNIFE_FIXTURES_DIR",
        path.display()
    );
    path
}

/// A fixture's `.expected.json`, parsed.
pub fn expected_json(rel: &str) -> Value {
    let text = std::fs::read_to_string(fixture(rel)).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// A `knife` command with a scrubbed environment, run from `cwd` (so no stray
/// `./knife.toml` or `$XDG_CONFIG_HOME/knife/knife.toml` is picked up).
pub fn knife_command(cwd: &Path) -> Command {
    let mut cmd = Command::new(knife_bin());
    for var in SCRUBBED_ENV {
        cmd.env_remove(var);
    }
    cmd.env("XDG_CONFIG_HOME", cwd)
        .env("NO_COLOR", "1")
        .current_dir(cwd)
        .stdin(Stdio::null())
        .kill_on_drop(true);
    cmd
}

/// A running child process of the binary; killed when dropped.
pub struct Proc {
    /// `None` once the process was waited for.
    child: Option<Child>,
    /// `HOST:PORT` parsed from the "listening on" line.
    pub addr: String,
    stderr: Arc<Mutex<String>>,
    label: String,
}

impl Proc {
    /// Spawns `cmd` (stdout/stderr piped), waits for a stdout line containing
    /// `listening on http://`, then for `GET /healthz` to answer 200.
    pub async fn spawn(label: &str, mut cmd: Command) -> Proc {
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("spawn the knife binary");
        let stderr = Arc::new(Mutex::new(String::new()));
        forward_stderr(label, child.stderr.take().unwrap(), stderr.clone());
        let (addr_tx, addr_rx) = oneshot::channel::<String>();
        let stdout = child.stdout.take().unwrap();
        let out_label = label.to_owned();
        tokio::spawn(async move {
            let mut lines = BufReader::new(stdout).lines();
            let mut addr_tx = Some(addr_tx);
            while let Ok(Some(line)) = lines.next_line().await {
                eprintln!("[{out_label} stdout] {line}");
                if let Some(rest) = line.split("listening on http://").nth(1)
                    && let Some(tx) = addr_tx.take()
                {
                    let addr: String = rest
                        .chars()
                        .take_while(|c| !c.is_whitespace() && *c != '/')
                        .collect();
                    let _ = tx.send(addr);
                }
            }
        });
        let addr = match tokio::time::timeout(READY_TIMEOUT, addr_rx).await {
            Ok(Ok(addr)) => addr,
            other => {
                let status = child.try_wait().ok().flatten();
                panic!(
                    "{label} did not print its listening line within {READY_TIMEOUT:?} \
                     ({other:?}, exit: {status:?}); stderr:\n{}",
                    stderr.lock().unwrap()
                );
            }
        };
        let proc = Proc {
            child: Some(child),
            addr,
            stderr,
            label: label.to_owned(),
        };
        proc.wait_healthy().await;
        proc
    }

    /// `http://HOST:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Everything the process wrote to stderr so far.
    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// The OS process id.
    pub fn pid(&self) -> u32 {
        self.child
            .as_ref()
            .and_then(Child::id)
            .expect("process still running")
    }

    async fn wait_healthy(&self) {
        let http = reqwest::Client::new();
        let url = format!("{}/healthz", self.url());
        let deadline = tokio::time::Instant::now() + READY_TIMEOUT;
        loop {
            let ok = matches!(
                http.get(&url).timeout(Duration::from_secs(1)).send().await,
                Ok(r) if r.status().is_success()
            );
            if ok {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{} at {url} was not healthy within {READY_TIMEOUT:?}; stderr:\n{}",
                self.label,
                self.stderr()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits (up to 15 s) for the process to exit on its own (e.g. after a signal).
    pub async fn wait(&mut self) -> ExitStatus {
        let mut child = self.child.take().expect("process already waited for");
        match tokio::time::timeout(Duration::from_secs(15), child.wait()).await {
            Ok(status) => status.unwrap(),
            Err(_) => panic!(
                "{} did not exit within 15 s; stderr:\n{}",
                self.label,
                self.stderr()
            ),
        }
    }

    /// Sends SIGKILL (a crash: no shutdown code runs) and reaps the process.
    pub async fn kill_hard(&mut self) -> ExitStatus {
        let pid = self.pid();
        let status = std::process::Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -KILL {pid} failed");
        self.wait().await
    }

    /// Sends SIGTERM and waits (up to 15 s) for the process to exit.
    pub async fn terminate(&mut self) -> ExitStatus {
        let pid = self.pid();
        let status = std::process::Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -TERM {pid} failed");
        self.wait().await
    }
}

fn forward_stderr(
    label: &str,
    stderr: tokio::process::ChildStderr,
    sink: Arc<Mutex<String>>,
) -> tokio::task::JoinHandle<()> {
    let label = label.to_owned();
    tokio::spawn(async move {
        let mut lines = BufReader::new(stderr).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            eprintln!("[{label}] {line}");
            let mut buf = sink.lock().unwrap();
            buf.push_str(&line);
            buf.push('\n');
        }
    })
}

/// `knife mock-llm` on a loopback port.
pub struct MockLlm {
    pub proc: Proc,
    /// Holds the script file.
    _dir: tempfile::TempDir,
}

impl MockLlm {
    /// Replays `files` (paths relative to the fixtures dir) for successive requests.
    pub async fn replay(files: &[&str]) -> MockLlm {
        let dir = tempfile::tempdir().unwrap();
        let mut cmd = knife_command(dir.path());
        cmd.args(["mock-llm", "--listen", "127.0.0.1:0"]);
        for f in files {
            cmd.arg("--replay").arg(fixture(f));
        }
        let proc = Proc::spawn("mock-llm", cmd).await;
        MockLlm { proc, _dir: dir }
    }

    /// Serves the TOML `script`, with `extra` flags (e.g. `--chunk-delay`).
    pub async fn script(script: &str, extra: &[&str]) -> MockLlm {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("script.toml");
        std::fs::write(&path, script).unwrap();
        let mut cmd = knife_command(dir.path());
        cmd.args(["mock-llm", "--listen", "127.0.0.1:0", "--script"])
            .arg(&path)
            .args(extra);
        let proc = Proc::spawn("mock-llm", cmd).await;
        MockLlm { proc, _dir: dir }
    }

    /// The OpenAI-compatible base URL (`http://HOST:PORT/v1`).
    pub fn base_url(&self) -> String {
        format!("{}/v1", self.proc.url())
    }
}

/// A `knife.toml` with one `mock` provider instance at `base_url`.
pub fn config_toml(base_url: &str) -> String {
    format!(
        "default_provider = \"mock\"\n\n[providers.mock]\ndriver = \"openai-chat\"\n\
         base_url = \"{base_url}\"\nmodel = \"gpt-4o-mini\"\n"
    )
}

/// `knife serve` on a temp data dir, with a config pointing at a mock.
pub struct Server {
    pub proc: Proc,
    pub api: Api,
    /// Holds the config, the data dir and a project folder.
    pub dir: tempfile::TempDir,
}

impl Server {
    /// Starts a server whose default provider is the mock at `mock_base_url`.
    pub async fn start(mock_base_url: &str) -> Server {
        Self::start_with_config(&config_toml(mock_base_url)).await
    }

    /// [`Server::start`] with `server_toml` as the `[server]` table's body
    /// (e.g. `max_resume_attempts = 2`).
    pub async fn start_with(mock_base_url: &str, server_toml: &str) -> Server {
        let mut toml = config_toml(mock_base_url);
        if !server_toml.is_empty() {
            toml.push_str(&format!("\n[server]\n{server_toml}\n"));
        }
        Self::start_with_config(&toml).await
    }

    /// Starts a server with `knife.toml` = `config` (e.g. another driver).
    pub async fn start_with_config(config: &str) -> Server {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("knife.toml"), config).unwrap();
        std::fs::create_dir_all(dir.path().join("project")).unwrap();
        let proc = Self::spawn_in(dir.path()).await;
        let api = Api::new(&proc.url());
        Server { proc, api, dir }
    }

    /// [`Server::start_with_config`] with extra environment variables, and, when
    /// the test runs as root, as the unprivileged user `nobody` (65534, through
    /// `setpriv`; the temp dir is handed over to it): root may read any process's
    /// `/proc/<pid>/environ`, so only an ordinary user shows what a command run by
    /// the agent can read.
    pub async fn start_unprivileged_with_env(config: &str, env: &[(&str, &str)]) -> Server {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("knife.toml"), config).unwrap();
        std::fs::create_dir_all(dir.path().join("project")).unwrap();
        let as_root = std::fs::read_to_string("/proc/self/status")
            .unwrap()
            .lines()
            .find_map(|l| l.strip_prefix("Uid:"))
            .and_then(|ids| ids.split_whitespace().nth(1).map(|euid| euid == "0"))
            .unwrap();
        let mut cmd = if as_root {
            for path in [
                dir.path().to_owned(),
                dir.path().join("knife.toml"),
                dir.path().join("project"),
            ] {
                std::os::unix::fs::chown(&path, Some(65534), Some(65534)).unwrap();
            }
            // The build directory may sit under a home only root can enter (CI's
            // target dir is under /root): run a copy the unprivileged user can reach.
            let bin = dir.path().join("knife");
            std::fs::copy(knife_bin(), &bin).unwrap();
            std::fs::set_permissions(&bin, std::os::unix::fs::PermissionsExt::from_mode(0o755))
                .unwrap();
            let mut cmd = Command::new("setpriv");
            cmd.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
                .arg(&bin);
            cmd
        } else {
            Command::new(knife_bin())
        };
        for var in SCRUBBED_ENV {
            cmd.env_remove(var);
        }
        cmd.env("XDG_CONFIG_HOME", dir.path())
            .env("NO_COLOR", "1")
            .envs(env.iter().copied())
            .current_dir(dir.path())
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .arg("serve")
            .arg("--config")
            .arg(dir.path().join("knife.toml"))
            .args(["--listen", "127.0.0.1:0", "--data-dir"])
            .arg(dir.path().join("data"));
        let proc = Proc::spawn("knife serve", cmd).await;
        let api = Api::new(&proc.url());
        Server { proc, api, dir }
    }

    async fn spawn_in(dir: &Path) -> Proc {
        let mut cmd = knife_command(dir);
        cmd.arg("serve")
            .arg("--config")
            .arg(dir.join("knife.toml"))
            .args(["--listen", "127.0.0.1:0", "--data-dir"])
            .arg(dir.join("data"));
        Proc::spawn("knife serve", cmd).await
    }

    /// SIGTERM, checks a clean exit, then starts a new server on the same data dir.
    pub async fn restart(&mut self) {
        let status = self.proc.terminate().await;
        assert!(
            status.success(),
            "knife serve exited with {status} after SIGTERM; stderr:\n{}",
            self.proc.stderr()
        );
        self.respawn().await;
    }

    /// Starts a new server on the same data dir (the old process must be gone).
    pub async fn respawn(&mut self) {
        self.proc = Self::spawn_in(self.dir.path()).await;
        self.api = Api::new(&self.proc.url());
    }

    /// The project folder of this server's temp dir.
    pub fn project_dir(&self) -> PathBuf {
        self.dir.path().join("project")
    }

    /// The data directory (holds `knife.db`).
    pub fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// The temp dir holding `knife.toml`, `data/` and `project/`.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }
}

/// A tiny JSON client of the knife API.
#[derive(Clone)]
pub struct Api {
    pub base: String,
    pub http: reqwest::Client,
}

impl Api {
    pub fn new(base: &str) -> Api {
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .build()
            .unwrap();
        Api {
            base: base.to_owned(),
            http,
        }
    }

    /// `GET path` → (status, JSON body or `null`).
    pub async fn get(&self, path: &str) -> (StatusCode, Value) {
        let resp = self
            .http
            .get(format!("{}{path}", self.base))
            .send()
            .await
            .unwrap();
        status_and_json(resp).await
    }

    /// `POST path` with a JSON body → (status, JSON body or `null`).
    pub async fn post(&self, path: &str, body: &Value) -> (StatusCode, Value) {
        let resp = self
            .http
            .post(format!("{}{path}", self.base))
            .json(body)
            .send()
            .await
            .unwrap();
        status_and_json(resp).await
    }

    /// `POST path` with `raw` bytes as an `application/json` body.
    pub async fn post_raw(&self, path: &str, raw: &str) -> (StatusCode, Value) {
        let resp = self
            .http
            .post(format!("{}{path}", self.base))
            .header("content-type", "application/json")
            .body(raw.to_owned())
            .send()
            .await
            .unwrap();
        status_and_json(resp).await
    }

    /// True when `/healthz` answers 200 `ok`.
    pub async fn healthy(&self) -> bool {
        match self.http.get(format!("{}/healthz", self.base)).send().await {
            Ok(r) if r.status().is_success() => r.text().await.unwrap_or_default() == "ok",
            _ => false,
        }
    }

    /// Registers a project on `root`; returns its id.
    pub async fn create_project(&self, root: &Path) -> String {
        let (status, body) = self
            .post(
                "/api/projects",
                &json!({ "root": root.display().to_string() }),
            )
            .await;
        // 201 for a new folder, 200 with the existing project for a known one.
        assert!(
            status == StatusCode::CREATED || status == StatusCode::OK,
            "create project: {status} {body}"
        );
        body["id"].as_str().unwrap().to_owned()
    }

    /// Creates a thread in `project_id`; returns its id.
    pub async fn create_thread(&self, project_id: &str) -> String {
        let (status, body) = self
            .post(
                "/api/threads",
                &json!({ "project_id": project_id, "title": "test" }),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "create thread: {body}");
        body["id"].as_str().unwrap().to_owned()
    }

    /// Posts a message (expects 202); returns the run id.
    pub async fn post_message(&self, thread: &str, text: &str) -> String {
        let (status, body) = self
            .post(
                &format!("/api/threads/{thread}/messages"),
                &json!({ "text": text }),
            )
            .await;
        assert_eq!(status, StatusCode::ACCEPTED, "post message: {body}");
        body["run_id"].as_str().unwrap().to_owned()
    }

    /// `GET /api/threads/{id}` as raw JSON (expects 200).
    pub async fn thread_json(&self, thread: &str) -> Value {
        let (status, body) = self.get(&format!("/api/threads/{thread}")).await;
        assert_eq!(status, StatusCode::OK, "get thread: {body}");
        body
    }

    /// `GET /api/threads/{id}` once the thread is quiet: no active run and the same
    /// `latest_sequence` on two reads 100 ms apart (events written after a run's
    /// terminal event, e.g. the thread's own update, have landed).
    pub async fn settled_thread_json(&self, thread: &str) -> Value {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        let mut prev = self.thread_json(thread).await;
        loop {
            tokio::time::sleep(Duration::from_millis(100)).await;
            let now = self.thread_json(thread).await;
            let idle = now["thread"]["active_run_id"].is_null();
            if idle && prev["latest_sequence"] == now["latest_sequence"] {
                return now;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "thread {thread} did not settle within 5 s: {now}"
            );
            prev = now;
        }
    }

    /// `GET /api/threads/{id}`, typed.
    pub async fn projection(&self, thread: &str) -> ThreadProjection {
        serde_json::from_value(self.thread_json(thread).await).unwrap()
    }

    /// Follows `GET /api/threads/{id}/events?after=N` (SSE) until a `run.updated`
    /// of `run` with a terminal status; returns every event seen and that run.
    pub async fn follow_run(&self, thread: &str, run: &str, after: u64) -> (Vec<StoredEvent>, Run) {
        let fut = async {
            let resp = self
                .http
                .get(format!(
                    "{}/api/threads/{thread}/events?after={after}",
                    self.base
                ))
                // Longer than the outer time box, so a stuck run reports as such.
                .timeout(RUN_TIMEOUT + Duration::from_secs(5))
                .send()
                .await
                .unwrap();
            assert_eq!(resp.status(), StatusCode::OK);
            let mut sse = Box::pin(knife_llm::sse::decode_stream(resp.bytes_stream()));
            let mut events = Vec::new();
            while let Some(item) = sse.next().await {
                let item = item.expect("the SSE stream broke");
                assert_ne!(item.event, "error", "event stream error: {}", item.data);
                if item.event == "delta" || item.event == "reset" {
                    // Live text (LIVE-01), not durable: these helpers collect events.
                    continue;
                }
                let event: StoredEvent = serde_json::from_str(&item.data)
                    .unwrap_or_else(|e| panic!("bad event JSON ({e}): {}", item.data));
                assert_eq!(item.event, event.event.event_type(), "SSE event name");
                let done = match &event.event.body {
                    EventBody::RunUpdated(r)
                        if r.id.to_string() == run && r.status.is_terminal() =>
                    {
                        Some(r.clone())
                    }
                    _ => None,
                };
                events.push(event);
                if let Some(r) = done {
                    return (events, r);
                }
            }
            panic!("the event stream ended before run {run} finished; saw {events:#?}");
        };
        tokio::time::timeout(RUN_TIMEOUT, fut)
            .await
            .unwrap_or_else(|_| panic!("run {run} did not finish within {RUN_TIMEOUT:?}"))
    }
}

async fn status_and_json(resp: reqwest::Response) -> (StatusCode, Value) {
    let status = resp.status();
    let text = resp.text().await.unwrap();
    let body = if text.is_empty() {
        Value::Null
    } else {
        serde_json::from_str(&text).unwrap_or(Value::String(text))
    };
    (status, body)
}

/// Asserts `body` is an API error `{"error":{"code","message"}}` with `code`.
pub fn assert_api_error(body: &Value, code: &str) {
    let error = &body["error"];
    assert_eq!(error["code"], code, "error body: {body}");
    let message = error["message"].as_str().unwrap_or_default();
    assert!(!message.is_empty(), "error message is empty: {body}");
}

/// Output of a finished CLI command.
pub struct CliOutput {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

/// Runs `knife ARGS` from `cwd` to completion (within [`CLI_TIMEOUT`]).
pub async fn run_cli(cwd: &Path, args: &[&str]) -> CliOutput {
    let mut cmd = knife_command(cwd);
    cmd.args(args).stdout(Stdio::piped()).stderr(Stdio::piped());
    let child = cmd.spawn().expect("spawn the knife binary");
    let out = tokio::time::timeout(CLI_TIMEOUT, child.wait_with_output())
        .await
        .unwrap_or_else(|_| {
            panic!(
                "`knife {}` did not finish within {CLI_TIMEOUT:?}",
                args.join(" ")
            )
        })
        .unwrap();
    let result = CliOutput {
        status: out.status,
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    };
    eprintln!(
        "[knife {}] exit {}\n--- stdout\n{}\n--- stderr\n{}",
        args.join(" "),
        result.status,
        result.stdout,
        result.stderr
    );
    result
}

/// Polls `check` every 50 ms until it returns `Some`, or panics after `timeout`.
pub async fn poll_until<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A client WebSocket to a knife server.
pub type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// A WebSocket subscription of `thread` on `server` from `after`.
pub async fn subscribe_ws(server: &Server, thread: &str, after: u64) -> Ws {
    use futures::SinkExt;
    let url = format!("ws://{}/api/ws", server.proc.addr);
    let (mut ws, _) = tokio_tungstenite::connect_async(url.as_str())
        .await
        .unwrap();
    let msg = serde_json::json!({"type": "subscribe", "thread_id": thread, "after": after});
    ws.send(tokio_tungstenite::tungstenite::Message::Text(
        msg.to_string().into(),
    ))
    .await
    .unwrap();
    ws
}

/// One server message (30 s box).
pub async fn next_ws(ws: &mut Ws) -> knife_protocol::WsServerMessage {
    use futures::StreamExt;
    loop {
        let msg = tokio::time::timeout(Duration::from_secs(30), ws.next())
            .await
            .expect("no websocket message within 30 s")
            .expect("websocket closed")
            .expect("websocket error");
        if let tokio_tungstenite::tungstenite::Message::Text(t) = msg {
            return serde_json::from_str(&t).unwrap();
        }
    }
}
