//! The `read` tool: a text file's lines, numbered, from an optional 1-based
//! offset, capped at [`MAX_LINES`] lines and [`MAX_OUTPUT_BYTES`] bytes of output.
//!
//! Memory and time are capped too: only regular files are opened (a FIFO or
//! device could block or never end), at most [`MAX_LINE_BYTES`] of a line are
//! held, and counting the lines after the shown window stops after
//! [`MAX_COUNT_BYTES`].

use std::io::{BufRead, BufReader};

use knife_llm::ToolSpec;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{Tool, ToolContext, ToolError, blocking, parse_args, truncate_chars};

/// Most lines one call returns (and the default `limit`).
pub const MAX_LINES: usize = 2000;
/// Most bytes of output one call returns (50 KiB).
pub const MAX_OUTPUT_BYTES: usize = 50 * 1024;
/// Longer lines are cut at this many characters.
pub const MAX_LINE_CHARS: usize = 2000;
/// Most bytes of one line held in memory (64 KiB); the rest is skipped unread
/// into memory, and the line is shown truncated.
pub const MAX_LINE_BYTES: usize = 64 * 1024;
/// Most bytes scanned after the shown window to count the file's lines (4 MiB);
/// past it the footer says more lines follow instead of giving the total.
pub const MAX_COUNT_BYTES: u64 = 4 * 1024 * 1024;
/// Appended to a line cut at [`MAX_LINE_CHARS`] or [`MAX_LINE_BYTES`].
const LINE_TRUNCATED: &str = "… (line truncated)";

/// Reads a text file: `{"path": str, "offset"?: 1-based line, "limit"?: lines}` →
/// `"     N\t<line>"` per line, plus a footer saying when lines were left out.
#[derive(Clone, Copy, Debug, Default)]
pub struct ReadTool;

#[derive(Deserialize)]
struct Args {
    path: String,
    #[serde(default)]
    offset: Option<u64>,
    #[serde(default)]
    limit: Option<u64>,
}

#[async_trait::async_trait]
impl Tool for ReadTool {
    fn name(&self) -> &'static str {
        "read"
    }

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: self.name().to_owned(),
            description: format!(
                "Read a text file of the project. Returns numbered lines (`line-number<TAB>text`). \
                 Use offset/limit to page through long files; at most {MAX_LINES} lines or \
                 {} KiB are returned per call, and the output says when it was truncated.",
                MAX_OUTPUT_BYTES / 1024
            ),
            parameters: json!({
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "File path relative to the project root."},
                    "offset": {"type": "integer", "minimum": 1, "description": "1-based line to start at (default 1)."},
                    "limit": {"type": "integer", "minimum": 1, "maximum": MAX_LINES, "description": "Most lines to return (default and maximum 2000)."}
                },
                "required": ["path"],
                "additionalProperties": false
            }),
        }
    }

    async fn execute(&self, args: Value, ctx: &ToolContext) -> Result<String, ToolError> {
        let args: Args = parse_args(self.name(), args)?;
        let offset = args.offset.unwrap_or(1).max(1);
        let limit = args
            .limit
            .map_or(MAX_LINES, |l| usize::try_from(l).unwrap_or(MAX_LINES))
            .clamp(1, MAX_LINES);
        let ctx = ctx.clone();
        blocking(move || {
            // Canonicalizing touches the filesystem too, so it runs here as well.
            // Opened beneath the root by fd, checked against the file really opened (SEC-03).
            let (file, shown) = ctx.open_beneath("read", &args.path)?;
            read_lines(&ctx, file, &shown, offset, limit)
        })
        .await
    }
}

/// Where the scan stopped, for the footer.
enum ScanEnd {
    /// End of file: the total line count is known.
    Eof,
    /// [`MAX_COUNT_BYTES`] ran out after the window: more lines follow.
    Budget,
}

