//! The `grep` tool: lines matching a regex in the project's files, searched with
//! grep-regex + grep-searcher over the `ignore` walker; `path:line:text`, capped.

use std::path::Path;

use grep_regex::{RegexMatcher, RegexMatcherBuilder};
use grep_searcher::sinks::Lossy;
use grep_searcher::{BinaryDetection, Searcher, SearcherBuilder};
use knife_llm::ToolSpec;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{Tool, ToolContext, ToolError, blocking, parse_args, truncate_chars, walker};

/// Most matching lines one call returns.
pub const MAX_MATCHES: usize = 500;
/// Most bytes of output one call returns (50 KiB).
pub const MAX_OUTPUT_BYTES: usize = 50 * 1024;
/// Matching lines are cut at this many characters.
pub const MAX_LINE_CHARS: usize = 300;
/// Most heap one file's search may use (4 MiB): the searcher holds a whole line,
/// so a file with a longer line is skipped (and named in the output) instead of
/// being buffered whole.
pub const HEAP_LIMIT_BYTES: usize = 4 * 1024 * 1024;
/// Most skipped files named in the output.
const MAX_SKIPPED_SHOWN: usize = 5;

/// Searches file contents: `{"pattern": regex, "path"?: str, "include"?: glob,
/// "case_insensitive"?: bool}` → `path:line:text` per matching line (paths
/// relative to the project root, files in sorted order), capped at
/// [`MAX_MATCHES`] lines / [`MAX_OUTPUT_BYTES`]. Binary files, files that are
/// not regular (FIFOs, devices) and files with a line over [`HEAP_LIMIT_BYTES`]
/// are skipped; `path` naming a FIFO or device is a [`ToolError::NotAFile`].
#[derive(Clone, Copy, Debug, Default)]
pub struct GrepTool;

#[derive(Deserialize)]
struct Args {
    pattern: String,
    #[serde(default)]
    path: Option<String>,
    #[serde(default)]
    include: Option<String>,
    #[serde(default)]
    case_insensitive: bool,
}

#[async_trait::async_trait]
impl Tool for GrepTool {
    fn name(&self) -> &'static str {
        "grep"
    }

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: self.name().to_owned(),
            description: format!(
                "Search file contents with a regular expression (Rust regex syntax). Searches \
                 `path` (a directory or one file; default the project root), skipping files \
                 ignored by .gitignore and binary files. `include` filters files by glob \
                 (`*.rs` matches file names; a pattern with `/` matches paths relative to `path`). \
                 Returns `path:line:text` lines, at most {MAX_MATCHES}."
            ),
            parameters: json!({
                "type": "object",
                "properties": {
                    "pattern": {"type": "string", "description": "Regular expression to search for."},
                    "path": {"type": "string", "description": "Directory or file to search, relative to the project root (default: the root)."},
                    "include": {"type": "string", "description": "Only search files matching this glob, e.g. `*.rs`."},
                    "case_insensitive": {"type": "boolean", "description": "Match case-insensitively (default false)."}
                },
                "required": ["pattern"],
                "additionalProperties": false
            }),
        }
    }

    async fn execute(&self, args: Value, ctx: &ToolContext) -> Result<String, ToolError> {
        let args: Args = parse_args(self.name(), args)?;
        let matcher = RegexMatcherBuilder::new()
            .case_insensitive(args.case_insensitive)
            .build(&args.pattern)
            .map_err(|e| ToolError::InvalidPattern {
                pattern: args.pattern.clone(),
                message: e.to_string(),
            })?;
        let include = match &args.include {
            Some(glob) => Some(Include::new(glob)?),
            None => None,
        };
        let ctx = ctx.clone();
        let pattern = args.pattern;
        let requested = args.path.unwrap_or_else(|| ".".to_owned());
        blocking(move || {
            let start = ctx.resolve(&requested)?;
            // Searching a FIFO blocks until a writer comes; a device may never end.
            if !start.is_dir() && !start.is_file() {
                return Err(ToolError::NotAFile {
                    path: ctx.display_path(&start),
                });
            }
            search(&ctx, &start, &matcher, include.as_ref(), &pattern)
        })
        .await
    }
}

/// The `include` filter: a glob over file names, or over paths when it has a `/`.
struct Include {
    matcher: globset::GlobMatcher,
    by_path: bool,
}

