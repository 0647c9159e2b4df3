// Process tests of the CLI against the real binary: `knife run`, `knife threads list|show`
// (over HTTP and straight from the data dir) and the self-contained `knife demo`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use knife_protocol::*;
use knife_testkit::demo::DEMO_ANSWER;

const ANSWER: &str = "The project is a sample folder with nothing in it yet.";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_cli_run_then_threads_list_and_show() {
    let mock = MockLlm::script(
        &format!(
            "[[response]]\ntext = \"{ANSWER}\"\nstream_deltas_ms = 5\n\n\
             [[response]]\ntext = \"Second answer.\"\n"
        ),
        &[],
    )
    .await;
    let mut server = Server::start(&mock.base_url()).await;
    let url = server.proc.url();
    let project = server.project_dir().display().to_string();
    let cwd = server.path().to_owned();

    let prompt = "What is in this project?";
    let out = run_cli(
        &cwd,
        &["run", "--server", &url, "--project", &project, prompt],
    )
    .await;
    assert!(out.status.success(), "knife run failed: {}", out.stderr);
    assert_eq!(out.stdout.trim_end(), ANSWER, "stdout of knife run");
    assert!(out.stderr.contains("completed"), "stderr: {}", out.stderr);

    // The thread the CLI created, through the API.
    let (_, threads) = server.api.get("/api/threads").await;
    let threads: Vec<Thread> = serde_json::from_value(threads).unwrap();
    assert_eq!(threads.len(), 1, "{threads:?}");
    let thread = threads[0].id.to_string();
    assert_eq!(threads[0].title, prompt);
    let (_, projects) = server.api.get("/api/projects").await;
    let projects: Vec<Project> = serde_json::from_value(projects).unwrap();
    let canonical = std::fs::canonicalize(&project).unwrap();
    assert_eq!(projects.len(), 1);
    assert_eq!(std::path::Path::new(&projects[0].root), canonical);

    // A second `knife run` in the same folder reuses the project.
    let again = run_cli(
        &cwd,
        &["run", "--server", &url, "--project", &project, "again"],
    )
    .await;
    assert!(
        again.status.success(),
        "second knife run failed: {}",
        again.stderr
    );
    assert_eq!(again.stdout.trim_end(), "Second answer.");
    let (_, projects) = server.api.get("/api/projects").await;
    assert_eq!(
        projects.as_array().unwrap().len(),
        1,
        "project duplicated: {projects}"
    );

    let list = run_cli(&cwd, &["threads", "list", "--server", &url]).await;
    assert!(
        list.status.success(),
        "threads list failed: {}",
        list.stderr
    );
    let line = list
        .stdout
        .lines()
        .find(|l| l.starts_with(&thread))
        .unwrap_or_else(|| panic!("thread {thread} not listed:\n{}", list.stdout));
    let cols: Vec<&str> = line.split_whitespace().collect();
    assert_eq!((cols[1], cols[2]), ("idle", "1"), "{line}");
    assert!(
        list.stdout.starts_with("THREAD") && list.stdout.lines().next().unwrap().contains("STATUS"),
        "a header first:\n{}",
        list.stdout
    );
    assert!(line.ends_with(prompt), "{line}");

    let show = run_cli(&cwd, &["threads", "show", &thread, "--server", &url]).await;
    assert!(
        show.status.success(),
        "threads show failed: {}",
        show.stderr
    );
    for expected in [
        format!("thread   {thread}"),
        "status   idle".to_owned(),
        "run 1 · completed".to_owned(),
        format!("you: {prompt}"),
        format!("assistant: {ANSWER}"),
    ] {
        assert!(
            show.stdout.contains(&expected),
            "`{expected}` missing from:\n{}",
            show.stdout
        );
    }
    let you = show.stdout.find("you: ").unwrap();
    let assistant = show.stdout.find("assistant: ").unwrap();
    assert!(you < assistant, "transcript out of order:\n{}", show.stdout);

    // `--json` prints exactly the API projection.
    let json = run_cli(
        &cwd,
        &["threads", "show", &thread, "--json", "--server", &url],
    )
    .await;
    assert!(json.status.success(), "{}", json.stderr);
    let printed: serde_json::Value = serde_json::from_str(&json.stdout).unwrap();
    assert_eq!(printed, server.api.thread_json(&thread).await);

    // Unknown thread: non-zero, says so.
    let missing = run_cli(&cwd, &["threads", "show", "thread_nope", "--server", &url]).await;
    assert!(!missing.status.success());
    assert!(missing.stderr.contains("thread_nope"), "{}", missing.stderr);

    // With the server stopped, the CLI reads the data dir directly.
    let status = server.proc.terminate().await;
    assert!(status.success(), "serve exit: {status}");
    let data = server.path().join("data").display().to_string();
    let offline = run_cli(
        &cwd,
        &["threads", "list", "--server", &url, "--data-dir", &data],
    )
    .await;
    assert!(offline.status.success(), "{}", offline.stderr);
    assert!(offline.stdout.contains(&thread), "{}", offline.stdout);
    let offline_show = run_cli(
        &cwd,
        &[
            "threads",
            "show",
            &thread,
            "--server",
            &url,
            "--data-dir",
            &data,
        ],
    )
    .await;
    assert!(offline_show.status.success(), "{}", offline_show.stderr);
    assert!(
        offline_show
            .stdout
            .contains(&format!("assistant: {ANSWER}")),
        "{}",
        offline_show.stdout
    );

    // `knife run --server` with nothing listening: non-zero and a clear message.
    let down = run_cli(
        &cwd,
        &["run", "--server", &url, "--project", &project, "hi"],
    )
    .await;
    assert!(!down.status.success());
    assert!(
        down.stderr.contains("no knife server answers") && down.stderr.contains(&url),
        "{}",
        down.stderr
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_demo_prints_the_answer_and_the_event_log_summary() {
    let cwd = tempfile::tempdir().unwrap();
    let out = run_cli(cwd.path(), &["demo"]).await;
    assert!(out.status.success(), "knife demo failed: {}", out.stderr);
    assert!(
        out.stdout.contains(DEMO_ANSWER),
        "the demo answer is missing from stdout:\n{}",
        out.stdout
    );
    assert!(out.stdout.contains("Let me look at the project files."));
    let summary = out
        .stdout
        .find("event log:")
        .unwrap_or_else(|| panic!("no event-log summary:\n{}", out.stdout));
    assert!(summary > out.stdout.find(DEMO_ANSWER).unwrap());
    let tail = &out.stdout[summary..];
    for event_type in [
        "run.created",
        "run.updated",
        "turn-item.updated",
        "thread.created",
    ] {
        assert!(tail.contains(event_type), "`{event_type}` missing:\n{tail}");
    }
    assert!(tail.contains("model requests: 3"), "{tail}");
    // The tool calls are shown on stderr.
    assert!(
        out.stderr.contains("list") && out.stderr.contains("read"),
        "{}",
        out.stderr
    );
    assert!(out.stderr.contains("completed"), "{}", out.stderr);
}

/// One process owns a data directory: a second `knife serve` on it is refused with a
/// message naming the owner's server, and `knife run --data-dir` on it (no --server)
/// finds and uses that server instead of opening the database a second time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_data_dir_is_owned_by_one_process_and_clients_find_its_server() {
    let mock = MockLlm::script("[[response]]\ntext = \"found it\"\n", &[]).await;
    let server = Server::start(&mock.base_url()).await;
    let url = server.proc.url();
    let cwd = server.path().to_owned();
    let data = server.path().join("data").display().to_string();
    let config = server.path().join("knife.toml").display().to_string();

    let second = run_cli(
        &cwd,
        &[
            "serve",
            "--config",
            &config,
            "--listen",
            "127.0.0.1:0",
            "--data-dir",
            &data,
        ],
    )
    .await;
    assert!(
        !second.status.success(),
        "a second server on one data dir must be refused"
    );
    assert!(
        second.stderr.contains(&url),
        "the refusal names the owner's server: {}",
        second.stderr
    );
    assert!(second.stderr.contains("--data-dir"), "{}", second.stderr);

    // `db rebuild` needs the directory to itself: it says to stop the server.
    let rebuild = run_cli(&cwd, &["db", "rebuild", "--data-dir", &data]).await;
    assert!(!rebuild.status.success());
    assert!(
        rebuild.stderr.contains(&url) && rebuild.stderr.contains("stop it first"),
        "{}",
        rebuild.stderr
    );
    assert!(!rebuild.stderr.contains("knife run"), "{}", rebuild.stderr);

    let project = server.project_dir().display().to_string();
    let out = run_cli(
        &cwd,
        &[
            "run",
            "--config",
            &config,
            "--data-dir",
            &data,
            "--project",
            &project,
            "hello",
        ],
    )
    .await;
    assert!(out.status.success(), "{}", out.stderr);
    assert_eq!(out.stdout.trim_end(), "found it");
    assert!(
        out.stderr
            .contains(&format!("using the knife server at {url}")),
        "{}",
        out.stderr
    );
    let (_, threads) = server.api.get("/api/threads").await;
    assert_eq!(
        threads.as_array().unwrap().len(),
        1,
        "the run went through the owner's server"
    );
}

/// Runs `knife ARGS` with its stdout a pipe whose reader is already gone.
async fn run_with_closed_stdout(
    cwd: &std::path::Path,
    args: &[&str],
) -> (std::process::ExitStatus, String) {
    let mut cmd = knife_command(cwd);
    cmd.args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    drop(child.stdout.take());
    let out = tokio::time::timeout(CLI_TIMEOUT, child.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    (
        out.status,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_cli_output_into_a_closed_pipe_exits_quietly() {
    let mock = MockLlm::script(&format!("[[response]]\ntext = \"{ANSWER}\"\n"), &[]).await;
    let server = Server::start(&mock.base_url()).await;
    let url = server.proc.url();
    let project = server.api.create_project(&server.project_dir()).await;
    let thread = server.api.create_thread(&project).await;
    server.api.post_message(&thread, "hello").await;
    server.api.settled_thread_json(&thread).await;
    let cwd = server.path().to_owned();

    for args in [
        vec!["threads", "list", "--server", &url],
        vec!["threads", "show", &thread, "--server", &url],
    ] {
        let (status, stderr) = run_with_closed_stdout(&cwd, &args).await;
        assert!(
            status.success(),
            "`knife {}`: {status}: {stderr}",
            args.join(" ")
        );
        assert!(!stderr.contains("panicked"), "{stderr}");
        assert!(!stderr.contains("Broken pipe"), "{stderr}");
    }

    // The shell way: `knife threads list | head -1`.
    let out = tokio::process::Command::new("sh")
        .arg("-c")
        .arg(format!(
            "\"{}\" threads list --server {url} | head -1",
            knife_bin().display()
        ))
        .current_dir(&cwd)
        .env("XDG_CONFIG_HOME", &cwd)
        .output()
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(
        String::from_utf8_lossy(&out.stdout).starts_with("THREAD"),
        "stdout: {}\nstderr: {stderr}",
        String::from_utf8_lossy(&out.stdout)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_cli_a_wrong_api_token_is_told_apart_from_a_missing_one() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("knife.toml"),
        config_toml("http://127.0.0.1:9/v1"),
    )
    .unwrap();
    let mut cmd = knife_command(dir.path());
    cmd.arg("serve")
        .args(["--listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir.path().join("data"))
        .env("KNIFE_API_TOKEN", "the-right-token");
    let server = Proc::spawn("knife serve", cmd).await;
    let url = server.url();

    let missing = run_cli(dir.path(), &["threads", "list", "--server", &url]).await;
    assert!(!missing.status.success());
    assert!(
        missing.stderr.contains("requires an API token"),
        "{}",
        missing.stderr
    );

    let mut cmd = knife_command(dir.path());
    cmd.args(["threads", "list", "--server", &url])
        .env("KNIFE_API_TOKEN", "a-wrong-token");
    let wrong = cmd.output().await.unwrap();
    let stderr = String::from_utf8_lossy(&wrong.stderr);
    assert!(!wrong.status.success());
    assert!(stderr.contains("rejected the API token"), "{stderr}");
    assert!(!stderr.contains("requires an API token"), "{stderr}");

    let mut cmd = knife_command(dir.path());
    cmd.args(["threads", "list", "--server", &url])
        .env("KNIFE_API_TOKEN", "the-right-token");
    let right = cmd.output().await.unwrap();
    assert!(
        right.status.success(),
        "{}",
        String::from_utf8_lossy(&right.stderr)
    );
}

/// A newcomer's knife.toml with several instances and no `default_provider`:
/// `knife run --provider ID` serves in-process without one, while `knife serve`
/// (which needs a default) says which line to add. A codex instance whose
/// CODEX_HOME folder is missing is refused at start with how to make it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_cli_several_instances_without_a_default_and_a_missing_codex_home() {
    let mock = MockLlm::script("[[response]]\ntext = \"Picked by --provider.\"\n", &[]).await;
    let dir = tempfile::tempdir().unwrap();
    let project = dir.path().join("project");
    std::fs::create_dir_all(&project).unwrap();
    let missing_home = dir.path().join("no-codex-home");
    let config = dir.path().join("knife.toml");
    // `listen` at a port nobody serves: `knife run` must not find another server.
    let base = format!(
        "[server]\nlisten = \"127.0.0.1:9\"\n\n\
         [providers.dead]\ndriver = \"openai-chat\"\nbase_url = \"http://127.0.0.1:9/v1\"\nmodel = \"m\"\n\n\
         [providers.mock]\ndriver = \"openai-chat\"\nbase_url = \"{}\"\nmodel = \"gpt-4o-mini\"\n",
        mock.base_url()
    );
    std::fs::write(&config, &base).unwrap();
    let data = dir.path().join("data");
    let run = |provider: &'static str| {
        let args: Vec<String> = [
            "run",
            "--config",
            config.to_str().unwrap(),
            "--data-dir",
            data.to_str().unwrap(),
            "--project",
            project.to_str().unwrap(),
            "--provider",
            provider,
            "hi",
        ]
        .iter()
        .map(std::string::ToString::to_string)
        .collect();
        let cwd = dir.path().to_owned();
        async move {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            run_cli(&cwd, &args).await
        }
    };
    let out = run("mock").await;
    assert!(out.status.success(), "{}", out.stderr);
    assert_eq!(out.stdout.trim_end(), "Picked by --provider.");

    let serve = run_cli(
        dir.path(),
        &[
            "serve",
            "--config",
            config.to_str().unwrap(),
            "--listen",
            "127.0.0.1:0",
            "--data-dir",
            data.to_str().unwrap(),
        ],
    )
    .await;
    assert!(!serve.status.success());
    assert!(
        serve
            .stderr
            .contains("several provider instances (dead, mock) and no default_provider"),
        "{}",
        serve.stderr
    );
    assert!(
        serve.stderr.contains("add default_provider = \"dead\""),
        "{}",
        serve.stderr
    );

    std::fs::write(
        &config,
        format!(
            "{base}\n[providers.cx]\ndriver = \"codex\"\ncommand = \"/bin/true\"\n\
             [providers.cx.env]\nCODEX_HOME = \"{}\"\n",
            missing_home.display()
        ),
    )
    .unwrap();
    let out = run("cx").await;
    assert!(!out.status.success());
    assert!(
        out.stderr
            .contains(&format!("mkdir -p {}", missing_home.display())),
        "{}",
        out.stderr
    );
}

/// Without a terminal `knife run` has no spinner: a retrying provider is said on a
/// line of its own per attempt (a codex without a model provider retries for
/// minutes and would look hung otherwise).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_cli_run_without_a_terminal_prints_retries() {
    let mock = MockLlm::script(
        "[[response]]\nstatus = 503\nbody = '{\"error\":{\"message\":\"busy now\",\"type\":\"server_error\"}}'\n\
         headers = { \"retry-after-ms\" = \"0\" }\n\n\
         [[response]]\ntext = \"After the retry.\"\n",
        &[],
    )
    .await;
    let server = Server::start(&mock.base_url()).await;
    let url = server.proc.url();
    let project = server.project_dir().display().to_string();
    let out = run_cli(
        server.path(),
        &["run", "--server", &url, "--project", &project, "hi"],
    )
    .await;
    assert!(out.status.success(), "{}", out.stderr);
    assert_eq!(out.stdout.trim_end(), "After the retry.");
    let retries = out
        .stderr
        .lines()
        .filter(|l| l.contains("Provider Server Error; retrying (attempt 2 of 8, next in 0 s)"))
        .count();
    assert_eq!(retries, 1, "{}", out.stderr);
}
