//! Confinement of tool paths to the project root: resolve, canonicalize (symlinks
//! resolved) and refuse anything outside; plus root-relative display of paths.

use std::path::{Component, Path, PathBuf};

use super::{ToolContext, ToolError};

impl ToolContext {
    /// Resolves `requested` (relative to the project root, or absolute) to a
    /// canonical path inside the root. An empty string or `.` is the root itself.
    ///
    /// Errors: [`ToolError::OutsideRoot`] when the path (after resolving `..` and
    /// symlinks) leaves the root — decided from its deepest existing ancestor when
    /// the path itself does not exist, so missing and existing files outside look
    /// the same — [`ToolError::NotFound`] when nothing exists there,
    /// [`ToolError::Io`] for other failures.
    pub fn resolve(&self, requested: &str) -> Result<PathBuf, ToolError> {
        let trimmed = requested.trim();
        let requested_path = Path::new(trimmed);
        let joined = if requested_path.is_absolute() {
            requested_path.to_path_buf()
        } else {
            self.root().join(requested_path)
        };
        let outside = || ToolError::OutsideRoot {
            path: trimmed.to_owned(),
            root: self.root().display().to_string(),
        };
        match std::fs::canonicalize(&joined) {
            Ok(canonical) if canonical.starts_with(self.root()) => Ok(canonical),
            Ok(_) => Err(outside()),
            // Nothing there (or not reachable): decide "outside" exactly as for an
            // existing path, from where the path really leads, so the answer for
            // `link/nope` and `link/secret` (link -> /etc) is the same and the
            // model cannot probe which files exist outside the root.
            Err(_) if !self.resolves_inside(&joined) => Err(outside()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(ToolError::NotFound {
                path: trimmed.to_owned(),
            }),
            Err(e) => Err(ToolError::Io {
                path: trimmed.to_owned(),
                message: e.to_string(),
            }),
        }
    }

    /// Whether `path`, which does not (fully) exist, would lie inside the root
    /// (see [`Self::fold_missing`]).
    fn resolves_inside(&self, path: &Path) -> bool {
        self.fold_missing(path)
            .is_some_and(|p| p.starts_with(self.root()))
    }

    /// Where `path`, which does not (fully) exist, really leads: its deepest
    /// existing ancestor is canonicalized (symlinks resolved) and the remaining
    /// components are folded onto it lexically. `None` when no ancestor resolves.
    fn fold_missing(&self, path: &Path) -> Option<PathBuf> {
        for ancestor in path.ancestors().skip(1) {
            let Ok(canonical) = std::fs::canonicalize(ancestor) else {
                continue;
            };
            let rest = path.strip_prefix(ancestor).unwrap_or(Path::new(""));
            return Some(normalize_lexically(&canonical.join(rest)));
        }
        None
    }

    /// Resolves `requested` as a file to write (it may not exist yet) to the path
    /// to write to, inside the root: an existing file (or a symlink to one inside
    /// the root) resolves to its canonical path; a missing one to its deepest
    /// existing ancestor's canonical path plus the missing components (the caller
    /// creates the missing directories).
    ///
    /// Errors: [`ToolError::OutsideRoot`] when it leads outside the root (through
    /// `..`, an absolute path or a symlink, also a dangling one),
    /// [`ToolError::IsDirectory`] for a directory (the root included),
    /// [`ToolError::DanglingSymlink`] for a symlink to a missing file inside the
    /// root, [`ToolError::Io`] for other failures.
    pub fn resolve_for_write(&self, requested: &str) -> Result<PathBuf, ToolError> {
        let trimmed = requested.trim();
        let requested_path = Path::new(trimmed);
        let joined = if requested_path.is_absolute() {
            requested_path.to_path_buf()
        } else {
            self.root().join(requested_path)
        };
        let outside = || ToolError::OutsideRoot {
            path: trimmed.to_owned(),
            root: self.root().display().to_string(),
        };
        let target = match std::fs::canonicalize(&joined) {
            Ok(canonical) if canonical.starts_with(self.root()) => canonical,
            Ok(_) => return Err(outside()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let folded = self.fold_missing(&joined).ok_or_else(outside)?;
                if !folded.starts_with(self.root()) {
                    return Err(outside());
                }
                // A dangling symlink as the last component: writing through it
                // would create its target, wherever that is.
                if let Ok(meta) = std::fs::symlink_metadata(&joined)
                    && meta.file_type().is_symlink()
                {
                    let link = std::fs::read_link(&joined).unwrap_or_default();
                    let dest = joined.parent().unwrap_or(self.root()).join(&link);
                    if !self.resolves_inside(&dest) {
                        return Err(outside());
                    }
                    return Err(ToolError::DanglingSymlink {
                        path: trimmed.to_owned(),
                        target: link.display().to_string(),
                    });
                }
                folded
            }
            Err(e) => {
                return Err(ToolError::Io {
                    path: trimmed.to_owned(),
                    message: e.to_string(),
                });
            }
        };
        if target.is_dir() {
            return Err(ToolError::IsDirectory {
                path: self.display_path(&target),
            });
        }
        Ok(target)
    }

    /// The subject of a path argument for permission rules: where the path
    /// really leads — symlinks resolved, `..` folded, as for [`Self::resolve`],
    /// so a rule on `secrets/*` also covers a link into `secrets` — shown
    /// root-relative (`.` for the root); a path outside the root is absolute.
    pub fn subject_path(&self, requested: &str) -> String {
        let requested_path = Path::new(requested.trim());
        let joined = if requested_path.is_absolute() {
            requested_path.to_path_buf()
        } else {
            self.root().join(requested_path)
        };
        let real = std::fs::canonicalize(&joined)
            .ok()
            .or_else(|| self.fold_missing(&joined))
            .unwrap_or_else(|| normalize_lexically(&joined));
        self.display_path(&real)
    }

    /// `path` relative to the root with `/` separators (`.` for the root itself),
    /// as shown to the model. Paths outside the root are shown as given.
    pub fn display_path(&self, path: &Path) -> String {
        match path.strip_prefix(self.root()) {
            Ok(rel) if rel.as_os_str().is_empty() => ".".to_owned(),
            Ok(rel) => rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy())
                .collect::<Vec<_>>()
                .join("/"),
            Err(_) => path.display().to_string(),
        }
    }
}

/// Removes `.` and folds `..` without touching the filesystem.
fn normalize_lexically(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other.as_os_str()),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn lexical_normalisation_folds_parent_dirs() {
        assert_eq!(
            normalize_lexically(Path::new("/p/a/../b/./c")),
            PathBuf::from("/p/b/c")
        );
        assert_eq!(
            normalize_lexically(Path::new("/p/../../x")),
            PathBuf::from("/x")
        );
    }
}