fn read_lines(
    ctx: &ToolContext,
    file: std::fs::File,
    shown: &str,
    offset: u64,
    limit: usize,
) -> Result<String, ToolError> {
    let io_err = |e: std::io::Error| ToolError::Io {
        path: shown.to_owned(),
        message: e.to_string(),
    };
    let metadata = file.metadata().map_err(io_err)?;
    if metadata.is_dir() {
        return Err(ToolError::IsDirectory {
            path: shown.to_owned(),
        });
    }
    // Opening a FIFO blocks until a writer comes; a device may never end.
    if !metadata.is_file() {
        return Err(ToolError::NotAFile {
            path: shown.to_owned(),
        });
    }
    let mut reader = BufReader::new(file);
    if reader.fill_buf().map_err(io_err)?.contains(&0) {
        return Err(ToolError::Binary {
            path: shown.to_owned(),
        });
    }

    let mut out = String::new();
    let mut line = Vec::new();
    let mut line_no: u64 = 0;
    let mut shown_lines = 0usize;
    let mut last_shown: u64 = 0;
    let mut hit_byte_cap = false;
    // Bytes scanned since the window was complete (counting toward the total).
    let mut counted_bytes: u64 = 0;
    let end = loop {
        if ctx.is_cancelled() {
            return Err(ToolError::Aborted);
        }
        let window_done = shown_lines >= limit || hit_byte_cap;
        if window_done && counted_bytes >= MAX_COUNT_BYTES {
            break ScanEnd::Budget;
        }
        let (consumed, cut) = read_capped_line(ctx, &mut reader, &mut line).map_err(io_err)?;
        if consumed == 0 {
            break ScanEnd::Eof;
        }
        line_no += 1;
        // Keep counting past the window so the footer can give the total.
        if line_no < offset || window_done {
            if window_done {
                counted_bytes += consumed as u64;
            }
            continue;
        }
        let text = String::from_utf8_lossy(&line);
        let text = text.trim_end_matches(['\n', '\r']);
        let mut text = truncate_chars(text, MAX_LINE_CHARS);
        if cut && !text.ends_with(LINE_TRUNCATED) {
            text.push_str(LINE_TRUNCATED);
        }
        let entry = format!("{line_no:>6}\t{text}\n");
        if out.len() + entry.len() > MAX_OUTPUT_BYTES {
            hit_byte_cap = true;
            continue;
        }
        out.push_str(&entry);
        shown_lines += 1;
        last_shown = line_no;
    };

    let total = line_no;
    if total == 0 {
        return Ok(format!("({shown} is empty)"));
    }
    if shown_lines == 0 {
        return Ok(format!(
            "({shown} has {total} lines; offset {offset} is past the end)"
        ));
    }
    let why = if hit_byte_cap {
        format!(
            " because the output reached {} KiB",
            MAX_OUTPUT_BYTES / 1024
        )
    } else {
        String::new()
    };
    match end {
        ScanEnd::Budget => out.push_str(&format!(
            "\n(truncated: showed lines {offset}-{last_shown}; more lines follow{why}; \
             call read with offset={} to continue)",
            last_shown + 1
        )),
        ScanEnd::Eof if last_shown < total => out.push_str(&format!(
            "\n(truncated: showed lines {offset}-{last_shown} of {total}{why}; \
             call read with offset={} to continue)",
            last_shown + 1
        )),
        ScanEnd::Eof if offset > 1 => out.push_str(&format!(
            "\n(showed lines {offset}-{last_shown} of {total})"
        )),
        ScanEnd::Eof => {}
    }
    Ok(out)
}

/// Reads one line (through its `\n`, or to EOF) into `line`, keeping at most
/// [`MAX_LINE_BYTES`] of it (cut back to a whole UTF-8 character) and skipping
/// the rest without holding it. Returns the bytes consumed (0 at EOF) and
/// whether the line was cut. Stops early (as if at the line's end) when the
/// turn is cancelled; the caller then sees the cancellation.
fn read_capped_line(
    ctx: &ToolContext,
    reader: &mut impl BufRead,
    line: &mut Vec<u8>,
) -> std::io::Result<(usize, bool)> {
    line.clear();
    let mut consumed = 0usize;
    let mut cut = false;
    loop {
        let buf = match reader.fill_buf() {
            Ok(buf) => buf,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if buf.is_empty() {
            break;
        }
        let (len, line_end) = match buf.iter().position(|&b| b == b'\n') {
            Some(i) => (i + 1, true),
            None => (buf.len(), false),
        };
        let room = MAX_LINE_BYTES.saturating_sub(line.len());
        if len > room {
            cut = true;
        }
        line.extend_from_slice(&buf[..len.min(room)]);
        reader.consume(len);
        consumed += len;
        if line_end || ctx.is_cancelled() {
            break;
        }
    }
    if cut && let Err(e) = std::str::from_utf8(line) {
        // A character split by the cap: drop its first bytes.
        if e.error_len().is_none() {
            line.truncate(e.valid_up_to());
        }
    }
    Ok((consumed, cut))
}
