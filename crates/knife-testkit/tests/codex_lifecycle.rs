//! The default codex lifecycle suite (issue 7): knife's execution service and session
//! manager on a real SQLite store drive the `codex` driver against the scripted fake
//! app-server (`src/bin/fake_codex.rs`, a real child process): open, streamed turn,
//! approval round trips, interrupt, detach/unload, idle release with no orphan, child
//! crash → `error` with the exit status, malformed output, close escalation, resume of
//! the native thread by a new server.
//!
//! The suite lives in knife-testkit because `CARGO_BIN_EXE_fake_codex` exists only for
//! tests of the package that owns the binary.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use knife_adapters::codex::{CodexAdapter, CodexConfig};
use knife_adapters::process::group_alive;
use knife_protocol::*;
use knife_runtime::commands::{create_project, create_thread};
use knife_runtime::mcp::{CredentialRegistry, McpSlots};
use knife_runtime::process_groups::ProcessGroups;
use knife_runtime::sessions::SessionManagerOptions;
use knife_runtime::*;
use knife_store::Store;
use serde_json::Value;

const INSTANCE: &str = "codex";
const WAIT: Duration = Duration::from_secs(15);

struct Harness {
    dir: tempfile::TempDir,
    store: Store,
    exec: ExecutionService,
    thread: Thread,
    root: PathBuf,
    codex_home: PathBuf,
    registry: Arc<CredentialRegistry>,
}

fn instance() -> ProviderInstanceId {
    ProviderInstanceId::from(INSTANCE)
}

fn session_id() -> ProviderSessionId {
    ProviderSessionId::shared(&instance())
}

/// A harness on a fresh temp dir; `idle` is the session idle timeout.
async fn harness(idle: Duration) -> Harness {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("knife.db")).await.unwrap();
    let root = dir.path().join("project");
    std::fs::create_dir(&root).unwrap();
    let codex_home = dir.path().join("codex-home");
    std::fs::create_dir(&codex_home).unwrap();
    let clock: SharedClock = Arc::new(SystemClock);
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
        },
        &instance(),
        std::slice::from_ref(&instance()),
    )
    .await
    .unwrap();
    let (exec, registry) = service(&store, &codex_home, idle);
    Harness {
        root: std::fs::canonicalize(&root).unwrap(),
        dir,
        store,
        exec,
        thread,
        codex_home,
        registry,
    }
}

/// A session manager + execution service with the codex driver on the fake peer.
fn service(
    store: &Store,
    codex_home: &std::path::Path,
    idle: Duration,
) -> (ExecutionService, Arc<CredentialRegistry>) {
    let clock: SharedClock = Arc::new(SystemClock);
    let registry = CredentialRegistry::new(Some("http://127.0.0.1:43123/mcp".into()));
    let slots = Arc::new(McpSlots::default());
    let mut config = CodexConfig::new(instance());
    config.command = env!("CARGO_BIN_EXE_fake_codex").into();
    config.args = Vec::new();
    config.env = vec![("CODEX_HOME".into(), codex_home.as_os_str().to_owned())];
    config.model = Some("mock-model".into());
    config.mcp_slots = Some(Arc::clone(&slots));
    config.process_groups = Some(ProcessGroups::new(store.clone(), Arc::clone(&clock)));
    config.request_timeout = Duration::from_secs(5);
    config.eof_grace = Duration::from_millis(300);
    config.term_grace = Duration::from_millis(300);
    let mut adapters: HashMap<ProviderInstanceId, Arc<dyn ProviderAdapter>> = HashMap::new();
    adapters.insert(instance(), Arc::new(CodexAdapter::new(config)));
    let options = SessionManagerOptions {
        idle_timeout: idle,
        mcp: Some((Arc::clone(&registry), slots)),
        ..Default::default()
    };
    let manager = SessionManager::new(
        Arc::new(store.clone()),
        Arc::clone(&clock),
        adapters,
        options,
    );
    let exec = ExecutionService::new(store.clone(), clock, manager)
        .with_interrupt_grace(Duration::from_secs(5));
    (exec, registry)
}

