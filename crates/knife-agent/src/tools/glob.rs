//! The `glob` tool: files of the project whose path matches a glob pattern,
//! found with the `ignore` walker (so `.gitignore` applies), sorted and capped.

use knife_llm::ToolSpec;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{Tool, ToolContext, ToolError, blocking, parse_args, walker};

/// Most paths one call returns.
pub const MAX_MATCHES: usize = 1000;

/// Finds files: `{"pattern": str, "path"?: str (default ".")}` → matching file
/// paths relative to the project root, one per line, sorted; capped at [`MAX_MATCHES`].
///
/// The pattern is matched against the path relative to `path`; `*` does not cross
/// `/`, `**` does (`**/*.rs` finds Rust files at any depth).
#[derive(Clone, Copy, Debug, Default)]
pub struct GlobTool;

#[derive(Deserialize)]
struct Args {
    pattern: String,
    #[serde(default)]
    path: Option<String>,
}

#[async_trait::async_trait]
impl Tool for GlobTool {
    fn name(&self) -> &'static str {
        "glob"
    }

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: self.name().to_owned(),
            description: format!(
                "Find files by glob pattern, matched against paths relative to `path` \
                 (default: the project root). `*` stays within one directory, `**` spans \
                 directories: `**/*.rs`, `src/**/mod.rs`, `*.toml`. Files ignored by .gitignore \
                 are skipped. Returns sorted paths relative to the project root, at most {MAX_MATCHES}."
            ),
            parameters: json!({
                "type": "object",
                "properties": {
                    "pattern": {"type": "string", "description": "Glob pattern, e.g. `**/*.rs`."},
                    "path": {"type": "string", "description": "Directory to search, relative to the project root (default: the root)."}
                },
                "required": ["pattern"],
                "additionalProperties": false
            }),
        }
    }

    async fn execute(&self, args: Value, ctx: &ToolContext) -> Result<String, ToolError> {
        let args: Args = parse_args(self.name(), args)?;
        let matcher = globset::GlobBuilder::new(&args.pattern)
            .literal_separator(true)
            .build()
            .map_err(|e| ToolError::InvalidPattern {
                pattern: args.pattern.clone(),
                message: e.kind().to_string(),
            })?
            .compile_matcher();
        let ctx = ctx.clone();
        let pattern = args.pattern;
        let requested = args.path.unwrap_or_else(|| ".".to_owned());
        blocking(move || {
            let dir = ctx.resolve(&requested)?;
            if !dir.is_dir() {
                return Err(ToolError::NotADirectory {
                    path: ctx.display_path(&dir),
                });
            }
            let mut found = Vec::new();
            let mut truncated = false;
            let (walk, withheld) = walker(&ctx, "glob", &dir, None);
            for entry in walk.flatten() {
                if ctx.is_cancelled() {
                    return Err(ToolError::Aborted);
                }
                if !entry.file_type().is_some_and(|t| t.is_file()) {
                    continue;
                }
                let Ok(rel) = entry.path().strip_prefix(&dir) else {
                    continue;
                };
                if matcher.is_match(rel) {
                    if found.len() >= MAX_MATCHES {
                        truncated = true;
                        break;
                    }
                    found.push(ctx.display_path(entry.path()));
                }
            }
            if found.is_empty() {
                return Ok(format!("No files match {pattern:?}.{}", withheld.note()));
            }
            found.sort();
            let mut out = found.join("\n");
            if truncated {
                out.push_str(&format!(
                    "\n(truncated at {MAX_MATCHES} paths; use a narrower pattern or path)"
                ));
            }
            out.push_str(&withheld.note());
            Ok(out)
        })
        .await
    }
}
