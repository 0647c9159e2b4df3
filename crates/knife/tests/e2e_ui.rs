// The web page (docs/2026-11-29-web-page.md) in a real browser: headless Chromium driven by Playwright
// (`playwright-core`, pinned in tests/ui/package.json) against real `knife serve`
// and `knife mock-llm` processes started here, one pair per scenario so the
// scripted model answers never interleave. The browser tests are in
// tests/ui/tests.mjs; each saves a screenshot under target/ui-screenshots/.
//
// Needs Node (`node` on PATH or $KNIFE_NODE), playwright-core installed from
// tests/ui/package-lock.json ($KNIFE_UI_NODE_MODULES, default
// ~/.cache/knife-ui-node/node_modules) and Chromium ($KNIFE_CHROMIUM, default
// /usr/bin/chromium), found by `knife_prereqs::browser`; `scripts/test` installs all
// three. Gated on `knife_has_browser`: where one is missing the test is ignored (with the
// reason); forced to run (`--include-ignored`), it fails naming the missing piece.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use common::*;
use serde_json::{Value, json};

/// The whole browser suite's budget.
const SUITE_TIMEOUT: Duration = Duration::from_secs(150);
const TOKEN: &str = "ui-test-token-5f2c";

/// Node, playwright-core and Chromium; panics naming the missing piece.
fn browser_tools() -> knife_prereqs::Browser {
    knife_prereqs::browser().unwrap_or_else(|missing| panic!("{missing}"))
}

/// One scenario's processes: the mock model and the server using it.
struct Pair {
    _mock: MockLlm,
    server: Server,
    token: Option<&'static str>,
}

async fn pair(script: String, server_toml: &str, token: Option<&'static str>) -> Pair {
    let mock = MockLlm::script(&script, &[]).await;
    let mut config = config_toml(&mock.base_url());
    // `{mock}` in a scenario's TOML: the mock's URL (for more provider instances).
    config.push_str(&server_toml.replace("{mock}", &mock.base_url()));
    let server = match token {
        None => Server::start_with_config(&config).await,
        Some(t) => start_with_token(&config, t).await,
    };
    Pair {
        _mock: mock,
        server,
        token,
    }
}

