//! `write` and `edit` on temp-dir projects (behaviour, errors, confinement, atomic
//! replacement), and agent-loop runs in which the model tries every tool on paths
//! outside the project. Permission rules and approvals: `tool_permissions.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::fs;
use std::path::Path;
use std::sync::Arc;

use common::*;
use knife_agent::tools::{ToolContext, ToolError, ToolSet};
use knife_protocol::*;
use serde_json::{Value, json};

fn project() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    fs::create_dir_all(dir.path().join("src")).unwrap();
    fs::write(
        dir.path().join("src/main.rs"),
        "fn main() {\n    println!(\"hello\");\n}\n",
    )
    .unwrap();
    dir
}

async fn run(root: &Path, tool: &str, args: Value) -> Result<String, ToolError> {
    let ctx = ToolContext::new(root).unwrap();
    ToolSet::standard().execute(tool, args, &ctx).await
}

fn outside_with_secret() -> tempfile::TempDir {
    let outside = tempfile::tempdir().unwrap();
    fs::write(outside.path().join("secret.txt"), "top secret\n").unwrap();
    outside
}

fn assert_outside(result: Result<String, ToolError>, what: &str) {
    match result {
        Err(ToolError::OutsideRoot { .. }) => {}
        other => panic!("{what}: expected OutsideRoot, got {other:?}"),
    }
}

// ------------------------------------------------------------------ write

#[tokio::test]
async fn write_creates_files_and_parent_dirs_and_reports_bytes() {
    let p = project();
    let out = run(
        p.path(),
        "write",
        json!({"path": "a/b/c.txt", "content": "hello\n"}),
    )
    .await
    .unwrap();
    assert_eq!(out, "Wrote 6 bytes to a/b/c.txt (new file)");
    assert_eq!(
        fs::read_to_string(p.path().join("a/b/c.txt")).unwrap(),
        "hello\n"
    );

    let out = run(
        p.path(),
        "write",
        json!({"path": "a/b/c.txt", "content": "é"}),
    )
    .await
    .unwrap();
    assert_eq!(
        out,
        "Wrote 2 bytes to a/b/c.txt (replaced its previous 6 bytes)"
    );
    assert_eq!(fs::read_to_string(p.path().join("a/b/c.txt")).unwrap(), "é");

    // An absolute path inside the root, and `..` that stays inside, are fine.
    let abs = p.path().join("src/abs.txt").display().to_string();
    run(p.path(), "write", json!({"path": abs, "content": "x"}))
        .await
        .unwrap();
    let out = run(
        p.path(),
        "write",
        json!({"path": "new/../src/folded.txt", "content": ""}),
    )
    .await
    .unwrap();
    assert_eq!(out, "Wrote 0 bytes to src/folded.txt (new file)");
    assert!(p.path().join("src/abs.txt").is_file() && p.path().join("src/folded.txt").is_file());
}

#[tokio::test]
async fn write_refuses_directories_and_bad_arguments() {
    let p = project();
    for path in [".", "", "src", "src/"] {
        assert!(
            matches!(
                run(p.path(), "write", json!({"path": path, "content": "x"})).await,
                Err(ToolError::IsDirectory { .. })
            ),
            "{path:?}"
        );
    }
    assert!(matches!(
        run(p.path(), "write", json!({"path": "x.txt"})).await,
        Err(ToolError::InvalidArguments { .. })
    ));
}

