//! knife-workspace against the real `git` program on temp folders: checkpoints,
//! excludes, size cap, change sets, diffs, restores, and the user's `.git` untouched.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::Command;

use knife_protocol::{FileChangeKind, ProjectId, ThreadId};
use knife_workspace::*;

struct Fixture {
    _dir: tempfile::TempDir,
    tree: WorkTree,
    checkpoints: Checkpoints,
}

async fn fixture(options: CheckpointOptions) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let project = dir.path().join("project");
    std::fs::create_dir_all(&project).unwrap();
    let git = Git::locate().await.unwrap();
    let checkpoints = Checkpoints::new(git, dir.path().join("data/checkpoints"), options);
    Fixture {
        tree: WorkTree::new(ProjectId::from("project_1"), project),
        checkpoints,
        _dir: dir,
    }
}

fn write(root: &Path, path: &str, content: &str) {
    let p = root.join(path);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, content).unwrap();
}

fn user_git(root: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(args)
        .current_dir(root)
        .env("GIT_AUTHOR_NAME", "u")
        .env("GIT_AUTHOR_EMAIL", "u@x")
        .env("GIT_COMMITTER_NAME", "u")
        .env("GIT_COMMITTER_EMAIL", "u@x")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn snapshot_git_dir(root: &Path) -> Vec<(String, Vec<u8>)> {
    let mut files = Vec::new();
    fn walk(base: &Path, dir: &Path, out: &mut Vec<(String, Vec<u8>)>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let e = e.unwrap();
            if e.file_type().unwrap().is_dir() {
                walk(base, &e.path(), out);
            } else {
                let rel = e.path().strip_prefix(base).unwrap().display().to_string();
                out.push((rel, std::fs::read(e.path()).unwrap()));
            }
        }
    }
    walk(root, &root.join(".git"), &mut files);
    files.sort();
    files
}

#[tokio::test]
async fn chg_01_checkpoint_records_untracked_and_tracked_files_and_leaves_the_users_git_alone() {
    let f = fixture(CheckpointOptions::default()).await;
    let root = f.tree.path.clone();
    user_git(&root, &["init", "-q"]);
    write(&root, "src/main.rs", "fn main() {}\n");
    write(&root, ".gitignore", "secret.txt\n");
    write(&root, "secret.txt", "ignored by .gitignore\n");
    write(&root, "node_modules/x/index.js", "ignored by default\n");
    write(&root, "target/debug/out", "ignored by default\n");
    user_git(&root, &["add", "src/main.rs", ".gitignore"]);
    user_git(&root, &["commit", "-q", "-m", "first"]);
    write(&root, "notes.md", "untracked but not ignored\n");
    let before = snapshot_git_dir(&root);
    let status_before = user_git(&root, &["status", "--porcelain"]);

    let thread = ThreadId::from("thread_a");
    let cp = f
        .checkpoints
        .checkpoint(&f.tree, &run_ref(&thread, 1, "start"), "start")
        .await
        .unwrap();
    assert_eq!(cp.git_ref, "refs/knife/threads/thread_a/runs/1/start");
    let repo = f.checkpoints.repo_dir(&f.tree.project);
    let listed = Command::new("git")
        .args([
            "--git-dir",
            repo.to_str().unwrap(),
            "ls-tree",
            "-r",
            "--name-only",
            &cp.commit,
        ])
        .output()
        .unwrap();
    let listed = String::from_utf8_lossy(&listed.stdout);
    let names: Vec<&str> = listed.lines().collect();
    assert_eq!(
        names,
        vec![".gitignore", "notes.md", "src/main.rs"],
        "{listed}"
    );
    // The user's repository: not one byte of .git changed, status the same.
    assert_eq!(snapshot_git_dir(&root), before);
    assert_eq!(user_git(&root, &["status", "--porcelain"]), status_before);
    assert!(!repo.starts_with(&root));
}

