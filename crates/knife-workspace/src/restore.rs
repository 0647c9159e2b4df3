//! Restoring files of a working tree from a checkpoint (CHG-04, CHG-10): each file is
//! written to a temp file beside it and renamed over the old one; removed files are deleted.
//!
//! Temp names are deterministic per (`tag`, path), so replaying a restore after a
//! crash overwrites and renames the temp files the dead process left.

use std::collections::HashMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};

use tokio::io::AsyncWriteExt;

use crate::checkpoints::Locked;
use crate::error::WorkspaceError;

/// One entry of a checkpoint tree: its git mode and blob id.
#[derive(Clone, Debug)]
struct Entry {
    mode: String,
    oid: String,
}

/// What [`Locked::restore`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Restored {
    /// Files written with the checkpoint's content.
    pub written: Vec<String>,
    /// Files removed (absent from the checkpoint).
    pub removed: Vec<String>,
}

impl Locked {
    /// Makes each of `paths` (relative, `/`-separated) in the working tree what it is in
    /// checkpoint tree `tree`: written (mode and symlinks kept) when the checkpoint has
    /// it, removed otherwise; directories left empty by a removal go too. `tag` names
    /// the temp files (use the revert id). Idempotent: running it again gives the same tree.
    ///
    /// Errors: [`WorkspaceError::Parse`] for a path that leaves the working tree,
    /// [`WorkspaceError::Io`] for a file that cannot be written, [`WorkspaceError::Git`].
    pub async fn restore(
        &self,
        tree: &str,
        paths: &[String],
        tag: &str,
    ) -> Result<Restored, WorkspaceError> {
        for p in paths {
            check_relative(p)?;
        }
        let entries = self.tree_entries(tree).await?;
        let wanted: Vec<(&String, &Entry)> = paths
            .iter()
            .filter_map(|p| entries.get(p).map(|e| (p, e)))
            .filter(|(_, e)| e.mode != "160000")
            .collect();
        let blobs = self
            .blobs(
                &wanted
                    .iter()
                    .map(|(_, e)| e.oid.clone())
                    .collect::<Vec<_>>(),
            )
            .await?;
        let root = self.tree.path.clone();
        let mut done = Restored::default();
        // Removals first: a file that becomes a directory (or back) needs room.
        for p in paths.iter().filter(|p| !entries.contains_key(*p)) {
            let dest = root.join(p);
            match tokio::fs::symlink_metadata(&dest).await {
                Ok(meta) if meta.is_dir() => {}
                Ok(_) => {
                    tokio::fs::remove_file(&dest)
                        .await
                        .map_err(WorkspaceError::io("remove", &dest))?;
                    remove_empty_parents(&root, &dest).await;
                    done.removed.push(p.clone());
                }
                Err(_) => {}
            }
        }
        for (path, entry) in wanted {
            let Some(content) = blobs.get(&entry.oid) else {
                return Err(WorkspaceError::Parse {
                    command: "cat-file --batch".into(),
                    detail: format!("no content for {path} ({})", entry.oid),
                });
            };
            let dest = root.join(path);
            prepare_parents(&root, &dest).await?;
            let tmp = temp_path(&dest, tag);
            let _ = tokio::fs::remove_file(&tmp).await;
            if entry.mode == "120000" {
                let target = PathBuf::from(String::from_utf8_lossy(content).into_owned());
                tokio::fs::symlink(&target, &tmp)
                    .await
                    .map_err(WorkspaceError::io("create the symlink", &tmp))?;
            } else {
                let mut file = tokio::fs::File::create(&tmp)
                    .await
                    .map_err(WorkspaceError::io("create", &tmp))?;
                file.write_all(content)
                    .await
                    .map_err(WorkspaceError::io("write", &tmp))?;
                file.sync_all()
                    .await
                    .map_err(WorkspaceError::io("sync", &tmp))?;
                let mode = if entry.mode == "100755" { 0o755 } else { 0o644 };
                tokio::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(mode))
                    .await
                    .map_err(WorkspaceError::io("set the mode of", &tmp))?;
            }
            if let Ok(meta) = tokio::fs::symlink_metadata(&dest).await
                && meta.is_dir()
            {
                // Only an empty directory can give way; a full one is someone's work.
                tokio::fs::remove_dir(&dest)
                    .await
                    .map_err(WorkspaceError::io("replace the directory", &dest))?;
            }
            tokio::fs::rename(&tmp, &dest)
                .await
                .map_err(WorkspaceError::io("rename into place", &dest))?;
            done.written.push(path.clone());
        }
        Ok(done)
    }

    /// Every entry of `tree`, by path.
    async fn tree_entries(&self, tree: &str) -> Result<HashMap<String, Entry>, WorkspaceError> {
        let out = self
            .checkpoints
            .run_git()
            .run(
                self.checkpoints.env(&self.repo),
                ["ls-tree", "-r", "-z", "--full-tree", tree],
            )
            .await?;
        let mut entries = HashMap::new();
        for record in out.split(|b| *b == 0).filter(|r| !r.is_empty()) {
            let record = String::from_utf8_lossy(record);
            let Some((meta, path)) = record.split_once('\t') else {
                continue;
            };
            let mut meta = meta.split(' ');
            if let (Some(mode), Some(_kind), Some(oid)) = (meta.next(), meta.next(), meta.next()) {
                entries.insert(
                    path.to_owned(),
                    Entry {
                        mode: mode.to_owned(),
                        oid: oid.to_owned(),
                    },
                );
            }
        }
        Ok(entries)
    }

    /// The contents of blobs `oids` (`git cat-file --batch`).
    async fn blobs(&self, oids: &[String]) -> Result<HashMap<String, Vec<u8>>, WorkspaceError> {
        if oids.is_empty() {
            return Ok(HashMap::new());
        }
        let input: String = oids.iter().map(|o| format!("{o}\n")).collect();
        let out = self
            .checkpoints
            .run_git()
            .run_with_input(
                self.checkpoints.env(&self.repo),
                ["cat-file", "--batch"],
                Some(input.into_bytes()),
            )
            .await?;
        let bad = |detail: String| WorkspaceError::Parse {
            command: "cat-file --batch".into(),
            detail,
        };
        let mut blobs = HashMap::new();
        let mut rest = out.as_slice();
        while !rest.is_empty() {
            let Some(nl) = rest.iter().position(|b| *b == b'\n') else {
                return Err(bad("a header without a newline".into()));
            };
            let header = String::from_utf8_lossy(&rest[..nl]).into_owned();
            let mut parts = header.split(' ');
            let (Some(oid), Some(_kind), Some(size)) = (parts.next(), parts.next(), parts.next())
            else {
                return Err(bad(format!("the header {header:?}")));
            };
            let size: usize = size
                .parse()
                .map_err(|_| bad(format!("the size in {header:?}")))?;
            let start = nl + 1;
            let end = start + size;
            if rest.len() < end {
                return Err(bad(format!("{oid} is shorter than {size} bytes")));
            }
            blobs.insert(oid.to_owned(), rest[start..end].to_vec());
            rest = rest.get(end + 1..).unwrap_or_default();
        }
        Ok(blobs)
    }
}

