//! The rigs of the driver conformance suite: one per driver, each a real SQLite store,
//! a project, a thread and an execution service over that driver's peer (the built-in
//! agent on the mock LLM over loopback HTTP, the fake codex app-server, the fake ACP agent).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use knife_adapters::acp::{AcpAdapter, AcpConfig};
use knife_adapters::codex::{CodexAdapter, CodexConfig};
use knife_agent::{BuiltinAgentAdapter, BuiltinAgentConfig};
use knife_llm::openai_chat::OpenAiChatClient;
use knife_protocol::*;
use knife_runtime::commands::{create_project, create_thread};
use knife_runtime::process_groups::ProcessGroups;
use knife_runtime::*;
use knife_store::Store;
use knife_testkit::mock_llm::{MockLlm, MockLlmConfig, MockLlmHandle, Script, ScriptResponse};
use serde_json::{Value, json};

/// The longest any scenario waits for one condition.
pub const LIMIT: Duration = Duration::from_secs(20);

/// What one run of a scenario asks the peer to do. Each rig turns a step into the
/// message text (codex, ACP: a script in the text) or the mock LLM's responses (built-in).
#[derive(Clone, Copy, Debug)]
pub enum Step {
    /// Stream this answer and complete.
    Answer(&'static str),
    /// Ask to run a command; once allowed, run it and answer this text.
    Approval(&'static str),
    /// Ask to run a command and, whatever the answer, wait until interrupted.
    ApprovalThenWait,
    /// Start answering and never finish on its own.
    Hang,
    /// The runtime dies mid-turn (the child exits; the model stream is cut).
    Crash,
    /// Output that is not the protocol, then this answer (where the driver skips it).
    Malformed(&'static str),
}

/// A driver's peer as the scenarios see it.
pub trait Peer: Send + Sync {
    /// The driver name recorded on the provider session.
    fn driver(&self) -> &'static str;
    /// The message text that makes the peer do `step`.
    fn prompt(&self, step: Step) -> String;
    /// A new execution service over `store` (a new knife process).
    fn execution(&self, store: &Store, clock: &SharedClock) -> ExecutionService;
    /// For drivers with a wire: whether the open approval was answered before the
    /// turn was interrupted (`None`: the driver has no wire to look at).
    fn approval_answered_before_interrupt(&self) -> Option<bool>;
    /// After a restart: whether the peer was given the thread's earlier context
    /// (native resume, session load, or the transcript containing `earlier`).
    fn resumed_with_context(&self, earlier: &str) -> bool;
    /// Whether output that is not the protocol is skipped (else it fails the run).
    fn skips_malformed_output(&self) -> bool;
    /// Whether the session runs a child process (recorded as a process group).
    fn runs_a_process(&self) -> bool;
}

/// One scenario's world.
pub struct Rig {
    /// Holds the store, project and peer state; removed when the rig drops.
    pub _dir: tempfile::TempDir,
    pub store: Store,
    pub clock: SharedClock,
    pub thread: ThreadId,
    pub exec: ExecutionService,
    pub peer: Box<dyn Peer>,
}

/// A fresh store and project in a temp dir, and the peer `make` builds for it.
async fn rig(instance: &ProviderInstanceId, make: impl FnOnce(&Path) -> Box<dyn Peer>) -> Rig {
    let dir = tempfile::tempdir().unwrap();
    let store = knife_store_sqlite::open(dir.path().join("knife.db"))
        .await
        .unwrap();
    let clock: SharedClock = Arc::new(SystemClock);
    let root = dir.path().join("project");
    std::fs::create_dir(&root).unwrap();
    let (project, _) = create_project(
        &store,
        clock.as_ref(),
        CreateProjectRequest {
            root: root.display().to_string(),
            name: None,
        },
    )
    .await
    .unwrap();
    let thread = create_thread(
        &store,
        clock.as_ref(),
        CreateThreadRequest {
            project_id: project.id,
            title: None,
            provider_instance_id: None,
            model: None,
            parent_thread_id: None,
            worktree: None,
        },
        instance,
        std::slice::from_ref(instance),
    )
    .await
    .unwrap()
    .id;
    let peer = make(dir.path());
    let exec = peer.execution(&store, &clock);
    Rig {
        _dir: dir,
        store,
        clock,
        thread,
        exec,
        peer,
    }
}

fn manager(
    store: &Store,
    clock: &SharedClock,
    instance: &ProviderInstanceId,
    adapter: Arc<dyn ProviderAdapter>,
) -> ExecutionService {
    let mut adapters: HashMap<ProviderInstanceId, Arc<dyn ProviderAdapter>> = HashMap::new();
    adapters.insert(instance.clone(), adapter);
    let manager = SessionManager::new(
        Arc::new(store.clone()),
        Arc::clone(clock),
        adapters,
        SessionManagerOptions {
            idle_timeout: Duration::from_secs(60),
            ..Default::default()
        },
    );
    ExecutionService::new(store.clone(), Arc::clone(clock), manager)
        .with_interrupt_grace(Duration::from_secs(2))
}

// ---------------------------------------------------------------- built-in agent

/// The built-in agent on the mock LLM (OpenAI Chat over loopback), one model call budget
/// per call (no retries: a cut stream fails the run), `ask` approvals for `bash`.
pub async fn builtin(steps: &[Step]) -> Rig {
    let mut responses = Vec::new();
    for step in steps {
        match *step {
            Step::Answer(text) => responses.push(ScriptResponse::text(text)),
            Step::Approval(text) => {
                responses.push(ScriptResponse::tool_call(
                    "bash",
                    r#"{"command":"echo approved"}"#,
                ));
                responses.push(ScriptResponse::text(text));
            }
            Step::ApprovalThenWait => responses.push(ScriptResponse::tool_call(
                "bash",
                r#"{"command":"echo approved"}"#,
            )),
            Step::Hang => responses.push(ScriptResponse {
                text: Some("working on it slowly".into()),
                stream_deltas_ms: Some(600_000),
                ..ScriptResponse::default()
            }),
            Step::Crash => responses.push(ScriptResponse {
                text: Some("an answer the connection cuts".into()),
                cut: true,
                ..ScriptResponse::default()
            }),
            Step::Malformed(_) => responses.push(ScriptResponse {
                raw: Some("data: this is not json\n\n".into()),
                ..ScriptResponse::default()
            }),
        }
    }
    let mut script = Script::new(responses);
    script.no_tools_text = Some("a title".into());
    let mock = MockLlm::start(MockLlmConfig::script(script)).await.unwrap();
    let instance = ProviderInstanceId::from("local");
    rig(&instance.clone(), move |_| {
        Box::new(Builtin { instance, mock })
    })
    .await
}

struct Builtin {
    instance: ProviderInstanceId,
    mock: MockLlmHandle,
}

impl Peer for Builtin {
    fn driver(&self) -> &'static str {
        knife_agent::DRIVER
    }
    fn prompt(&self, step: Step) -> String {
        format!("conformance step {step:?}")
    }
    fn execution(&self, store: &Store, clock: &SharedClock) -> ExecutionService {
        let llm = Arc::new(OpenAiChatClient::new(self.mock.base_url(), None));
        let mut config = BuiltinAgentConfig::new(self.instance.clone(), "mock-model", llm);
        config.retry.max_attempts = 1;
        manager(
            store,
            clock,
            &self.instance,
            Arc::new(BuiltinAgentAdapter::new(config)),
        )
    }
    fn approval_answered_before_interrupt(&self) -> Option<bool> {
        None
    }
    fn resumed_with_context(&self, earlier: &str) -> bool {
        self.mock
            .model_requests()
            .last()
            .is_some_and(|r| r.body_text.contains(earlier))
    }
    fn skips_malformed_output(&self) -> bool {
        false
    }
    fn runs_a_process(&self) -> bool {
        false
    }
}

// ---------------------------------------------------------------- fake codex

/// The codex driver on the scripted fake app-server (`src/bin/fake_codex.rs`).
pub async fn fake_codex(_steps: &[Step]) -> Rig {
    let instance = ProviderInstanceId::from("codex");
    rig(&instance.clone(), |dir| {
        let home = dir.join("codex-home");
        std::fs::create_dir(&home).unwrap();
        Box::new(FakeCodex { instance, home })
    })
    .await
}

struct FakeCodex {
    instance: ProviderInstanceId,
    home: PathBuf,
}

impl FakeCodex {
    fn sent(&self) -> Vec<Value> {
        json_lines(&self.home.join("fake-requests.jsonl"))
    }
}

impl Peer for FakeCodex {
    fn driver(&self) -> &'static str {
        "codex"
    }
    fn prompt(&self, step: Step) -> String {
        let commands = match step {
            Step::Answer(text) => json!([{ "text": text }]),
            Step::Approval(text) => json!([{"approve_command": "echo approved"}, { "text": text }]),
            Step::ApprovalThenWait => {
                json!([{"approve_command": "echo approved"}, {"wait_interrupt": true}])
            }
            Step::Hang => json!([{"text": "working"}, {"wait_interrupt": true}]),
            Step::Crash => json!([{"text": "working"}, {"crash": 3}]),
            Step::Malformed(text) => json!([{"malformed": true}, { "text": text }]),
        };
        format!("conformance FAKE_CODEX: {commands}")
    }
    fn execution(&self, store: &Store, clock: &SharedClock) -> ExecutionService {
        let mut config = CodexConfig::new(self.instance.clone());
        config.command = env!("CARGO_BIN_EXE_fake_codex").into();
        config.args = Vec::new();
        config.env = vec![("CODEX_HOME".into(), self.home.as_os_str().to_owned())];
        config.model = Some("mock-model".into());
        config.process_groups = Some(ProcessGroups::new(store.clone(), Arc::clone(clock)));
        config.request_timeout = Duration::from_secs(5);
        config.eof_grace = Duration::from_millis(300);
        config.term_grace = Duration::from_millis(300);
        manager(
            store,
            clock,
            &self.instance,
            Arc::new(CodexAdapter::new(config)),
        )
    }
    fn approval_answered_before_interrupt(&self) -> Option<bool> {
        let sent = self.sent();
        let answer = sent
            .iter()
            .position(|m| m.get("method").is_none() && m["result"].get("decision").is_some());
        let interrupt = sent.iter().position(|m| m["method"] == "turn/interrupt");
        Some(matches!((answer, interrupt), (Some(a), Some(i)) if a < i))
    }
    fn resumed_with_context(&self, _earlier: &str) -> bool {
        self.sent().iter().any(|m| m["method"] == "thread/resume")
    }
    fn skips_malformed_output(&self) -> bool {
        true
    }
    fn runs_a_process(&self) -> bool {
        true
    }
}

// ---------------------------------------------------------------- fake ACP agent

/// The ACP driver on the scripted fake agent (`src/bin/fake_acp.rs`), sessions kept on
/// disk so a new process can `session/load` them.
pub async fn fake_acp(_steps: &[Step]) -> Rig {
    let instance = ProviderInstanceId::from("fake-acp");
    rig(&instance.clone(), |dir| {
        let state = dir.join("acp-state");
        std::fs::create_dir(&state).unwrap();
        Box::new(FakeAcp {
            instance,
            state,
            log: dir.join("acp.log"),
        })
    })
    .await
}

struct FakeAcp {
    instance: ProviderInstanceId,
    state: PathBuf,
    log: PathBuf,
}

impl FakeAcp {
    fn received(&self) -> Vec<Value> {
        json_lines(&self.log)
            .into_iter()
            .filter(|v| v.get("pid").is_none())
            .collect()
    }
}

impl Peer for FakeAcp {
    fn driver(&self) -> &'static str {
        "acp"
    }
    fn prompt(&self, step: Step) -> String {
        let tool = json!({"id": "c1", "title": "echo approved", "kind": "execute"});
        let steps = match step {
            Step::Answer(text) => json!([{ "text": text }]),
            Step::Approval(text) => {
                json!([{"tool": tool, "permission": true, "output": "approved"}, { "text": text }])
            }
            Step::ApprovalThenWait => {
                json!([{"tool": tool, "permission": true, "output": "approved"}, {"hang": true}])
            }
            Step::Hang => json!([{"text": "working"}, {"hang": true}]),
            Step::Crash => json!([{"text": "working"}, {"crash": 3}]),
            Step::Malformed(text) => json!([{"garbage": "this is not json {"}, { "text": text }]),
        };
        json!({ "steps": steps }).to_string()
    }
    fn execution(&self, store: &Store, clock: &SharedClock) -> ExecutionService {
        let mut config = AcpConfig::new(self.instance.clone(), env!("CARGO_BIN_EXE_fake_acp"));
        config.env = vec![
            ("FAKE_ACP_STATE_DIR".into(), self.state.clone().into()),
            ("FAKE_ACP_LOG".into(), self.log.clone().into()),
        ];
        config.process_groups = Some(ProcessGroups::new(store.clone(), Arc::clone(clock)));
        config.handshake_timeout = Duration::from_secs(10);
        config.eof_grace = Duration::from_millis(500);
        config.term_grace = Duration::from_millis(500);
        manager(
            store,
            clock,
            &self.instance,
            Arc::new(AcpAdapter::new(config)),
        )
    }
    fn approval_answered_before_interrupt(&self) -> Option<bool> {
        let received = self.received();
        let answer = received
            .iter()
            .position(|m| m.get("method").is_none() && m["result"].get("outcome").is_some());
        let cancel = received
            .iter()
            .position(|m| m["method"] == "session/cancel");
        Some(matches!((answer, cancel), (Some(a), Some(c)) if a < c))
    }
    fn resumed_with_context(&self, _earlier: &str) -> bool {
        self.received()
            .iter()
            .any(|m| m["method"] == "session/load" || m["method"] == "session/resume")
    }
    fn skips_malformed_output(&self) -> bool {
        true
    }
    fn runs_a_process(&self) -> bool {
        true
    }
}

fn json_lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}
