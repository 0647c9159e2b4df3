// SPEC UX-01: a test whose prerequisite is missing reports as ignored (with its reason),
// never as ok, and the README's test command is CI's. (Each real prerequisite's gate:
// crates/knife/tests/prereqs.rs.)
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::Command;

/// Probe: its gate is never open (build.rs), so it is ignored unless `--include-ignored`,
/// and then it fails like a real test whose prerequisite is missing.
#[test]
#[cfg_attr(
    not(knife_has_ux01_absent_probe),
    ignore = "needs a prerequisite that never exists (probe for ux_01)"
)]
fn probe_absent() {
    panic!("the absent probe ran: its prerequisite does not exist");
}

/// Runs this test binary on one probe; returns (its `test … ...` line, whole output).
fn run_probe(name: &str, extra: &[&str]) -> (String, String) {
    let out = Command::new(std::env::current_exe().unwrap())
        .args([name, "--exact", "--test-threads=1"])
        .args(extra)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let line = text
        .lines()
        .find(|l| l.starts_with(&format!("test {name} ...")))
        .unwrap_or_else(|| panic!("no result line for {name}:\n{text}"))
        .to_owned();
    (line, text)
}

#[test]
fn ux_01_a_missing_prerequisite_is_ignored_with_its_reason_never_ok() {
    let (line, text) = run_probe("probe_absent", &[]);
    assert_eq!(
        line,
        "test probe_absent ... ignored, needs a prerequisite that never exists (probe for ux_01)",
        "{text}"
    );
    assert!(text.contains("0 passed; 0 failed; 1 ignored"), "{text}");
    // Forced to run, it fails: the body does not pretend.
    let (line, text) = run_probe("probe_absent", &["--include-ignored"]);
    assert_eq!(line, "test probe_absent ... FAILED", "{text}");
}

fn workspace_file(rel: &str) -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    std::fs::read_to_string(root.join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// The last command line of a shell script (comments, blanks and `echo` lines left out).
fn last_command(script: &str) -> String {
    script
        .lines()
        .map(str::trim)
        .rfind(|l| !l.is_empty() && !l.starts_with('#') && !l.starts_with("echo "))
        .unwrap_or_default()
        .to_owned()
}

#[test]
fn ux_01_readme_test_command_is_what_ci_runs_last() {
    let readme = workspace_file("README.md");
    let mut in_block = false;
    let mut commands = Vec::new();
    for line in readme.lines() {
        if line.starts_with("```") {
            in_block = !in_block;
        } else if in_block && line.starts_with("scripts/test") {
            commands.push(line.split('#').next().unwrap().trim().to_owned());
        }
    }
    assert!(
        commands.iter().any(|c| c == "scripts/test"),
        "README's code blocks show no `scripts/test` line: {commands:?}"
    );
    assert_eq!(last_command(&workspace_file(".ci/run")), "scripts/test");
    assert_eq!(
        last_command(&workspace_file("scripts/test")),
        "exec cargo test --workspace --locked \"$@\""
    );
}

#[test]
fn ux_01_no_test_skips_through_an_env_var_and_passes() {
    // The old mechanism: a skip variable (KNIFE_SKIP plus a name) made a test return
    // early and count as passed.
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut offenders = Vec::new();
    let mut stack = vec![root];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() && path.file_name().is_some_and(|n| n != "target") {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path).unwrap();
                if text.contains(concat!("KNIFE_SKIP", "_")) {
                    offenders.push(path.display().to_string());
                }
            }
        }
    }
    assert!(
        offenders.is_empty(),
        "env-var skips remain in {offenders:?}"
    );
}
