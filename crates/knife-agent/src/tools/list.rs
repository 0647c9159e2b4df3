//! The `list` tool: a directory's entries (recursively, depth-limited), skipping
//! what `.gitignore` ignores, as root-relative paths with `/` after directories.

use knife_llm::ToolSpec;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{Tool, ToolContext, ToolError, blocking, parse_args, walker};

/// Default recursion depth (1 = direct children only).
pub const DEFAULT_DEPTH: usize = 2;
/// Deepest recursion a call may ask for.
pub const MAX_DEPTH: usize = 8;
/// Most entries one call returns.
pub const MAX_ENTRIES: usize = 1000;

/// Lists a directory: `{"path"?: str (default "."), "depth"?: 1..=8 (default 2)}` →
/// one root-relative path per line, directories ending in `/`, symlinks marked
/// `@` (never followed), sorted; capped at [`MAX_ENTRIES`].
#[derive(Clone, Copy, Debug, Default)]
pub struct ListTool;

#[derive(Deserialize)]
struct Args {
    #[serde(default)]
    path: Option<String>,
    #[serde(default)]
    depth: Option<u64>,
}

#[async_trait::async_trait]
impl Tool for ListTool {
    fn name(&self) -> &'static str {
        "list"
    }

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: self.name().to_owned(),
            description: format!(
                "List a directory of the project recursively (default depth {DEFAULT_DEPTH}), \
                 skipping files ignored by .gitignore. Directories end with `/`, symlinks with `@`. \
                 At most {MAX_ENTRIES} entries are returned."
            ),
            parameters: json!({
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "Directory relative to the project root (default: the root)."},
                    "depth": {"type": "integer", "minimum": 1, "maximum": MAX_DEPTH, "description": "How many levels to descend (default 2)."}
                },
                "additionalProperties": false
            }),
        }
    }

    async fn execute(&self, args: Value, ctx: &ToolContext) -> Result<String, ToolError> {
        let args: Args = parse_args(self.name(), args)?;
        let depth = args
            .depth
            .map_or(DEFAULT_DEPTH, |d| usize::try_from(d).unwrap_or(MAX_DEPTH))
            .clamp(1, MAX_DEPTH);
        let ctx = ctx.clone();
        let requested = args.path.unwrap_or_else(|| ".".to_owned());
        blocking(move || {
            let dir = ctx.resolve(&requested)?;
            let shown = ctx.display_path(&dir);
            if !dir.is_dir() {
                return Err(ToolError::NotADirectory { path: shown });
            }
            let mut lines = Vec::new();
            let mut truncated = false;
            let (walk, withheld) = walker(&ctx, "list", &dir, Some(depth));
            for entry in walk.flatten() {
                if ctx.is_cancelled() {
                    return Err(ToolError::Aborted);
                }
                if entry.depth() == 0 {
                    continue;
                }
                if lines.len() >= MAX_ENTRIES {
                    truncated = true;
                    break;
                }
                let mut line = ctx.display_path(entry.path());
                match entry.file_type() {
                    Some(t) if t.is_dir() => line.push('/'),
                    Some(t) if t.is_symlink() => line.push('@'),
                    _ => {}
                }
                lines.push(line);
            }
            if lines.is_empty() {
                return Ok(format!(
                    "({shown} is empty or everything in it is ignored){}",
                    withheld.note()
                ));
            }
            let mut out = lines.join("\n");
            if truncated {
                out.push_str(&format!(
                    "\n(truncated at {MAX_ENTRIES} entries; list a subdirectory or use a smaller depth)"
                ));
            }
            out.push_str(&withheld.note());
            Ok(out)
        })
        .await
    }
}
