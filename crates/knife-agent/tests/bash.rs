//! The `bash` tool over real processes (so real time, with short timeouts):
//! output and exit status, the output cap, timeouts, background processes,
//! secrets, the process-group recorder, and aborts — through the tool context's
//! cancellation and through an interrupted agent turn — that must leave no
//! process of the command's group alive.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use knife_agent::tools::bash::{HEAD_BYTES, MAX_TIMEOUT_MS, TAIL_BYTES};
use knife_agent::tools::{ToolContext, ToolError, ToolPolicy, ToolSet};
use knife_process::{GroupRecord, GroupRecorder, RecordError};
use knife_protocol::*;
use knife_runtime::InterruptReason;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

/// Records the recorder's calls in order: `spawned` (register), `exited` (unregister).
#[derive(Default)]
struct Observed(Mutex<Vec<(&'static str, u32)>>);

#[async_trait::async_trait]
impl GroupRecorder for Observed {
    async fn register(&self, group: &GroupRecord) -> Result<(), RecordError> {
        // Taken while the shell runs: it identifies the live group.
        assert!(group.is_still_ours(), "{group:?}");
        self.0.lock().unwrap().push(("spawned", group.pgid));
        Ok(())
    }
    async fn unregister(&self, group: &GroupRecord) -> Result<(), RecordError> {
        // The group is gone by now: there is nothing left to kill.
        assert!(!group.is_still_ours(), "{group:?}");
        self.0.lock().unwrap().push(("exited", group.pgid));
        Ok(())
    }
}

impl Observed {
    fn calls(&self) -> Vec<(&'static str, u32)> {
        self.0.lock().unwrap().clone()
    }
    fn pgid(&self) -> u32 {
        self.calls()
            .iter()
            .find(|(what, _)| *what == "spawned")
            .map(|(_, pgid)| *pgid)
            .expect("no process group was reported")
    }
}

fn context(root: &Path, observer: Option<Arc<Observed>>, secrets: &[&str]) -> ToolContext {
    let policy = ToolPolicy {
        secret_env_vars: secrets.iter().map(|s| (*s).to_owned()).collect(),
        process_recorder: observer.map(|o| o as Arc<dyn GroupRecorder>),
        ..ToolPolicy::default()
    };
    ToolContext::new(root)
        .unwrap()
        .with_policy(Arc::new(policy))
}

async fn bash(ctx: &ToolContext, args: Value) -> Result<String, ToolError> {
    ToolSet::standard().execute("bash", args, ctx).await
}

/// `(state, pgrp)` of process `pid` from /proc, read independently of knife.
fn proc_stat(pid: u32) -> Option<(String, u32)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(')')?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    Some((fields[0].to_owned(), fields[2].parse().ok()?))
}

/// Pids of the members of group `pgid` that are not zombies.
fn live_members(pgid: u32) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            proc_stat(*pid)
                .is_some_and(|(state, pgrp)| pgrp == pgid && state != "Z" && state != "X")
        })
        .collect()
}

fn pid_alive(pid: u32) -> bool {
    proc_stat(pid).is_some_and(|(state, _)| state != "Z" && state != "X")
}

/// Polls `check` every 10 ms (real time) until it holds or `limit` passes.
async fn eventually(limit: Duration, mut check: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        if check() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    check()
}

/// The pid written to `file` under `root` by the test command, once it is there.
async fn pid_from(root: &Path, file: &str) -> u32 {
    let path = root.join(file);
    let mut pid = None;
    assert!(
        eventually(Duration::from_secs(3), || {
            pid = std::fs::read_to_string(&path)
                .ok()
                .and_then(|s| s.trim().parse().ok());
            pid.is_some()
        })
        .await,
        "the command never wrote {file}"
    );
    pid.unwrap()
}

/// Starts a child that ignores SIGTERM (and writes its pid), then waits for it.
const STUBBORN: &str = "sh -c 'trap \"\" TERM; echo $$ > child.pid; exec sleep 30' & wait";

#[tokio::test]
async fn runs_in_the_project_root_and_reports_output_and_exit_code() {
    let dir = tempfile::tempdir().unwrap();
    let ctx = context(dir.path(), None, &[]);
    let out = bash(
        &ctx,
        json!({"command": "pwd; echo out; echo err >&2; echo again; exit 3"}),
    )
    .await
    .unwrap();
    let root = ctx.root().display().to_string();
    assert_eq!(out, format!("{root}\nout\nerr\nagain\n(exit code 3)"));

    let out = bash(&ctx, json!({"command": "true"})).await.unwrap();
    assert_eq!(out, "(no output)\n(exit code 0)");
    let out = bash(&ctx, json!({"command": "kill -9 $$"})).await.unwrap();
    assert!(out.ends_with("(killed by signal 9)"), "{out}");
    assert!(matches!(
        bash(&ctx, json!({"command": "  "})).await,
        Err(ToolError::InvalidArguments { .. })
    ));
}

