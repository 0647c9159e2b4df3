//! The `write` tool: creates or overwrites a file of the project with the given
//! content, creating missing parent directories inside the root.
//!
//! Confinement: the path is resolved with [`ToolContext::resolve_for_write`], so
//! `..`, absolute paths and symlinks (also dangling ones) leading outside the root
//! are refused; after creating the parent directories their canonical path is
//! checked again. A symlink to a file inside the root is written through.

use knife_llm::ToolSpec;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{Tool, ToolContext, ToolError, blocking, parse_args};

/// Largest content one call may write (10 MiB).
pub const MAX_WRITE_BYTES: usize = 10 * 1024 * 1024;

/// Writes a file: `{"path": str, "content": str}` → `"Wrote N bytes to <path> …"`.
#[derive(Clone, Copy, Debug, Default)]
pub struct WriteTool;

#[derive(Deserialize)]
struct Args {
    path: String,
    content: String,
}

#[async_trait::async_trait]
impl Tool for WriteTool {
    fn name(&self) -> &'static str {
        "write"
    }

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: self.name().to_owned(),
            description: "Create a file of the project, or replace a file's whole content. \
                 Missing parent directories are created. Prefer edit for changing part of an \
                 existing file. The content is written exactly as given (include the final newline)."
                .to_owned(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "File path relative to the project root."},
                    "content": {"type": "string", "description": "The file's complete new content."}
                },
                "required": ["path", "content"],
                "additionalProperties": false
            }),
        }
    }

    fn mutating(&self) -> bool {
        true
    }

    async fn execute(&self, args: Value, ctx: &ToolContext) -> Result<String, ToolError> {
        let args: Args = parse_args(self.name(), args)?;
        if args.content.len() > MAX_WRITE_BYTES {
            return Err(ToolError::InvalidArguments {
                tool: self.name().to_owned(),
                message: format!(
                    "content is {} bytes; at most {} MiB can be written per call",
                    args.content.len(),
                    MAX_WRITE_BYTES / (1024 * 1024)
                ),
            });
        }
        let ctx = ctx.clone();
        blocking(move || write_file(&ctx, &args.path, args.content.as_bytes())).await
    }
}

fn write_file(ctx: &ToolContext, requested: &str, content: &[u8]) -> Result<String, ToolError> {
    let target = ctx.resolve_for_write(requested)?;
    let shown = ctx.display_path(&target);
    let io_err = |e: std::io::Error| ToolError::Io {
        path: shown.clone(),
        message: e.to_string(),
    };
    let parent = target.parent().unwrap_or(ctx.root());
    std::fs::create_dir_all(parent).map_err(io_err)?;
    // The directories now exist: check where they really are (a symlinked
    // component created or swapped meanwhile must not lead outside).
    let parent = std::fs::canonicalize(parent).map_err(io_err)?;
    if !parent.starts_with(ctx.root()) {
        return Err(ToolError::OutsideRoot {
            path: requested.trim().to_owned(),
            root: ctx.root().display().to_string(),
        });
    }
    let Some(name) = target.file_name() else {
        return Err(ToolError::IsDirectory { path: shown });
    };
    let target = parent.join(name);
    let previous = match std::fs::metadata(&target) {
        Ok(meta) if meta.is_file() => Some(meta.len()),
        Ok(meta) if meta.is_dir() => return Err(ToolError::IsDirectory { path: shown }),
        Ok(_) => return Err(ToolError::NotAFile { path: shown }),
        Err(_) => None,
    };
    super::write_atomic(&target, content).map_err(io_err)?;
    let what = match previous {
        Some(old) => format!("replaced its previous {old} bytes"),
        None => "new file".to_owned(),
    };
    Ok(format!("Wrote {} bytes to {shown} ({what})", content.len()))
}
