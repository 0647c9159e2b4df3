// The peer suite's table of real peers and its harness: how each peer is
// configured as a knife provider instance (driver, command, args, env, home
// folder) against the in-process mock LLM, where the peer is installed, and the
// process-tree checks (peer process groups, no orphans).

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use knife_protocol::*;
use knife_testkit::mock_llm::{MockLlm, MockLlmConfig, MockLlmHandle, Script, ToolCallSpec};
use knife_testkit::peers::Peer;
use serde_json::{Value, json};

use crate::common::*;

/// How long a peer turn may take (peers start in 1-5 s; a turn is a few model calls).
pub const PEER_TIMEOUT: Duration = Duration::from_secs(90);

/// The name of knife's MCP server as the drivers register it with the peer.
pub const MCP_SERVER: &str = "knife";

/// Answer of side requests (no tools declared: titles, summaries).
pub const SIDE_TEXT: &str = "Peer suite";

/// One real peer as a knife provider instance.
pub struct PeerSpec {
    pub peer: Peer,
    /// `driver = "…"` in knife.toml.
    pub driver: &'static str,
    /// `args = […]` (empty: the driver's default).
    pub args: &'static [&'static str],
    /// `model = "…"`.
    pub model: &'static str,
    /// The peer's shell tool call that runs `command` and needs approval.
    pub shell_call: fn(command: &str) -> ToolCallSpec,
    /// The peer's environment, given the mock's root URL (`http://127.0.0.1:PORT`)
    /// and a home folder that survives knife restarts.
    pub env: fn(mock_root: &str, home: &Path) -> Vec<(String, String)>,
    /// Files the peer needs in its home folder before it starts.
    pub setup_home: fn(mock_root: &str, home: &Path),
    /// The peer's answers lag one prompt behind after a cancel: the prompt
    /// right after `session/cancel` ends at once (`end_turn`, zero usage, no
    /// text) and its answer streams during the following prompt
    /// (claude-agent-acp 0.23.1, seen without knife too).
    pub lags_after_cancel: bool,
    /// The peer can reload its session after being killed in the middle of a
    /// turn. Gemini CLI 0.61.0 cannot: its `session/load` then fails with "No
    /// previous sessions found for this project" (also without knife), so knife
    /// falls back to a new session and the conversation starts over.
    pub reloads_after_mid_turn_kill: bool,
}

fn call(name: &str, arguments: Value) -> ToolCallSpec {
    ToolCallSpec {
        name: name.into(),
        arguments: arguments.to_string(),
        ..ToolCallSpec::default()
    }
}

fn kv(pairs: &[(&str, String)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), v.clone()))
        .collect()
}

fn path(p: PathBuf) -> String {
    p.to_string_lossy().into_owned()
}

/// Codex app-server 0.169.0: `CODEX_HOME/config.toml` names the mock as a Responses provider.
pub static CODEX: PeerSpec = PeerSpec {
    peer: Peer::Codex,
    driver: "codex",
    args: &[
        "app-server",
        "--disable",
        "plugins",
        "--disable",
        "apps",
        "--disable",
        "remote_plugin",
        "--disable",
        "in_app_updates",
        "--disable",
        "plugin_sharing",
    ],
    model: "mock-model",
    // Escalation makes codex ask whatever the approval policy (unless `never`).
    shell_call: |command| {
        call(
            "exec_command",
            json!({"cmd": command, "sandbox_permissions": "require_escalated",
                   "justification": "The peer suite needs this file."}),
        )
    },
    env: |_, home| {
        kv(&[
            ("CODEX_HOME", path(home.join("codex-home"))),
            ("MOCK_API_KEY", "mock-key".into()),
        ])
    },
    setup_home: |mock_root, home| {
        let codex_home = home.join("codex-home");
        std::fs::create_dir_all(&codex_home).unwrap();
        std::fs::write(
            codex_home.join("config.toml"),
            format!(
                "model = \"mock-model\"\nmodel_provider = \"mock\"\n\n[model_providers.mock]\n\
                 name = \"knife mock\"\nbase_url = \"{mock_root}/v1\"\nenv_key = \"MOCK_API_KEY\"\n\
                 wire_api = \"responses\"\nrequest_max_retries = 0\nstream_max_retries = 0\n"
            ),
        )
        .unwrap();
    },
    lags_after_cancel: false,
    reloads_after_mid_turn_kill: true,
};