#[tokio::test]
async fn stdin_is_empty_so_readers_do_not_wait() {
    let dir = tempfile::tempdir().unwrap();
    let ctx = context(dir.path(), None, &[]);
    let start = Instant::now();
    let out = bash(&ctx, json!({"command": "cat; read x || echo no-input"}))
        .await
        .unwrap();
    assert_eq!(out, "no-input\n(exit code 0)");
    assert!(start.elapsed() < Duration::from_secs(2));
}

#[tokio::test]
async fn output_over_the_cap_keeps_head_and_tail_and_says_how_much_was_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let ctx = context(dir.path(), None, &[]);
    let out = bash(
        &ctx,
        json!({"command": "echo START; head -c 100000 /dev/zero | tr '\\0' a; echo; echo END"}),
    )
    .await
    .unwrap();
    // 6 + 100000 + 1 + 4 bytes printed.
    let dropped = 100_011 - HEAD_BYTES - TAIL_BYTES;
    assert!(out.starts_with("START\naaa"), "{}", &out[..20]);
    assert!(
        out.contains(&format!("[… {dropped} bytes of output dropped here")),
        "{}",
        &out[HEAD_BYTES - 10..HEAD_BYTES + 250]
    );
    assert!(
        out.ends_with("aaa\nEND\n(exit code 0)"),
        "{}",
        &out[out.len() - 40..]
    );
    assert!(
        out.len() < HEAD_BYTES + TAIL_BYTES + 300,
        "{} bytes",
        out.len()
    );
}

#[tokio::test]
async fn timeout_kills_the_whole_group_and_returns_what_was_printed() {
    let dir = tempfile::tempdir().unwrap();
    let observed = Arc::new(Observed::default());
    let ctx = context(dir.path(), Some(Arc::clone(&observed)), &[]);
    let start = Instant::now();
    let err = bash(
        &ctx,
        json!({"command": format!("echo before; {STUBBORN}"), "timeout_ms": 300}),
    )
    .await
    .unwrap_err();
    let elapsed = start.elapsed();
    assert!(
        matches!(
            err,
            ToolError::CommandTimedOut {
                timeout_ms: 300,
                ..
            }
        ),
        "{err:?}"
    );
    let msg = err.to_string();
    assert!(msg.contains("timed out after 300 ms"), "{msg}");
    assert!(msg.contains(&format!("at most {MAX_TIMEOUT_MS}")), "{msg}");
    assert!(msg.ends_with("before\n"), "{msg}");
    // 300 ms, then SIGTERM, which the child ignores, then SIGKILL after the grace.
    assert!(elapsed < Duration::from_millis(2800), "took {elapsed:?}");

    let child = pid_from(dir.path(), "child.pid").await;
    let pgid = observed.pgid();
    assert!(!pid_alive(child), "the SIGTERM-ignoring child survived");
    assert_eq!(live_members(pgid), Vec::<u32>::new());
    assert_eq!(proc_stat(child).map(|(_, g)| g).unwrap_or(pgid), pgid);
    assert_eq!(observed.calls(), [("spawned", pgid), ("exited", pgid)]);
}

#[tokio::test]
async fn dropping_the_call_while_it_handles_a_timeout_still_kills_the_group() {
    let dir = tempfile::tempdir().unwrap();
    let observed = Arc::new(Observed::default());
    let ctx = context(dir.path(), Some(Arc::clone(&observed)), &[]);
    let call =
        tokio::spawn(
            async move { bash(&ctx, json!({"command": STUBBORN, "timeout_ms": 100})).await },
        );
    let child = pid_from(dir.path(), "child.pid").await;
    let pgid = observed.pgid();
    // The timeout fired and the group got SIGTERM, which the child ignores:
    // the call is now waiting out the grace period. Drop it there.
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(pid_alive(child));
    call.abort();
    assert!(call.await.unwrap_err().is_cancelled());
    assert!(
        eventually(Duration::from_secs(2), || !pid_alive(child)).await,
        "the child survived the dropped call"
    );
    assert!(eventually(Duration::from_secs(1), || live_members(pgid).is_empty()).await);
    assert!(eventually(Duration::from_secs(1), || observed.calls().len() == 2).await);
    assert_eq!(observed.calls(), [("spawned", pgid), ("exited", pgid)]);
}