#[tokio::test]
async fn chg_02_change_set_lists_added_modified_deleted_renamed_binary_and_skipped() {
    let f = fixture(CheckpointOptions {
        max_file_bytes: 1000,
        ..CheckpointOptions::default()
    })
    .await;
    let root = f.tree.path.clone();
    write(&root, "a.txt", "one\ntwo\nthree\n");
    write(&root, "gone.txt", "bye\n");
    let long: String = (0..40)
        .map(|i| format!("line {i} of a file that moves\n"))
        .collect();
    write(&root, "old/name.rs", &long[..900]);
    let t = ThreadId::from("thread_b");
    let start = f
        .checkpoints
        .checkpoint(&f.tree, &run_ref(&t, 1, "start"), "s")
        .await
        .unwrap();
    write(&root, "a.txt", "one\n2\nthree\nfour\n");
    std::fs::remove_file(root.join("gone.txt")).unwrap();
    std::fs::create_dir_all(root.join("new")).unwrap();
    std::fs::rename(root.join("old/name.rs"), root.join("new/name.rs")).unwrap();
    write(&root, "added.txt", "hello\n");
    std::fs::write(root.join("pic.bin"), [0u8, 1, 2, 0, 255]).unwrap();
    write(&root, "huge.log", &"x".repeat(5000));
    let end = f
        .checkpoints
        .checkpoint(&f.tree, &run_ref(&t, 1, "end"), "e")
        .await
        .unwrap();
    assert_eq!(end.skipped.len(), 1);
    assert_eq!(end.skipped[0].path, "huge.log");
    assert_eq!(end.skipped[0].bytes, 5000);
    let changes = f
        .checkpoints
        .changes(&f.tree.project, &start.commit, &end.commit)
        .await
        .unwrap();
    let by = |p: &str| {
        changes
            .files
            .iter()
            .find(|c| c.path == p)
            .unwrap_or_else(|| panic!("{p} in {changes:?}"))
    };
    assert_eq!(by("a.txt").kind, FileChangeKind::Modified);
    assert_eq!((by("a.txt").added, by("a.txt").removed), (2, 1));
    assert_eq!(by("gone.txt").kind, FileChangeKind::Deleted);
    assert_eq!(by("added.txt").kind, FileChangeKind::Added);
    assert_eq!(by("new/name.rs").kind, FileChangeKind::Renamed);
    assert_eq!(by("new/name.rs").old_path.as_deref(), Some("old/name.rs"));
    assert!(by("pic.bin").binary);
    assert!(changes.files.iter().all(|c| c.path != "huge.log"));

    let diff = f
        .checkpoints
        .diff(&f.tree.project, &start.commit, &end.commit)
        .await
        .unwrap();
    assert!(!diff.truncated);
    assert!(diff.text.contains("+four"), "{}", diff.text);
    assert!(
        diff.text
            .contains("Binary files /dev/null and b/pic.bin differ"),
        "{}",
        diff.text
    );
}

#[tokio::test]
async fn chg_03_a_diff_over_the_cap_is_cut_at_a_file_boundary_with_a_note() {
    let f = fixture(CheckpointOptions {
        max_diff_bytes: 2000,
        ..CheckpointOptions::default()
    })
    .await;
    let root = f.tree.path.clone();
    let t = ThreadId::from("thread_c");
    let start = f
        .checkpoints
        .checkpoint(&f.tree, &run_ref(&t, 1, "start"), "s")
        .await
        .unwrap();
    for i in 0..20 {
        write(&root, &format!("f{i:02}.txt"), &"some text\n".repeat(20));
    }
    let end = f
        .checkpoints
        .checkpoint(&f.tree, &run_ref(&t, 1, "end"), "e")
        .await
        .unwrap();
    let diff = f
        .checkpoints
        .diff(&f.tree.project, &start.commit, &end.commit)
        .await
        .unwrap();
    assert!(diff.truncated);
    assert!(diff.text.len() <= 2000);
    assert!(diff.text.starts_with("diff --git "));
    assert!(diff.note.unwrap().contains("max_diff_bytes"));
}

#[tokio::test]
async fn chg_04_restore_writes_back_files_and_removes_added_ones() {
    let f = fixture(CheckpointOptions::default()).await;
    let root = f.tree.path.clone();
    write(&root, "keep.txt", "original\n");
    std::fs::write(root.join("run.sh"), "#!/bin/sh\n").unwrap();
    std::fs::set_permissions(
        root.join("run.sh"),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let t = ThreadId::from("thread_d");
    let start = f
        .checkpoints
        .checkpoint(&f.tree, &run_ref(&t, 1, "start"), "s")
        .await
        .unwrap();
    write(&root, "keep.txt", "changed\n");
    std::fs::remove_file(root.join("run.sh")).unwrap();
    write(&root, "deep/new/file.txt", "new\n");
    let paths = vec![
        "deep/new/file.txt".to_owned(),
        "keep.txt".to_owned(),
        "run.sh".to_owned(),
    ];
    let locked = f.checkpoints.lock(&f.tree).await.unwrap();
    let done = locked
        .restore(&start.tree, &paths, "revert_1")
        .await
        .unwrap();
    assert_eq!(done.removed, vec!["deep/new/file.txt"]);
    assert_eq!(
        std::fs::read_to_string(root.join("keep.txt")).unwrap(),
        "original\n"
    );
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(root.join("run.sh"))
            .unwrap()
            .permissions(),
    );
    assert_eq!(mode & 0o777, 0o755);
    assert!(
        !root.join("deep").exists(),
        "empty folders left by the removal go too"
    );
    // Idempotent: a replay changes nothing and leaves no temp file.
    locked
        .restore(&start.tree, &paths, "revert_1")
        .await
        .unwrap();
    let names: Vec<String> = std::fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        names.iter().all(|n| !n.contains("knife-revert")),
        "{names:?}"
    );
    assert!(
        locked
            .restore(&start.tree, &["../x".to_owned()], "r")
            .await
            .is_err()
    );
}