/// Claude through `claude-agent-acp` 0.23.1 (Anthropic Messages at the mock).
pub static CLAUDE: PeerSpec = PeerSpec {
    peer: Peer::ClaudeAgentAcp,
    driver: "acp",
    args: &[],
    model: "claude-mock",
    shell_call: |command| {
        call(
            "Bash",
            json!({"command": command, "description": "Create a file"}),
        )
    },
    env: |mock_root, home| {
        kv(&[
            ("HOME", path(home.to_owned())),
            ("ANTHROPIC_BASE_URL", mock_root.to_owned()),
            ("ANTHROPIC_API_KEY", "mock-key".into()),
            // Required as root, else session/new fails ("Query closed before response").
            ("IS_SANDBOX", "1".into()),
            ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1".into()),
            ("DISABLE_TELEMETRY", "1".into()),
            ("DISABLE_AUTOUPDATER", "1".into()),
            ("DISABLE_ERROR_REPORTING", "1".into()),
        ])
    },
    setup_home: |_, _| {},
    lags_after_cancel: true,
    reloads_after_mid_turn_kill: true,
};

/// Gemini CLI 0.61.0 (`gemini --acp`, streamGenerateContent at the mock).
pub static GEMINI: PeerSpec = PeerSpec {
    peer: Peer::Gemini,
    driver: "acp",
    // `-m`: else a model-router classifier call comes first.
    args: &["--acp", "-m", "gemini-2.5-flash"],
    model: "gemini-2.5-flash",
    shell_call: |command| {
        call(
            "run_shell_command",
            json!({"command": command, "description": "Create a file"}),
        )
    },
    env: |mock_root, home| {
        kv(&[
            ("HOME", path(home.to_owned())),
            ("GEMINI_API_KEY", "mock-key".into()),
            ("GOOGLE_GEMINI_BASE_URL", mock_root.to_owned()),
            ("GEMINI_TELEMETRY_ENABLED", "false".into()),
        ])
    },
    // Without it the project folder is untrusted and the MCP servers are ignored.
    setup_home: |_, home| {
        let dir = home.join(".gemini");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("settings.json"),
            r#"{"security":{"folderTrust":{"enabled":false}}}"#,
        )
        .unwrap();
    },
    lags_after_cancel: false,
    reloads_after_mid_turn_kill: false,
};

/// opencode 1.18.33 (`opencode acp`, Chat Completions at the mock; bash asks).
pub static OPENCODE: PeerSpec = PeerSpec {
    peer: Peer::Opencode,
    driver: "acp",
    args: &["acp"],
    model: "mock/mock-model",
    shell_call: |command| {
        call(
            "bash",
            json!({"command": command, "description": "Create a file"}),
        )
    },
    env: |mock_root, home| {
        let config = json!({
            "model": "mock/mock-model",
            "permission": {"bash": "ask", "edit": "ask"},
            "provider": {"mock": {
                "npm": "@ai-sdk/openai-compatible",
                "options": {"baseURL": format!("{mock_root}/v1"), "apiKey": "mock-key"},
                "models": {"mock-model": {"name": "Mock"}},
            }},
        });
        kv(&[
            ("HOME", path(home.to_owned())),
            ("XDG_CONFIG_HOME", path(home.join("config"))),
            ("XDG_DATA_HOME", path(home.join("data"))),
            ("XDG_CACHE_HOME", path(home.join("cache"))),
            ("OPENCODE_DISABLE_MODELS_FETCH", "1".into()),
            ("OPENCODE_DISABLE_AUTOUPDATE", "1".into()),
            ("OPENCODE_DISABLE_SHARE", "1".into()),
            ("OPENCODE_DISABLE_LSP_DOWNLOAD", "1".into()),
            ("OPENCODE_DISABLE_DEFAULT_PLUGINS", "1".into()),
            ("OPENCODE_CONFIG_CONTENT", config.to_string()),
        ])
    },
    setup_home: |_, _| {},
    lags_after_cancel: false,
    reloads_after_mid_turn_kill: true,
};

