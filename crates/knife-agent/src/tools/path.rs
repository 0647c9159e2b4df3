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

    /// Whether `path`, which does not (fully) exist, would lie inside the root:
    /// its deepest existing ancestor is canonicalized (symlinks resolved) and
    /// the remaining components are folded onto it lexically.
    fn resolves_inside(&self, path: &Path) -> bool {
        for ancestor in path.ancestors().skip(1) {
            let Ok(canonical) = std::fs::canonicalize(ancestor) else {
                continue;
            };
            let rest = path.strip_prefix(ancestor).unwrap_or(Path::new(""));
            return normalize_lexically(&canonical.join(rest)).starts_with(self.root());
        }
        false
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
