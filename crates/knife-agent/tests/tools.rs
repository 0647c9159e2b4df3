//! Tests of the read-only tools on temp-dir projects: behaviour, confinement to
//! the project root (`..`, absolute paths, symlinks), `.gitignore` and output caps.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fs;
use std::path::Path;

use knife_agent::tools::{ToolContext, ToolError, ToolSet};
use serde_json::{Value, json};

fn project() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    fs::create_dir_all(root.join("src/nested")).unwrap();
    fs::write(root.join("Cargo.toml"), "[package]\nname = \"demo\"\n").unwrap();
    fs::write(
        root.join("src/main.rs"),
        "fn main() {\n    println!(\"hello\");\n}\n",
    )
    .unwrap();
    fs::write(
        root.join("src/lib.rs"),
        "pub fn hello() -> &'static str {\n    \"Hello\"\n}\n",
    )
    .unwrap();
    fs::write(root.join("src/nested/deep.rs"), "// deep hello\n").unwrap();
    fs::write(root.join(".gitignore"), "target/\n*.log\n").unwrap();
    fs::create_dir_all(root.join("target/debug")).unwrap();
    fs::write(
        root.join("target/debug/out.rs"),
        "hello from build output\n",
    )
    .unwrap();
    fs::write(root.join("debug.log"), "hello log\n").unwrap();
    dir
}

async fn run(root: &Path, tool: &str, args: Value) -> Result<String, ToolError> {
    let ctx = ToolContext::new(root).unwrap();
    ToolSet::read_only().execute(tool, args, &ctx).await
}

#[tokio::test]
async fn specs_name_the_four_tools_with_object_schemas() {
    let specs = ToolSet::read_only().specs();
    let names: Vec<_> = specs.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["glob", "grep", "list", "read"]);
    for spec in specs {
        assert_eq!(spec.parameters["type"], "object", "{}", spec.name);
        assert!(!spec.description.is_empty());
    }
}

#[tokio::test]
async fn read_returns_numbered_lines() {
    let p = project();
    let out = run(p.path(), "read", json!({"path": "src/main.rs"}))
        .await
        .unwrap();
    assert_eq!(
        out,
        "     1\tfn main() {\n     2\t    println!(\"hello\");\n     3\t}\n"
    );
}

#[tokio::test]
async fn read_honours_offset_and_limit_and_says_what_it_left_out() {
    let p = project();
    let text: String = (1..=10).map(|i| format!("line {i}\n")).collect();
    fs::write(p.path().join("ten.txt"), text).unwrap();
    let out = run(
        p.path(),
        "read",
        json!({"path": "ten.txt", "offset": 3, "limit": 2}),
    )
    .await
    .unwrap();
    assert!(out.starts_with("     3\tline 3\n     4\tline 4\n"), "{out}");
    assert!(out.contains("truncated: showed lines 3-4 of 10"), "{out}");
    assert!(out.contains("offset=5"), "{out}");
    let past = run(p.path(), "read", json!({"path": "ten.txt", "offset": 50}))
        .await
        .unwrap();
    assert!(past.contains("past the end"), "{past}");
}

#[tokio::test]
async fn read_caps_lines_and_bytes() {
    let p = project();
    let many: String = (1..=3000).map(|i| format!("{i}\n")).collect();
    fs::write(p.path().join("many.txt"), many).unwrap();
    let out = run(p.path(), "read", json!({"path": "many.txt"}))
        .await
        .unwrap();
    assert!(out.contains("  2000\t2000\n"));
    assert!(!out.contains("  2001\t"));
    assert!(
        out.contains("showed lines 1-2000 of 3000"),
        "{}",
        &out[out.len() - 200..]
    );

    let wide: String = (0..1000)
        .map(|_| format!("{}\n", "x".repeat(200)))
        .collect();
    fs::write(p.path().join("wide.txt"), wide).unwrap();
    let out = run(p.path(), "read", json!({"path": "wide.txt"}))
        .await
        .unwrap();
    assert!(out.len() <= 50 * 1024 + 300, "output {} bytes", out.len());
    assert!(
        out.contains("because the output reached 50 KiB"),
        "{}",
        &out[out.len() - 200..]
    );
}