#[cfg(unix)]
#[tokio::test]
async fn write_refuses_every_way_out_of_the_root() {
    let p = project();
    let root = p.path();
    let outside = outside_with_secret();
    let out_dir = outside.path();
    std::os::unix::fs::symlink(out_dir, root.join("linkdir")).unwrap();
    std::os::unix::fs::symlink(out_dir.join("secret.txt"), root.join("link.txt")).unwrap();
    std::os::unix::fs::symlink(out_dir.join("planted.txt"), root.join("dangling.txt")).unwrap();

    let attempts = [
        "../escape.txt".to_owned(),
        "src/../../escape.txt".to_owned(),
        "new/../../escape.txt".to_owned(),
        out_dir.join("abs.txt").display().to_string(),
        out_dir.join("secret.txt").display().to_string(),
        "linkdir/new.txt".to_owned(),
        "linkdir/deeper/new.txt".to_owned(),
        "linkdir/secret.txt".to_owned(),
        "link.txt".to_owned(),
        "dangling.txt".to_owned(),
    ];
    for path in &attempts {
        assert_outside(
            run(root, "write", json!({"path": path, "content": "pwned\n"})).await,
            path,
        );
    }
    // Nothing was written or created outside.
    assert_eq!(
        fs::read_to_string(out_dir.join("secret.txt")).unwrap(),
        "top secret\n"
    );
    let mut names: Vec<_> = fs::read_dir(out_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["secret.txt"]);
    assert!(!root.parent().unwrap().join("escape.txt").exists());
    assert!(!root.join("new").exists());

    // A dangling link inside the root is refused too (writing would create its target).
    std::os::unix::fs::symlink("src/missing.rs", root.join("inner-dangling.rs")).unwrap();
    let err = run(
        root,
        "write",
        json!({"path": "inner-dangling.rs", "content": "x"}),
    )
    .await
    .unwrap_err();
    assert!(matches!(err, ToolError::DanglingSymlink { .. }), "{err:?}");
    assert!(err.to_string().contains("write to the target path instead"));

    // A link to a file inside the root is written through; the link stays.
    std::os::unix::fs::symlink(root.join("src/main.rs"), root.join("main-link.rs")).unwrap();
    let out = run(
        root,
        "write",
        json!({"path": "main-link.rs", "content": "fn main() {}\n"}),
    )
    .await
    .unwrap();
    assert!(out.starts_with("Wrote 13 bytes to src/main.rs"), "{out}");
    assert!(
        fs::symlink_metadata(root.join("main-link.rs"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert_eq!(
        fs::read_to_string(root.join("src/main.rs")).unwrap(),
        "fn main() {}\n"
    );
}

// ------------------------------------------------------------------- edit

#[tokio::test]
async fn edit_replaces_a_unique_occurrence_and_keeps_every_other_byte() {
    let p = project();
    // A BOM, tabs, trailing spaces and no final newline survive the edit.
    let original = "\u{feff}first\n\tsecond  \nthird";
    fs::write(p.path().join("f.txt"), original).unwrap();
    let out = run(
        p.path(),
        "edit",
        json!({"path": "f.txt", "old_string": "\tsecond", "new_string": "\t2nd"}),
    )
    .await
    .unwrap();
    assert_eq!(out, "Edited f.txt: replaced 1 occurrence (at line 2)");
    assert_eq!(
        fs::read_to_string(p.path().join("f.txt")).unwrap(),
        "\u{feff}first\n\t2nd  \nthird"
    );
}

#[tokio::test]
async fn edit_says_when_the_string_is_absent_or_ambiguous_and_changes_nothing() {
    let p = project();
    let original = "let a = 1;\nlet b = 1;\nlet c = 1;\n";
    fs::write(p.path().join("f.rs"), original).unwrap();

    let absent = run(
        p.path(),
        "edit",
        json!({"path": "f.rs", "old_string": "let d", "new_string": "let e"}),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(absent, ToolError::StringNotFound { .. }),
        "{absent:?}"
    );
    let msg = absent.to_string();
    assert!(
        msg.contains("not found in f.rs") && msg.contains("copy the exact text"),
        "{msg}"
    );

    let ambiguous = run(
        p.path(),
        "edit",
        json!({"path": "f.rs", "old_string": "= 1;", "new_string": "= 2;"}),
    )
    .await
    .unwrap_err();
    assert_eq!(
        ambiguous,
        ToolError::AmbiguousMatch {
            path: "f.rs".into(),
            count: 3
        }
    );
    let msg = ambiguous.to_string();
    assert!(
        msg.contains("occurs 3 times") && msg.contains("replace_all"),
        "{msg}"
    );
    assert_eq!(fs::read_to_string(p.path().join("f.rs")).unwrap(), original);

    let out = run(
        p.path(),
        "edit",
        json!({"path": "f.rs", "old_string": "= 1;", "new_string": "= 2;", "replace_all": true}),
    )
    .await
    .unwrap();
    assert_eq!(
        out,
        "Edited f.rs: replaced 3 occurrences (the first at line 1)"
    );
    assert_eq!(
        fs::read_to_string(p.path().join("f.rs")).unwrap(),
        "let a = 2;\nlet b = 2;\nlet c = 2;\n"
    );
}

#[tokio::test]
async fn edit_keeps_crlf_line_endings() {
    let p = project();
    fs::write(p.path().join("w.txt"), "one\r\ntwo\r\nthree\r\n").unwrap();
    run(
        p.path(),
        "edit",
        json!({"path": "w.txt", "old_string": "one\ntwo\n", "new_string": "1\n2\n"}),
    )
    .await
    .unwrap();
    assert_eq!(
        fs::read(p.path().join("w.txt")).unwrap(),
        b"1\r\n2\r\nthree\r\n"
    );
}

#[tokio::test]
async fn edit_refuses_missing_files_empty_or_unchanged_strings_and_binary_files() {
    let p = project();
    let err = run(
        p.path(),
        "edit",
        json!({"path": "nope.rs", "old_string": "a", "new_string": "b"}),
    )
    .await
    .unwrap_err();
    assert!(matches!(err, ToolError::NotFound { .. }), "{err:?}");
    assert!(!p.path().join("nope.rs").exists());

    let err = run(
        p.path(),
        "edit",
        json!({"path": "src/main.rs", "old_string": "", "new_string": "b"}),
    )
    .await
    .unwrap_err();
    assert!(err.to_string().contains("use write"), "{err}");
    let err = run(
        p.path(),
        "edit",
        json!({"path": "src/main.rs", "old_string": "main", "new_string": "main"}),
    )
    .await
    .unwrap_err();
    assert!(err.to_string().contains("nothing would change"), "{err}");

    fs::write(p.path().join("blob.bin"), [0xffu8, 0xfe, 0x00, 0x41]).unwrap();
    let err = run(
        p.path(),
        "edit",
        json!({"path": "blob.bin", "old_string": "A", "new_string": "B"}),
    )
    .await
    .unwrap_err();
    assert!(matches!(err, ToolError::NotText { .. }), "{err:?}");
    assert!(matches!(
        run(
            p.path(),
            "edit",
            json!({"path": "src", "old_string": "a", "new_string": "b"})
        )
        .await,
        Err(ToolError::IsDirectory { .. })
    ));
}

#[cfg(unix)]
#[tokio::test]
async fn edit_refuses_files_outside_the_root() {
    let p = project();
    let outside = outside_with_secret();
    std::os::unix::fs::symlink(outside.path().join("secret.txt"), p.path().join("link.txt"))
        .unwrap();
    std::os::unix::fs::symlink(outside.path(), p.path().join("linkdir")).unwrap();
    let abs = outside.path().join("secret.txt").display().to_string();
    let rel = format!(
        "../{}/secret.txt",
        outside.path().file_name().unwrap().to_string_lossy()
    );
    for path in [abs.as_str(), rel.as_str(), "link.txt", "linkdir/secret.txt"] {
        assert_outside(
            run(
                p.path(),
                "edit",
                json!({"path": path, "old_string": "top", "new_string": "no"}),
            )
            .await,
            path,
        );
    }
    assert_eq!(
        fs::read_to_string(outside.path().join("secret.txt")).unwrap(),
        "top secret\n"
    );
}

// -------------------------------------------------- escapes in the agent loop

#[cfg(unix)]
#[tokio::test]
async fn every_file_tool_refuses_escapes_in_the_agent_loop() {
    let outside = outside_with_secret();
    let out_dir = outside.path().to_path_buf();
    let abs_secret = out_dir.join("secret.txt").display().to_string();
    let abs_new = out_dir.join("new.txt").display().to_string();
    let dir_name = out_dir.file_name().unwrap().to_string_lossy().into_owned();
    let up = format!("../{dir_name}/secret.txt");

    // (tool, arguments) of every attempt; each is its own model step.
    let attempts: Vec<(&str, Value)> = vec![
        ("write", json!({"path": "../escape.txt", "content": "x"})),
        ("write", json!({"path": abs_new, "content": "x"})),
        ("write", json!({"path": "linkdir/new.txt", "content": "x"})),
        ("write", json!({"path": "link.txt", "content": "x"})),
        (
            "edit",
            json!({"path": up, "old_string": "top", "new_string": "no"}),
        ),
        (
            "edit",
            json!({"path": abs_secret, "old_string": "top", "new_string": "no"}),
        ),
        (
            "edit",
            json!({"path": "link.txt", "old_string": "top", "new_string": "no"}),
        ),
        ("read", json!({"path": up})),
        ("read", json!({"path": abs_secret})),
        ("read", json!({"path": "linkdir/secret.txt"})),
        ("list", json!({"path": ".."})),
        ("list", json!({"path": out_dir})),
        ("list", json!({"path": "linkdir"})),
        ("glob", json!({"pattern": "*", "path": "../"})),
        ("glob", json!({"pattern": "*", "path": out_dir})),
        ("glob", json!({"pattern": "*", "path": "linkdir"})),
        ("grep", json!({"pattern": "secret", "path": up})),
        ("grep", json!({"pattern": "secret", "path": abs_secret})),
        ("grep", json!({"pattern": "secret", "path": "linkdir"})),
    ];
    let mut scripts: Vec<_> = attempts
        .iter()
        .enumerate()
        .map(|(i, (tool, args))| tool_step(&format!("call_{i}"), tool, &args.to_string()))
        .collect();
    scripts.push(text_step(&["nothing escaped"]));
    let llm = FakeLlm::new(scripts);
    let mut h = open(Arc::clone(&llm), |c| c.max_steps = 30, None).await;
    let root = h._project.path().to_path_buf();
    std::os::unix::fs::symlink(&out_dir, root.join("linkdir")).unwrap();
    std::os::unix::fs::symlink(out_dir.join("secret.txt"), root.join("link.txt")).unwrap();

    h.session
        .start_turn(turn(1, "escape", vec![]))
        .await
        .unwrap();
    let events = collect_turn(&mut h.events).await;
    assert_eq!(outcome(&events).0, TurnOutcome::Completed);
    assert_nothing_pending(&events);

    let tool_items: Vec<_> = final_items(&events)
        .into_iter()
        .filter(|i| matches!(i.kind, TurnItemKind::ToolCall { .. }))
        .collect();
    assert_eq!(tool_items.len(), attempts.len());
    for (item, (tool, args)) in tool_items.iter().zip(&attempts) {
        assert_eq!(item.status, TurnItemStatus::Failed, "{tool} {args}");
        let TurnItemKind::ToolCall { error, .. } = &item.kind else {
            unreachable!()
        };
        let error = error.as_deref().unwrap_or_default();
        assert!(
            error.contains("is outside the project root"),
            "{tool} {args}: {error}"
        );
    }
    // The model read every refusal, and nothing outside changed.
    let last = llm.requests().pop().unwrap();
    let results = tool_results(&last);
    assert_eq!(results.len(), attempts.len());
    assert!(
        results.iter().all(|r| r.starts_with("Error: path ")),
        "{results:?}"
    );
    assert!(!results.iter().any(|r| r.contains("top secret")));
    assert_eq!(
        fs::read_to_string(out_dir.join("secret.txt")).unwrap(),
        "top secret\n"
    );
    assert!(!out_dir.join("new.txt").exists());
    assert!(!root.parent().unwrap().join("escape.txt").exists());
}

/// `write` and `edit` replace a file atomically (temp file in the same directory,
/// then rename): a reader that opened the file before keeps the complete old
/// content instead of a truncated one, the mode is kept, no temp file is left.
#[cfg(unix)]
#[tokio::test]
async fn write_and_edit_replace_files_atomically() {
    use std::io::Read;
    use std::os::unix::fs::PermissionsExt;
    let p = project();
    let file = p.path().join("script.sh");
    fs::write(&file, "echo old\n").unwrap();
    fs::set_permissions(&file, fs::Permissions::from_mode(0o750)).unwrap();

    let mut reader = fs::File::open(&file).unwrap();
    run(
        p.path(),
        "write",
        json!({"path": "script.sh", "content": "echo new\n"}),
    )
    .await
    .unwrap();
    let mut old = String::new();
    reader.read_to_string(&mut old).unwrap();
    assert_eq!(old, "echo old\n", "the open reader saw a rewritten file");
    assert_eq!(fs::read_to_string(&file).unwrap(), "echo new\n");
    assert_eq!(
        fs::metadata(&file).unwrap().permissions().mode() & 0o777,
        0o750
    );

    let mut reader = fs::File::open(&file).unwrap();
    run(
        p.path(),
        "edit",
        json!({"path": "script.sh", "old_string": "new", "new_string": "edited"}),
    )
    .await
    .unwrap();
    let mut before = String::new();
    reader.read_to_string(&mut before).unwrap();
    assert_eq!(before, "echo new\n");
    assert_eq!(fs::read_to_string(&file).unwrap(), "echo edited\n");
    assert_eq!(
        fs::metadata(&file).unwrap().permissions().mode() & 0o777,
        0o750
    );

    let leftovers: Vec<_> = fs::read_dir(p.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains("knife-"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}
