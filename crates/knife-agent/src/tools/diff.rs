//! The proposed change of a `write` / `edit` call as a unified diff (CHG-05): worked
//! out from the file as it is now and what the call would make of it, before the
//! user is asked to approve the call.

use serde_json::Value;

use super::ToolContext;
use super::edit::match_line_endings;
use super::write::MAX_WRITE_BYTES;

/// Lines of context around each hunk.
const CONTEXT_LINES: usize = 3;

/// The unified diff (`--- a/<path>` / `+++ b/<path>`, `/dev/null` for a new file) of
/// what `tool` (`write` or `edit`) would do with `args` in `ctx`'s project, read on
/// the blocking pool. `None` for other tools, for arguments the tool would refuse
/// (missing fields, a path outside the root, an `old_string` that does not occur
/// exactly once without `replace_all`), for files that are not UTF-8 text or are
/// over the tools' size limit, and when nothing would change: the tool's own error
/// then says what is wrong after the answer.
pub async fn proposed_diff(tool: &str, args: &Value, ctx: &ToolContext) -> Option<String> {
    if !matches!(tool, "write" | "edit") {
        return None;
    }
    let (tool, args, ctx) = (tool.to_owned(), args.clone(), ctx.clone());
    tokio::task::spawn_blocking(move || diff_now(&tool, &args, &ctx))
        .await
        .ok()
        .flatten()
}

fn diff_now(tool: &str, args: &Value, ctx: &ToolContext) -> Option<String> {
    let requested = args.get("path")?.as_str()?;
    let path = ctx.resolve_for_write(requested).ok()?;
    let shown = ctx.display_path(&path);
    let current = match std::fs::metadata(&path) {
        Ok(meta) if meta.is_file() && meta.len() <= MAX_WRITE_BYTES as u64 => {
            Some(String::from_utf8(std::fs::read(&path).ok()?).ok()?)
        }
        Ok(_) => return None,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(_) => return None,
    };
    let proposed = match tool {
        "write" => args.get("content")?.as_str()?.to_owned(),
        _ => {
            let content = current.as_deref()?;
            let old = args.get("old_string")?.as_str()?;
            let new = args.get("new_string")?.as_str()?;
            let all = args
                .get("replace_all")
                .and_then(Value::as_bool)
                .unwrap_or(false);
            let (old, new) = match_line_endings(content, old, new);
            let count = if old.is_empty() {
                0
            } else {
                content.matches(old.as_str()).count()
            };
            if count == 0 || (count > 1 && !all) {
                return None;
            }
            if all {
                content.replace(old.as_str(), &new)
            } else {
                content.replacen(old.as_str(), &new, 1)
            }
        }
    };
    unified_diff(&shown, current.as_deref(), &proposed)
}

/// The unified diff of `path` from `old` (`None` = the file does not exist) to `new`;
/// `None` when they are equal.
pub fn unified_diff(path: &str, old: Option<&str>, new: &str) -> Option<String> {
    if old == Some(new) {
        return None;
    }
    let from = match old {
        Some(_) => format!("a/{path}"),
        None => "/dev/null".to_owned(),
    };
    let diff = similar::TextDiff::from_lines(old.unwrap_or(""), new);
    let text = diff
        .unified_diff()
        .context_radius(CONTEXT_LINES)
        .header(&from, &format!("b/{path}"))
        .to_string();
    (!text.is_empty()).then_some(text)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn chg_05_unified_diff_of_a_change_and_of_a_new_file() {
        let d = unified_diff("src/a.txt", Some("one\ntwo\nthree\n"), "one\n2\nthree\n").unwrap();
        assert_eq!(
            d,
            "--- a/src/a.txt\n+++ b/src/a.txt\n@@ -1,3 +1,3 @@\n one\n-two\n+2\n three\n"
        );
        let d = unified_diff("new.txt", None, "hello\n").unwrap();
        assert!(
            d.starts_with("--- /dev/null\n+++ b/new.txt\n@@ -0,0 +1 @@\n+hello\n"),
            "{d}"
        );
        assert_eq!(unified_diff("same", Some("x\n"), "x\n"), None);
    }
}