#[tokio::test]
async fn chg_06_checkpoints_store_only_changed_content_and_never_ignored_paths() {
    let f = fixture(CheckpointOptions {
        exclude: vec!["*.tmp".into()],
        ..CheckpointOptions::default()
    })
    .await;
    let root = f.tree.path.clone();
    for i in 0..200 {
        write(&root, &format!("src/m{i}.rs"), &format!("// module {i}\n"));
    }
    write(&root, "node_modules/big/index.js", "x");
    write(&root, "scratch.tmp", "configured exclude");
    let t = ThreadId::from("thread_e");
    f.checkpoints
        .checkpoint(&f.tree, &run_ref(&t, 1, "start"), "s")
        .await
        .unwrap();
    let repo = f.checkpoints.repo_dir(&f.tree.project);
    let count = || {
        let out = Command::new("git")
            .args(["--git-dir", repo.to_str().unwrap(), "count-objects", "-v"])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        text.lines()
            .find_map(|l| l.strip_prefix("count: "))
            .unwrap()
            .parse::<u64>()
            .unwrap()
    };
    let first = count();
    write(&root, "src/m3.rs", "// changed\n");
    let end = f
        .checkpoints
        .checkpoint(&f.tree, &run_ref(&t, 1, "end"), "e")
        .await
        .unwrap();
    // One new blob, the trees on its path (src/ and root), one commit.
    assert_eq!(count() - first, 4);
    let listed = Command::new("git")
        .args([
            "--git-dir",
            repo.to_str().unwrap(),
            "ls-tree",
            "-r",
            "--name-only",
            &end.commit,
        ])
        .output()
        .unwrap();
    let listed = String::from_utf8_lossy(&listed.stdout);
    assert!(!listed.contains("node_modules"));
    assert!(!listed.contains("scratch.tmp"));
}

#[tokio::test]
async fn chg_11_forget_thread_drops_its_refs_and_collect_frees_the_objects() {
    let f = fixture(CheckpointOptions::default()).await;
    let root = f.tree.path.clone();
    let t = ThreadId::from("thread_f");
    write(&root, "a.txt", &"payload ".repeat(10_000));
    f.checkpoints
        .checkpoint(&f.tree, &run_ref(&t, 1, "start"), "s")
        .await
        .unwrap();
    write(&root, "a.txt", &"other payload ".repeat(10_000));
    f.checkpoints
        .checkpoint(&f.tree, &run_ref(&t, 1, "end"), "e")
        .await
        .unwrap();
    let used = f.checkpoints.disk_usage().await;
    assert!(used > 0);
    assert_eq!(
        f.checkpoints
            .forget_thread(&f.tree.project, &t)
            .await
            .unwrap(),
        2
    );
    f.checkpoints.collect(&f.tree.project).await.unwrap();
    let repo = f.checkpoints.repo_dir(&f.tree.project);
    let out = Command::new("git")
        .args(["--git-dir", repo.to_str().unwrap(), "count-objects", "-v"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(text.contains("count: 0"), "{text}");
    assert!(text.contains("in-pack: 0"), "{text}");
    assert_eq!(
        f.checkpoints
            .forget_thread(&f.tree.project, &t)
            .await
            .unwrap(),
        0
    );
}

#[tokio::test]
async fn a_missing_git_program_is_one_typed_error() {
    let err = Git::with_program("/nonexistent/git".into())
        .await
        .unwrap_err();
    assert!(matches!(err, WorkspaceError::GitMissing { .. }));
    assert!(err.to_string().contains("install it"));
}

#[tokio::test]
async fn project_gitattributes_cannot_change_the_bytes_a_checkpoint_holds() {
    let f = fixture(CheckpointOptions::default()).await;
    let root = f.tree.path.clone();
    write(&root, ".gitattributes", "*.txt text eol=crlf\n");
    write(&root, "a.txt", "unix\nlines\n");
    let t = ThreadId::from("thread_g");
    let cp = f
        .checkpoints
        .checkpoint(&f.tree, &run_ref(&t, 1, "start"), "s")
        .await
        .unwrap();
    let repo = f.checkpoints.repo_dir(&f.tree.project);
    let out = Command::new("git")
        .args([
            "--git-dir",
            repo.to_str().unwrap(),
            "show",
            &format!("{}:a.txt", cp.commit),
        ])
        .output()
        .unwrap();
    assert_eq!(out.stdout, b"unix\nlines\n");
}
