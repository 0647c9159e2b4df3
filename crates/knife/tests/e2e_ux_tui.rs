// The interactive terminal (SPEC UX-02) under a real pseudo-terminal of 80×24: the real
// `knife` binary (no subcommand) against a real `knife serve` with the mock model, driven by
// keys and read back from its screen (vt100), with screen captures saved at each step.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod pty;

use std::time::Duration;

use common::*;
use pty::Pty;

/// A streamed Markdown answer; a `write` that asks for approval, then its answer; a slow
/// answer to interrupt.
fn script() -> String {
    let slow: Vec<String> = (1..=60).map(|n| format!("w{n}")).collect();
    format!(
        r#"
[[response]]
text = "**Hello** from the mock, streamed word by word."
reasoning = "The user greets me."
stream_deltas_ms = 30

[[response]]
[[response.tool_calls]]
name = "write"
arguments = {{ path = "hello.txt", content = "hi\n" }}

[[response]]
text = "Wrote hello.txt."

[[response]]
text = "{slow}"
stream_deltas_ms = 150
"#,
        slow = slow.join(" ")
    )
}

const WAIT: Duration = Duration::from_secs(15);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ux_02_interactive_terminal_streams_approves_interrupts_and_picks_threads_in_80x24() {
    let mock = MockLlm::script(&script(), &[]).await;
    let server = Server::start(&mock.base_url()).await;
    let url = server.proc.url();
    let project = server.project_dir();
    let project_arg = project.display().to_string();
    let mut term = Pty::spawn(
        &knife_bin(),
        server.path(),
        &["--server", &url, "--project", &project_arg],
        &[],
        24,
        80,
    );
    tokio::task::block_in_place(|| {
        // Start: an empty transcript, the prompt and the keys.
        term.wait_for("^T threads", WAIT);
        term.wait_for("Type a message and press Enter", WAIT);
        term.save("ux_02_1_start");

        // Send; the answer streams in as rendered Markdown (bold, no asterisks), the
        // reasoning folded.
        term.send("say hello\r");
        let screen = term.wait_for("Hello from the mock, streamed word by word.", WAIT);
        assert!(!screen.contains("**Hello**"), "{screen}");
        assert!(screen.contains("› say hello"), "{screen}");
        assert!(screen.contains("▸ thinking · 1 line"), "{screen}");
        let row = screen
            .lines()
            .position(|l| l.contains("Hello from the mock"))
            .unwrap();
        let col = screen.lines().nth(row).unwrap().find("Hello").unwrap();
        assert_eq!(
            term.cell(row as u16, col as u16),
            Some(("H".to_owned(), true)),
            "{screen}"
        );
        term.wait_for("run 1 · completed", WAIT);
        term.save("ux_02_2_answer");
        // Ctrl-R unfolds the reasoning.
        term.send("\x12");
        term.wait_for("┊ The user greets me.", WAIT);
        term.send("\x12");

        // A write asks: the approval sits inline with its diff; `y` allows it.
        term.send("write a file\r");
        term.wait_for("approval needed", WAIT);
        let screen = term.wait_for("+hi", WAIT);
        assert!(screen.contains("write: hello.txt"), "{screen}");
        assert!(screen.contains("y allow once"), "{screen}");
        term.save("ux_02_3_approval");
        term.send("y");
        term.wait_for("Wrote hello.txt.", WAIT);
        term.wait_for("run 2 · completed", WAIT);
        assert_eq!(
            std::fs::read_to_string(project.join("hello.txt")).unwrap(),
            "hi\n"
        );
        term.save("ux_02_4_approved");

        // A slow answer: Esc interrupts it, shown as a neutral marker.
        term.send("count slowly\r");
        term.wait_for("w3", WAIT);
        term.send("\x1b");
        let screen = term.wait_for("■ Interrupted", WAIT);
        assert!(!screen.contains("w60"), "{screen}");
        term.wait_for("run 3 · interrupted", WAIT);
        term.save("ux_02_5_interrupted");

        // The thread picker lists the project's threads; Enter on "new thread" starts
        // afresh, and picking the old one brings its transcript back.
        term.send("\x14");
        let screen = term.wait_for("+ new thread", WAIT);
        assert!(screen.contains("say hello"), "{screen}");
        assert_overlay_is_clean(&screen, " threads ");
        term.save("ux_02_6_picker");
        term.send("\r");
        term.wait_for("Type a message and press Enter", WAIT);
        term.send("\x14");
        term.wait_for("+ new thread", WAIT);
        term.send("\x1b[B\r");
        term.wait_for("run 3 · interrupted", WAIT);

        // /help lists the commands; any key closes it.
        term.send("/help\r");
        let screen = term.wait_for("/revert RUN", WAIT);
        assert!(
            screen.contains("/diff [RUN]") && screen.contains("/queue"),
            "{screen}"
        );
        assert_overlay_is_clean(&screen, " help ");
        term.save("ux_02_7_help");
        term.send("x");
        term.wait_until("help closed", WAIT, |s| !s.contains("/revert RUN"));

        // /diff shows what run 2 changed.
        term.send("/diff 2\r");
        let screen = term.wait_for("+hi", WAIT);
        assert!(screen.contains(": 1 file, +1 -0"), "{screen}");
        assert!(!screen.contains("1 files"), "{screen}");
        term.save("ux_02_8_diff");

        // Ctrl-C quits and gives the terminal back.
        term.send("\x03");
        assert_eq!(term.wait_exit(WAIT), 0, "{}", term.screen());
    });
}

