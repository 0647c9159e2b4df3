//! The `write` tool: creates or overwrites a file of the project with the given
//! content, creating missing parent directories inside the root.
//!
//! Confinement: the path is resolved by fd beneath the root (SEC-03,
//! `ToolContext::write_beneath`), so `..`, absolute paths and symlinks leading
//! outside the root are refused even when swapped in while the call runs; missing
//! parent directories are created on the way. A symlink to a file inside the root
//! is written through.

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
    // The parent directory is reached (and created) by fd beneath the root and the
    // file replaced by name in it, checked against the real target (SEC-03).
    let (target, shown) = ctx.write_beneath("write", requested)?;
    let io_err = |e: std::io::Error| ToolError::Io {
        path: shown.clone(),
        message: e.to_string(),
    };
    let previous = target.existing_len;
    target.write_atomic(content).map_err(io_err)?;
    let what = match previous {
        Some(old) => format!("replaced its previous {old} bytes"),
        None => "new file".to_owned(),
    };
    Ok(format!("Wrote {} bytes to {shown} ({what})", content.len()))
}
