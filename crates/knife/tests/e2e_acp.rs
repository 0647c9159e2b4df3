// Process tests of the `acp` driver with the real binary: `knife run --provider
// <acp instance>` against the scripted fake ACP agent (knife-testkit's `fake_acp`),
// an approval answered over HTTP, the thread's MCP bearer in `session/new`, and a
// server SIGKILLed mid-turn: the restart kills the orphaned agent and resumes the
// thread through `session/load`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;

use common::*;
use knife_protocol::*;
use reqwest::StatusCode;
use serde_json::{Value, json};

fn acp_config(dir: &Path) -> String {
    let state = dir.join("acp-state");
    std::fs::create_dir_all(&state).unwrap();
    format!(
        "default_provider = \"agent\"\n\n[providers.agent]\ndriver = \"acp\"\n\
         command = \"{}\"\nenv = {{ FAKE_ACP_STATE_DIR = \"{}\", FAKE_ACP_LOG = \"{}\" }}\n",
        fake_peer_bin("fake_acp").display(),
        state.display(),
        dir.join("acp.log").display()
    )
}

fn received(dir: &Path) -> Vec<Value> {
    std::fs::read_to_string(dir.join("acp.log"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

fn pids(dir: &Path) -> Vec<i32> {
    received(dir)
        .iter()
        .filter_map(|v| v["pid"].as_i64().map(|p| p as i32))
        .collect()
}

fn alive(pid: i32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_acp_knife_run_approval_and_mcp_bearer() {
    let home = tempfile::tempdir().unwrap();
    let mut server = Server::start_with_config(&acp_config(home.path())).await;
    let url = server.proc.url();
    let project = server.project_dir().display().to_string();
    let cwd = server.path().to_owned();

    let out = run_cli(
        &cwd,
        &[
            "run",
            "--server",
            &url,
            "--project",
            &project,
            "--provider",
            "agent",
            "hello",
        ],
    )
    .await;
    assert!(out.status.success(), "knife run failed: {}", out.stderr);
    assert_eq!(out.stdout.trim_end(), "echo #1: hello");

    // session/new carried the project root and the thread's MCP server with its bearer.
    let log = received(home.path());
    let new = log.iter().find(|m| m["method"] == "session/new").unwrap();
    let canonical = std::fs::canonicalize(&project).unwrap();
    assert_eq!(new["params"]["cwd"], json!(canonical));
    let mcp = &new["params"]["mcpServers"][0];
    assert_eq!(mcp["type"], "http");
    assert_eq!(mcp["url"], json!(format!("{url}/mcp")));
    assert_eq!(mcp["headers"][0]["name"], "Authorization");
    assert!(
        mcp["headers"][0]["value"]
            .as_str()
            .unwrap()
            .starts_with("Bearer knife_mcp_"),
        "{mcp}"
    );

    // An approval answered over HTTP.
    let (_, threads) = server.api.get("/api/threads").await;
    let thread = threads[0]["id"].as_str().unwrap().to_owned();
    let script = json!({"steps": [
        {"tool": {"id": "c1", "title": "make build", "kind": "execute", "input": {"command": "make"}},
         "permission": true, "output": "built"},
        {"text": "all done"}
    ]})
    .to_string();
    let run = server.api.post_message(&thread, &script).await;
    let api = server.api.clone();
    let t = thread.clone();
    let request = poll_until("the approval request", RUN_TIMEOUT, || async {
        api.projection(&t)
            .await
            .runtime_requests
            .into_iter()
            .find(|r| r.status == RuntimeRequestStatus::Pending)
    })
    .await;
    let (status, body) = server
        .api
        .post(
            &format!("/api/threads/{thread}/requests/{}", request.id),
            &json!({"decision": "allow_always"}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (_, run) = server.api.follow_run(&thread, &run, 0).await;
    assert_eq!(run.status, RunStatus::Completed, "{:?}", run.error);
    let answered = received(home.path())
        .into_iter()
        .any(|m| m["result"]["outcome"] == json!({"outcome": "selected", "optionId": "always"}));
    assert!(answered, "the agent got the allow_always option");
    let p = server.api.projection(&thread).await;
    assert!(p.turn_items.iter().any(|i| matches!(&i.kind,
        TurnItemKind::ToolCall { call_id, output: Some(o), .. } if call_id == "c1" && o == "built")));

    let status = server.proc.terminate().await;
    assert!(status.success(), "stderr:\n{}", server.proc.stderr());
    for pid in pids(home.path()) {
        poll_until("the agent to exit with the server", RUN_TIMEOUT, || async {
            (!alive(pid)).then_some(())
        })
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_acp_sigkill_mid_turn_restart_kills_the_orphan_and_resumes_via_session_load() {
    let home = tempfile::tempdir().unwrap();
    let mut server = Server::start_with_config(&acp_config(home.path())).await;
    let project = server.api.create_project(&server.project_dir()).await;
    let thread = server.api.create_thread(&project).await;
    let first = server.api.post_message(&thread, "remember me").await;
    let (_, run) = server.api.follow_run(&thread, &first, 0).await;
    assert_eq!(run.status, RunStatus::Completed, "{:?}", run.error);

    let hang = json!({"steps": [{"text": "long job"}, {"hang": true}]}).to_string();
    server.api.post_message(&thread, &hang).await;
    let api = server.api.clone();
    let t = thread.clone();
    poll_until("the long job to stream", RUN_TIMEOUT, || async {
        api.projection(&t)
            .await
            .turn_items
            .iter()
            .any(|i| matches!(&i.kind, TurnItemKind::AssistantMessage { text, .. } if text == "long job"))
            .then_some(())
    })
    .await;
    let orphan = pids(home.path())[0];
    server.proc.kill_hard().await;
    assert!(alive(orphan), "the agent outlives a SIGKILLed server");

    server.respawn().await;
    poll_until(
        "the orphaned agent to be killed at boot",
        RUN_TIMEOUT,
        || async { (!alive(orphan)).then_some(()) },
    )
    .await;
    let api = server.api.clone();
    let t = thread.clone();
    let p = poll_until("the resumed run to finish", RUN_TIMEOUT, || async {
        let p = api.projection(&t).await;
        (p.runs.len() == 3 && p.thread.active_run_id.is_none()).then_some(p)
    })
    .await;
    let resumed = &p.runs[2];
    assert_eq!(resumed.status, RunStatus::Completed, "{:?}", resumed.error);
    let load = received(home.path())
        .into_iter()
        .find(|m| m["method"] == "session/load")
        .expect("session/load was sent");
    assert_eq!(
        load["params"]["sessionId"],
        json!(p.provider_threads[0].native_id.clone().unwrap())
    );
    let answer: Vec<&str> = p
        .turn_items
        .iter()
        .filter(|i| i.run_id.as_ref() == Some(&resumed.id))
        .filter_map(|i| match &i.kind {
            TurnItemKind::AssistantMessage { text, .. } => Some(text.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(answer.len(), 1, "{answer:?}");
    assert!(
        answer[0].starts_with("echo #3: "),
        "the agent kept its memory: {answer:?}"
    );
    assert!(!p.thread.is_claimed());
    let status = server.proc.terminate().await;
    assert!(status.success(), "stderr:\n{}", server.proc.stderr());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_acp_an_instance_without_command_is_refused_with_a_hint() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("knife.toml");
    std::fs::write(&path, "[providers.agent]\ndriver = \"acp\"\n").unwrap();
    let out = run_cli(
        dir.path(),
        &[
            "run",
            "--config",
            path.to_str().unwrap(),
            "--server",
            "http://127.0.0.1:9",
            "hi",
        ],
    )
    .await;
    assert!(!out.status.success());
    assert!(
        out.stderr.contains("has driver `acp` but no `command`"),
        "{}",
        out.stderr
    );
    // The LLM drivers still need a model.
    std::fs::write(&path, "[providers.x]\ndriver = \"openai-chat\"\n").unwrap();
    let out = run_cli(
        dir.path(),
        &[
            "run",
            "--config",
            path.to_str().unwrap(),
            "--server",
            "http://127.0.0.1:9",
            "hi",
        ],
    )
    .await;
    assert!(!out.status.success());
    assert!(out.stderr.contains("has no `model`"), "{}", out.stderr);
}

/// `knife run` (in-process server) from `dir` with `config` written to `dir/knife.toml`
/// and `env` added to knife's environment.
async fn run_in_process(
    dir: &Path,
    config: &str,
    env: &[(&str, &str)],
    args: &[&str],
) -> CliOutput {
    std::fs::write(dir.join("knife.toml"), config).unwrap();
    let data = dir.join("data").display().to_string();
    let mut cmd = knife_command(dir);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut all = vec!["run", "--data-dir", &data];
    all.extend_from_slice(args);
    cmd.args(&all)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let out = tokio::time::timeout(CLI_TIMEOUT, cmd.spawn().unwrap().wait_with_output())
        .await
        .expect("knife run finished")
        .unwrap();
    let out = CliOutput {
        status: out.status,
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    };
    eprintln!("--- stdout\n{}\n--- stderr\n{}", out.stdout, out.stderr);
    out
}

/// The agent program does not inherit knife's secrets: the `api_key_env` variables of
/// every instance are removed from its environment (like `bash` commands), unless the
/// agent instance's own `env` sets one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_acp_agent_env_has_no_api_keys_of_other_instances() {
    let dir = tempfile::tempdir().unwrap();
    let env_file = dir.path().join("agent-env.txt");
    let config = format!(
        "default_provider = \"agent\"\n[server]\nlisten = \"127.0.0.1:9\"\n\n\
         [providers.other]\ndriver = \"openai-chat\"\nbase_url = \"http://127.0.0.1:9/v1\"\n\
         model = \"m\"\napi_key_env = \"OPENAI_LIKE_SECRET\"\n\n\
         [providers.third]\ndriver = \"anthropic\"\nmodel = \"m\"\napi_key_env = \"THIRD_SECRET_KEY\"\n\n\
         [providers.agent]\ndriver = \"acp\"\ncommand = \"sh\"\n\
         args = [\"-c\", \"env > '{}'; exec '{}'\"]\n\
         env = {{ THIRD_SECRET_KEY = \"given-to-the-agent\" }}\n",
        env_file.display(),
        fake_peer_bin("fake_acp").display()
    );
    let out = run_in_process(
        dir.path(),
        &config,
        &[
            ("THIRD_SECRET_KEY", "knife-own-secret"),
            ("OPENAI_LIKE_SECRET", "s3cret-other"),
        ],
        &["--provider", "agent", "hi"],
    )
    .await;
    assert!(out.status.success(), "knife run failed: {}", out.stderr);
    assert_eq!(out.stdout.trim_end(), "echo #1: hi");
    let env = std::fs::read_to_string(&env_file).unwrap();
    assert!(
        !env.contains("s3cret-other"),
        "another instance's API key leaked:\n{env}"
    );
    assert!(!env.contains("OPENAI_LIKE_SECRET="), "{env}");
    assert!(!env.contains("knife-own-secret"), "{env}");
    assert!(env.contains("THIRD_SECRET_KEY=given-to-the-agent"), "{env}");
    assert!(
        env.contains("PATH="),
        "the rest of the environment is kept:\n{env}"
    );
}

/// A codex or ACP instance whose program does not exist: `knife run` ends at once
/// with an error that names the program and says how to fix the config.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_missing_agent_program_fails_fast_with_advice() {
    let dir = tempfile::tempdir().unwrap();
    let config = "default_provider = \"cx\"\n[server]\nlisten = \"127.0.0.1:9\"\n\n\
                  [providers.cx]\ndriver = \"codex\"\ncommand = \"/nonexistent/bin/codex\"\n\n\
                  [providers.ac]\ndriver = \"acp\"\ncommand = \"no-such-acp-agent-knife-test\"\n";
    for (provider, program, where_) in [
        ("cx", "/nonexistent/bin/codex", "was not found;"),
        (
            "ac",
            "no-such-acp-agent-knife-test",
            "was not found on PATH",
        ),
    ] {
        let started = std::time::Instant::now();
        let out = run_in_process(dir.path(), config, &[], &["--provider", provider, "hi"]).await;
        assert!(!out.status.success());
        assert!(
            started.elapsed() < std::time::Duration::from_secs(20),
            "took {:?}",
            started.elapsed()
        );
        assert!(out.stderr.contains(program), "{}", out.stderr);
        assert!(out.stderr.contains(where_), "{}", out.stderr);
        assert!(
            out.stderr.contains("`command` in knife.toml"),
            "{}",
            out.stderr
        );
    }
}

/// A program that is not an agent (`cat` echoes knife's own `initialize` back; `sh`
/// prints a plain text line and waits): `knife run` fails within seconds, not after the
/// handshake timeout, quoting the program's first output and naming the instance.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_a_program_that_is_not_an_agent_fails_the_run_fast() {
    let dir = tempfile::tempdir().unwrap();
    let config = "[server]\nlisten = \"127.0.0.1:9\"\n\n\
                  [providers.ac]\ndriver = \"acp\"\ncommand = \"cat\"\n\n\
                  [providers.sh]\ndriver = \"acp\"\ncommand = \"sh\"\n\
                  args = [\"-c\", \"echo hello; sleep 1000\"]\n\n\
                  [providers.cx]\ndriver = \"codex\"\ncommand = \"sh\"\nargs = [\"-c\", \"cat\"]\n";
    for (provider, program, protocol, output) in [
        ("ac", "`cat`", "does not speak ACP", "\"initialize\""),
        ("sh", "`sh`", "does not speak ACP", "\"hello\""),
        (
            "cx",
            "`sh`",
            "does not speak the codex app-server protocol",
            "initialize",
        ),
    ] {
        let started = std::time::Instant::now();
        let out = run_in_process(dir.path(), config, &[], &["--provider", provider, "hi"]).await;
        assert!(!out.status.success());
        assert!(
            started.elapsed() < std::time::Duration::from_secs(10),
            "took {:?}",
            started.elapsed()
        );
        for want in [program, protocol, output, "its first output was"] {
            assert!(out.stderr.contains(want), "{want}: {}", out.stderr);
        }
        assert!(
            out.stderr
                .contains(&format!("`args` of provider instance {provider}")),
            "{}",
            out.stderr
        );
    }
}

/// CHG-02 with an ACP agent: a file the agent writes itself is in the change set.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chg_02_acp_agent_edits_are_in_the_change_set() {
    let home = tempfile::tempdir().unwrap();
    let server = Server::start_with_config(&acp_config(home.path())).await;
    let api = &server.api;
    let project_dir = server.project_dir();
    let project = api.create_project(&project_dir).await;
    let thread = api.create_thread(&project).await;
    let target = std::fs::canonicalize(&project_dir)
        .unwrap()
        .join("made-by-acp.txt");
    let prompt = json!({"steps": [
        {"write_file": {"path": target.display().to_string(), "content": "a\nb\nc\n"}},
        {"text": "done"}
    ]});
    let run = api.post_message(&thread, &prompt.to_string()).await;
    let (_, done) = api.follow_run(&thread, &run, 0).await;
    assert_eq!(done.status, RunStatus::Completed, "{done:?}");
    let changes = done.changes.expect("change set");
    let f = changes
        .files
        .iter()
        .find(|f| f.path == "made-by-acp.txt")
        .unwrap();
    assert_eq!(f.kind, FileChangeKind::Added);
    assert_eq!(f.added, 3);
}