#[tokio::test]
async fn a_timeout_above_the_limit_is_clamped_not_refused() {
    let dir = tempfile::tempdir().unwrap();
    let ctx = context(dir.path(), None, &[]);
    let out = bash(&ctx, json!({"command": "echo ok", "timeout_ms": u64::MAX}))
        .await
        .unwrap();
    assert_eq!(out, "ok\n(exit code 0)");
    let spec = ToolSet::standard()
        .specs()
        .into_iter()
        .find(|s| s.name == "bash")
        .unwrap();
    assert_eq!(
        spec.parameters["properties"]["timeout_ms"]["maximum"],
        MAX_TIMEOUT_MS
    );
    assert_eq!(spec.parameters["required"], json!(["command"]));
}

#[tokio::test]
async fn background_processes_are_stopped_when_the_command_ends() {
    let dir = tempfile::tempdir().unwrap();
    let observed = Arc::new(Observed::default());
    let ctx = context(dir.path(), Some(Arc::clone(&observed)), &[]);
    let start = Instant::now();
    let out = bash(
        &ctx,
        json!({"command": "sleep 30 & echo $! > bg.pid; echo started"}),
    )
    .await
    .unwrap();
    assert!(
        start.elapsed() < Duration::from_secs(2),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(
        out,
        "started\n(background processes it left running were stopped)\n(exit code 0)"
    );
    let bg = pid_from(dir.path(), "bg.pid").await;
    assert!(!pid_alive(bg));
    assert_eq!(live_members(observed.pgid()), Vec::<u32>::new());
}

/// Runs [`background_processes_of_a_reaper_probe`] in a child test process that
/// becomes a child subreaper (as knife is when it runs as PID 1 of a container),
/// so a command's orphans become knife's own children.
#[cfg(target_os = "linux")]
#[test]
fn background_processes_are_stopped_when_knife_reaps_orphans() {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--ignored",
            "--exact",
            "background_processes_of_a_reaper_probe",
        ])
        .env("KNIFE_AGENT_TEST_SUBREAPER", "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("1 passed"), "{stdout}");
}

#[cfg(target_os = "linux")]
#[ignore = "run by background_processes_are_stopped_when_knife_reaps_orphans"]
#[tokio::test]
async fn background_processes_of_a_reaper_probe() {
    assert!(std::env::var("KNIFE_AGENT_TEST_SUBREAPER").is_ok());
    nix::sys::prctl::set_child_subreaper(true).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let observed = Arc::new(Observed::default());
    let ctx = context(dir.path(), Some(Arc::clone(&observed)), &[]);
    let start = Instant::now();
    let out = bash(
        &ctx,
        json!({"command": "sleep 5 & echo $! > bg.pid; echo started", "timeout_ms": 3000}),
    )
    .await
    .unwrap();
    assert!(
        start.elapsed() < Duration::from_secs(2),
        "{:?}",
        start.elapsed()
    );
    assert!(out.starts_with("started\n(background processes"), "{out}");
    let bg = pid_from(dir.path(), "bg.pid").await;
    // Reaped by knife, not left a zombie: it is gone from /proc altogether.
    assert!(proc_stat(bg).is_none(), "{:?}", proc_stat(bg));
    assert_eq!(live_members(observed.pgid()), Vec::<u32>::new());
}

#[tokio::test]
async fn cancelling_the_turn_aborts_the_call_and_kills_the_group() {
    let dir = tempfile::tempdir().unwrap();
    let observed = Arc::new(Observed::default());
    let cancel = CancellationToken::new();
    let ctx = context(dir.path(), Some(Arc::clone(&observed)), &[]).with_cancel(cancel.clone());
    let call = tokio::spawn(async move { bash(&ctx, json!({"command": STUBBORN})).await });
    let child = pid_from(dir.path(), "child.pid").await;
    let pgid = observed.pgid();
    assert!(pid_alive(child));
    let start = Instant::now();
    cancel.cancel();
    let result = call.await.unwrap();
    assert_eq!(result, Err(ToolError::Aborted));
    assert!(
        start.elapsed() < Duration::from_secs(2),
        "{:?}",
        start.elapsed()
    );
    assert!(!pid_alive(child));
    assert_eq!(live_members(pgid), Vec::<u32>::new());
    assert_eq!(observed.calls(), [("spawned", pgid), ("exited", pgid)]);
}

#[tokio::test]
async fn sec_02_only_allowlisted_variables_are_in_the_environment() {
    // cargo sets these for test binaries; one is declared secret, neither is on the
    // allowlist (SEC-02): knife's environment is never inherited whole.
    assert!(std::env::var("CARGO_PKG_NAME").is_ok());
    assert!(std::env::var("CARGO_MANIFEST_DIR").is_ok());
    let dir = tempfile::tempdir().unwrap();
    let ctx = context(dir.path(), None, &["CARGO_PKG_NAME"]);
    let out = bash(
        &ctx,
        json!({"command": "echo \"pkg=${CARGO_PKG_NAME-unset} dir=${CARGO_MANIFEST_DIR-unset} path=${PATH:+set}\""}),
    )
    .await
    .unwrap();
    assert_eq!(out, "pkg=unset dir=unset path=set\n(exit code 0)");
}

