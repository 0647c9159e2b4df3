// Process tests of the `codex` driver with the real knife binary and the scripted fake
// app-server (knife-testkit's `fake_codex` binary): `knife run --provider codex`, and a
// server SIGKILLed mid-turn whose restart kills the orphaned app-server and resumes the
// claimed thread through `thread/resume` of the same codex thread (resume after a restart, MGR-09).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
use std::time::Duration;

use common::*;
use knife_protocol::*;
use serde_json::Value;

/// A knife.toml whose default instance `codex` runs the fake app-server with
/// `CODEX_HOME` = `home`.
fn codex_toml(home: &Path) -> String {
    format!(
        "default_provider = \"codex\"\n\n[providers.codex]\ndriver = \"codex\"\n\
         command = \"{}\"\nargs = []\nmodel = \"mock-model\"\n\n[providers.codex.env]\n\
         CODEX_HOME = \"{}\"\n",
        fake_peer_bin("fake_codex").display(),
        home.display()
    )
}

fn sent(home: &Path) -> Vec<Value> {
    std::fs::read_to_string(home.join("fake-requests.jsonl"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

fn sent_methods(home: &Path, method: &str) -> Vec<Value> {
    sent(home)
        .into_iter()
        .filter(|m| m["method"] == method)
        .collect()
}

fn pid_alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|stat| {
            let state = stat
                .rsplit_once(')')
                .map(|(_, rest)| rest.trim_start().chars().next());
            !matches!(state, Some(Some('Z' | 'X')))
        })
        .unwrap_or(false)
}

/// Pids of running fake app-servers whose `CODEX_HOME` is `home`.
fn fake_pids(home: &Path) -> Vec<u32> {
    let wanted = format!("CODEX_HOME={}", home.display());
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_string_lossy().parse::<u32>().ok())
        .filter(|pid| {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
            String::from_utf8_lossy(&cmdline).contains("fake_codex")
                && String::from_utf8_lossy(&environ)
                    .split('\0')
                    .any(|v| v == wanted)
                && pid_alive(*pid)
        })
        .collect()
}

#[tokio::test]
async fn knife_run_provider_codex_streams_the_answer_of_the_app_server() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("codex-home");
    std::fs::create_dir_all(&home).unwrap();
    let project = dir.path().join("project");
    std::fs::create_dir_all(&project).unwrap();
    let config = dir.path().join("knife.toml");
    std::fs::write(&config, codex_toml(&home)).unwrap();
    let out = run_cli(
        dir.path(),
        &[
            "run",
            "--config",
            config.to_str().unwrap(),
            "--data-dir",
            dir.path().join("data").to_str().unwrap(),
            "--project",
            project.to_str().unwrap(),
            "--provider",
            "codex",
            r#"FAKE_CODEX: [{"text":"Hello from the codex app-server."}]"#,
        ],
    )
    .await;
    assert!(out.status.success(), "{}", out.stderr);
    assert!(
        out.stdout.contains("Hello from the codex app-server."),
        "{}",
        out.stdout
    );
    let start = &sent_methods(&home, "thread/start")[0]["params"];
    assert_eq!(
        start["cwd"],
        std::fs::canonicalize(&project)
            .unwrap()
            .display()
            .to_string()
    );
    // The in-process server knows its /mcp address: the thread's bearer is passed.
    let header = start["config"]["mcp_servers"]["knife"]["http_headers"]["Authorization"]
        .as_str()
        .unwrap_or_default();
    assert!(header.starts_with("Bearer knife_mcp_"), "{start}");
    // `knife run` stopped its in-process server, and the app-server with it.
    poll_until(
        "the app-server to exit",
        Duration::from_secs(10),
        || async { fake_pids(&home).is_empty().then_some(()) },
    )
    .await;
}