/// Like `Server::start_with_config`, with `KNIFE_API_TOKEN` set: every `/api` call
/// then needs the token (the page must ask for it).
async fn start_with_token(config: &str, token: &str) -> Server {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("knife.toml"), config).unwrap();
    std::fs::create_dir_all(dir.path().join("project")).unwrap();
    let mut cmd = knife_command(dir.path());
    cmd.env("KNIFE_API_TOKEN", token)
        .arg("serve")
        .arg("--config")
        .arg(dir.path().join("knife.toml"))
        .args(["--listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir.path().join("data"));
    let proc = Proc::spawn("knife serve (token)", cmd).await;
    let api = Api::new(&proc.url());
    Server { proc, api, dir }
}

fn words(prefix: &str, n: usize) -> String {
    (0..n)
        .map(|i| format!("{prefix}{i}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The files of the "changes" scenario's project before its run (name, content);
/// tests.mjs checks them on disk after the revert.
const CHANGES_FILES: [(&str, &str); 3] = [
    ("keep.txt", "alpha\nbeta\ngamma\n"),
    ("gone.txt", "bye\nbye again\n"),
    (
        "old-name.txt",
        "a file that the run renames\nline two\nline three\n",
    ),
];

/// What the "changes" run writes to `page.html`: markup that must stay text on the page.
const CHANGED_HTML: &str = "<img src=x onerror=\"window.__pwned = 1\">\n<b>bold</b>\n";

/// Makes `dir` a git repository with one commit (README.md) on branch `main`.
fn git_repository(dir: &Path) {
    std::fs::write(dir.join("README.md"), "readme\n").unwrap();
    for args in [
        &["init", "-q", "-b", "main"][..],
        &["add", "-A"],
        &[
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "commit",
            "-qm",
            "init",
        ],
    ] {
        let out = std::process::Command::new("git")
            .args(args)
            .current_dir(dir)
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {out:?}");
    }
}

/// Where screenshots go: `<workspace>/target/ui-screenshots` (or $KNIFE_UI_SCREENSHOTS).
fn screenshot_dir() -> PathBuf {
    std::env::var_os("KNIFE_UI_SCREENSHOTS")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/ui-screenshots")
        })
}

/// Prepares the "restart" scenario: thread "Resumed thread" streams a slow answer
/// and thread "Expired approval" waits for a `bash` approval when the server is
/// killed (SIGKILL: nothing settles the approval); the new process on the same data
/// dir resumes both threads (a slow answer: about 14 s, so a browser that starts
/// slowly on a loaded machine still sees it streaming) and expires the approval.
/// Returns once the resumed run is running.
async fn stop_mid_stream_and_restart(server: &mut Server) {
    let api = server.api.clone();
    let project = api.create_project(&server.project_dir()).await;
    let thread = |title: &'static str| {
        let api = api.clone();
        let project = project.clone();
        async move {
            let (status, body) = api
                .post(
                    "/api/threads",
                    &json!({"project_id": project, "title": title}),
                )
                .await;
            assert_eq!(status, reqwest::StatusCode::CREATED, "{body}");
            body["id"].as_str().unwrap().to_owned()
        }
    };
    let resumed = thread("Resumed thread").await;
    let asking = thread("Expired approval").await;
    api.post_message(&resumed, "answer slowly").await;
    poll_until("the slow answer to stream", RUN_TIMEOUT, || async {
        let p = api.thread_json(&resumed).await;
        p["turn_items"]
            .as_array()
            .unwrap()
            .iter()
            .any(|i| i["type"] == "assistant_message" && i["text"] != "")
            .then_some(())
    })
    .await;
    api.post_message(&asking, "run something").await;
    poll_until("the approval request", RUN_TIMEOUT, || async {
        let p = api.thread_json(&asking).await;
        p["runtime_requests"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["status"] == "pending")
            .then_some(())
    })
    .await;
    server.proc.kill_hard().await;
    server.respawn().await;
    // The browser test must see the resumed run still streaming ("resuming after
    // restart" in the sidebar): wait only until the new process resumed it.
    let api = server.api.clone();
    poll_until(
        "the restart sweep to resume the work",
        RUN_TIMEOUT,
        || async {
            let p = api.thread_json(&resumed).await;
            (p["thread"]["resume_attempts"].as_u64() >= Some(1)
                && !p["thread"]["active_run_id"].is_null())
            .then_some(())
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(knife_has_browser),
    ignore = "needs Node, playwright-core and Chromium: run scripts/test"
)]
async fn e2e_ui_browser_suite_against_knife_serve() {
    let tools = browser_tools();
    let sessions = "\n[sessions]\nidle_timeout_secs = 600\n";
    let scenarios: Vec<(&str, String, &str, Option<&'static str>)> = vec![
        (
            "chat",
            "[[response]]\nreasoning = \"The user greets me; I will answer politely.\"\n\
             text = \"Hello from **knife**: this answer streams in `piece by piece` \
             over the WebSocket.\"\ndeltas = 12\nstream_deltas_ms = 150\n"
                .into(),
            "",
            None,
        ),
        (
            "approval",
            "[[response]]\ntool_calls = [{ name = \"bash\", arguments = { command = \"echo knife-ui-ok; seq 1 300\" } }]\n\n\
             [[response]]\ntext = \"The command printed knife-ui-ok. Done.\"\n"
                .into(),
            "",
            None,
        ),
        (
            // A `write` asks for approval; its card shows the diff (CHG-05).
            "diff",
            "[[response]]\ntool_calls = [{ name = \"write\", arguments = { path = \"notes.md\", content = \"hello <b>knife</b>\\nsecond line\\n\" } }]\n\n\
             [[response]]\ntext = \"Written.\"\n"
                .into(),
            "",
            None,
        ),
        (
            // A run edits files with `write` and `bash` (no approvals): its Changes
            // panel, a revert and its undo (CHG-03/04); then a second thread in the
            // same folder answers (the shared-folder warning).
            "changes",
            format!(
                "[[response]]\ntool_calls = [\n  {{ name = \"write\", arguments = {{ path = \"page.html\", content = {html:?} }} }},\n  \
                 {{ name = \"bash\", arguments = {{ command = {bash:?} }} }},\n]\n\n\
                 [[response]]\ntext = \"Changed four files.\"\n\n\
                 [[response]]\ntext = \"The second thread answers.\"\n",
                html = CHANGED_HTML,
                bash = "sed -i 's/^beta$/BETA/' keep.txt && rm gone.txt && mv old-name.txt new-name.txt",
            ),
            "\n[[permissions]]\ntool = \"*\"\naction = \"allow\"\n",
            None,
        ),
        (
            // A thread with its own worktree (the page's checkbox) writes a file;
            // Merge brings it into the project's branch (CHG-07).
            "worktree",
            "[[response]]\ntool_calls = [{ name = \"write\", arguments = { path = \"feature.txt\", content = \"made in the worktree\\n\" } }]\n\n\
             [[response]]\ntext = \"Wrote feature.txt.\"\n"
                .into(),
            "\n[[permissions]]\ntool = \"*\"\naction = \"allow\"\n",
            None,
        ),
        (
            "slow",
            format!(
                "[[response]]\ntext = \"{} THE END\"\nstream_deltas_ms = 100\n",
                words("word", 200)
            ),
            "",
            None,
        ),
        (
            "reload",
            format!(
                "[[response]]\ntext = \"{} THE END\"\nstream_deltas_ms = 60\n\n\
                 [[response]]\ntext = \"{} THE END\"\nstream_deltas_ms = 80\n",
                words("w", 50),
                words("v", 50)
            ),
            "",
            None,
        ),
        (
            // Slow enough (about 3 s) for the sessions view to see the turn running.
            "sessions",
            "[[response]]\ntext = \"Session ready. This answer streams slowly.\"\n\
             deltas = 10\nstream_deltas_ms = 300\n"
                .into(),
            sessions,
            None,
        ),
        (
            "xss",
            format!(
                "[[response]]\ntext = '''Look: <script>window.__pwned = 1</script> and \
                 <img src=x onerror=\"window.__pwned = 2\"> and [a link](javascript:window.__pwned=3) \
                 and <a href=\"javascript:window.__pwned=4\">raw</a>\n\
                 **bold *nested italic* bold** and a long line: {}\n\
                 — end of test\n\n```sh\nan unclosed fence'''\n",
                "x".repeat(3000)
            ),
            "",
            None,
        ),
        (
            "retry",
            "[[response]]\nstatus = 429\nbody = '{\"error\":{\"message\":\"Slow down\",\"type\":\"rate_limit_exceeded\"}}'\n\
             headers = { \"retry-after\" = \"3\" }\n\n\
             [[response]]\ntext = \"Recovered after the retry.\"\n\n\
             [[response]]\nstatus = 400\nbody = '{\"error\":{\"message\":\"bad request from the mock\",\"type\":\"invalid_request_error\"}}'\n"
                .into(),
            "",
            None,
        ),
        (
            "restart",
            format!(
                "repeat_last = true\n\n\
             [[response]]\ntext = \"a slow answer that is still streaming when the server stops\"\n\
             deltas = 80\nstream_deltas_ms = 50\n\n\
             [[response]]\ntool_calls = [{{ name = \"bash\", arguments = {{ command = \"echo never-run\" }} }}]\n\n\
             [[response]]\ntext = \"Picked up where I left off, slowly: {}.\"\nstream_deltas_ms = 350\n",
                words("r", 40)
            ),
            "",
            None,
        ),
        (
            // 9100 tokens of an 8000-token context (1000 reserved) overflow: the agent
            // summarises (response 2), then answers (response 3).
            "compaction",
            "[[response]]\ntext = \"A long first answer.\"\n\
             usage = { prompt_tokens = 9000, completion_tokens = 100 }\n\n\
             [[response]]\ntext = \"The user asked about the project; it is empty.\"\n\n\
             [[response]]\ntext = \"Final answer after compaction.\"\n\
             usage = { prompt_tokens = 50, completion_tokens = 5 }\n"
                .into(),
            "context_limit = 8000\noutput_limit = 1000\n",
            None,
        ),
        (
            // Two instances (both at the mock): the page offers a provider picker.
            "providers",
            "[[response]]\ntext = \"Answered by the second instance.\"\n".into(),
            "\n[providers.second]\ndriver = \"openai-chat\"\nbase_url = \"{mock}\"\n\
             model = \"second-model\"\n",
            None,
        ),
        (
            // The composer's model picker (TURN-10).
            "model",
            "repeat_last = true\n\n[[response]]\ntext = \"Answered on the picked model.\"\n".into(),
            "",
            None,
        ),
        (
            "token",
            "[[response]]\ntext = \"Authorised answer.\"\n".into(),
            "",
            Some(TOKEN),
        ),
    ];
    let mut started = futures::future::join_all(
        scenarios
            .iter()
            .map(|(_, script, toml, token)| pair(script.clone(), toml, *token)),
    )
    .await;
    // Set up before "restart" (the browser must come while its resumed run streams).
    // "changes": the files its run edits, deletes and renames.
    let changes = scenarios.iter().position(|s| s.0 == "changes").unwrap();
    for (name, content) in CHANGES_FILES {
        std::fs::write(started[changes].server.project_dir().join(name), content).unwrap();
    }
    // "worktree": the project is a git repository with one commit on `main`.
    let worktree = scenarios.iter().position(|s| s.0 == "worktree").unwrap();
    git_repository(&started[worktree].server.project_dir());
    // "restart": a thread whose run was cut short by a server restart, resumed by
    // the new process (the page must show the "continuing after restart" marker).
    let restart = scenarios.iter().position(|s| s.0 == "restart").unwrap();
    stop_mid_stream_and_restart(&mut started[restart].server).await;
    let mut servers = serde_json::Map::new();
    for ((name, ..), p) in scenarios.iter().zip(&started) {
        let project = std::fs::canonicalize(p.server.project_dir()).unwrap();
        servers.insert(
            (*name).to_owned(),
            json!({
                "url": p.server.proc.url(),
                "project": project.display().to_string(),
                "token": p.token,
            }),
        );
    }
    let work = tempfile::tempdir().unwrap();
    let config_path = work.path().join("ui-config.json");
    let config = json!({
        "screenshots": screenshot_dir().display().to_string(),
        "servers": Value::Object(servers),
    });
    std::fs::write(&config_path, config.to_string()).unwrap();

    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/ui/run.mjs");
    let mut cmd = tokio::process::Command::new(&tools.node);
    cmd.arg(script)
        .env("KNIFE_UI_CONFIG", &config_path)
        .env("KNIFE_UI_NODE_MODULES", &tools.node_modules)
        .env("KNIFE_CHROMIUM", &tools.chromium)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let out = tokio::time::timeout(SUITE_TIMEOUT, cmd.output())
        .await
        .unwrap_or_else(|_| panic!("the browser suite did not finish within {SUITE_TIMEOUT:?}"))
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!("{stdout}\n{stderr}");
    assert!(
        out.status.success(),
        "browser tests failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    assert!(
        stdout.contains("all browser tests passed"),
        "unexpected runner output:\n{stdout}"
    );
    drop(started);
}
