//! Paths from agents and clients stay in bounds (SPEC.md SEC-06): which folders may
//! be a project root, and where `worktree_create` may put a checkout.

use std::path::{Component, Path, PathBuf};

/// System trees no project may live in (SEC-06): confinement to such a root would
/// mean nothing.
pub const SYSTEM_TREES: &[&str] = &[
    "/etc", "/usr", "/bin", "/sbin", "/boot", "/proc", "/sys", "/dev",
];

/// Why `root` (canonical, absolute) cannot be a project root, or `None` when it can.
///
/// Refused: `/`; a home directory itself (`$HOME`, `/root`, any `/home/<name>`) and
/// `/home`; any folder inside one of [`SYSTEM_TREES`]. A folder *inside* a home
/// directory is fine. The message says why and what to pick instead.
pub fn refused_project_root(root: &Path) -> Option<String> {
    let shown = root.display();
    if root.parent().is_none() {
        return Some(format!(
            "project root {shown} is the whole filesystem: a project confines its agents to \
             its root, so `/` would confine nothing; use the folder of one project"
        ));
    }
    if let Some(tree) = SYSTEM_TREES
        .iter()
        .find(|tree| root.starts_with(Path::new(tree)))
    {
        return Some(format!(
            "project root {shown} is inside the system tree {tree}: agents would be \
             allowed to change system files; use a project folder outside {tree}"
        ));
    }
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .and_then(|h| std::fs::canonicalize(h).ok());
    let is_home = home.as_deref() == Some(root)
        || root == Path::new("/root")
        || root == Path::new("/home")
        || root.parent() == Some(Path::new("/home"));
    if is_home {
        return Some(format!(
            "project root {shown} is a home directory: agents would reach every file of \
             that user (keys, shell history, other projects); use a project folder inside it"
        ));
    }
    None
}

/// Where a worktree may be created (SEC-06): `requested` (absolute, or relative to
/// `project_root`) must resolve inside `project_root` or inside `worktrees_dir`
/// (a folder of knife's data dir). `..` components are resolved lexically and the
/// longest existing ancestor is canonicalized, so neither `../x` nor a symlinked
/// folder leads outside. Returns the path to create.
///
/// Errors: the message names the path and the two places allowed.
pub fn confine_worktree_path(
    project_root: &Path,
    worktrees_dir: &Path,
    requested: &Path,
) -> Result<PathBuf, String> {
    let joined = if requested.is_absolute() {
        requested.to_path_buf()
    } else {
        project_root.join(requested)
    };
    let resolved = resolve_existing_prefix(&normalize(&joined));
    let allowed = [project_root, worktrees_dir]
        .iter()
        .map(|p| resolve_existing_prefix(&normalize(p)))
        .any(|base| resolved.starts_with(&base) && resolved != base);
    if allowed {
        Ok(resolved)
    } else {
        Err(format!(
            "worktree path {} is outside the project and knife's worktree folder: create \
             worktrees inside the project ({}) or leave `path` out to use {}",
            requested.display(),
            project_root.display(),
            worktrees_dir.display()
        ))
    }
}

/// `path` with `.` dropped and `..` applied lexically (never above `/`).
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// The longest existing ancestor of `path` canonicalized (links resolved), with
/// the rest appended: what `path` will be once its missing folders are created.
fn resolve_existing_prefix(path: &Path) -> PathBuf {
    let mut existing = path.to_path_buf();
    let mut rest = Vec::new();
    loop {
        if let Ok(canonical) = std::fs::canonicalize(&existing) {
            let mut out = canonical;
            out.extend(rest.iter().rev());
            return out;
        }
        match (
            existing.file_name().map(ToOwned::to_owned),
            existing.parent(),
        ) {
            (Some(name), Some(parent)) => {
                rest.push(name);
                existing = parent.to_path_buf();
            }
            _ => return path.to_path_buf(),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn sec_06_system_trees_and_homes_are_refused_as_roots() {
        for bad in [
            "/",
            "/etc",
            "/usr/local/src/x",
            "/proc/1",
            "/dev",
            "/root",
            "/home/alice",
        ] {
            assert!(refused_project_root(Path::new(bad)).is_some(), "{bad}");
        }
        for good in ["/tmp/proj", "/home/alice/src/proj", "/srv/code", "/opt/p"] {
            assert!(refused_project_root(Path::new(good)).is_none(), "{good}");
        }
        let why = refused_project_root(Path::new("/etc")).unwrap();
        assert!(why.contains("system tree /etc"), "{why}");
    }

    #[test]
    fn sec_06_worktree_paths_stay_in_the_project_or_the_worktree_folder() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("proj");
        let data = dir.path().join("data/worktrees");
        std::fs::create_dir_all(&root).unwrap();
        std::fs::create_dir_all(&data).unwrap();
        let root = std::fs::canonicalize(root).unwrap();
        let data = std::fs::canonicalize(data).unwrap();
        assert!(confine_worktree_path(&root, &data, Path::new("wt/a")).is_ok());
        assert!(confine_worktree_path(&root, &data, &data.join("p/a")).is_ok());
        assert!(confine_worktree_path(&root, &data, Path::new("../escape")).is_err());
        assert!(confine_worktree_path(&root, &data, Path::new("/tmp/x")).is_err());
        assert!(confine_worktree_path(&root, &data, Path::new("a/../../x")).is_err());
        // The root itself is not a place for a second checkout.
        assert!(confine_worktree_path(&root, &data, Path::new(".")).is_err());
        // A link inside the project that points out of it does not count as inside.
        std::os::unix::fs::symlink(dir.path(), root.join("out")).unwrap();
        assert!(confine_worktree_path(&root, &data, Path::new("out/x")).is_err());
    }
}
