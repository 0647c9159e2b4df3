//! How `knife run` and the TUI show a tool call's output: the summary and preview
//! under a settled call (UX-03), the last lines of a running one (LIVE-02), its input.

/// The first lines of a tool's output, for the preview under its summary (UX-03): at
/// most [`PREVIEW_LINES`], each cut at 160 characters, then `… N more lines`; bash's
/// own status lines left out.
pub fn output_preview(tool: &str, output: &str) -> Vec<String> {
    let lines: Vec<&str> = output
        .lines()
        .filter(|l| {
            tool != "bash"
                || !(l.starts_with("(exit ")
                    || l.starts_with("(killed by signal")
                    || *l == "(no output)"
                    || l.starts_with("(background processes it left running"))
        })
        .collect();
    let mut out: Vec<String> = lines
        .iter()
        .take(PREVIEW_LINES)
        .map(|l| {
            if l.chars().count() > 160 {
                format!("{}…", l.chars().take(159).collect::<String>())
            } else {
                (*l).to_owned()
            }
        })
        .collect();
    if lines.len() > PREVIEW_LINES {
        out.push(format!("… {} more lines", lines.len() - PREVIEW_LINES));
    }
    out
}

/// The last non-empty line of a running tool's `output`, at most 60 characters (the
/// spinner's `running bash… │ line`, LIVE-02).
pub fn last_line(output: &str) -> Option<String> {
    let line = output
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())?
        .trim_end();
    Some(if line.chars().count() > 60 {
        format!("{}…", line.chars().take(59).collect::<String>())
    } else {
        line.to_owned()
    })
}

/// The last lines of a running tool's `output` as it streams (LIVE-02; the TUI shows
/// them under `… running`): at most [`PREVIEW_LINES`], each cut at 160 characters,
/// after `… N earlier lines` when there are more.
pub fn output_tail(output: &str) -> Vec<String> {
    let lines: Vec<&str> = output.lines().collect();
    let skip = lines.len().saturating_sub(PREVIEW_LINES);
    let mut out = Vec::new();
    if skip > 0 {
        out.push(format!("… {skip} earlier lines"));
    }
    out.extend(lines[skip..].iter().map(|l| {
        if l.chars().count() > 160 {
            format!("{}…", l.chars().take(159).collect::<String>())
        } else {
            (*l).to_owned()
        }
    }));
    out
}

/// Lines of tool output shown under a tool call.
pub const PREVIEW_LINES: usize = 4;

/// A short summary of a tool's output: its line count, and for `bash` the exit
/// status it ends with (`no output, exit code 0`, `3 lines, exit code 1`).
pub fn summarize_output(tool: &str, output: &str) -> String {
    let mut lines: Vec<&str> = output.lines().collect();
    let mut status = None;
    if tool == "bash" {
        if let Some(last) = lines.last()
            && (last.starts_with("(exit ") || last.starts_with("(killed by signal"))
        {
            status = Some(last.trim_start_matches('(').trim_end_matches(')'));
            lines.pop();
        }
        // Lines the bash tool adds about the output rather than output itself.
        lines.retain(|l| {
            *l != "(no output)" && !l.starts_with("(background processes it left running")
        });
    }
    let count = match lines.len() {
        0 => "no output".to_owned(),
        1 => "1 line".to_owned(),
        n => format!("{n} lines"),
    };
    match status {
        Some(status) => format!("{count}, {status}"),
        None => count,
    }
}

/// A one-line, at most 120-char rendering of a tool input.
pub fn compact_input(input: &serde_json::Value) -> String {
    let text = match input {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    if text.chars().count() > 120 {
        format!("{}…", text.chars().take(119).collect::<String>())
    } else {
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::render::thousands;

    #[test]
    fn bash_output_is_summarised_with_its_exit_status() {
        assert_eq!(
            summarize_output("bash", "(no output)\n(exit code 0)"),
            "no output, exit code 0"
        );
        assert_eq!(
            summarize_output("bash", "a\nb\nc\n(exit code 1)"),
            "3 lines, exit code 1"
        );
        assert_eq!(summarize_output("read", "one\n"), "1 line");
        assert_eq!(summarize_output("list", ""), "no output");
    }

    #[test]
    fn ux_03_tool_output_preview_shows_the_first_lines_and_counts_the_rest() {
        let out = "a\nb\nc\nd\ne\nf\n(exit code 0)";
        assert_eq!(
            output_preview("bash", out),
            ["a", "b", "c", "d", "… 2 more lines"]
        );
        assert!(output_preview("bash", "(no output)\n(exit code 0)").is_empty());
        assert_eq!(thousands(1_234_567), "1,234,567");
        assert_eq!(thousands(12), "12");
    }

    #[test]
    fn live_02_a_running_tools_output_shows_its_last_lines() {
        let output: String = (1..=6).map(|i| format!("line {i}\n")).collect();
        assert_eq!(
            output_tail(&output),
            ["… 2 earlier lines", "line 3", "line 4", "line 5", "line 6"]
        );
        assert_eq!(last_line(&output).as_deref(), Some("line 6"));
        assert_eq!(last_line("half a li").as_deref(), Some("half a li"));
        assert_eq!(last_line("\n \n"), None);
        assert_eq!(
            last_line(&"x".repeat(100)).map(|l| l.chars().count()),
            Some(60)
        );
    }
}
