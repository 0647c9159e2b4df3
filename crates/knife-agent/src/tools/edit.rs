//! The `edit` tool: replaces an exact occurrence of `old_string` with
//! `new_string` in a file of the project (or every occurrence with `replace_all`).
//!
//! Every other byte of the file is kept. Line endings are preserved: when the
//! file uses CRLF and the model's strings use bare LF (as models write them), the
//! strings are matched and written with CRLF.

use knife_llm::ToolSpec;
use serde::Deserialize;
use serde_json::{Value, json};

use super::write::MAX_WRITE_BYTES;
use super::{Tool, ToolContext, ToolError, blocking, parse_args};

/// Edits a file: `{"path": str, "old_string": str, "new_string": str,
/// "replace_all"?: bool}` → `"Edited <path>: replaced N occurrence(s) …"`.
#[derive(Clone, Copy, Debug, Default)]
pub struct EditTool;

#[derive(Deserialize)]
struct Args {
    path: String,
    old_string: String,
    new_string: String,
    #[serde(default)]
    replace_all: bool,
}

#[async_trait::async_trait]
impl Tool for EditTool {
    fn name(&self) -> &'static str {
        "edit"
    }

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: self.name().to_owned(),
            description: "Replace text in a file of the project. old_string must match the \
                 file exactly (whitespace and indentation included) and occur exactly once, \
                 unless replace_all is true. Read the file first; include enough surrounding \
                 lines to make old_string unique. Use write to create files."
                .to_owned(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "File path relative to the project root."},
                    "old_string": {"type": "string", "description": "The exact text to replace."},
                    "new_string": {"type": "string", "description": "The text to put in its place."},
                    "replace_all": {"type": "boolean", "description": "Replace every occurrence (default false)."}
                },
                "required": ["path", "old_string", "new_string"],
                "additionalProperties": false
            }),
        }
    }

    fn mutating(&self) -> bool {
        true
    }

    async fn execute(&self, args: Value, ctx: &ToolContext) -> Result<String, ToolError> {
        let args: Args = parse_args(self.name(), args)?;
        if args.old_string.is_empty() {
            return Err(ToolError::InvalidEdit(
                "old_string is empty; give the exact text to replace, or use write to create \
                 a file or replace its whole content"
                    .to_owned(),
            ));
        }
        if args.old_string == args.new_string {
            return Err(ToolError::InvalidEdit(
                "old_string and new_string are the same, so nothing would change; \
                 give the new text in new_string"
                    .to_owned(),
            ));
        }
        let ctx = ctx.clone();
        blocking(move || edit_file(&ctx, &args)).await
    }
}

fn edit_file(ctx: &ToolContext, args: &Args) -> Result<String, ToolError> {
    // Read and written through the same walk beneath the root (SEC-03): the write
    // goes to the file that was read, by fd of its directory.
    // The read first: a missing file creates no directories.
    let (file, shown) = ctx.open_beneath("edit", &args.path)?;
    let (target, target_shown) = ctx.write_beneath("edit", &shown)?;
    if target_shown != shown {
        return Err(ToolError::Io {
            path: shown,
            message: format!(
                "the path changed to {target_shown} while it was being edited; call edit again"
            ),
        });
    }
    let io_err = |e: std::io::Error| ToolError::Io {
        path: shown.clone(),
        message: e.to_string(),
    };
    let meta = file.metadata().map_err(io_err)?;
    if meta.is_dir() {
        return Err(ToolError::IsDirectory { path: shown });
    }
    if !meta.is_file() {
        return Err(ToolError::NotAFile { path: shown });
    }
    if meta.len() > MAX_WRITE_BYTES as u64 {
        return Err(ToolError::InvalidEdit(format!(
            "{shown} is {} bytes; edit handles files up to {} MiB",
            meta.len(),
            MAX_WRITE_BYTES / (1024 * 1024)
        )));
    }
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(&mut &file, &mut bytes).map_err(io_err)?;
    let content = String::from_utf8(bytes).map_err(|_| ToolError::NotText {
        path: shown.clone(),
    })?;

    let (old, new) = match_line_endings(&content, &args.old_string, &args.new_string);
    let count = content.matches(old.as_str()).count();
    if count == 0 {
        return Err(ToolError::StringNotFound { path: shown });
    }
    if count > 1 && !args.replace_all {
        return Err(ToolError::AmbiguousMatch { path: shown, count });
    }
    let first = content.find(old.as_str()).unwrap_or(0);
    let line = content[..first].matches('\n').count() + 1;
    let edited = if args.replace_all {
        content.replace(old.as_str(), &new)
    } else {
        content.replacen(old.as_str(), &new, 1)
    };
    target.write_atomic(edited.as_bytes()).map_err(io_err)?;
    Ok(if count == 1 {
        format!("Edited {shown}: replaced 1 occurrence (at line {line})")
    } else {
        format!("Edited {shown}: replaced {count} occurrences (the first at line {line})")
    })
}

/// `old` and `new` as they should be matched in `content`: unchanged when `old`
/// occurs as given; with LF turned into CRLF when it does not but would with the
/// file's CRLF line endings (and the strings have no CR of their own).
pub(super) fn match_line_endings(content: &str, old: &str, new: &str) -> (String, String) {
    let crlf = |s: &str| s.replace('\n', "\r\n");
    if !content.contains(old)
        && content.contains("\r\n")
        && old.contains('\n')
        && !old.contains('\r')
        && !new.contains('\r')
        && content.contains(&crlf(old))
    {
        return (crlf(old), crlf(new));
    }
    (old.to_owned(), new.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crlf_files_are_matched_and_written_with_crlf() {
        let content = "a\r\nb\r\nc\r\n";
        assert_eq!(
            match_line_endings(content, "a\nb\n", "x\ny\n"),
            ("a\r\nb\r\n".to_owned(), "x\r\ny\r\n".to_owned())
        );
        // Exact matches and LF files are left alone.
        assert_eq!(
            match_line_endings(content, "a\r\nb", "z"),
            ("a\r\nb".to_owned(), "z".to_owned())
        );
        assert_eq!(
            match_line_endings("a\nb\n", "a\nb", "x\ny"),
            ("a\nb".to_owned(), "x\ny".to_owned())
        );
    }
}