/// Refuses a path that could leave the working tree (absolute, `..`, empty).
fn check_relative(path: &str) -> Result<(), WorkspaceError> {
    let ok = !path.is_empty()
        && Path::new(path)
            .components()
            .all(|c| matches!(c, Component::Normal(_)));
    if ok {
        Ok(())
    } else {
        Err(WorkspaceError::Parse {
            command: "restore".into(),
            detail: format!("the path {path:?} is not inside the working tree"),
        })
    }
}

/// Creates the parent folders of `dest` below `root`; a symlink or file standing
/// where a folder must be is removed first, so nothing is written outside `root`.
async fn prepare_parents(root: &Path, dest: &Path) -> Result<(), WorkspaceError> {
    let Ok(rel) = dest.strip_prefix(root) else {
        return Ok(());
    };
    let mut dir = root.to_owned();
    let parents: Vec<_> = rel.components().collect();
    for part in parents.iter().take(parents.len().saturating_sub(1)) {
        dir.push(part);
        match tokio::fs::symlink_metadata(&dir).await {
            Ok(meta) if meta.is_dir() => continue,
            Ok(_) => tokio::fs::remove_file(&dir)
                .await
                .map_err(WorkspaceError::io("remove", &dir))?,
            Err(_) => {}
        }
        tokio::fs::create_dir(&dir)
            .await
            .map_err(WorkspaceError::io("create", &dir))?;
    }
    Ok(())
}

/// Removes the folders above `removed` that are now empty, up to (not including) `root`.
async fn remove_empty_parents(root: &Path, removed: &Path) {
    let mut dir = removed.parent();
    while let Some(d) = dir {
        if d == root || !d.starts_with(root) || tokio::fs::remove_dir(d).await.is_err() {
            break;
        }
        dir = d.parent();
    }
}

/// `.<name>.knife-<tag>.tmp` beside `dest`.
fn temp_path(dest: &Path, tag: &str) -> PathBuf {
    let name = dest
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    dest.with_file_name(format!(".{name}.knife-{tag}.tmp"))
}
