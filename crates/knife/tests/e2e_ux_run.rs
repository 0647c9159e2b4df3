// `knife run` output (SPEC UX-03) through the real binary and a real `knife serve` with the
// mock model: on a pseudo-terminal colour and rendered Markdown, dimmed reasoning, a tool
// output preview and a summary line; NO_COLOR and pipes plain; a dead endpoint said at once.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod pty;

use common::*;
use pty::{Pty, has_sgr};

const ANSWER: &str = "# Files\n\nThere is **one** file:\n\n- `notes.txt`\n";

/// A reasoning + `list` call, then a Markdown answer.
fn script() -> String {
    format!(
        "[[response]]\nreasoning = \"Looking at the files first.\"\n\
         tool_calls = [{{ name = \"list\", arguments = '{{\"path\":\".\"}}' }}]\n\n\
         [[response]]\ntext = {ANSWER:?}\nusage = {{ prompt_tokens = 1200, completion_tokens = 34 }}\n"
    )
}

async fn server_with_project() -> (MockLlm, Server) {
    let mock = MockLlm::script(&script(), &[]).await;
    let server = Server::start(&mock.base_url()).await;
    std::fs::write(server.project_dir().join("notes.txt"), "hello\n").unwrap();
    (mock, server)
}

fn run_on_pty(server: &Server, env: &[(&str, &str)]) -> Pty {
    let url = server.proc.url();
    let project = server.project_dir().display().to_string();
    Pty::spawn(
        &knife_bin(),
        server.path(),
        &[
            "run",
            "--server",
            &url,
            "--project",
            &project,
            "what is here?",
        ],
        env,
        40,
        100,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ux_03_run_on_a_terminal_renders_markdown_in_colour_with_reasoning_preview_and_summary() {
    let (_mock, server) = server_with_project().await;
    let mut term = run_on_pty(&server, &[]);
    let code = tokio::task::block_in_place(|| term.wait_exit(RUN_TIMEOUT));
    let screen = term.screen();
    term.save("ux_03_run_colour");
    assert_eq!(code, 0, "{screen}");
    let raw = term.raw();
    assert!(has_sgr(&raw), "colour escapes on a terminal:\n{raw:?}");
    // Rendered, not raw: no `**`, no `# `, a bullet for the list item.
    for shown in [
        "There is one file:",
        "• notes.txt",
        "┊ Looking at the files first.",
        "✓ list",
        "│ notes.txt",
        "run 1 · completed",
        "tokens (",
    ] {
        assert!(screen.contains(shown), "`{shown}` missing:\n{screen}");
    }
    assert!(
        !screen.contains("**one**") && !screen.contains("# Files"),
        "{screen}"
    );
    // In the transcript's order: the tool's result before the answer that follows it.
    assert!(
        screen.find("│ notes.txt").unwrap() < screen.find("There is one file:").unwrap(),
        "{screen}"
    );
    // `one` is bold on the screen.
    let row = screen
        .lines()
        .position(|l| l.contains("There is one file:"))
        .unwrap();
    let col = screen.lines().nth(row).unwrap().find("one").unwrap();
    let (text, bold) = term.cell(row as u16, col as u16).unwrap();
    assert_eq!((text.as_str(), bold), ("o", true), "{screen}");
    // The summary line ends with the elapsed time and the token counts.
    let summary = screen
        .lines()
        .find(|l| l.contains("run 1 · completed"))
        .unwrap();
    assert!(
        summary.contains(" in, ") && summary.contains(" out)"),
        "{summary}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ux_03_no_color_on_a_terminal_and_pipes_stay_plain_text() {
    let (_mock, server) = server_with_project().await;
    let mut term = run_on_pty(&server, &[("NO_COLOR", "1")]);
    let code = tokio::task::block_in_place(|| term.wait_exit(RUN_TIMEOUT));
    term.save("ux_03_run_no_color");
    assert_eq!(code, 0, "{}", term.screen());
    assert!(!has_sgr(&term.raw()), "NO_COLOR: {:?}", term.raw());
    assert!(term.screen().contains("There is **one** file:"));
    // NO_COLOR removes the colour, not the reasoning.
    assert!(
        term.screen().contains("┊ Looking at the files first."),
        "{}",
        term.screen()
    );

    // Piped: the answer exactly as the model wrote it, no escapes anywhere.
    let (_mock2, piped) = server_with_project().await;
    let url = piped.proc.url();
    let project = piped.project_dir().display().to_string();
    let out = run_cli(
        piped.path(),
        &[
            "run",
            "--server",
            &url,
            "--project",
            &project,
            "what is here?",
        ],
    )
    .await;
    assert!(out.status.success(), "{}", out.stderr);
    assert_eq!(out.stdout.trim_end(), ANSWER.trim_end());
    assert!(
        !has_sgr(&out.stdout) && !has_sgr(&out.stderr),
        "{}\n{}",
        out.stdout,
        out.stderr
    );
    assert!(out.stderr.contains("✓ list: 1 line"), "{}", out.stderr);
    assert!(out.stderr.contains("│ notes.txt"), "{}", out.stderr);
    assert!(
        out.stderr.contains("run 1 · completed") && out.stderr.contains("tokens ("),
        "{}",
        out.stderr
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ux_03_an_unreachable_endpoint_is_said_at_once_with_url_cause_and_attempts() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let mut config = config_toml(&format!("http://127.0.0.1:{port}/v1"));
    config.push_str("max_retry_attempts = 2\n");
    let server = Server::start_with_config(&config).await;
    let url = server.proc.url();
    let project = server.project_dir().display().to_string();
    let out = run_cli(
        server.path(),
        &["run", "--server", &url, "--project", &project, "hello"],
    )
    .await;
    assert!(!out.status.success());
    let retry = out
        .stderr
        .lines()
        .find(|l| l.contains("⟳"))
        .unwrap_or_else(|| panic!("no retry line:\n{}", out.stderr));
    assert!(
        retry.contains(&format!(
            "Could not reach http://127.0.0.1:{port}/v1/chat/completions"
        )) && retry.contains(": connection refused; retrying (attempt 2 of 2, next in "),
        "{retry}"
    );
    // The retry line comes before the final error, which says what to do.
    let error = out.stderr.find("error:").unwrap();
    assert!(out.stderr.find('⟳').unwrap() < error, "{}", out.stderr);
    assert!(
        out.stderr[error..].contains("Check the base_url in knife.toml"),
        "{}",
        out.stderr
    );
    assert!(out.stderr.contains("run 1 · failed"), "{}", out.stderr);
}
