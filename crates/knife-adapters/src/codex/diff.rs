//! codex's file changes as one unified diff (CHG-05): what a `fileChange` approval
//! shows the user instead of the raw `changes` array.

use serde_json::Value;

/// The unified diff of codex's `changes` (`[{path, kind: {type: add|delete|update,
/// move_path?}, diff}]`, as the `fileChange` item carries them): per file a
/// `--- a/<path>` / `+++ b/<path>` header (`/dev/null` for an added or deleted file)
/// and codex's hunks. An added or deleted file whose `diff` is the plain content (no
/// `@@` hunk) gets one hunk of `+` / `-` lines. `None` when there is no change with a path.
pub(crate) fn changes_diff(changes: &Value) -> Option<String> {
    let mut out = String::new();
    for change in changes.as_array()? {
        let Some(path) = change.get("path").and_then(Value::as_str) else {
            continue;
        };
        let kind = change
            .pointer("/kind/type")
            .and_then(Value::as_str)
            .unwrap_or("update");
        let body = change.get("diff").and_then(Value::as_str).unwrap_or("");
        let moved = change
            .pointer("/kind/move_path")
            .or_else(|| change.pointer("/kind/movePath"))
            .and_then(Value::as_str);
        let (from, to) = match kind {
            "add" => ("/dev/null".to_owned(), format!("b/{path}")),
            "delete" => (format!("a/{path}"), "/dev/null".to_owned()),
            _ => (format!("a/{path}"), format!("b/{}", moved.unwrap_or(path))),
        };
        out.push_str(&format!("--- {from}\n+++ {to}\n"));
        let hunked = body.starts_with("@@") || body.contains("\n@@");
        match kind {
            "add" | "delete" if !hunked => {
                let sign = if kind == "add" { '+' } else { '-' };
                let lines: Vec<&str> = body.lines().collect();
                let range = format!("1,{}", lines.len());
                out.push_str(&if kind == "add" {
                    format!("@@ -0,0 +{range} @@\n")
                } else {
                    format!("@@ -{range} +0,0 @@\n")
                });
                for line in lines {
                    out.push(sign);
                    out.push_str(line);
                    out.push('\n');
                }
            }
            _ => {
                out.push_str(body);
                if !body.ends_with('\n') && !body.is_empty() {
                    out.push('\n');
                }
            }
        }
    }
    (!out.is_empty()).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn chg_05_codex_changes_become_one_unified_diff() {
        let changes = json!([
            {"path": "src/lib.rs", "kind": {"type": "update", "move_path": null}, "diff": "@@ -1 +1 @@\n-a\n+b\n"},
            {"path": "new.txt", "kind": {"type": "add"}, "diff": "one\ntwo\n"},
            {"path": "old.txt", "kind": {"type": "delete"}, "diff": "gone\n"},
        ]);
        assert_eq!(
            changes_diff(&changes).as_deref(),
            Some(
                "--- a/src/lib.rs\n+++ b/src/lib.rs\n@@ -1 +1 @@\n-a\n+b\n\
                 --- /dev/null\n+++ b/new.txt\n@@ -0,0 +1,2 @@\n+one\n+two\n\
                 --- a/old.txt\n+++ /dev/null\n@@ -1,1 +0,0 @@\n-gone\n"
            )
        );
        assert_eq!(changes_diff(&json!([])), None);
        assert_eq!(changes_diff(&Value::Null), None);
    }
}