#[tokio::test]
async fn read_refuses_directories_binaries_and_missing_files() {
    let p = project();
    fs::write(p.path().join("blob.bin"), [0u8, 1, 2, 3]).unwrap();
    assert!(matches!(
        run(p.path(), "read", json!({"path": "src"})).await,
        Err(ToolError::IsDirectory { .. })
    ));
    assert!(matches!(
        run(p.path(), "read", json!({"path": "blob.bin"})).await,
        Err(ToolError::Binary { .. })
    ));
    let missing = run(p.path(), "read", json!({"path": "nope.rs"}))
        .await
        .unwrap_err();
    assert!(matches!(missing, ToolError::NotFound { .. }));
    assert!(missing.to_string().contains("nope.rs"));
    assert!(matches!(
        run(p.path(), "read", json!({"offset": 1})).await,
        Err(ToolError::InvalidArguments { .. })
    ));
}

#[tokio::test]
async fn parent_dir_escape_is_a_tool_error() {
    let p = project();
    let root = fs::canonicalize(p.path()).unwrap();
    let err = run(p.path(), "read", json!({"path": "../secret.txt"}))
        .await
        .unwrap_err();
    assert!(matches!(err, ToolError::OutsideRoot { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(
        msg.contains("path ../secret.txt is outside the project root")
            && msg.contains(&root.display().to_string())
            && msg.contains("use a path inside the project"),
        "{msg}"
    );
    // Existing directories outside the root, via `..` inside a longer path.
    let err = run(p.path(), "list", json!({"path": "src/../.."}))
        .await
        .unwrap_err();
    assert!(matches!(err, ToolError::OutsideRoot { .. }), "{err:?}");
}

#[tokio::test]
async fn absolute_paths_outside_are_refused_inside_accepted() {
    let p = project();
    let outside = tempfile::tempdir().unwrap();
    fs::write(outside.path().join("secret.txt"), "top secret\n").unwrap();
    let abs = outside.path().join("secret.txt").display().to_string();
    for tool in ["read", "list", "glob", "grep"] {
        let args = match tool {
            "read" | "list" => json!({"path": abs}),
            "glob" => json!({"pattern": "*", "path": outside.path()}),
            _ => json!({"pattern": "secret", "path": abs}),
        };
        let err = run(p.path(), tool, args).await.unwrap_err();
        assert!(
            matches!(err, ToolError::OutsideRoot { .. }),
            "{tool}: {err:?}"
        );
    }
    assert!(matches!(
        run(p.path(), "read", json!({"path": "/etc/passwd"})).await,
        Err(ToolError::OutsideRoot { .. })
    ));
    let inside = p.path().join("src/main.rs").display().to_string();
    let out = run(p.path(), "read", json!({"path": inside}))
        .await
        .unwrap();
    assert!(out.contains("fn main"));
}

#[cfg(unix)]
#[tokio::test]
async fn symlink_pointing_outside_is_refused_and_never_walked() {
    let p = project();
    let outside = tempfile::tempdir().unwrap();
    fs::write(outside.path().join("secret.txt"), "top secret hello\n").unwrap();
    std::os::unix::fs::symlink(outside.path().join("secret.txt"), p.path().join("link.txt"))
        .unwrap();
    std::os::unix::fs::symlink(outside.path(), p.path().join("linkdir")).unwrap();

    let err = run(p.path(), "read", json!({"path": "link.txt"}))
        .await
        .unwrap_err();
    assert!(matches!(err, ToolError::OutsideRoot { .. }), "{err:?}");
    let err = run(p.path(), "read", json!({"path": "linkdir/secret.txt"}))
        .await
        .unwrap_err();
    assert!(matches!(err, ToolError::OutsideRoot { .. }), "{err:?}");
    let err = run(p.path(), "list", json!({"path": "linkdir"}))
        .await
        .unwrap_err();
    assert!(matches!(err, ToolError::OutsideRoot { .. }), "{err:?}");

    // Walks do not follow links out of the root.
    let grep = run(p.path(), "grep", json!({"pattern": "top secret"}))
        .await
        .unwrap();
    assert!(grep.starts_with("No matches"), "{grep}");
    let glob = run(p.path(), "glob", json!({"pattern": "**/secret.txt"}))
        .await
        .unwrap();
    assert!(glob.starts_with("No files match"), "{glob}");

    // A symlink that stays inside the root is fine.
    std::os::unix::fs::symlink(p.path().join("src/lib.rs"), p.path().join("inner.rs")).unwrap();
    let out = run(p.path(), "read", json!({"path": "inner.rs"}))
        .await
        .unwrap();
    assert!(out.contains("pub fn hello"));
}

#[tokio::test]
async fn list_respects_gitignore_and_depth() {
    let p = project();
    let out = run(p.path(), "list", json!({})).await.unwrap();
    let lines: Vec<_> = out.lines().collect();
    assert_eq!(
        lines,
        [
            ".gitignore",
            "Cargo.toml",
            "src/",
            "src/lib.rs",
            "src/main.rs",
            "src/nested/"
        ],
        "{out}"
    );
    let deep = run(p.path(), "list", json!({"path": "src", "depth": 3}))
        .await
        .unwrap();
    assert!(deep.lines().any(|l| l == "src/nested/deep.rs"), "{deep}");
    assert!(matches!(
        run(p.path(), "list", json!({"path": "Cargo.toml"})).await,
        Err(ToolError::NotADirectory { .. })
    ));
}

#[tokio::test]
async fn list_caps_entries() {
    let p = project();
    fs::create_dir(p.path().join("big")).unwrap();
    for i in 0..1100 {
        fs::write(p.path().join(format!("big/f{i:04}.txt")), "").unwrap();
    }
    let out = run(p.path(), "list", json!({"path": "big"})).await.unwrap();
    assert_eq!(out.lines().filter(|l| l.starts_with("big/")).count(), 1000);
    assert!(out.contains("truncated at 1000 entries"));
}

#[tokio::test]
async fn glob_matches_sorted_and_skips_ignored() {
    let p = project();
    let out = run(p.path(), "glob", json!({"pattern": "**/*.rs"}))
        .await
        .unwrap();
    assert_eq!(
        out.lines().collect::<Vec<_>>(),
        ["src/lib.rs", "src/main.rs", "src/nested/deep.rs"]
    );
    let top = run(p.path(), "glob", json!({"pattern": "*.rs", "path": "src"}))
        .await
        .unwrap();
    assert_eq!(
        top.lines().collect::<Vec<_>>(),
        ["src/lib.rs", "src/main.rs"]
    );
    let none = run(p.path(), "glob", json!({"pattern": "*.log"}))
        .await
        .unwrap();
    assert!(none.starts_with("No files match"), "{none}");
    assert!(matches!(
        run(p.path(), "glob", json!({"pattern": "a[b"})).await,
        Err(ToolError::InvalidPattern { .. })
    ));
}

#[tokio::test]
async fn glob_caps_matches() {
    let p = project();
    fs::create_dir(p.path().join("big")).unwrap();
    for i in 0..1050 {
        fs::write(p.path().join(format!("big/f{i:04}.txt")), "").unwrap();
    }
    let out = run(p.path(), "glob", json!({"pattern": "big/*.txt"}))
        .await
        .unwrap();
    assert_eq!(out.lines().filter(|l| l.starts_with("big/")).count(), 1000);
    assert!(out.contains("truncated at 1000 paths"));
}

#[tokio::test]
async fn grep_finds_lines_and_skips_ignored_files() {
    let p = project();
    let out = run(p.path(), "grep", json!({"pattern": "hello"}))
        .await
        .unwrap();
    assert_eq!(
        out.lines().collect::<Vec<_>>(),
        [
            "src/lib.rs:1:pub fn hello() -> &'static str {",
            "src/main.rs:2:    println!(\"hello\");",
            "src/nested/deep.rs:1:// deep hello"
        ],
        "{out}"
    );
    let ci = run(
        p.path(),
        "grep",
        json!({"pattern": "hello", "case_insensitive": true, "include": "lib.rs"}),
    )
    .await
    .unwrap();
    assert_eq!(
        ci,
        "src/lib.rs:1:pub fn hello() -> &'static str {\nsrc/lib.rs:2:    \"Hello\""
    );
    let one = run(
        p.path(),
        "grep",
        json!({"pattern": "fn", "path": "src/main.rs"}),
    )
    .await
    .unwrap();
    assert_eq!(one, "src/main.rs:1:fn main() {");
    let none = run(p.path(), "grep", json!({"pattern": "zzz"}))
        .await
        .unwrap();
    assert!(none.starts_with("No matches"));
    assert!(matches!(
        run(p.path(), "grep", json!({"pattern": "("})).await,
        Err(ToolError::InvalidPattern { .. })
    ));
}

#[tokio::test]
async fn grep_caps_matches() {
    let p = project();
    let text: String = (0..800).map(|i| format!("needle {i}\n")).collect();
    fs::write(p.path().join("hay.txt"), text).unwrap();
    let out = run(p.path(), "grep", json!({"pattern": "needle"}))
        .await
        .unwrap();
    assert_eq!(
        out.lines().filter(|l| l.starts_with("hay.txt:")).count(),
        500
    );
    assert!(out.contains("truncated after 500 matching lines"));
}

#[tokio::test]
async fn unknown_tool_lists_the_available_ones() {
    let p = project();
    let err = run(p.path(), "write", json!({})).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "unknown tool write; available tools: glob, grep, list, read"
    );
}

/// Runs a tool on `root`; if it has not answered within 10 s (blocked opening
/// `fifo`), opens the FIFO for writing so the blocked reader returns, then fails.
#[cfg(unix)]
async fn run_unblocking(
    root: &Path,
    tool: &str,
    args: Value,
    fifo: &Path,
) -> Result<String, ToolError> {
    let call = run(root, tool, args);
    match tokio::time::timeout(std::time::Duration::from_secs(10), call).await {
        Ok(result) => result,
        Err(_) => {
            drop(fs::OpenOptions::new().write(true).open(fifo));
            panic!("{tool} blocked on the FIFO");
        }
    }
}

#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_and_grep_refuse_a_fifo_instead_of_blocking() {
    let p = project();
    let fifo = p.path().join("pipe");
    let status = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(status.success());
    let err = run_unblocking(p.path(), "read", json!({"path": "pipe"}), &fifo)
        .await
        .unwrap_err();
    assert!(matches!(err, ToolError::NotAFile { .. }), "{err:?}");
    assert!(
        err.to_string().contains("pipe is not a regular file"),
        "{err}"
    );
    let err = run_unblocking(
        p.path(),
        "grep",
        json!({"pattern": "x", "path": "pipe"}),
        &fifo,
    )
    .await
    .unwrap_err();
    assert!(matches!(err, ToolError::NotAFile { .. }), "{err:?}");
    // A search of the directory skips the FIFO and finds the rest.
    let out = run_unblocking(p.path(), "grep", json!({"pattern": "fn main"}), &fifo)
        .await
        .unwrap();
    assert_eq!(out, "src/main.rs:1:fn main() {");
}

#[tokio::test]
async fn read_of_a_huge_single_line_file_returns_a_truncated_line_quickly() {
    let p = project();
    fs::write(p.path().join("one.txt"), "a".repeat(5_000_000)).unwrap();
    let started = std::time::Instant::now();
    let out = run(p.path(), "read", json!({"path": "one.txt", "limit": 1}))
        .await
        .unwrap();
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
    assert!(out.starts_with("     1\taaaa"), "{}", &out[..40]);
    assert!(
        out.contains("… (line truncated)"),
        "{}",
        &out[out.len() - 200..]
    );
    assert!(out.len() < 3000, "{} bytes", out.len());
}

#[tokio::test]
async fn read_stops_counting_lines_after_its_scan_budget() {
    let p = project();
    let line = format!("{}\n", "x".repeat(99));
    fs::write(p.path().join("big.txt"), line.repeat(200_000)).unwrap(); // 20 MB
    let out = run(p.path(), "read", json!({"path": "big.txt", "limit": 2}))
        .await
        .unwrap();
    assert!(out.starts_with("     1\txxx"), "{}", &out[..40]);
    assert!(out.contains("showed lines 1-2; more lines follow"), "{out}");
    assert!(out.contains("offset=3"), "{out}");
    // A file within the budget still gets its total.
    fs::write(p.path().join("small.txt"), line.repeat(1000)).unwrap();
    let out = run(p.path(), "read", json!({"path": "small.txt", "limit": 2}))
        .await
        .unwrap();
    assert!(out.contains("showed lines 1-2 of 1000"), "{out}");
}

#[tokio::test]
async fn grep_skips_a_file_whose_line_exceeds_the_heap_limit_and_says_so() {
    let p = project();
    let huge = format!("needle {}", "a".repeat(6 * 1024 * 1024));
    fs::write(p.path().join("huge.txt"), huge).unwrap();
    fs::write(p.path().join("small.txt"), "a needle\n").unwrap();
    let out = run(p.path(), "grep", json!({"pattern": "needle"}))
        .await
        .unwrap();
    assert!(
        out.starts_with("small.txt:1:a needle"),
        "{}",
        &out[..out.len().min(300)]
    );
    assert!(
        !out.contains("huge.txt:1:"),
        "{}",
        &out[..out.len().min(300)]
    );
    assert!(out.contains("skipped 1 file"), "{out}");
    assert!(out.contains("huge.txt"), "{out}");
}

#[cfg(unix)]
#[tokio::test]
async fn missing_and_existing_files_behind_an_outside_symlink_give_the_same_error() {
    let p = project();
    let outside = tempfile::tempdir().unwrap();
    fs::write(outside.path().join("shadow"), "secret\n").unwrap();
    std::os::unix::fs::symlink(outside.path(), p.path().join("link")).unwrap();
    let root = fs::canonicalize(p.path()).unwrap();
    for tool in ["read", "list", "grep"] {
        for path in [
            "link/shadow",
            "link/nope",
            "link/nope/deeper",
            "link/../link/nope",
        ] {
            let args = match tool {
                "grep" => json!({"pattern": "x", "path": path}),
                _ => json!({"path": path}),
            };
            let err = run(p.path(), tool, args).await.unwrap_err();
            assert_eq!(
                err,
                ToolError::OutsideRoot {
                    path: path.into(),
                    root: root.display().to_string()
                },
                "{tool} {path}"
            );
        }
    }
    // A missing file inside the root is still "not found".
    assert!(matches!(
        run(p.path(), "read", json!({"path": "src/nope.rs"})).await,
        Err(ToolError::NotFound { .. })
    ));
}

/// A path deny rule also covers directory-level `grep`, `glob` and `list`: each
/// visited entry is checked like a call naming it (a link into the denied folder
/// included), withheld, and the output says how many were.
#[tokio::test]
async fn walkers_withhold_entries_denied_by_path_rules() {
    use knife_agent::ToolPolicy;
    use knife_agent::permissions::{PermissionAction, PermissionRule, PermissionRules};
    use std::sync::Arc;

    let dir = project();
    let root = dir.path();
    fs::create_dir_all(root.join("secrets")).unwrap();
    fs::write(root.join("secrets/key"), "KEY=hunter2\n").unwrap();
    fs::write(root.join("notes.txt"), "KEY=public\n").unwrap();
    #[cfg(unix)]
    std::os::unix::fs::symlink(root.join("secrets/key"), root.join("src/key-link")).unwrap();
    let policy = Arc::new(ToolPolicy {
        permissions: PermissionRules::new(vec![PermissionRule::new(
            "*",
            "secrets/*",
            PermissionAction::Deny,
        )])
        .unwrap(),
        ..ToolPolicy::default()
    });
    let ctx = ToolContext::new(root).unwrap().with_policy(policy);
    let tools = ToolSet::read_only();
    let run = |tool: &'static str, args: Value| tools.execute(tool, args, &ctx);

    let grep = run("grep", json!({"pattern": "KEY", "path": "."}))
        .await
        .unwrap();
    assert!(grep.contains("notes.txt:1:KEY=public"), "{grep}");
    assert!(!grep.contains("hunter2"), "{grep}");
    assert!(grep.contains("withheld by permission rules"), "{grep}");

    let glob = run("glob", json!({"pattern": "**/*"})).await.unwrap();
    assert!(glob.contains("notes.txt"), "{glob}");
    assert!(!glob.contains("secrets/key"), "{glob}");
    assert!(glob.contains("withheld by permission rules"), "{glob}");

    let list = run("list", json!({"path": ".", "depth": 3})).await.unwrap();
    assert!(list.contains("secrets/"), "{list}");
    assert!(!list.contains("secrets/key"), "{list}");
    #[cfg(unix)]
    assert!(!list.contains("key-link"), "{list}");
    assert!(list.contains("withheld by permission rules"), "{list}");

    // Without rules nothing is withheld.
    let plain = ToolSet::read_only()
        .execute(
            "grep",
            json!({"pattern": "KEY"}),
            &ToolContext::new(root).unwrap(),
        )
        .await
        .unwrap();
    assert!(
        plain.contains("hunter2") && !plain.contains("withheld"),
        "{plain}"
    );
}