#[tokio::test]
async fn a_killed_server_restarts_kills_the_orphaned_app_server_and_resumes_the_codex_thread() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("codex-home");
    std::fs::create_dir_all(&home).unwrap();
    let mut server = Server::start_with_config(&codex_toml(&home)).await;
    let project = server.api.create_project(&server.project_dir()).await;
    let thread = server.api.create_thread(&project).await;
    let first = server
        .api
        .post_message(
            &thread,
            // `hang`: like a wedged agent, it ignores stdin EOF and SIGTERM, so it
            // outlives the crashed server (a healthy codex exits at EOF).
            r#"FAKE_CODEX: [{"hang":true},{"text":"working on it"},{"wait_interrupt":true}]"#,
        )
        .await;
    let api = server.api.clone();
    let t = thread.clone();
    let p = poll_until("the codex turn to stream", RUN_TIMEOUT, || async {
        let p = api.projection(&t).await;
        p.turn_items
            .iter()
            .any(|i| {
                matches!(&i.kind, TurnItemKind::AssistantMessage { text, .. } if text == "working on it")
            })
            .then_some(p)
    })
    .await;
    let native = p.provider_threads[0].native_id.clone().unwrap();
    let orphans = fake_pids(&home);
    assert_eq!(orphans.len(), 1, "one app-server runs");

    // Crash: the app-server, in its own process group, outlives knife.
    server.proc.kill_hard().await;
    assert!(
        pid_alive(orphans[0]),
        "the app-server should outlive a SIGKILLed knife"
    );

    // The restarted server kills it, then resumes the claimed thread.
    server.respawn().await;
    assert!(
        !pid_alive(orphans[0]),
        "the orphaned app-server survived the restart"
    );
    let api = server.api.clone();
    let t = thread.clone();
    let p = poll_until("the continuation run to complete", RUN_TIMEOUT, || async {
        let p = api.projection(&t).await;
        (p.runs.len() == 2
            && p.runs.iter().all(|r| r.status.is_terminal())
            && p.thread.active_run_id.is_none())
        .then_some(p)
    })
    .await;
    let continuation = p.runs.iter().find(|r| r.id.as_str() != first).unwrap();
    assert_eq!(
        continuation.status,
        RunStatus::Completed,
        "{continuation:?}"
    );
    // The new app-server resumed the same codex thread and got the continuation message.
    let resumes = sent_methods(&home, "thread/resume");
    assert_eq!(resumes.len(), 1, "{resumes:?}");
    assert_eq!(resumes[0]["params"]["threadId"], native.as_str());
    let turns = sent_methods(&home, "turn/start");
    let last = turns.last().unwrap();
    assert_eq!(last["params"]["threadId"], native.as_str());
    assert!(
        last["params"]["input"][0]["text"]
            .as_str()
            .unwrap()
            .starts_with("The server restarted while you were working"),
        "{last}"
    );
    assert_eq!(sent_methods(&home, "thread/start").len(), 1);
    // One app-server runs now: the new one.
    let now = fake_pids(&home);
    assert_eq!(now.len(), 1);
    assert_ne!(now[0], orphans[0]);
}

/// CHG-02 with an external runtime: a file codex writes on its own (no knife tool)
/// is in the run's change set.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chg_02_codex_edits_made_by_the_app_server_itself_are_in_the_change_set() {
    let home = tempfile::tempdir().unwrap();
    let server = Server::start_with_config(&codex_toml(home.path())).await;
    let api = &server.api;
    let project_dir = server.project_dir();
    std::fs::write(project_dir.join("lib.rs"), "fn old() {}\n").unwrap();
    let project = api.create_project(&project_dir).await;
    let thread = api.create_thread(&project).await;
    let target = std::fs::canonicalize(&project_dir).unwrap().join("lib.rs");
    let script = serde_json::json!([
        {"write_file": {"path": target.display().to_string(), "content": "fn new() {}\nfn more() {}\n"}},
        {"text": "patched"}
    ]);
    let run = api
        .post_message(&thread, &format!("FAKE_CODEX: {script}"))
        .await;
    let (_, done) = api.follow_run(&thread, &run, 0).await;
    assert_eq!(done.status, RunStatus::Completed, "{done:?}");
    let changes = done.changes.expect("change set");
    let lib = changes.files.iter().find(|f| f.path == "lib.rs").unwrap();
    assert_eq!(lib.kind, FileChangeKind::Modified);
    assert_eq!((lib.added, lib.removed), (2, 1));
}
