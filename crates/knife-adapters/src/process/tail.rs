//! The stderr lines kept for an exit description ([`super::ExitInfo::stderr_tail`]).

use std::collections::VecDeque;

/// The last [`super::STDERR_TAIL_LINES`] useful stderr lines, plus the first error line.
///
/// Backtrace lines (`stack backtrace:`, frames like `  1: <unknown>` and their
/// `at file:line` lines) are skipped: a crashing Rust program (codex) prints its
/// `Error: …` line first and then dozens of frames, which would push it out. The
/// first line starting with `Error` or `error:` is kept even when later lines push it
/// out of the tail; it then comes first in [`StderrTail::lines`].
#[derive(Debug, Default)]
pub(crate) struct StderrTail {
    last: VecDeque<String>,
    /// The first error line and whether it is still in `last`'s window.
    first_error: Option<String>,
    /// Lines pushed since `first_error` (it left the window after `capacity` of them).
    since_error: usize,
}

/// Characters kept of one line.
const LINE_CHARS: usize = 500;

impl StderrTail {
    /// Records one stderr line (already without colour codes and trailing space).
    pub(crate) fn push(&mut self, line: &str) {
        if is_backtrace_line(line) {
            return;
        }
        let line: String = line.chars().take(LINE_CHARS).collect();
        if self.first_error.is_none() && is_error_line(&line) {
            self.first_error = Some(line.clone());
            self.since_error = 0;
        } else {
            self.since_error += 1;
        }
        if self.last.len() == super::STDERR_TAIL_LINES {
            self.last.pop_front();
        }
        self.last.push_back(line);
    }

    /// The kept lines, oldest first: the first error line when it left the tail, then
    /// the tail (at most [`super::STDERR_TAIL_LINES`] + 1 lines).
    pub(crate) fn lines(&self) -> Vec<String> {
        let mut out = Vec::with_capacity(self.last.len() + 1);
        if let Some(error) = &self.first_error
            && self.since_error >= super::STDERR_TAIL_LINES
        {
            out.push(error.clone());
        }
        out.extend(self.last.iter().cloned());
        out
    }
}

/// `Error: …`, `Error …`, `error: …` (Rust's `main` returning an error, clap, cargo).
fn is_error_line(line: &str) -> bool {
    let line = line.trim_start();
    line.starts_with("Error") || line.starts_with("error:") || line.starts_with("error[")
}

/// A line of a printed backtrace: `stack backtrace:`, a frame (`  12: name`), or a
/// frame's location (`        at src/main.rs:3:5`).
fn is_backtrace_line(line: &str) -> bool {
    let trimmed = line.trim_start();
    if trimmed.eq_ignore_ascii_case("stack backtrace:") {
        return true;
    }
    let indented = trimmed.len() < line.len();
    if indented && trimmed.starts_with("at ") {
        return true;
    }
    let digits = trimmed.bytes().take_while(u8::is_ascii_digit).count();
    digits > 0 && trimmed[digits..].starts_with(": ")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn the_error_line_survives_a_long_backtrace() {
        let mut tail = StderrTail::default();
        tail.push("2026-11-29 WARN starting");
        tail.push("Error: failed to load config: CODEX_HOME points to a missing folder");
        tail.push("");
        tail.push("Stack backtrace:");
        for n in 0..40 {
            tail.push(&format!("  {n:>2}: <unknown>"));
            tail.push(&format!(
                "             at /rustc/abc/library/std/src/rt.rs:{n}:5"
            ));
        }
        assert_eq!(
            tail.lines(),
            vec![
                "2026-11-29 WARN starting".to_owned(),
                "Error: failed to load config: CODEX_HOME points to a missing folder".to_owned(),
                String::new(),
            ]
        );
    }

    #[test]
    fn the_first_error_line_is_kept_when_other_lines_push_it_out() {
        let mut tail = StderrTail::default();
        tail.push("error: the model provider is not configured");
        for n in 0..20 {
            tail.push(&format!("retrying {n}"));
        }
        tail.push("Error: giving up");
        let lines = tail.lines();
        assert_eq!(lines.len(), super::super::STDERR_TAIL_LINES + 1);
        assert_eq!(lines[0], "error: the model provider is not configured");
        assert_eq!(lines.last().map(String::as_str), Some("Error: giving up"));
        assert_eq!(lines[1], "retrying 13");
    }

    #[test]
    fn short_tails_are_kept_as_they_are() {
        let mut tail = StderrTail::default();
        for line in ["Error: bad", "12 files scanned", "at home: ok", "1:2 ratio"] {
            tail.push(line);
        }
        assert_eq!(
            tail.lines(),
            vec!["Error: bad", "12 files scanned", "at home: ok", "1:2 ratio"]
        );
    }
}