fn script(commands: &str) -> String {
    format!("please do this FAKE_CODEX: {commands}")
}

impl Harness {
    async fn projection(&self) -> ThreadProjection {
        self.store
            .thread_projection(&self.thread.id)
            .await
            .unwrap()
            .unwrap()
    }

    async fn until(
        &self,
        what: &str,
        check: impl Fn(&ThreadProjection) -> bool,
    ) -> ThreadProjection {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let p = self.projection().await;
            if check(&p) {
                return p;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "timed out waiting for {what}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn run(&self, text: String) -> Run {
        let run = self.exec.start_run(&self.thread.id, text).await.unwrap();
        self.finish(&run.id).await
    }

    async fn finish(&self, run: &RunId) -> Run {
        tokio::time::timeout(WAIT, self.exec.await_idle(&self.thread.id))
            .await
            .expect("the run did not finish");
        let p = self.projection().await;
        p.runs.iter().find(|r| &r.id == run).cloned().unwrap()
    }

    /// Every JSON-RPC line the fake peer(s) of this harness received, parsed.
    fn sent(&self) -> Vec<Value> {
        std::fs::read_to_string(self.codex_home.join("fake-requests.jsonl"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    fn sent_methods(&self, method: &str) -> Vec<Value> {
        self.sent()
            .into_iter()
            .filter(|m| m["method"] == method)
            .collect()
    }

    async fn pgids(&self) -> Vec<i32> {
        self.store
            .list_process_groups()
            .await
            .unwrap()
            .into_iter()
            .map(|g| g.pgid)
            .collect()
    }
}

fn assistant_texts(p: &ThreadProjection, run: &RunId) -> Vec<(String, TurnItemStatus)> {
    p.turn_items
        .iter()
        .filter(|i| i.run_id.as_ref() == Some(run))
        .filter_map(|i| match &i.kind {
            TurnItemKind::AssistantMessage { text, .. } => Some((text.clone(), i.status)),
            _ => None,
        })
        .collect()
}

async fn gone_within(pgid: i32, limit: Duration) -> bool {
    let deadline = tokio::time::Instant::now() + limit;
    while tokio::time::Instant::now() < deadline {
        if !group_alive(u32::try_from(pgid).unwrap()) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

#[tokio::test]
async fn codex_open_and_streamed_turn_record_items_usage_and_the_native_thread() {
    let h = harness(Duration::from_secs(60)).await;
    let run = h
        .run(script(
            r#"[{"reasoning":"thinking it over"},{"text":"Hello there, world."},{"usage":[100,7]}]"#,
        ))
        .await;
    assert_eq!(run.status, RunStatus::Completed, "{:?}", run.error);
    let p = h.projection().await;
    assert_eq!(
        assistant_texts(&p, &run.id),
        vec![("Hello there, world.".to_owned(), TurnItemStatus::Completed)]
    );
    assert!(p.turn_items.iter().any(|i| matches!(
        &i.kind,
        TurnItemKind::Reasoning { text, streaming: false } if text == "thinking it over"
    )));
    let usage = run.usage.expect("usage recorded");
    assert_eq!(
        (usage.input_tokens, usage.output_tokens, usage.total_tokens),
        (100, 7, 107)
    );
    // The codex thread is recorded with its native id (what a later session resumes).
    let pt = &p.provider_threads[0];
    let native = pt.native_id.clone().unwrap();
    assert_eq!(pt.driver, "codex");
    assert_eq!(pt.id, ProviderThreadId::native("codex", &native));
    // thread/start carried the project root and the thread's MCP server + bearer.
    let start = &h.sent_methods("thread/start")[0]["params"];
    assert_eq!(start["cwd"], h.root.display().to_string());
    assert_eq!(start["model"], "mock-model");
    let bearer = start["config"]["mcp_servers"]["knife"]["http_headers"]["Authorization"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(
        start["config"]["mcp_servers"]["knife"]["url"],
        "http://127.0.0.1:43123/mcp"
    );
    let token = bearer.strip_prefix("Bearer ").unwrap();
    let scope = h.registry.resolve(token).expect("a live credential");
    assert_eq!(scope.thread_id, h.thread.id);
    // The handshake omits the "jsonrpc" field, as codex does.
    let init = &h.sent_methods("initialize")[0];
    assert!(init.get("jsonrpc").is_none());
    assert_eq!(h.sent_methods("initialized").len(), 1);

    // A second run continues the same codex thread on the same process.
    let second = h.run("again".into()).await;
    assert_eq!(second.status, RunStatus::Completed);
    let p = h.projection().await;
    assert_eq!(
        assistant_texts(&p, &second.id),
        vec![(
            "Hello from fake codex.".to_owned(),
            TurnItemStatus::Completed
        )]
    );
    assert_eq!(h.sent_methods("thread/start").len(), 1);
    let turns = h.sent_methods("turn/start");
    assert_eq!(turns.len(), 2);
    assert!(
        turns
            .iter()
            .all(|t| t["params"]["threadId"] == native.as_str())
    );
    assert_eq!(
        h.sent_methods("initialize").len(),
        1,
        "one process serves the thread"
    );
}

async fn pending_request(h: &Harness) -> RuntimeRequest {
    let p = h
        .until("a pending runtime request", |p| {
            p.runtime_requests
                .iter()
                .any(|r| r.status == RuntimeRequestStatus::Pending)
        })
        .await;
    p.runtime_requests
        .into_iter()
        .find(|r| r.status == RuntimeRequestStatus::Pending)
        .unwrap()
}

#[tokio::test]
async fn codex_command_approval_round_trip_runs_the_command() {
    let h = harness(Duration::from_secs(60)).await;
    let run = h
        .exec
        .start_run(
            &h.thread.id,
            script(r#"[{"approve_command":"touch approved.txt"},{"text":"done"}]"#),
        )
        .await
        .unwrap();
    let request = pending_request(&h).await;
    assert_eq!(request.kind, RuntimeRequestKind::Command);
    assert_eq!(
        request.response_capability,
        ResponseCapability::Live {
            provider_session_id: session_id()
        }
    );
    assert_eq!(
        request.prompt.as_deref(),
        Some("command: touch approved.txt")
    );
    let p = h.projection().await;
    let waiting = p
        .turn_items
        .iter()
        .find(|i| matches!(i.kind, TurnItemKind::ToolCall { .. }))
        .unwrap();
    assert_eq!(waiting.status, TurnItemStatus::Waiting);
    let answered = h
        .exec
        .respond_to_request(
            &h.thread.id,
            &request.id,
            RequestAnswer {
                decision: ApprovalDecision::AllowOnce,
                message: None,
            },
        )
        .await
        .unwrap();
    assert_eq!(answered.status, RuntimeRequestStatus::Resolved);
    assert_eq!(answered.decision, Some(ApprovalDecision::AllowOnce));
    let run = h.finish(&run.id).await;
    assert_eq!(run.status, RunStatus::Completed);
    let p = h.projection().await;
    let tool = p
        .turn_items
        .iter()
        .find(|i| matches!(i.kind, TurnItemKind::ToolCall { .. }))
        .unwrap();
    assert_eq!(tool.status, TurnItemStatus::Completed);
    assert!(matches!(
        &tool.kind,
        TurnItemKind::ToolCall { tool, output: Some(out), .. }
            if tool == "command" && out == "ran: touch approved.txt (accept)"
    ));
    // A second answer is refused: the request is no longer pending.
    let again = h
        .exec
        .respond_to_request(
            &h.thread.id,
            &request.id,
            RequestAnswer {
                decision: ApprovalDecision::Deny,
                message: None,
            },
        )
        .await;
    assert!(again.is_err());
}

#[tokio::test]
async fn codex_denied_command_and_always_allowed_mcp_tool_call() {
    let h = harness(Duration::from_secs(60)).await;
    let run = h
        .exec
        .start_run(
            &h.thread.id,
            script(r#"[{"approve_command":"rm -rf /"},{"mcp_tool":"whoami"},{"text":"ok"}]"#),
        )
        .await
        .unwrap();
    let deny = pending_request(&h).await;
    h.exec
        .respond_to_request(
            &h.thread.id,
            &deny.id,
            RequestAnswer {
                decision: ApprovalDecision::Deny,
                message: Some("not that".into()),
            },
        )
        .await
        .unwrap();
    let mcp = pending_request(&h).await;
    assert_ne!(mcp.id, deny.id);
    assert_eq!(
        mcp.tool_approval.as_ref().unwrap().tool,
        "mcp__knife__whoami"
    );
    h.exec
        .respond_to_request(
            &h.thread.id,
            &mcp.id,
            RequestAnswer {
                decision: ApprovalDecision::AllowAlways,
                message: None,
            },
        )
        .await
        .unwrap();
    let run = h.finish(&run.id).await;
    assert_eq!(run.status, RunStatus::Completed);
    let p = h.projection().await;
    let tools: Vec<_> = p
        .turn_items
        .iter()
        .filter_map(|i| match &i.kind {
            TurnItemKind::ToolCall {
                tool,
                output,
                error,
                ..
            } => Some((tool.clone(), i.status, output.clone(), error.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(tools.len(), 2, "{tools:?}");
    assert_eq!(tools[0].0, "command");
    assert_eq!(tools[0].1, TurnItemStatus::Failed);
    assert_eq!(
        tools[0].3.as_deref(),
        Some("the user declined this command")
    );
    assert_eq!(tools[1].0, "mcp__knife__whoami");
    assert_eq!(tools[1].2.as_deref(), Some("called whoami"));
    // What codex got: decline, then accept with the session-wide persistence hint.
    let answers: Vec<Value> = h
        .sent()
        .into_iter()
        .filter(|m| m.get("result").is_some())
        .map(|m| m["result"].clone())
        .collect();
    assert_eq!(answers[0], serde_json::json!({"decision": "decline"}));
    assert_eq!(answers[1]["action"], "accept");
    assert_eq!(answers[1]["_meta"]["persist"], "session");
}

#[tokio::test]
async fn codex_interrupt_ends_the_turn_interrupted() {
    let h = harness(Duration::from_secs(60)).await;
    let run = h
        .exec
        .start_run(
            &h.thread.id,
            script(r#"[{"text":"working on it"},{"wait_interrupt":true}]"#),
        )
        .await
        .unwrap();
    h.until("the streamed text", |p| {
        p.turn_items.iter().any(|i| {
            matches!(&i.kind, TurnItemKind::AssistantMessage { text, .. } if text == "working on it")
        })
    })
    .await;
    h.exec
        .interrupt(&h.thread.id, InterruptReason::User)
        .await
        .unwrap();
    let run = h.finish(&run.id).await;
    assert_eq!(run.status, RunStatus::Interrupted);
    let interrupts = h.sent_methods("turn/interrupt");
    assert_eq!(interrupts.len(), 1);
    let p = h.projection().await;
    let turn = p
        .provider_turns
        .iter()
        .find(|t| t.run_id == run.id)
        .unwrap();
    assert_eq!(turn.status, ProviderTurnStatus::Interrupted);
    assert!(
        interrupts[0]["params"]["turnId"]
            .as_str()
            .unwrap()
            .starts_with("turn-")
    );
    // The session survives an interrupt: the next run uses the same process.
    let next = h.run("next".into()).await;
    assert_eq!(next.status, RunStatus::Completed);
    assert_eq!(h.sent_methods("initialize").len(), 1);
}

#[tokio::test]
async fn codex_mgr_12_detach_unloads_the_native_thread_and_keeps_the_runtime() {
    let h = harness(Duration::from_secs(60)).await;
    let run = h.run("hello".into()).await;
    assert_eq!(run.status, RunStatus::Completed);
    let native = h.projection().await.provider_threads[0]
        .native_id
        .clone()
        .unwrap();
    h.exec
        .manager()
        .detach(&session_id(), &h.thread.id, None, false)
        .await
        .unwrap();
    let unsubscribes = h.sent_methods("thread/unsubscribe");
    assert_eq!(unsubscribes.len(), 1);
    assert_eq!(unsubscribes[0]["params"]["threadId"], native.as_str());
    assert!(
        h.exec.manager().is_live(&session_id()),
        "the shared runtime stays up"
    );
    let p = h
        .until("the provider thread unloaded", |p| {
            p.provider_threads[0].status == ProviderThreadStatus::NotLoaded
        })
        .await;
    assert_eq!(
        p.provider_threads[0].native_id.as_deref(),
        Some(native.as_str())
    );
    // The next run reattaches and resumes the same codex thread.
    let again = h.run("back".into()).await;
    assert_eq!(again.status, RunStatus::Completed);
    let resumes = h.sent_methods("thread/resume");
    assert_eq!(resumes.len(), 1);
    assert_eq!(resumes[0]["params"]["threadId"], native.as_str());
    assert_eq!(h.sent_methods("thread/start").len(), 1);
}

#[tokio::test]
async fn codex_mgr_20_idle_release_stops_the_process_and_leaves_no_orphan() {
    let h = harness(Duration::from_millis(400)).await;
    let run = h
        .exec
        .start_run(
            &h.thread.id,
            script(r#"[{"spawn_child":true},{"text":"spawned"}]"#),
        )
        .await
        .unwrap();
    let pgids = {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let pgids = h.pgids().await;
            if !pgids.is_empty() {
                break pgids;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "no process group recorded"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    assert_eq!(pgids.len(), 1);
    let run = h.finish(&run.id).await;
    assert_eq!(run.status, RunStatus::Completed);
    h.until("the idle release", |p| {
        p.provider_sessions
            .iter()
            .any(|s| s.status == SessionStatus::Stopped)
    })
    .await;
    assert!(!h.exec.manager().is_live(&session_id()));
    // The app-server and the `sleep` it started are gone, and the group is forgotten.
    assert!(
        gone_within(pgids[0], Duration::from_secs(5)).await,
        "orphans left in group {}",
        pgids[0]
    );
    let deadline = tokio::time::Instant::now() + WAIT;
    while !h.pgids().await.is_empty() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the process group row stayed"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn codex_mgr_31_child_crash_fails_the_run_and_records_the_exit_status() {
    let h = harness(Duration::from_secs(60)).await;
    let run = h
        .run(script(r#"[{"text":"about to crash"},{"crash":7}]"#))
        .await;
    assert_eq!(run.status, RunStatus::Failed);
    let error = run.error.unwrap();
    assert!(error.message.contains("exit status 7"), "{error:?}");
    let p = h
        .until("the session released with an error", |p| {
            p.provider_sessions
                .iter()
                .any(|s| s.status == SessionStatus::Error)
        })
        .await;
    let last_error = p.provider_sessions[0].last_error.clone().unwrap();
    assert!(
        last_error.contains("exited unexpectedly (exit status 7)"),
        "{last_error}"
    );
    assert!(
        last_error.contains("fake codex crashing with status 7"),
        "{last_error}"
    );
    assert!(!h.exec.manager().is_live(&session_id()));
    // The streamed text is kept; nothing is left running.
    assert_eq!(assistant_texts(&p, &run.id)[0].0, "about to crash");
    assert!(
        p.turn_items.iter().all(|i| !matches!(
            i.status,
            TurnItemStatus::Running | TurnItemStatus::Pending | TurnItemStatus::Waiting
        )),
        "{:?}",
        p.turn_items
    );
    // A new run starts a new process that resumes the same codex thread.
    let native = p.provider_threads[0].native_id.clone().unwrap();
    let next = h.run("after the crash".into()).await;
    assert_eq!(next.status, RunStatus::Completed);
    assert_eq!(h.sent_methods("initialize").len(), 2);
    assert_eq!(
        h.sent_methods("thread/resume")[0]["params"]["threadId"],
        native.as_str()
    );
}

#[tokio::test]
async fn codex_malformed_and_oversized_output_is_skipped() {
    let h = harness(Duration::from_secs(60)).await;
    let oversized = 16 * 1024 * 1024 + 10;
    let run = h
        .run(script(&format!(
            r#"[{{"malformed":true}},{{"oversized":{oversized}}},{{"text":"still fine"}}]"#
        )))
        .await;
    assert_eq!(run.status, RunStatus::Completed, "{:?}", run.error);
    let p = h.projection().await;
    assert_eq!(
        assistant_texts(&p, &run.id),
        vec![("still fine".to_owned(), TurnItemStatus::Completed)]
    );
    assert!(h.exec.manager().is_live(&session_id()));
}

#[tokio::test]
async fn codex_mgr_33_a_process_that_ignores_eof_and_sigterm_is_killed_on_close() {
    let h = harness(Duration::from_secs(60)).await;
    let run = h
        .run(script(r#"[{"hang":true},{"text":"hanging now"}]"#))
        .await;
    assert_eq!(run.status, RunStatus::Completed);
    let pgid = h.pgids().await[0];
    let started = tokio::time::Instant::now();
    h.exec.manager().close(&session_id()).await.unwrap();
    // EOF (300 ms) → SIGTERM ignored (300 ms) → SIGKILL.
    assert!(gone_within(pgid, Duration::from_secs(5)).await);
    assert!(
        started.elapsed() >= Duration::from_millis(600),
        "{:?}",
        started.elapsed()
    );
    let p = h
        .until("the session stopped", |p| {
            p.provider_sessions
                .iter()
                .any(|s| s.status == SessionStatus::Stopped)
        })
        .await;
    assert_eq!(p.provider_sessions[0].last_error, None);
}

#[tokio::test]
async fn codex_a_new_server_resumes_the_native_thread_and_falls_back_when_codex_forgot_it() {
    let h = harness(Duration::from_secs(60)).await;
    let run = h.run("first".into()).await;
    assert_eq!(run.status, RunStatus::Completed);
    let native = h.projection().await.provider_threads[0]
        .native_id
        .clone()
        .unwrap();
    h.exec.shutdown(Duration::from_secs(5)).await;

    // A new server on the same store and CODEX_HOME resumes the recorded thread.
    let (exec, _) = service(&h.store, &h.codex_home, Duration::from_secs(60));
    let second = exec.start_run(&h.thread.id, "second".into()).await.unwrap();
    tokio::time::timeout(WAIT, exec.await_idle(&h.thread.id))
        .await
        .unwrap();
    let p = h.projection().await;
    let second = p.runs.iter().find(|r| r.id == second.id).unwrap();
    assert_eq!(second.status, RunStatus::Completed);
    let resumes = h.sent_methods("thread/resume");
    assert_eq!(resumes.len(), 1);
    assert_eq!(resumes[0]["params"]["threadId"], native.as_str());
    assert_eq!(resumes[0]["params"]["cwd"], h.root.display().to_string());
    assert_eq!(h.sent_methods("thread/start").len(), 1);
    exec.shutdown(Duration::from_secs(5)).await;

    // A CODEX_HOME without the thread: resume fails, a new codex thread is started.
    std::fs::remove_dir_all(h.codex_home.join("fake-threads")).unwrap();
    std::fs::create_dir(h.codex_home.join("fake-threads")).unwrap();
    let (exec, _) = service(&h.store, &h.codex_home, Duration::from_secs(60));
    let third = exec.start_run(&h.thread.id, "third".into()).await.unwrap();
    tokio::time::timeout(WAIT, exec.await_idle(&h.thread.id))
        .await
        .unwrap();
    let p = h.projection().await;
    assert_eq!(
        p.runs.iter().find(|r| r.id == third.id).unwrap().status,
        RunStatus::Completed
    );
    assert_eq!(h.sent_methods("thread/start").len(), 2);
    let newest = p
        .provider_threads
        .iter()
        .max_by_key(|t| t.updated_at)
        .unwrap();
    assert_ne!(newest.native_id.as_deref(), Some(native.as_str()));
    exec.shutdown(Duration::from_secs(5)).await;
    drop(h.dir);
}

#[tokio::test]
async fn codex_mgr_10_threads_of_two_projects_share_one_process_with_their_own_cwd_and_bearer() {
    let h = harness(Duration::from_secs(60)).await;
    let clock: SharedClock = Arc::new(SystemClock);
    let other_root = h.dir.path().join("other-project");
    std::fs::create_dir(&other_root).unwrap();
    let (other_project, _) = create_project(
        &h.store,
        clock.as_ref(),
        CreateProjectRequest {
            root: other_root.display().to_string(),
            name: None,
        },
    )
    .await
    .unwrap();
    let other = create_thread(
        &h.store,
        clock.as_ref(),
        CreateThreadRequest {
            project_id: other_project.id,
            title: None,
            provider_instance_id: None,
            model: None,
            parent_thread_id: None,
        },
        &instance(),
        std::slice::from_ref(&instance()),
    )
    .await
    .unwrap();
    assert_eq!(
        h.run("first project".into()).await.status,
        RunStatus::Completed
    );
    let run = h
        .exec
        .start_run(&other.id, "second project".into())
        .await
        .unwrap();
    tokio::time::timeout(WAIT, h.exec.await_idle(&other.id))
        .await
        .unwrap();
    let p = h.store.thread_projection(&other.id).await.unwrap().unwrap();
    let run = p.runs.iter().find(|r| r.id == run.id).unwrap();
    assert_eq!(run.status, RunStatus::Completed, "{:?}", run.error);
    assert_eq!(
        h.sent_methods("initialize").len(),
        1,
        "one app-server serves both"
    );
    let starts = h.sent_methods("thread/start");
    assert_eq!(starts.len(), 2);
    assert_eq!(starts[0]["params"]["cwd"], h.root.display().to_string());
    let other_root = std::fs::canonicalize(&other_root).unwrap();
    assert_eq!(starts[1]["params"]["cwd"], other_root.display().to_string());
    let bearer = |i: usize| {
        starts[i]["params"]["config"]["mcp_servers"]["knife"]["http_headers"]["Authorization"]
            .as_str()
            .unwrap()
            .strip_prefix("Bearer ")
            .unwrap()
            .to_owned()
    };
    assert_eq!(
        h.registry.resolve(&bearer(0)).unwrap().thread_id,
        h.thread.id
    );
    assert_eq!(h.registry.resolve(&bearer(1)).unwrap().thread_id, other.id);
}

#[tokio::test]
async fn codex_an_interrupt_while_an_approval_waits_cancels_the_request() {
    let h = harness(Duration::from_secs(60)).await;
    let run = h
        .exec
        .start_run(
            &h.thread.id,
            script(r#"[{"approve_command":"make deploy"}]"#),
        )
        .await
        .unwrap();
    let request = pending_request(&h).await;
    h.exec
        .interrupt(&h.thread.id, InterruptReason::User)
        .await
        .unwrap();
    let run = h.finish(&run.id).await;
    assert_eq!(run.status, RunStatus::Interrupted);
    let p = h.projection().await;
    let settled = p
        .runtime_requests
        .iter()
        .find(|r| r.id == request.id)
        .unwrap();
    assert_eq!(settled.status, RuntimeRequestStatus::Cancelled);
    let approval = p
        .turn_items
        .iter()
        .find(|i| matches!(i.kind, TurnItemKind::Approval { .. }))
        .unwrap();
    assert_eq!(approval.status, TurnItemStatus::Cancelled);
    // A late answer is refused.
    let late = h
        .exec
        .respond_to_request(
            &h.thread.id,
            &request.id,
            RequestAnswer {
                decision: ApprovalDecision::AllowOnce,
                message: None,
            },
        )
        .await;
    assert!(late.is_err());
}
