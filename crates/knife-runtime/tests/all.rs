// knife-runtime's integration tests as one binary: each file beside this one is a module
// (one link instead of 24; docs/2026-12-01-test-binaries.md). `disk_full` stays alone: it
// installs a process-global metrics recorder.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod support;

mod any_node;
mod commands;
mod exec;
mod execution;
mod execution_native;
mod lifecycle;
mod mcp_access;
mod mcp_manager;
mod mgr_idle;
mod mgr_metrics;
mod mgr_open;
mod mgr_reaper;
mod mgr_release;
mod mgr_requests;
mod mgr_roster;
mod mgr_shared;
mod mgr_watchdog;
mod process_groups;
mod reaper;
mod reconcile_claims;
mod recovery;
mod turn_budget;
mod turn_queue;
mod workspaces;

/// Every test file in this folder is compiled: a file missing from the list above (or
/// from `[[test]]` in Cargo.toml, for the ones that stay alone) would silently not run.
#[test]
fn every_test_file_is_a_module_of_this_binary() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests");
    let listed = include_str!("all.rs");
    let alone = include_str!("../Cargo.toml");
    for entry in std::fs::read_dir(&dir).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        let Some(stem) = name.strip_suffix(".rs") else {
            continue;
        };
        if stem == "all" {
            continue;
        }
        assert!(
            listed.contains(&format!("\nmod {stem};\n"))
                || alone.contains(&format!("path = \"tests/{name}\"")),
            "tests/{name} is not compiled: add `mod {stem};` to tests/all.rs"
        );
    }
}
