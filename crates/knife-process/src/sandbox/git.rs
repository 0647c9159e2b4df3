//! The git directories a checkout needs writable besides its root (SEC-01, CHG-07):
//! read from the checkout's `.git` file, taken only when git's own back-link agrees.

use std::path::{Path, PathBuf};

/// The git directories a checkout at `root` needs writable besides `root`, so that
/// git works inside the sandbox: for a linked worktree (its `.git` is a file
/// `gitdir: …`, like a knife thread's worktree) its git dir and the repository's
/// common dir; for a submodule its git dir; nothing for a plain checkout (its `.git`
/// is inside the root) and nothing when the `.git` file is not confirmed.
///
/// The `.git` file lies inside the root, where the model's commands write: it is
/// only a claim. A linked worktree's claim counts when its git dir is
/// `<common>/worktrees/<name>`, names the common dir in `commondir` and names this
/// checkout's `.git` back in `gitdir` (what `git worktree add` writes), and the
/// common dir holds `HEAD` and `objects`; a submodule's when its git dir's
/// `config` sets `worktree` to this root. A `.git` file pointing elsewhere (the
/// data dir, the home) therefore makes nothing writable.
pub fn git_dirs_outside(root: &Path) -> Vec<PathBuf> {
    let Ok(root) = std::fs::canonicalize(root) else {
        return Vec::new();
    };
    let Some(gitdir) = claimed_gitdir(&root) else {
        return Vec::new();
    };
    let mut out = match std::fs::read_to_string(gitdir.join("commondir")) {
        Ok(common) => match confirmed_common(&root, &gitdir, common.trim()) {
            // The worktree's git dir lies inside the common dir.
            Some(common) => vec![common],
            None => return Vec::new(),
        },
        Err(_) if submodule_of(&gitdir, &root) => vec![gitdir],
        Err(_) => return Vec::new(),
    };
    out.retain(|d| !d.starts_with(&root));
    out
}

/// The git dir `<root>/.git` names (`gitdir: <dir>`, relative to the root), canonical.
fn claimed_gitdir(root: &Path) -> Option<PathBuf> {
    let dot_git = root.join(".git");
    if !std::fs::symlink_metadata(&dot_git).ok()?.is_file() {
        return None;
    }
    let text = std::fs::read_to_string(&dot_git).ok()?;
    let named = text.lines().find_map(|l| l.strip_prefix("gitdir:"))?.trim();
    std::fs::canonicalize(root.join(named)).ok()
}

/// The common dir of worktree git dir `gitdir` when the back-link confirms `root`.
fn confirmed_common(root: &Path, gitdir: &Path, commondir: &str) -> Option<PathBuf> {
    let common = std::fs::canonicalize(gitdir.join(commondir)).ok()?;
    let name = gitdir.file_name()?;
    if gitdir != common.join("worktrees").join(name) {
        return None;
    }
    if !common.join("HEAD").is_file() || !common.join("objects").is_dir() {
        return None;
    }
    let back = std::fs::read_to_string(gitdir.join("gitdir")).ok()?;
    let back = std::fs::canonicalize(gitdir.join(back.trim())).ok()?;
    (back == root.join(".git")).then_some(common)
}

/// True when `gitdir`'s `config` sets `worktree = <root>` (a submodule's git dir).
fn submodule_of(gitdir: &Path, root: &Path) -> bool {
    let Ok(config) = std::fs::read_to_string(gitdir.join("config")) else {
        return false;
    };
    config.lines().any(|line| {
        let Some((key, value)) = line.split_once('=') else {
            return false;
        };
        key.trim().eq_ignore_ascii_case("worktree")
            && std::fs::canonicalize(gitdir.join(value.trim())).is_ok_and(|w| w == root)
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn git(dir: &Path, args: &[&str]) {
        let out = std::process::Command::new("git")
            .args(args)
            .current_dir(dir)
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {out:?}");
    }

    /// A repository at `<tmp>/repo` with one commit and a worktree at `<tmp>/wt`.
    fn repo_with_worktree() -> (tempfile::TempDir, PathBuf, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let tmp = std::fs::canonicalize(dir.path()).unwrap();
        let repo = tmp.join("repo");
        std::fs::create_dir_all(&repo).unwrap();
        git(&repo, &["init", "-q", "-b", "main"]);
        std::fs::write(repo.join("a.txt"), "a\n").unwrap();
        git(&repo, &["add", "-A"]);
        git(
            &repo,
            &[
                "-c",
                "user.name=t",
                "-c",
                "user.email=t@t",
                "commit",
                "-qm",
                "init",
            ],
        );
        let wt = tmp.join("wt");
        git(
            &repo,
            &["worktree", "add", "-q", "-b", "side", wt.to_str().unwrap()],
        );
        (dir, repo, wt)
    }

    #[test]
    fn chg_07_a_worktree_needs_its_repositorys_git_dir_and_a_plain_checkout_nothing() {
        let (_dir, repo, wt) = repo_with_worktree();
        assert_eq!(git_dirs_outside(&wt), vec![repo.join(".git")]);
        assert_eq!(git_dirs_outside(&repo), Vec::<PathBuf>::new());
    }

    #[test]
    fn sec_01_a_forged_dot_git_file_makes_nothing_writable() {
        let (dir, _repo, wt) = repo_with_worktree();
        let tmp = std::fs::canonicalize(dir.path()).unwrap();
        // A folder the model wants to write (the data dir, say), with a fake git dir.
        let target = tmp.join("secret");
        std::fs::create_dir_all(target.join("objects")).unwrap();
        std::fs::write(target.join("HEAD"), "ref: refs/heads/main\n").unwrap();
        let plain = tmp.join("plain");
        std::fs::create_dir_all(&plain).unwrap();
        for root in [&plain, &wt] {
            std::fs::remove_file(root.join(".git")).ok();
            std::fs::write(root.join(".git"), format!("gitdir: {}\n", target.display())).unwrap();
            assert_eq!(git_dirs_outside(root), Vec::<PathBuf>::new(), "{root:?}");
            // Pointing at a real worktree entry of another checkout: no back-link to here.
            std::fs::write(
                root.join(".git"),
                format!("gitdir: {}\n", tmp.join("repo/.git/worktrees/wt").display()),
            )
            .unwrap();
            if root == &plain {
                assert_eq!(git_dirs_outside(root), Vec::<PathBuf>::new());
            }
        }
        // A fake `worktrees/<name>` inside the target with a back-link: the target
        // would need to be writable already to hold it; without it, nothing.
        std::fs::create_dir_all(target.join("worktrees/x")).unwrap();
        std::fs::write(target.join("worktrees/x/commondir"), "../..\n").unwrap();
        std::fs::write(
            plain.join(".git"),
            format!("gitdir: {}\n", target.join("worktrees/x").display()),
        )
        .unwrap();
        assert_eq!(git_dirs_outside(&plain), Vec::<PathBuf>::new());
    }
}
