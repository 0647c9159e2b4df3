// The bash tool's process groups are recorded in the store (app.rs wires the tool's
// recorder to knife_runtime::process_groups::ProcessGroups): a server SIGKILLed while a
// command runs leaves the command behind, and the next boot kills it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::*;

// `$$` is the shell, the group's leader; `exec` keeps that pid for the sleep.
const SCRIPT: &str = r#"
[[response]]
[[response.tool_calls]]
name = "bash"
arguments = { command = "echo $$ > leader.pid; exec sleep 300" }

[[response]]
text = "after the restart"
"#;

/// True when `/proc/<pid>` exists and is not a zombie.
fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_process_groups_a_killed_servers_bash_command_is_killed_at_the_next_boot() {
    let mock = MockLlm::script(SCRIPT, &[]).await;
    let config = format!(
        "{}\n[[permissions]]\ntool = \"bash\"\naction = \"allow\"\n\n\
         [[projects]]\nroot = \"project\"\nsandbox = \"off\"\n",
        config_toml(&mock.base_url())
    );
    let mut server = Server::start_with_config(&config).await;
    let api = server.api.clone();
    let project = api.create_project(&server.project_dir()).await;
    let thread = api.create_thread(&project).await;
    api.post_message(&thread, "run it").await;
    let pid_file = server.project_dir().join("leader.pid");
    let leader: u32 = poll_until("the command to start", RUN_TIMEOUT, || async {
        std::fs::read_to_string(&pid_file)
            .ok()
            .and_then(|s| s.trim().parse().ok())
    })
    .await;
    assert!(alive(leader));
    // The registration is queued right after the spawn; give it a moment to land.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let server_pid = server.proc.pid();
    server.proc.kill_hard().await;
    assert!(alive(leader), "the command died with its server");
    {
        let store = knife_store_sqlite::open(server.data_dir().join("knife.db"))
            .await
            .unwrap();
        let rows = store.list_process_groups().await.unwrap();
        let row = rows
            .iter()
            .find(|r| r.pgid == leader as i32)
            .unwrap_or_else(|| panic!("the group was not recorded: {rows:?}"));
        assert_eq!(row.owner_pid, server_pid);
        assert_eq!(
            row.thread_id.as_ref().map(std::string::ToString::to_string),
            Some(thread.clone())
        );
        assert!(row.label.starts_with("bash: echo $$"), "{}", row.label);
    }
    server.respawn().await;
    poll_until(
        "the left-over command to be killed",
        Duration::from_secs(5),
        || async { (!alive(leader)).then_some(()) },
    )
    .await;
    assert!(
        server.proc.stderr().contains("killed a process group"),
        "{}",
        server.proc.stderr()
    );
    server.proc.terminate().await;
}

/// A command that ends normally is forgotten: no row is left for the next boot.
#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_process_groups_a_finished_command_is_unregistered() {
    const QUICK: &str = r#"
[[response]]
[[response.tool_calls]]
name = "bash"
arguments = { command = "echo $$ > leader.pid" }

[[response]]
text = "done"
"#;
    let mock = MockLlm::script(QUICK, &[]).await;
    let config = format!(
        "{}\n[[permissions]]\ntool = \"bash\"\naction = \"allow\"\n\n\
         [[projects]]\nroot = \"project\"\nsandbox = \"off\"\n",
        config_toml(&mock.base_url())
    );
    let mut server = Server::start_with_config(&config).await;
    let api = server.api.clone();
    let project = api.create_project(&server.project_dir()).await;
    let thread = api.create_thread(&project).await;
    let run = api.post_message(&thread, "run it").await;
    let (_, done) = api.follow_run(&thread, &run, 0).await;
    assert_eq!(done.status, knife_protocol::RunStatus::Completed);
    let leader: i32 = std::fs::read_to_string(server.project_dir().join("leader.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let status = server.proc.terminate().await;
    assert!(status.success());
    let store = knife_store_sqlite::open(server.data_dir().join("knife.db"))
        .await
        .unwrap();
    let rows = store.list_process_groups().await.unwrap();
    assert!(
        rows.iter().all(|r| r.pgid != leader),
        "the finished command's group is still recorded: {rows:?}"
    );
}
