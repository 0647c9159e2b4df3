//! Change sets and diffs between two checkpoints (CHG-02/03): `git diff-tree -r -M`
//! read as `--name-status -z` (kinds, renames) and `--numstat -z` (lines, binary).

use std::collections::{BTreeSet, HashMap};

use knife_protocol::{ChangeSet, FileChange, FileChangeKind, ProjectId};

use crate::checkpoints::Checkpoints;
use crate::error::WorkspaceError;

/// A unified diff, possibly cut at the size cap.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnifiedDiff {
    /// git's patch text (binary files as "Binary files … differ").
    pub text: String,
    /// The text was cut at a file boundary below the cap.
    pub truncated: bool,
    /// What was cut, for the reader.
    pub note: Option<String>,
}

impl Checkpoints {
    /// The change set from checkpoint `from` to `to` (commit or tree ids) in
    /// `project`'s repository: added, modified, deleted, renamed and type-changed
    /// files with line counts; binary files flagged with zero counts.
    ///
    /// Errors: [`WorkspaceError::Git`] (unknown ids), [`WorkspaceError::Parse`].
    pub async fn changes(
        &self,
        project: &ProjectId,
        from: &str,
        to: &str,
    ) -> Result<ChangeSet, WorkspaceError> {
        let repo = self.repo_dir(project);
        let git = self.run_git();
        let env = self.env(&repo);
        let status = git
            .run(
                env,
                ["diff-tree", "-r", "-M", "-z", "--name-status", from, to],
            )
            .await?;
        let numstat = git
            .run(env, ["diff-tree", "-r", "-M", "-z", "--numstat", from, to])
            .await?;
        let counts = parse_numstat(&numstat)?;
        let mut files = parse_name_status(&status)?;
        for f in &mut files {
            match counts.get(&f.path) {
                Some(Some((added, removed))) => {
                    f.added = *added;
                    f.removed = *removed;
                }
                Some(None) => f.binary = true,
                None => {}
            }
        }
        Ok(ChangeSet {
            added: files.iter().map(|f| f.added).sum(),
            removed: files.iter().map(|f| f.removed).sum(),
            files,
            skipped: Vec::new(),
        })
    }

    /// The unified diff from `from` to `to`, cut below
    /// [`crate::CheckpointOptions::max_diff_bytes`] at a file boundary with a note.
    pub async fn diff(
        &self,
        project: &ProjectId,
        from: &str,
        to: &str,
    ) -> Result<UnifiedDiff, WorkspaceError> {
        let cap = self.options().max_diff_bytes;
        let repo = self.repo_dir(project);
        let (bytes, more) = self
            .run_git()
            .run_capped(
                self.env(&repo),
                [
                    "diff-tree",
                    "-r",
                    "-M",
                    "-p",
                    "--no-color",
                    "--no-ext-diff",
                    "--no-textconv",
                    from,
                    to,
                ],
                cap,
            )
            .await?;
        let text = String::from_utf8_lossy(&bytes).into_owned();
        if !more {
            return Ok(UnifiedDiff {
                text,
                truncated: false,
                note: None,
            });
        }
        // Cut at the last file header, so no file's diff is shown half.
        let cut = text.rfind("\ndiff --git ").map_or(0, |i| i + 1);
        let shown = text[..cut].matches("diff --git ").count();
        Ok(UnifiedDiff {
            text: text[..cut].to_owned(),
            truncated: true,
            note: Some(format!(
                "the diff is larger than {cap} bytes: it shows the first {shown} files; the \
                 file list has every file (raise [checkpoints] max_diff_bytes to see more)"
            )),
        })
    }

    /// Paths that differ between trees `from` and `to`, restricted to `paths`
    /// (sorted). Used by the revert's conflict check.
    pub async fn changed_paths(
        &self,
        project: &ProjectId,
        from: &str,
        to: &str,
        paths: &[String],
    ) -> Result<Vec<String>, WorkspaceError> {
        let repo = self.repo_dir(project);
        let out = self
            .run_git()
            .run(
                self.env(&repo),
                [
                    "diff-tree",
                    "-r",
                    "-z",
                    "--no-renames",
                    "--name-only",
                    from,
                    to,
                ],
            )
            .await?;
        let wanted: BTreeSet<&str> = paths.iter().map(String::as_str).collect();
        Ok(out
            .split(|b| *b == 0)
            .filter(|p| !p.is_empty())
            .map(|p| String::from_utf8_lossy(p).into_owned())
            .filter(|p| wanted.contains(p.as_str()))
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect())
    }
}