/// The overlay box titled `title` hides what is under it: on every row from the line above
/// its top border to its bottom border nothing shows beside the box, and the input box
/// below keeps its own top border (`┌───…┐`, nothing of the overlay drawn onto it).
fn assert_overlay_is_clean(screen: &str, title: &str) {
    let rows: Vec<Vec<char>> = screen.lines().map(|l| l.chars().collect()).collect();
    let text = |r: &[char]| r.iter().collect::<String>();
    let top = rows
        .iter()
        .position(|r| text(r).contains(title))
        .unwrap_or_else(|| panic!("no overlay {title:?}:\n{screen}"));
    let left = rows[top]
        .iter()
        .position(|c| *c == '┌')
        .unwrap_or_else(|| panic!("no top-left corner:\n{screen}"));
    let bottom = (top..rows.len())
        .find(|&i| rows[i].get(left) == Some(&'└'))
        .unwrap_or_else(|| panic!("no bottom border:\n{screen}"));
    let right = rows[top].iter().rposition(|c| *c == '┐').unwrap_or(left);
    for (i, row) in rows.iter().enumerate().take(bottom + 1).skip(top - 1) {
        let beside: String = row
            .iter()
            .enumerate()
            .filter(|(col, _)| i == top - 1 || *col < left || *col > right)
            .map(|(_, c)| *c)
            .collect();
        assert!(
            beside.trim().is_empty(),
            "row {i} shows {beside:?} beside the {title:?} box:\n{screen}"
        );
    }
    let input_top = rows
        .iter()
        .rposition(|r| text(r).starts_with("│›"))
        .map(|i| i - 1)
        .unwrap_or_else(|| panic!("no input box:\n{screen}"));
    assert!(
        bottom < input_top,
        "the overlay covers the input box:\n{screen}"
    );
    let border = text(&rows[input_top]);
    assert!(
        border.starts_with('┌') && border.trim_end().ends_with('┐') && !border.contains('└'),
        "input box border: {border:?}\n{screen}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ux_02_without_a_terminal_knife_alone_says_to_use_knife_run() {
    let out = run_cli(
        std::env::temp_dir().as_path(),
        &["--server", "http://127.0.0.1:9"],
    )
    .await;
    assert!(!out.status.success());
    assert!(
        out.stderr.contains("needs a terminal") && out.stderr.contains("knife run"),
        "{}",
        out.stderr
    );
}