/// The peer's binary; panics with the install command when it is not installed. The
/// tests calling this are gated on `knife_peer_<name>` (KNIFE_PEERS selects the peer), so
/// a selected peer that is missing fails rather than passes.
pub fn installed(spec: &PeerSpec) -> PathBuf {
    let name = spec.peer.name();
    spec.peer.bin().unwrap_or_else(|| {
        panic!(
            "the {name} peer is not installed: run scripts/install-peers.sh --only {name} \
             (or set {})",
            spec.peer.bin_env()
        )
    })
}

fn toml_str(s: &str) -> String {
    serde_json::to_string(s).unwrap()
}

/// The knife.toml of a server whose default provider is the peer.
pub fn knife_toml(
    spec: &PeerSpec,
    bin: &Path,
    mock_root: &str,
    home: &Path,
    sessions: &str,
) -> String {
    let args: Vec<String> = spec.args.iter().map(|a| toml_str(a)).collect();
    let mut toml = format!(
        "default_provider = \"peer\"\n\n[providers.peer]\ndriver = {}\ncommand = {}\n\
         args = [{}]\nmodel = {}\n\n[providers.peer.env]\n",
        toml_str(spec.driver),
        toml_str(&bin.to_string_lossy()),
        args.join(", "),
        toml_str(spec.model),
    );
    for (k, v) in (spec.env)(mock_root, home) {
        toml.push_str(&format!("{k} = {}\n", toml_str(&v)));
    }
    if !sessions.is_empty() {
        toml.push_str(&format!("\n[sessions]\n{sessions}\n"));
    }
    toml
}

/// A running rig: the mock LLM (in this process), the peer's home folder and
/// `knife serve` with the peer as its default provider.
pub struct Rig {
    pub spec: &'static PeerSpec,
    pub mock: MockLlmHandle,
    pub server: Server,
    pub home: tempfile::TempDir,
    pub project: String,
    /// Every peer process group seen (killed on drop, in case a test failed).
    pub groups: std::sync::Mutex<Vec<i32>>,
}

impl Rig {
    /// Starts the rig, or `None` when the peer is not selected (see [`selected`]).
    /// `sessions` is the `[sessions]` table's body (e.g. `idle_timeout_secs = 2`).
    pub async fn start(spec: &'static PeerSpec, script: Script, sessions: &str) -> Rig {
        let bin = installed(spec);
        let mock = MockLlm::start(MockLlmConfig::script(script.no_tools_text(SIDE_TEXT)))
            .await
            .unwrap();
        let mock_root = format!("http://{}", mock.addr());
        let home = tempfile::Builder::new()
            .prefix("knife-peer-home-")
            .tempdir()
            .unwrap();
        (spec.setup_home)(&mock_root, home.path());
        let config = knife_toml(spec, &bin, &mock_root, home.path(), sessions);
        let server = Server::start_with_config(&config).await;
        let project = server.api.create_project(&server.project_dir()).await;
        Rig {
            spec,
            mock,
            server,
            home,
            project,
            groups: std::sync::Mutex::new(Vec::new()),
        }
    }

    /// A new thread in the rig's project (on the default provider, the peer).
    pub async fn thread(&self) -> String {
        self.server.api.create_thread(&self.project).await
    }

    /// Posts a message; returns the run id.
    pub async fn send(&self, thread: &str, text: &str) -> String {
        self.server.api.post_message(thread, text).await
    }

