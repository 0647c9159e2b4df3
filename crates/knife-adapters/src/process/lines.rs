//! Splitting a child's output into capped lines, and cleaning them up for the log.

use tokio::io::{AsyncBufRead, AsyncBufReadExt};

use super::LineStats;

/// Splits a byte stream into lines of at most `cap` bytes (see [`CappedLines::next`]).
pub(crate) struct CappedLines<R> {
    reader: R,
    cap: usize,
    buf: Vec<u8>,
    discarding: bool,
    done: bool,
}

impl<R: AsyncBufRead + Unpin> CappedLines<R> {
    pub(crate) fn new(reader: R, cap: usize) -> Self {
        Self {
            reader,
            cap,
            buf: Vec::new(),
            discarding: false,
            done: false,
        }
    }

    /// The next line without its `\n` (and a trailing `\r`) as `Some(Some(bytes))`;
    /// `Some(None)` once per line longer than `cap`, whose bytes are skipped up to its
    /// end; `None` at EOF or after a read error (logged). A last line without `\n`
    /// counts at EOF.
    pub(crate) async fn next(&mut self) -> Option<Option<Vec<u8>>> {
        while !self.done {
            let chunk = match self.reader.fill_buf().await {
                Ok(chunk) => chunk,
                Err(e) => {
                    tracing::debug!(error = %e, "reading an agent process's output failed");
                    self.done = true;
                    break;
                }
            };
            if chunk.is_empty() {
                self.done = true;
                if !self.discarding && !self.buf.is_empty() {
                    return Some(Some(std::mem::take(&mut self.buf)));
                }
                break;
            }
            match chunk.iter().position(|b| *b == b'\n') {
                Some(i) => {
                    let result = if self.discarding {
                        None
                    } else if self.buf.len() + i > self.cap {
                        Some(None)
                    } else {
                        self.buf.extend_from_slice(&chunk[..i]);
                        if self.buf.last() == Some(&b'\r') {
                            self.buf.pop();
                        }
                        Some(Some(std::mem::take(&mut self.buf)))
                    };
                    self.buf.clear();
                    self.discarding = false;
                    self.reader.consume(i + 1);
                    if result.is_some() {
                        return result;
                    }
                }
                None => {
                    let n = chunk.len();
                    let mut oversized = false;
                    if !self.discarding {
                        if self.buf.len() + n > self.cap {
                            oversized = true;
                            self.discarding = true;
                            self.buf = Vec::new();
                        } else {
                            self.buf.extend_from_slice(chunk);
                        }
                    }
                    self.reader.consume(n);
                    if oversized {
                        return Some(None);
                    }
                }
            }
        }
        None
    }
}

/// `text` without ANSI escape sequences (colours of a child's log lines): `ESC [`
/// followed by parameters up to a final byte in `@`..`~`, and lone `ESC x` pairs.
pub fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c != '\u{1b}' {
            out.push(c);
            continue;
        }
        if chars.next() == Some('[') {
            for c in chars.by_ref() {
                if ('@'..='~').contains(&c) {
                    break;
                }
            }
        }
    }
    out
}

/// UTF-8 text of a non-blank line; counts and logs a line that is not UTF-8.
pub(super) fn decode_line(bytes: Vec<u8>, label: &str, stats: &LineStats) -> Option<String> {
    match String::from_utf8(bytes) {
        Ok(text) if text.trim().is_empty() => None,
        Ok(text) => Some(text),
        Err(e) => {
            let lossy = String::from_utf8_lossy(e.as_bytes()).into_owned();
            stats.record_malformed(label, "not UTF-8", &lossy);
            None
        }
    }
}
