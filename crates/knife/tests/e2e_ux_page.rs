// The page's UX in a real browser (SPEC UX-05, UX-06): headless Chromium driven by
// Playwright (tests/ui/run.mjs with $KNIFE_UI_TESTS = tests/ui/ux_tests.mjs) against real
// `knife serve` + `knife mock-llm` processes started here; screenshots in
// target/ui-screenshots/. Gated on `knife_has_browser` like e2e_ui.rs.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use common::*;
use serde_json::json;

const SUITE_TIMEOUT: Duration = Duration::from_secs(120);

fn screenshot_dir() -> PathBuf {
    std::env::var_os("KNIFE_UI_SCREENSHOTS")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/ui-screenshots")
        })
}

/// Starts a mock + server per `(name, script)`, runs the browser tests `only` of
/// ux_tests.mjs against them, and fails with the runner's output when one fails.
async fn browser(servers: &[(&str, String)], only: &[&str]) {
    let servers: Vec<(&str, String, &str)> = servers
        .iter()
        .map(|(name, script)| (*name, script.clone(), ""))
        .collect();
    browser_with(&servers, only).await;
}

/// [`browser`] with `(name, script, extra knife.toml)` per server.
async fn browser_with(servers: &[(&str, String, &str)], only: &[&str]) {
    let tools = knife_prereqs::browser().unwrap_or_else(|missing| panic!("{missing}"));
    let mut started = Vec::new();
    for (_, script, extra) in servers {
        let mock = MockLlm::script(script, &[]).await;
        let config = format!("{}\n{extra}", config_toml(&mock.base_url()));
        let server = Server::start_with_config(&config).await;
        started.push((mock, server));
    }
    let mut config = serde_json::Map::new();
    for ((name, ..), (_, server)) in servers.iter().zip(&started) {
        let project = std::fs::canonicalize(server.project_dir()).unwrap();
        config.insert(
            (*name).to_owned(),
            json!({"url": server.proc.url(), "project": project.display().to_string(), "token": null}),
        );
    }
    let work = tempfile::tempdir().unwrap();
    let config_path = work.path().join("ui-config.json");
    let body = json!({
        "screenshots": screenshot_dir().display().to_string(),
        "servers": serde_json::Value::Object(config),
    });
    std::fs::write(&config_path, body.to_string()).unwrap();
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/ui");
    let mut cmd = tokio::process::Command::new(&tools.node);
    cmd.arg(dir.join("run.mjs"))
        .env("KNIFE_UI_CONFIG", &config_path)
        .env("KNIFE_UI_TESTS", dir.join("ux_tests.mjs"))
        .env("KNIFE_UI_ONLY", only.join(","))
        .env("KNIFE_UI_NODE_MODULES", &tools.node_modules)
        .env("KNIFE_CHROMIUM", &tools.chromium)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let out = tokio::time::timeout(SUITE_TIMEOUT, cmd.output())
        .await
        .unwrap_or_else(|_| panic!("the browser tests did not finish within {SUITE_TIMEOUT:?}"))
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!("{stdout}\n{stderr}");
    assert!(
        out.status.success() && stdout.contains("all browser tests passed"),
        "browser tests failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    for name in only {
        assert!(
            stdout.contains(&format!("ok   {name} ")),
            "{name} did not run:\n{stdout}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(knife_has_browser),
    ignore = "needs Node, playwright-core and Chromium: run scripts/test"
)]
async fn ux_05_a_phone_viewport_hides_the_sidebar_behind_a_button() {
    let script =
        "repeat_last = true\n\n[[response]]\ntext = \"Short answer for a small screen.\"\n";
    browser(
        &[("phone", script.to_owned())],
        &["ux_05_phone_layout", "ux_05_desktop_keeps_the_sidebar"],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(knife_has_browser),
    ignore = "needs Node, playwright-core and Chromium: run scripts/test"
)]
async fn ux_06_approvals_sit_in_their_call_output_folds_by_lines_interrupts_are_neutral_and_sends_follow()
 {
    let story: Vec<String> = (0..200).map(|i| format!("word{i}")).collect();
    let tall: Vec<String> = (1..=40).map(|i| format!("Line {i}.")).collect();
    let script = format!(
        "[[response]]\ntool_calls = [{{ name = \"bash\", arguments = {{ command = \"seq 1 40\" }} }}]\n\n\
         [[response]]\ntext = \"Counted.\"\n\n\
         [[response]]\ntext = \"{} THE END\"\nstream_deltas_ms = 100\n\n\
         [[response]]\ntext = \"{}\\n\\nLAST LINE\"\nstream_deltas_ms = 40\n",
        story.join(" "),
        tall.join("\\n\\n")
    );
    browser(&[("transcript", script)], &["ux_06_transcript"]).await;
}

/// UX-07: per-run tokens and cost, opt-in notifications while the tab is hidden,
/// shortcuts under `?`, the search box (title filter and full text with marked words),
/// the message queue strip (queue, cancel, the rest runs after), and rename / archive /
/// delete / model picker present. Their actions, the diff view per run and its revert
/// are driven in e2e_ui's browser suite (`model_picker`,
/// `approve_write_diff_and_thread_lifecycle`, `changes_panel_revert_and_undo`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(knife_has_browser),
    ignore = "needs Node, playwright-core and Chromium: run scripts/test"
)]
async fn ux_07_the_page_shows_run_cost_notifies_lists_shortcuts_searches_and_queues() {
    let script = "[[response]]\ntext = \"First answer.\"\nusage = { prompt_tokens = 1000, completion_tokens = 200 }\n\n\
                  [[response]]\ntool_calls = [{ name = \"bash\", arguments = { command = \"echo hi\" } }]\n\n\
                  [[response]]\ntext = \"Ran it.\"\n\n\
                  [[response]]\ntext = \"A slow answer, long enough to queue two messages behind it.\"\ndeltas = 40\nstream_deltas_ms = 100\n\n\
                  [[response]]\ntext = \"The queued answer.\"\n";
    browser(&[("tools", script.to_owned())], &["ux_07_page_tools"]).await;
}

/// TURN-06/07 on the page: per-run and per-thread tokens and cost, and a spent thread
/// budget's "Raise and continue" (the raise, then a continuation run that answers).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(knife_has_browser),
    ignore = "needs Node, playwright-core and Chromium: run scripts/test"
)]
async fn turn_07_the_page_shows_usage_per_run_and_thread_and_raises_a_spent_budget() {
    let usage = "usage = { prompt_tokens = 1000, completion_tokens = 200 }";
    let script = format!(
        "[[response]]\ntext = \"First.\"\n{usage}\n\n\
         [[response]]\ntext = \"Second.\"\n{usage}\n\n\
         [[response]]\ntext = \"Continued after the raise.\"\n{usage}\n"
    );
    browser_with(
        &[("budget", script, "\n[budgets]\nthread_tokens = 1500\n")],
        &["turn_07_usage_per_run_and_thread_and_raise_and_continue"],
    )
    .await;
}