    /// Waits (up to [`PEER_TIMEOUT`]) until `run` of `thread` is terminal. With
    /// `approve`, every pending runtime request of the thread is answered
    /// `allow_once` through the HTTP API on the way; returns the projection and
    /// the ids of the requests answered.
    pub async fn finish(
        &self,
        thread: &str,
        run: &str,
        approve: bool,
    ) -> (ThreadProjection, Vec<String>) {
        let mut answered = Vec::new();
        let deadline = tokio::time::Instant::now() + PEER_TIMEOUT;
        loop {
            self.note_groups();
            let p = self.server.api.projection(thread).await;
            if let Some(r) = p.runs.iter().find(|r| r.id.as_str() == run)
                && r.status.is_terminal()
            {
                return (p, answered);
            }
            if approve {
                let fresh: Vec<String> = p
                    .runtime_requests
                    .iter()
                    .filter(|r| r.status == RuntimeRequestStatus::Pending)
                    .map(|r| r.id.to_string())
                    .filter(|id| !answered.contains(id))
                    .collect();
                for id in fresh {
                    self.answer(thread, &id, "allow_once").await;
                    answered.push(id);
                }
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{}: run {run} did not finish within {PEER_TIMEOUT:?}; projection: {p:#?}\nknife stderr:\n{}",
                self.spec.peer.name(),
                self.server.proc.stderr()
            );
            tokio::time::sleep(Duration::from_millis(150)).await;
        }
    }

    /// Answers runtime request `request` of `thread` with `decision`.
    pub async fn answer(&self, thread: &str, request: &str, decision: &str) -> Value {
        let (status, body) = self
            .server
            .api
            .post(
                &format!("/api/threads/{thread}/requests/{request}"),
                &json!({ "decision": decision }),
            )
            .await;
        assert_eq!(status, reqwest::StatusCode::OK, "answer {request}: {body}");
        body
    }

    /// Polls the projection until `check` returns something.
    pub async fn wait_for<T>(
        &self,
        what: &str,
        thread: &str,
        check: impl Fn(&ThreadProjection) -> Option<T>,
    ) -> T {
        let deadline = tokio::time::Instant::now() + PEER_TIMEOUT;
        loop {
            self.note_groups();
            let p = self.server.api.projection(thread).await;
            if let Some(t) = check(&p) {
                return t;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{}: {what} did not happen within {PEER_TIMEOUT:?}; projection: {p:#?}\nknife stderr:\n{}",
                self.spec.peer.name(),
                self.server.proc.stderr()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Every event of `thread` so far (SSE replay from 0 up to its latest event).
    pub async fn events(&self, thread: &str) -> Vec<StoredEvent> {
        let latest = self.server.api.projection(thread).await.latest_sequence;
        let resp = self
            .server
            .api
            .http
            .get(format!(
                "{}/api/threads/{thread}/events?after=0",
                self.server.api.base
            ))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), reqwest::StatusCode::OK);
        let mut sse = Box::pin(knife_llm::sse::decode_stream(resp.bytes_stream()));
        let mut events = Vec::new();
        use futures::StreamExt;
        while let Some(item) = tokio::time::timeout(Duration::from_secs(10), sse.next())
            .await
            .expect("event replay stalled")
        {
            let item = item.unwrap();
            if item.event == "delta" || item.event == "reset" {
                continue; // live text, not an event
            }
            let event: StoredEvent = serde_json::from_str(&item.data).unwrap();
            let last = event.sequence >= latest;
            events.push(event);
            if last {
                break;
            }
        }
        events
    }

    /// The process groups of the peer processes knife runs now (its children
    /// that lead a group of their own), remembered for [`Drop`].
    pub fn peer_groups(&self) -> Vec<i32> {
        let knife = i32::try_from(self.server.proc.pid()).unwrap();
        let groups: Vec<i32> = processes()
            .into_iter()
            .filter(|p| p.ppid == knife && p.pgid == p.pid)
            .map(|p| p.pgid)
            .collect();
        self.groups.lock().unwrap().extend(groups.iter().copied());
        groups
    }

    fn note_groups(&self) {
        let _ = self.peer_groups();
    }

    /// Waits until no live process is left in any of `groups`.
    pub async fn wait_groups_gone(&self, what: &str, groups: &[i32]) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let alive: Vec<OsProcess> = processes()
                .into_iter()
                .filter(|p| groups.contains(&p.pgid))
                .collect();
            if alive.is_empty() {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{}: {what}: processes still alive in groups {groups:?}: {alive:#?}",
                self.spec.peer.name()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The model requests that declared tools (the agent's turns, not side requests).
    pub fn turn_requests(&self) -> Vec<Value> {
        self.mock
            .model_requests()
            .into_iter()
            .filter_map(|r| r.body)
            .filter(|b| {
                b.get("tools")
                    .and_then(Value::as_array)
                    .is_some_and(|t| !t.is_empty())
            })
            .collect()
    }
}

impl Drop for Rig {
    fn drop(&mut self) {
        // A failed test must not leave peers behind: SIGKILL every group seen.
        for pgid in self.groups.lock().map(|g| g.clone()).unwrap_or_default() {
            let _ = std::process::Command::new("kill")
                .args(["-KILL", "--", &format!("-{pgid}")])
                .stderr(std::process::Stdio::null())
                .status();
        }
    }
}

/// One process from `/proc/<pid>/stat`.
#[derive(Debug, Clone)]
pub struct OsProcess {
    pub pid: i32,
    pub ppid: i32,
    pub pgid: i32,
    pub state: char,
    pub comm: String,
}

/// Every live (non-zombie) process.
pub fn processes() -> Vec<OsProcess> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(std::result::Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            let open = stat.find('(')?;
            let close = stat.rfind(')')?;
            let comm = stat[open + 1..close].to_owned();
            let mut rest = stat[close + 1..].split_whitespace();
            let state = rest.next()?.chars().next()?;
            let ppid = rest.next()?.parse().ok()?;
            let pgid = rest.next()?.parse().ok()?;
            Some(OsProcess {
                pid,
                ppid,
                pgid,
                state,
                comm,
            })
        })
        .filter(|p| p.state != 'Z')
        .collect()
}

/// The final assistant text of the transcript, if any.
pub fn last_assistant_text(p: &ThreadProjection) -> Option<String> {
    p.turn_items.iter().rev().find_map(|i| match &i.kind {
        TurnItemKind::AssistantMessage { text, .. } if !text.is_empty() => Some(text.clone()),
        _ => None,
    })
}

/// Whether any assistant message of the transcript has text yet.
pub fn has_assistant_text(p: &ThreadProjection) -> bool {
    last_assistant_text(p).is_some()
}

/// The pending runtime requests of the thread.
pub fn pending(p: &ThreadProjection) -> Vec<RuntimeRequest> {
    p.runtime_requests
        .iter()
        .filter(|r| r.status == RuntimeRequestStatus::Pending)
        .cloned()
        .collect()
}

/// The words `w1 … wN` streamed one per chunk (a long answer to interrupt or kill).
pub fn slow_words(n: usize) -> String {
    (1..=n)
        .map(|i| format!("w{i}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The tool names a model request declared (every format the mock serves),
/// and the names of the calls the conversation holds, for failure messages.
pub fn tool_names(body: &Value) -> Vec<String> {
    let mut names = Vec::new();
    for tool in body
        .get("tools")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        for key in ["name"] {
            if let Some(n) = tool.get(key).and_then(Value::as_str) {
                names.push(n.to_owned());
            }
        }
        if let Some(n) = tool.pointer("/function/name").and_then(Value::as_str) {
            names.push(n.to_owned());
        }
        for inner in ["tools", "functionDeclarations"] {
            for t in tool
                .get(inner)
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                if let Some(n) = t.get("name").and_then(Value::as_str) {
                    names.push(n.to_owned());
                }
            }
        }
    }
    names
}
