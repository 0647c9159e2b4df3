//! Confinement of tool paths to the project root: resolve, canonicalize (symlinks
//! resolved) and refuse anything outside; plus root-relative display of paths.

use std::path::{Component, Path, PathBuf};

use super::{ToolContext, ToolError};

impl ToolContext {
    /// Resolves `requested` (relative to the project root, or absolute) to a
    /// canonical path inside the root. An empty string or `.` is the root itself.
    ///
    /// Errors: [`ToolError::OutsideRoot`] when the path (after resolving `..` and
    /// symlinks) leaves the root, [`ToolError::NotFound`] when nothing exists there,
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
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                // Nothing there: say "outside" when the path would leave the root
                // even lexically, so the model does not go looking for it.
                if normalize_lexically(&joined).starts_with(self.root()) {
                    Err(ToolError::NotFound {
                        path: trimmed.to_owned(),
                    })
                } else {
                    Err(outside())
                }
            }
            Err(e) => Err(ToolError::Io {
                path: trimmed.to_owned(),
                message: e.to_string(),
            }),
        }
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
