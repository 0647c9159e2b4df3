// The `bash` tool through the real binary: a command that leaves a SIGTERM-ignoring
// child is interrupted over the HTTP API; its whole process group is gone within
// 2 s, the tool item failed "Tool execution aborted", and the thread is idle again.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::*;
use knife_protocol::*;
use serde_json::json;

const SCRIPT: &str = r#"
[[response]]
[[response.tool_calls]]
name = "bash"
arguments = { command = '''sh -c 'trap "" TERM; echo $$ > child.pid; exec sleep 30' & wait''' }

[[response]]
text = "the next turn works"
"#;

/// The test config plus a rule allowing every `bash` call: no one answers
/// approvals in these tests. The project runs unsandboxed (`sandbox = "off"`): these
/// tests read the command's pids and its parent from the host (a PID namespace would
/// hide them); the sandbox itself is tested in e2e_sandbox.rs.
fn bash_allowed(base_url: &str) -> String {
    format!(
        "{}\n[[permissions]]\ntool = \"bash\"\naction = \"allow\"\n\n\
         [[projects]]\nroot = \"project\"\nsandbox = \"off\"\n",
        config_toml(base_url)
    )
}

/// Whether `pid` is a running (not zombie) process, read from /proc.
fn pid_alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            let (_, rest) = stat.rsplit_once(')')?;
            rest.split_whitespace().next().map(|s| s != "Z" && s != "X")
        })
        .unwrap_or(false)
}

async fn child_pid(project: &Path) -> u32 {
    poll_until("the command's child to start", RUN_TIMEOUT, || async {
        std::fs::read_to_string(project.join("child.pid"))
            .ok()
            .and_then(|s| s.trim().parse::<u32>().ok())
    })
    .await
}

#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_interrupting_a_bash_call_kills_its_process_group() {
    let mock = MockLlm::script(SCRIPT, &[]).await;
    let server = Server::start_with_config(&bash_allowed(&mock.base_url())).await;
    let api = &server.api;
    let project_dir = server.project_dir();
    let project = api.create_project(&project_dir).await;
    let thread = api.create_thread(&project).await;
    let run = api.post_message(&thread, "run the command").await;

    let child = child_pid(&project_dir).await;
    assert!(pid_alive(child));
    let start = Instant::now();
    let (status, body) = api
        .post(&format!("/api/threads/{thread}/interrupt"), &json!({}))
        .await;
    assert!(status.is_success(), "{body}");
    let (_, done) = api.follow_run(&thread, &run, 0).await;
    assert_eq!(done.status, RunStatus::Interrupted, "run: {done:?}");

    while pid_alive(child) && start.elapsed() < Duration::from_secs(2) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        !pid_alive(child),
        "the SIGTERM-ignoring child still runs {:?} after the interrupt",
        start.elapsed()
    );

    let p = api.projection(&thread).await;
    let tool = p
        .turn_items
        .iter()
        .find(|i| matches!(i.kind, TurnItemKind::ToolCall { .. }))
        .unwrap_or_else(|| panic!("no tool item: {:#?}", p.turn_items));
    assert_eq!(tool.status, TurnItemStatus::Failed, "{tool:?}");
    match &tool.kind {
        TurnItemKind::ToolCall { tool, error, .. } => {
            assert_eq!(tool, "bash");
            assert_eq!(error.as_deref(), Some("Tool execution aborted"));
        }
        _ => unreachable!(),
    }
    assert_eq!(p.thread.status, ThreadStatus::Idle, "{:?}", p.thread);
    assert!(p.thread.active_run_id.is_none());

    let run2 = api.post_message(&thread, "again").await;
    let (_, done2) = api.follow_run(&thread, &run2, p.latest_sequence).await;
    assert_eq!(done2.status, RunStatus::Completed, "run: {done2:?}");
}

/// SIGTERM to the server while a command runs: shutdown interrupts the run, and
/// the command's group (its SIGTERM-ignoring child included) does not outlive
/// the server.
#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_server_shutdown_kills_a_running_command() {
    let mock = MockLlm::script(SCRIPT, &[]).await;
    let mut server = Server::start_with_config(&bash_allowed(&mock.base_url())).await;
    let api = server.api.clone();
    let project_dir = server.project_dir();
    let project = api.create_project(&project_dir).await;
    let thread = api.create_thread(&project).await;
    api.post_message(&thread, "run the command").await;
    let child = child_pid(&project_dir).await;
    assert!(pid_alive(child));

    let status = server.proc.terminate().await;
    assert!(status.success(), "stderr:\n{}", server.proc.stderr());
    let start = Instant::now();
    while pid_alive(child) && start.elapsed() < Duration::from_secs(2) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(!pid_alive(child), "the command's child outlived the server");
}

/// The server's secrets are not readable from a command through
/// `/proc/$PPID/environ` (the shell's parent is the server): `knife` makes itself
/// non-dumpable at startup (PR_SET_DUMPABLE 0), so those files are root's.
#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_a_bash_command_cannot_read_the_server_environment() {
    const SECRET: &str = "s3cr3t-e2e-value";
    let script = r#"
[[response]]
[[response.tool_calls]]
name = "bash"
arguments = { command = '''echo "parent=$(cat /proc/$PPID/comm)"; tr '\0' '\n' < /proc/$PPID/environ | grep -c s3cr3t-e2e-value''' }

[[response]]
text = "done"
"#;
    let mock = MockLlm::script(script, &[]).await;
    let server = Server::start_unprivileged_with_env(
        &bash_allowed(&mock.base_url()),
        &[
            ("KNIFE_E2E_SECRET", SECRET),
            ("OPENAI_API_KEY", "sk-s3cr3t-e2e-value"),
        ],
    )
    .await;
    let api = &server.api;
    let project = api.create_project(&server.project_dir()).await;
    let thread = api.create_thread(&project).await;
    let run = api.post_message(&thread, "read the environment").await;
    let (_, done) = api.follow_run(&thread, &run, 0).await;
    assert_eq!(done.status, RunStatus::Completed, "run: {done:?}");

    let p = api.projection(&thread).await;
    let output = p
        .turn_items
        .iter()
        .find_map(|i| match &i.kind {
            TurnItemKind::ToolCall { output, error, .. } => {
                Some(output.clone().or(error.clone()).unwrap_or_default())
            }
            _ => None,
        })
        .unwrap_or_else(|| panic!("no tool item: {:#?}", p.turn_items));
    assert!(output.contains("parent=knife"), "{output}");
    assert!(!output.contains(SECRET), "{output}");
    let count = output
        .lines()
        .find_map(|l| l.trim().parse::<u32>().ok())
        .unwrap_or(0);
    assert_eq!(count, 0, "the command read the server's secrets: {output}");
}