impl Include {
    fn new(glob: &str) -> Result<Self, ToolError> {
        let matcher = globset::GlobBuilder::new(glob)
            .literal_separator(true)
            .build()
            .map_err(|e| ToolError::InvalidPattern {
                pattern: glob.to_owned(),
                message: e.kind().to_string(),
            })?
            .compile_matcher();
        Ok(Self {
            matcher,
            by_path: glob.contains('/'),
        })
    }

    fn accepts(&self, start: &Path, file: &Path) -> bool {
        if self.by_path {
            file.strip_prefix(start)
                .is_ok_and(|rel| self.matcher.is_match(rel))
        } else {
            file.file_name()
                .is_some_and(|name| self.matcher.is_match(name))
        }
    }
}

fn search(
    ctx: &ToolContext,
    start: &Path,
    matcher: &RegexMatcher,
    include: Option<&Include>,
    pattern: &str,
) -> Result<String, ToolError> {
    let mut searcher: Searcher = SearcherBuilder::new()
        .line_number(true)
        .binary_detection(BinaryDetection::quit(b'\x00'))
        .heap_limit(Some(HEAP_LIMIT_BYTES))
        .build();
    let mut out = String::new();
    let mut matches = 0usize;
    let mut truncated = false;
    let mut skipped: Vec<String> = Vec::new();
    let (walk, withheld) = walker(ctx, "grep", start, None);
    for entry in walk.flatten() {
        if ctx.is_cancelled() {
            return Err(ToolError::Aborted);
        }
        if truncated {
            break;
        }
        if !entry.file_type().is_some_and(|t| t.is_file()) {
            continue;
        }
        if include.is_some_and(|inc| !inc.accepts(start, entry.path())) {
            continue;
        }
        // Opened by fd beneath the root, not by name (SEC-03): a directory swapped
        // for a link during the walk cannot lead the search outside, and the rules
        // apply to the file really opened.
        let opened = ctx
            .open_beneath("grep", &ctx.display_path(entry.path()))
            .and_then(|(file, shown)| match file.metadata() {
                Ok(m) if m.is_file() => Ok((file, shown)),
                _ => Err(ToolError::NotAFile { path: shown }),
            });
        let (file, shown) = match opened {
            Ok(opened) => opened,
            Err(e) => {
                tracing::debug!(path = %entry.path().display(), error = %e, "grep skipped a file");
                skipped.push(ctx.display_path(entry.path()));
                continue;
            }
        };
        let sink = Lossy(|line_no: u64, line: &str| {
            let text = truncate_chars(line.trim_end_matches(['\n', '\r']), MAX_LINE_CHARS);
            let entry = format!("{shown}:{line_no}:{text}\n");
            if matches >= MAX_MATCHES || out.len() + entry.len() > MAX_OUTPUT_BYTES {
                truncated = true;
                return Ok(false);
            }
            out.push_str(&entry);
            matches += 1;
            Ok(true)
        });
        // An unreadable file (or one with a line over the heap limit) is skipped
        // rather than failing the whole search; the output names it.
        if let Err(e) = searcher.search_file(matcher, &file, sink) {
            tracing::debug!(path = %shown, error = %e, "grep skipped a file");
            skipped.push(shown);
        }
    }
    let skipped_note = format!("{}{}", skipped_note(&skipped), withheld.note());
    if matches == 0 {
        return Ok(format!("No matches for {pattern:?}.{skipped_note}"));
    }
    if truncated {
        out.push_str(&format!(
            "(truncated after {matches} matching lines; narrow the pattern, path or include)"
        ));
    } else {
        out.truncate(out.trim_end().len());
    }
    out.push_str(&skipped_note);
    Ok(out)
}

/// The footer naming files that could not be searched ("" when none).
fn skipped_note(skipped: &[String]) -> String {
    if skipped.is_empty() {
        return String::new();
    }
    let n = skipped.len();
    let mut names = skipped[..n.min(MAX_SKIPPED_SHOWN)].join(", ");
    if n > MAX_SKIPPED_SHOWN {
        names.push_str(", …");
    }
    format!(
        "\n(skipped {n} file{s} that could not be searched (unreadable, or a line longer \
         than {} MiB): {names}; use read to look at {them})",
        HEAP_LIMIT_BYTES / (1024 * 1024),
        s = if n == 1 { "" } else { "s" },
        them = if n == 1 { "it" } else { "them" },
    )
}
