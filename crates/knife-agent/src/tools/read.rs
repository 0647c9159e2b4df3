//! The `read` tool: a text file's lines, numbered, from an optional 1-based
//! offset, capped at [`MAX_LINES`] lines and [`MAX_OUTPUT_BYTES`] bytes of output.

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
            let path = ctx.resolve(&args.path)?;
            let shown = ctx.display_path(&path);
            read_lines(&path, &shown, offset, limit)
        })
        .await
    }
}

fn read_lines(
    path: &std::path::Path,
    shown: &str,
    offset: u64,
    limit: usize,
) -> Result<String, ToolError> {
    let io_err = |e: std::io::Error| ToolError::Io {
        path: shown.to_owned(),
        message: e.to_string(),
    };
    if path.is_dir() {
        return Err(ToolError::IsDirectory {
            path: shown.to_owned(),
        });
    }
    let file = std::fs::File::open(path).map_err(io_err)?;
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
    loop {
        line.clear();
        if reader.read_until(b'\n', &mut line).map_err(io_err)? == 0 {
            break;
        }
        line_no += 1;
        // Keep counting past the window so the footer can give the total.
        if line_no < offset || shown_lines >= limit || hit_byte_cap {
            continue;
        }
        let text = String::from_utf8_lossy(&line);
        let text = text.trim_end_matches(['\n', '\r']);
        let entry = format!("{line_no:>6}\t{}\n", truncate_chars(text, MAX_LINE_CHARS));
        if out.len() + entry.len() > MAX_OUTPUT_BYTES {
            hit_byte_cap = true;
            continue;
        }
        out.push_str(&entry);
        shown_lines += 1;
        last_shown = line_no;
    }

    let total = line_no;
    if total == 0 {
        return Ok(format!("({shown} is empty)"));
    }
    if shown_lines == 0 {
        return Ok(format!(
            "({shown} has {total} lines; offset {offset} is past the end)"
        ));
    }
    if last_shown < total || offset > 1 {
        let why = if hit_byte_cap {
            format!(
                " because the output reached {} KiB",
                MAX_OUTPUT_BYTES / 1024
            )
        } else {
            String::new()
        };
        if last_shown < total {
            out.push_str(&format!(
                "\n(truncated: showed lines {offset}-{last_shown} of {total}{why}; \
                 call read with offset={} to continue)",
                last_shown + 1
            ));
        } else {
            out.push_str(&format!(
                "\n(showed lines {offset}-{last_shown} of {total})"
            ));
        }
    }
    Ok(out)
}
