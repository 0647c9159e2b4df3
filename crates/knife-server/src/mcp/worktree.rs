//! Git worktrees of a project through the `git` CLI (`worktree_list`,
//! `worktree_create`).

use std::path::{Path, PathBuf};

use knife_runtime::bounds::confine_worktree_path;
use serde_json::{Value, json};
use tokio::process::Command;

use super::tools::ToolFailure;

async fn git(root: &Path, args: &[&str]) -> Result<String, ToolFailure> {
    let output = Command::new("git")
        .arg("-C")
        .arg(root)
        .args(args)
        .kill_on_drop(true)
        .output()
        .await
        .map_err(|e| {
            ToolFailure(format!(
                "could not run git ({e}); install git on the server"
            ))
        })?;
    if !output.status.success() {
        return Err(ToolFailure(format!(
            "git {} failed in {}: {}",
            args.join(" "),
            root.display(),
            String::from_utf8_lossy(&output.stderr).trim()
        )));
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// `git worktree list --porcelain` run in `root` (the caller's working tree),
/// parsed: `[{path, head, branch, detached, current}]`; `current` marks `root`.
pub(super) async fn list(root: &Path) -> Result<Vec<Value>, ToolFailure> {
    let text = git(root, &["worktree", "list", "--porcelain"]).await?;
    let here = std::fs::canonicalize(root).unwrap_or_else(|_| root.to_path_buf());
    let mut list = parse_porcelain(&text);
    for entry in &mut list {
        let path = entry["path"].as_str().map(PathBuf::from);
        let same = path.is_some_and(|p| std::fs::canonicalize(&p).unwrap_or(p) == here);
        entry["current"] = json!(same);
    }
    Ok(list)
}

fn parse_porcelain(text: &str) -> Vec<Value> {
    let mut out = Vec::new();
    for block in text.split("\n\n").filter(|b| !b.trim().is_empty()) {
        let mut entry = json!({"path": null, "head": null, "branch": null, "detached": false});
        for line in block.lines() {
            let (key, value) = line.split_once(' ').unwrap_or((line, ""));
            match key {
                "worktree" => entry["path"] = json!(value),
                "HEAD" => entry["head"] = json!(value),
                "branch" => {
                    entry["branch"] = json!(value.strip_prefix("refs/heads/").unwrap_or(value))
                }
                "detached" => entry["detached"] = json!(true),
                _ => {}
            }
        }
        out.push(entry);
    }
    out
}

/// `git worktree add -b <branch> <path> [<base>]`. `path` must stay inside the
/// project or `worktrees` (SEC-06, [`confine_worktree_path`]); the default is
/// `<worktrees>/<branch>` (`/` in the branch becomes `-`).
pub(super) async fn create(
    root: &Path,
    worktrees: &Path,
    branch: &str,
    base: Option<&str>,
    path: Option<&str>,
) -> Result<Value, ToolFailure> {
    // Refuses names git would not accept as a branch (and option-looking names).
    if branch.starts_with('-') {
        return Err(ToolFailure(format!(
            "`{branch}` is not a valid branch name"
        )));
    }
    git(root, &["check-ref-format", "--branch", branch]).await?;
    let requested = match path {
        Some(p) => PathBuf::from(p),
        None => worktrees.join(branch.replace('/', "-")),
    };
    let path = confine_worktree_path(root, worktrees, &requested).map_err(ToolFailure)?;
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(|e| {
            ToolFailure(format!(
                "cannot create the worktree folder {} ({e})",
                parent.display()
            ))
        })?;
    }
    let path_text = path.display().to_string();
    let mut args = vec!["worktree", "add", "-b", branch, "--", path_text.as_str()];
    if let Some(base) = base {
        args.push(base);
    }
    git(root, &args).await?;
    Ok(json!({"path": path_text, "branch": branch}))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn porcelain_is_parsed() {
        let text =
            "worktree /a\nHEAD 123\nbranch refs/heads/main\n\nworktree /b\nHEAD 456\ndetached\n";
        let list = parse_porcelain(text);
        assert_eq!(list.len(), 2);
        assert_eq!(list[0]["branch"], "main");
        assert_eq!(list[1]["detached"], true);
        assert_eq!(list[1]["path"], "/b");
    }
}