/// Parses `--name-status -z`: `X\0path\0`, or `R086\0old\0new\0` for renames.
fn parse_name_status(out: &[u8]) -> Result<Vec<FileChange>, WorkspaceError> {
    let mut tokens = out
        .split(|b| *b == 0)
        .filter(|t| !t.is_empty())
        .map(|t| String::from_utf8_lossy(t).into_owned());
    let mut files = Vec::new();
    while let Some(status) = tokens.next() {
        let bad = || WorkspaceError::Parse {
            command: "diff-tree --name-status".into(),
            detail: format!("a status {status:?} without its path"),
        };
        let (kind, old_path, path) = match status.chars().next() {
            Some('R') | Some('C') => {
                let old = tokens.next().ok_or_else(bad)?;
                let new = tokens.next().ok_or_else(bad)?;
                let kind = if status.starts_with('R') {
                    FileChangeKind::Renamed
                } else {
                    FileChangeKind::Added
                };
                (kind, Some(old), new)
            }
            Some(c) => {
                let path = tokens.next().ok_or_else(bad)?;
                let kind = match c {
                    'A' => FileChangeKind::Added,
                    'D' => FileChangeKind::Deleted,
                    'T' => FileChangeKind::TypeChanged,
                    _ => FileChangeKind::Modified,
                };
                (kind, None, path)
            }
            None => continue,
        };
        files.push(FileChange {
            path,
            old_path,
            kind,
            added: 0,
            removed: 0,
            binary: false,
        });
    }
    Ok(files)
}

/// Parses `--numstat -z` into path → (added, removed), `None` for binary files.
/// Records are `a\tr\tpath\0`, or `a\tr\t\0old\0new\0` for renames.
fn parse_numstat(out: &[u8]) -> Result<HashMap<String, Option<(u64, u64)>>, WorkspaceError> {
    let mut tokens = out
        .split(|b| *b == 0)
        .map(|t| String::from_utf8_lossy(t).into_owned());
    let mut counts = HashMap::new();
    while let Some(record) = tokens.next() {
        if record.is_empty() {
            continue;
        }
        let mut parts = record.splitn(3, '\t');
        let (Some(added), Some(removed), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            return Err(WorkspaceError::Parse {
                command: "diff-tree --numstat".into(),
                detail: format!("the record {record:?} has no counts"),
            });
        };
        let path = if path.is_empty() {
            let _old = tokens.next();
            tokens.next().unwrap_or_default()
        } else {
            path.to_owned()
        };
        let value = match (added.parse::<u64>(), removed.parse::<u64>()) {
            (Ok(a), Ok(r)) => Some((a, r)),
            _ => None, // `-\t-`: binary
        };
        counts.insert(path, value);
    }
    Ok(counts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn name_status_reads_renames_and_plain_changes() {
        let out = b"M\0a.txt\0R090\0old.rs\0new.rs\0D\0gone\0A\0new file\0";
        let files = parse_name_status(out).unwrap_or_default();
        assert_eq!(files.len(), 4);
        assert_eq!(files[1].kind, FileChangeKind::Renamed);
        assert_eq!(files[1].old_path.as_deref(), Some("old.rs"));
        assert_eq!(files[1].path, "new.rs");
        assert_eq!(files[3].path, "new file");
    }

    #[test]
    fn numstat_reads_binary_and_renames() {
        let out = b"3\t1\ta.txt\0-\t-\tpic.png\0" as &[u8];
        let mut with_rename = out.to_vec();
        with_rename.extend_from_slice(b"2\t0\t\0old.rs\0new.rs\0");
        let counts = parse_numstat(&with_rename).unwrap_or_default();
        assert_eq!(counts.get("a.txt"), Some(&Some((3, 1))));
        assert_eq!(counts.get("pic.png"), Some(&None));
        assert_eq!(counts.get("new.rs"), Some(&Some((2, 0))));
    }
}
