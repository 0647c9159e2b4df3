//! Confinement of tool paths to the project root: resolve, canonicalize (symlinks
//! resolved) and refuse anything outside; plus root-relative display of paths.

use std::path::{Component, Path, PathBuf};

use super::beneath::{self, BeneathError, OpenedFile, WriteTarget};
use super::{ToolContext, ToolError};
use crate::permissions::PermissionAction;

impl ToolContext {
    /// Opens `requested` for reading beneath the root, race-free (SEC-03, see
    /// [`beneath`]): links inside the root are followed, links leading out refused,
    /// and a link swapped between any two steps cannot make the open leave the root.
    /// Then checks `tool`'s permission rules against the file actually opened
    /// ([`Self::check_opened`]). Returns the open file (possibly a directory or a
    /// FIFO, opened non-blocking: the caller checks its kind) and its root-relative
    /// path as shown to the model.
    ///
    /// Errors: [`ToolError::OutsideRoot`], [`ToolError::NotFound`],
    /// [`ToolError::NotADirectory`], [`ToolError::PermissionDenied`], [`ToolError::Io`].
    pub(crate) fn open_beneath(
        &self,
        tool: &str,
        requested: &str,
    ) -> Result<(std::fs::File, String), ToolError> {
        let trimmed = requested.trim();
        let opened: OpenedFile = beneath::relative_to_root(self.root(), Path::new(trimmed))
            .and_then(|rel| beneath::open_read(self.root(), &rel))
            .map_err(|e| self.beneath_error(trimmed, e))?;
        let shown = beneath::shown(&opened.rel);
        self.check_opened(tool, false, &shown)?;
        Ok((opened.file, shown))
    }

    /// Resolves `requested` as a file to write beneath the root, race-free (SEC-03):
    /// missing parent directories are created on the way, a final link inside the
    /// root is written through, a directory is refused; the permission rules of
    /// `tool` are checked against the real target ([`Self::check_opened`]).
    ///
    /// Errors: as [`Self::open_beneath`], plus [`ToolError::IsDirectory`].
    pub(crate) fn write_beneath(
        &self,
        tool: &str,
        requested: &str,
    ) -> Result<(WriteTarget, String), ToolError> {
        let trimmed = requested.trim();
        let target = beneath::relative_to_root(self.root(), Path::new(trimmed))
            .and_then(|rel| beneath::write_target(self.root(), &rel))
            .map_err(|e| self.beneath_error(trimmed, e))?;
        let shown = beneath::shown(&target.rel);
        self.check_opened(tool, true, &shown)?;
        Ok((target, shown))
    }

    /// The permission rules applied to the path actually opened (SEC-03): a `deny`
    /// rule on it refuses the call whatever path was checked before; when it differs
    /// from the subject the call was checked (and maybe approved) for
    /// ([`Self::with_checked_subject`]), it must be allowed outright — an `ask` on
    /// it refuses, since nobody approved that file.
    pub(crate) fn check_opened(
        &self,
        tool: &str,
        mutating: bool,
        shown: &str,
    ) -> Result<(), ToolError> {
        let decision = self.policy().permissions.evaluate(tool, shown, mutating);
        let rule = match decision.source {
            crate::permissions::DecisionSource::Rule(i) => format!("permission rule {i}"),
            crate::permissions::DecisionSource::Default => "the default rule".to_owned(),
        };
        let checked = self.checked_subject();
        match decision.action {
            PermissionAction::Allow => Ok(()),
            PermissionAction::Ask if checked.is_none_or(|s| s == shown) => Ok(()),
            PermissionAction::Ask => Err(ToolError::PermissionDenied {
                tool: tool.to_owned(),
                subject: shown.to_owned(),
                rule: format!(
                    "{rule}: the path changed to {shown} after it was checked as {}; \
                     call the tool again",
                    checked.unwrap_or_default()
                ),
            }),
            PermissionAction::Deny => Err(ToolError::PermissionDenied {
                tool: tool.to_owned(),
                subject: shown.to_owned(),
                rule,
            }),
        }
    }

    fn beneath_error(&self, requested: &str, e: BeneathError) -> ToolError {
        let path = requested.to_owned();
        match e {
            BeneathError::Outside => ToolError::OutsideRoot {
                path,
                root: self.root().display().to_string(),
            },
            BeneathError::NotFound => ToolError::NotFound { path },
            BeneathError::NotADirectory => ToolError::NotADirectory { path },
            BeneathError::IsDirectory => ToolError::IsDirectory { path },
            BeneathError::Dangling(target) => ToolError::DanglingSymlink { path, target },
            BeneathError::Loop => ToolError::Io {
                path,
                message: "too many levels of symbolic links".into(),
            },
            BeneathError::Io(e) => ToolError::Io {
                path,
                message: e.to_string(),
            },
        }
    }

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
