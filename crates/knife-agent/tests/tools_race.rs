//! SEC-03: file tools under a racing link swapper. A thread swaps a link inside the
//! project between a folder inside the root, a folder a `deny` rule covers and a
//! folder outside the root, as fast as it can, while parallel `read`, `write`,
//! `edit` and `grep` calls go through it; not one may return or change a file
//! outside the root or under the denied folder.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fs;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use knife_agent::permissions::{PermissionAction, PermissionRule, PermissionRules};
use knife_agent::tools::{Permission, ToolContext, ToolPolicy, ToolSet};
use serde_json::{Value, json};

/// How long the swapper races the tools.
const RACE: Duration = Duration::from_secs(3);

/// What the agent loop does: check, then run with the checked subject.
async fn call(tools: &ToolSet, ctx: &ToolContext, tool: &str, args: Value) -> Option<String> {
    let (verdict, subject) = tools.permission_for("c", tool, &args, ctx);
    let ctx = match subject {
        Some(s) => ctx.with_checked_subject(s),
        None => ctx.clone(),
    };
    match verdict {
        Permission::Allowed | Permission::Ask(_) => tools.execute(tool, args, &ctx).await.ok(),
        Permission::Denied(_) => None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sec_03_a_racing_link_swapper_never_lets_a_file_tool_escape() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    let outside = dir.path().join("outside");
    for d in [root.join("inside"), root.join("denied"), outside.clone()] {
        fs::create_dir_all(&d).unwrap();
    }
    fs::write(root.join("inside/data.txt"), "IN marker\n").unwrap();
    fs::write(root.join("denied/data.txt"), "DENIED marker\n").unwrap();
    fs::write(outside.join("data.txt"), "OUT marker\n").unwrap();
    let root = fs::canonicalize(&root).unwrap();
    let outside = fs::canonicalize(&outside).unwrap();
    std::os::unix::fs::symlink("inside", root.join("swap")).unwrap();

    let rules = PermissionRules::new(vec![
        PermissionRule {
            tool: "*".into(),
            pattern: "*".into(),
            action: PermissionAction::Allow,
        },
        PermissionRule {
            tool: "*".into(),
            pattern: "denied/**".into(),
            action: PermissionAction::Deny,
        },
    ])
    .unwrap();
    let policy = Arc::new(ToolPolicy {
        permissions: rules,
        ..ToolPolicy::default()
    });
    let ctx = ToolContext::new(&root).unwrap().with_policy(policy);
    let tools = ToolSet::standard();

    // The swapper: replaces `swap` atomically (symlink + rename) in a loop.
    let stop = Arc::new(AtomicBool::new(false));
    let swaps = Arc::new(AtomicUsize::new(0));
    let swapper = {
        let root = root.clone();
        let outside = outside.clone();
        let stop = Arc::clone(&stop);
        let swaps = Arc::clone(&swaps);
        std::thread::spawn(move || {
            let targets = [
                Path::new("inside").to_path_buf(),
                outside.clone(),
                Path::new("denied").to_path_buf(),
                Path::new("../outside").to_path_buf(),
            ];
            let tmp = root.join(".swap.tmp");
            let mut i = 0usize;
            while !stop.load(Ordering::Relaxed) {
                let _ = fs::remove_file(&tmp);
                std::os::unix::fs::symlink(&targets[i % targets.len()], &tmp).unwrap();
                fs::rename(&tmp, root.join("swap")).unwrap();
                i += 1;
                swaps.fetch_add(1, Ordering::Relaxed);
            }
        })
    };

    let escapes = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicUsize::new(0));
    let deadline = tokio::time::Instant::now() + RACE;
    let mut workers = Vec::new();
    for w in 0..8usize {
        let (tools, ctx) = (tools.clone(), ctx.clone());
        let (escapes, done) = (Arc::clone(&escapes), Arc::clone(&done));
        workers.push(tokio::spawn(async move {
            let mut n = 0usize;
            while tokio::time::Instant::now() < deadline {
                let out = match (w + n) % 4 {
                    0 => call(&tools, &ctx, "read", json!({"path": "swap/data.txt"})).await,
                    1 => call(&tools, &ctx, "grep", json!({"pattern": "marker", "path": "swap"})).await,
                    2 => {
                        call(
                            &tools,
                            &ctx,
                            "write",
                            json!({"path": format!("swap/w{w}.txt"), "content": "written\n"}),
                        )
                        .await
                    }
                    _ => {
                        call(
                            &tools,
                            &ctx,
                            "edit",
                            json!({"path": "swap/data.txt", "old_string": "marker", "new_string": "marker"}),
                        )
                        .await
                    }
                };
                if out.is_some_and(|o| o.contains("OUT") || o.contains("DENIED")) {
                    escapes.fetch_add(1, Ordering::Relaxed);
                }
                done.fetch_add(1, Ordering::Relaxed);
                n += 1;
            }
        }));
    }
    for w in workers {
        w.await.unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    swapper.join().unwrap();

    let calls = done.load(Ordering::Relaxed);
    eprintln!(
        "SEC-03 race: {calls} tool calls against {} link swaps in {RACE:?} (noisy shared machine)",
        swaps.load(Ordering::Relaxed)
    );
    assert!(calls > 100, "the race ran: {calls} calls");
    assert_eq!(escapes.load(Ordering::Relaxed), 0, "reads that escaped");
    // Nothing written outside the root or into the denied folder.
    let written_outside: Vec<_> = fs::read_dir(&outside)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .filter(|n| n != "data.txt")
        .collect();
    assert!(written_outside.is_empty(), "{written_outside:?}");
    let written_denied: Vec<_> = fs::read_dir(root.join("denied"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .filter(|n| n != "data.txt")
        .collect();
    assert!(written_denied.is_empty(), "{written_denied:?}");
    assert_eq!(
        fs::read_to_string(outside.join("data.txt")).unwrap(),
        "OUT marker\n"
    );
    // The inside folder got the writes (the tools still work through the link).
    assert!(fs::read_dir(root.join("inside")).unwrap().count() > 1);
}