/// Runs [`knife_variables_probe`] in a child test process whose environment has
/// `KNIFE_PROBE_SECRET` (tests cannot set variables in their own process).
#[test]
fn knife_variables_are_not_in_the_environment() {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--ignored",
            "--exact",
            "knife_variables_probe",
            "--test-threads=1",
        ])
        .env("KNIFE_PROBE_SECRET", "do-not-leak")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("1 passed"), "{stdout}");
}

#[ignore = "run by knife_variables_are_not_in_the_environment with KNIFE_PROBE_SECRET set"]
#[tokio::test]
async fn knife_variables_probe() {
    assert_eq!(std::env::var("KNIFE_PROBE_SECRET").unwrap(), "do-not-leak");
    let dir = tempfile::tempdir().unwrap();
    let ctx = context(dir.path(), None, &[]);
    let out = bash(&ctx, json!({"command": "env | grep -c '^KNIFE_' || true"}))
        .await
        .unwrap();
    assert_eq!(out, "0\n(exit code 0)");
}

// ------------------------------------------------------------- agent loop

#[tokio::test]
async fn interrupting_a_turn_kills_the_command_group_and_leaves_the_thread_idle() {
    let observed = Arc::new(Observed::default());
    let policy = Arc::new(ToolPolicy {
        process_recorder: Some(Arc::clone(&observed) as Arc<dyn GroupRecorder>),
        approvals: Some(Arc::new(knife_agent::permissions::AllowAll)),
        ..ToolPolicy::default()
    });
    let llm = FakeLlm::new(vec![
        tool_step("call_1", "bash", &json!({"command": STUBBORN}).to_string()),
        text_step(&["still here"]),
    ]);
    let mut h = open(Arc::clone(&llm), |c| c.tool_policy = policy, None).await;
    let root = h._project.path().to_path_buf();
    h.session
        .start_turn(turn(1, "run it", vec![]))
        .await
        .unwrap();

    let child = pid_from(&root, "child.pid").await;
    let pgid = observed.pgid();
    assert!(pid_alive(child));
    let start = Instant::now();
    h.session
        .interrupt_turn(&ThreadId::from("thread_1"), InterruptReason::User)
        .await
        .unwrap();
    let events = collect_turn(&mut h.events).await;
    assert_eq!(
        outcome(&events).0,
        TurnOutcome::Interrupted {
            reason: "user".into()
        }
    );
    assert_nothing_pending(&events);
    let tool = final_items(&events)
        .into_iter()
        .find(|i| matches!(i.kind, TurnItemKind::ToolCall { .. }))
        .unwrap();
    assert_eq!(tool.status, TurnItemStatus::Failed);
    match &tool.kind {
        TurnItemKind::ToolCall { tool, error, .. } => {
            assert_eq!(tool, "bash");
            assert_eq!(error.as_deref(), Some("Tool execution aborted"));
        }
        _ => unreachable!(),
    }

    // The whole group, the SIGTERM-ignoring child included, is gone within 2 s.
    assert!(
        eventually(Duration::from_secs(2), || live_members(pgid).is_empty()).await,
        "still alive after {:?}: {:?}",
        start.elapsed(),
        live_members(pgid)
    );
    assert!(!pid_alive(child));
    assert!(
        eventually(Duration::from_secs(1), || observed.calls().len() == 2).await,
        "{:?}",
        observed.calls()
    );
    assert_eq!(observed.calls()[1], ("exited", pgid));

    // The thread is idle: the next turn starts and completes.
    h.session
        .start_turn(turn(2, "again", vec![]))
        .await
        .unwrap();
    let events = collect_turn(&mut h.events).await;
    assert_eq!(outcome(&events).0, TurnOutcome::Completed);
}

#[tokio::test]
async fn a_command_run_by_the_agent_sends_its_output_to_the_model() {
    let llm = FakeLlm::new(vec![
        tool_step(
            "call_1",
            "bash",
            &json!({"command": "ls src; exit 1", "description": "list"}).to_string(),
        ),
        text_step(&["done"]),
    ]);
    let mut h = open(Arc::clone(&llm), |_| {}, None).await;
    h.session.start_turn(turn(1, "ls", vec![])).await.unwrap();
    let events = collect_turn(&mut h.events).await;
    assert_eq!(outcome(&events).0, TurnOutcome::Completed);
    let requests = llm.requests();
    assert_eq!(requests.len(), 2);
    let result = requests[1]
        .messages
        .iter()
        .find_map(|m| match m {
            knife_llm::ChatMessage::Tool { content, .. } => Some(content.clone()),
            _ => None,
        })
        .unwrap();
    assert_eq!(result, "main.rs\n(exit code 1)");
}
