//! Supervised child processes (issue 7 item 1): real `sh` children, short real timeouts.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use knife_adapters::process::{ChildProcess, ProcessSpec};
use knife_process::group_alive;
use knife_runtime::SystemClock;
use knife_runtime::process_groups::ProcessGroups;
use knife_runtime::scope::SessionScope;

fn sh(script: &str) -> ProcessSpec {
    let mut spec = ProcessSpec::new("sh", std::env::temp_dir(), "test: sh");
    spec.args = vec!["-c".into(), script.into()];
    spec.eof_grace = Duration::from_millis(300);
    spec.term_grace = Duration::from_millis(300);
    spec
}

async fn gone_within(pgid: u32, limit: Duration) -> bool {
    let deadline = tokio::time::Instant::now() + limit;
    while tokio::time::Instant::now() < deadline {
        if !group_alive(pgid) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

#[tokio::test]
async fn lines_round_trip_and_close_on_stdin_eof() {
    let mut spec = sh("exec cat");
    spec.eof_grace = Duration::from_secs(5);
    let (child, mut lines) = ChildProcess::spawn(spec, None).await.unwrap();
    child.send_line(r#"{"a":1}"#).unwrap();
    child.send_line("second").unwrap();
    assert_eq!(lines.next().await.as_deref(), Some(r#"{"a":1}"#));
    assert_eq!(lines.next().await.as_deref(), Some("second"));
    let started = tokio::time::Instant::now();
    let exit = child.close().await;
    // `cat` ends at EOF: no signal needed.
    assert!(
        started.elapsed() < Duration::from_millis(300),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(exit.status.and_then(|s| s.code()), Some(0));
    assert!(exit.closed_by_knife);
    assert_eq!(lines.next().await, None);
    assert!(!group_alive(child.pgid()));
    assert!(child.send_line("late").is_err());
    // Idempotent.
    assert_eq!(child.close().await, exit);
}

#[tokio::test]
async fn oversized_and_non_utf8_lines_are_counted_and_skipped() {
    let mut spec = sh(
        "head -c 5000 /dev/zero | tr '\\000' a; echo; printf 'x\\377y\\n'; echo; echo '   '; \
         head -c 3000 /dev/zero | tr '\\000' b; echo; echo ok; printf 'tail-without-newline'",
    );
    spec.max_line_bytes = 1024;
    let (child, mut lines) = ChildProcess::spawn(spec, None).await.unwrap();
    assert_eq!(lines.next().await.as_deref(), Some("ok"));
    assert_eq!(lines.next().await.as_deref(), Some("tail-without-newline"));
    assert_eq!(lines.next().await, None);
    let stats = child.stats();
    assert_eq!(stats.oversized(), 2);
    assert_eq!(stats.malformed(), 1);
    let exit = child.wait_exit().await;
    assert_eq!(exit.status.and_then(|s| s.code()), Some(0));
}

#[tokio::test]
async fn a_line_of_exactly_the_cap_passes() {
    let mut spec = sh(
        "head -c 1024 /dev/zero | tr '\\000' c; echo; head -c 1025 /dev/zero | tr '\\000' d; echo; echo end",
    );
    spec.max_line_bytes = 1024;
    let (child, mut lines) = ChildProcess::spawn(spec, None).await.unwrap();
    assert_eq!(lines.next().await.map(|l| l.len()), Some(1024));
    assert_eq!(lines.next().await.as_deref(), Some("end"));
    assert_eq!(child.stats().oversized(), 1);
}

#[tokio::test]
async fn unexpected_exit_reports_status_and_stderr_tail() {
    let (child, mut lines) = ChildProcess::spawn(sh("echo first >&2; echo boom >&2; exit 3"), None)
        .await
        .unwrap();
    assert_eq!(lines.next().await, None);
    let exit = child.wait_exit().await;
    assert!(!exit.closed_by_knife);
    assert_eq!(exit.status.and_then(|s| s.code()), Some(3));
    let text = exit.describe("codex");
    assert!(
        text.starts_with("codex exited unexpectedly (exit status 3)"),
        "{text}"
    );
    assert!(text.contains("boom"), "{text}");
}

#[tokio::test]
async fn close_escalates_to_sigterm() {
    // `sleep` ignores stdin EOF but dies of SIGTERM.
    let (child, _lines) = ChildProcess::spawn(sh("exec sleep 30"), None)
        .await
        .unwrap();
    let started = tokio::time::Instant::now();
    let exit = child.close().await;
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(exit.status_text(), "killed by signal 15 (SIGTERM)");
    assert!(!group_alive(child.pgid()));
}

#[tokio::test]
async fn close_escalates_to_sigkill_when_sigterm_is_ignored() {
    let (child, mut lines) = ChildProcess::spawn(
        sh("trap '' TERM; echo ready; while :; do sleep 0.05; done"),
        None,
    )
    .await
    .unwrap();
    assert_eq!(lines.next().await.as_deref(), Some("ready"));
    let started = tokio::time::Instant::now();
    let exit = child.close().await;
    assert!(started.elapsed() >= Duration::from_millis(600));
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(exit.status_text(), "killed by signal 9 (SIGKILL)");
    assert!(gone_within(child.pgid(), Duration::from_secs(1)).await);
}

#[tokio::test]
async fn members_left_behind_by_an_exiting_leader_are_killed() {
    let (child, mut lines) = ChildProcess::spawn(sh("sleep 30 & echo started; exit 0"), None)
        .await
        .unwrap();
    assert_eq!(lines.next().await.as_deref(), Some("started"));
    let exit = child.wait_exit().await;
    assert_eq!(exit.status.and_then(|s| s.code()), Some(0));
    assert!(
        !group_alive(child.pgid()),
        "the background sleep survived its leader"
    );
}

#[tokio::test]
async fn dropping_every_handle_stops_the_process() {
    let (child, lines) = ChildProcess::spawn(sh("exec cat"), None).await.unwrap();
    let pgid = child.pgid();
    assert!(group_alive(pgid));
    drop(child);
    drop(lines);
    assert!(gone_within(pgid, Duration::from_secs(2)).await);
}

#[tokio::test]
async fn closing_the_session_scope_stops_the_process() {
    let scope = SessionScope::new();
    let (child, _lines) = ChildProcess::spawn(sh("exec sleep 30"), None)
        .await
        .unwrap();
    child.register_on(&scope);
    assert!(scope.close_within(Duration::from_secs(3)).await);
    let exit = child.exit_info().expect("closed by the scope");
    assert!(exit.closed_by_knife);
    assert!(!group_alive(child.pgid()));
}

#[tokio::test]
async fn a_spawn_failure_names_the_program() {
    let spec = ProcessSpec::new("/nonexistent/codex", std::env::temp_dir(), "codex");
    let err = ChildProcess::spawn(spec, None)
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("/nonexistent/codex"), "{err}");
}

#[tokio::test]
async fn the_process_group_is_recorded_while_it_runs() {
    let dir = tempfile::tempdir().unwrap();
    let store = knife_store_sqlite::open(dir.path().join("knife.db"))
        .await
        .unwrap();
    let groups = ProcessGroups::new(store.clone(), Arc::new(SystemClock));
    let (child, _lines) = ChildProcess::spawn(sh("exec cat"), Some(groups))
        .await
        .unwrap();
    let rows = store.list_process_groups().await.unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].pgid, i32::try_from(child.pgid()).unwrap());
    assert_eq!(rows[0].label, "test: sh");
    child.close().await;
    assert!(store.list_process_groups().await.unwrap().is_empty());
}

#[tokio::test]
async fn variables_matching_a_removed_prefix_are_not_passed_to_the_child() {
    // HOME stands in for KNIFE_* (tests run in parallel: no process-wide set_var).
    let mut spec = sh("echo \"[$HOME][$EXTRA]\"");
    spec.env.push(("EXTRA".into(), "yes".into()));
    spec.env_remove_prefixes = vec!["HOM".into()];
    let (child, mut lines) = ChildProcess::spawn(spec, None).await.unwrap();
    assert_eq!(lines.next().await.as_deref(), Some("[][yes]"));
    child.wait_exit().await;
}

#[test]
fn ansi_colour_codes_are_removed_from_stderr_text() {
    use knife_adapters::process::strip_ansi;
    assert_eq!(
        strip_ansi("\u{1b}[2m2026\u{1b}[0m \u{1b}[31mERROR\u{1b}[0m codex: bad"),
        "2026 ERROR codex: bad"
    );
    assert_eq!(strip_ansi("plain ✓"), "plain ✓");
    assert_eq!(strip_ansi("cut \u{1b}["), "cut ");
}

#[tokio::test]
async fn the_stderr_tail_has_no_colour_codes() {
    let (child, _lines) = ChildProcess::spawn(
        sh("printf '\\033[31mERROR\\033[0m boom\\n' >&2; exit 2"),
        None,
    )
    .await
    .unwrap();
    let exit = child.wait_exit().await;
    assert_eq!(exit.stderr_tail, vec!["ERROR boom".to_owned()]);
}

#[tokio::test]
async fn named_variables_are_removed_unless_the_spec_sets_them() {
    // HOME and PATH are in every test environment; no `set_var` needed.
    let mut spec = sh("echo \"home=${HOME-unset} user=${LOGNAME-unset}\"");
    spec.env_remove = vec!["HOME".into(), "LOGNAME".into()];
    spec.env = vec![("LOGNAME".into(), "given".into())];
    let (child, mut lines) = ChildProcess::spawn(spec, None).await.unwrap();
    assert_eq!(lines.next().await.as_deref(), Some("home=unset user=given"));
    child.close().await;
}

#[tokio::test]
async fn a_missing_program_says_what_to_do() {
    let spec = ProcessSpec::new(
        "no-such-agent-knife-test",
        std::env::temp_dir(),
        "acp agent x",
    );
    let err = ChildProcess::spawn(spec, None)
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("acp agent x"), "{err}");
    assert!(
        err.contains("`no-such-agent-knife-test` was not found on PATH"),
        "{err}"
    );
    assert!(err.contains("`command` in knife.toml"), "{err}");
}

#[tokio::test]
async fn a_command_with_arguments_in_it_says_where_they_belong() {
    let spec = ProcessSpec::new(
        "npx codex app-server",
        std::env::temp_dir(),
        "codex app-server (cx)",
    );
    let err = ChildProcess::spawn(spec, None)
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("put its arguments in `args`"), "{err}");
}

#[test]
fn the_debug_form_of_a_spec_hides_env_values() {
    let mut spec = ProcessSpec::new("codex", std::env::temp_dir(), "codex");
    spec.env = vec![("OPENAI_API_KEY".into(), "sk-very-secret".into())];
    let text = format!("{spec:?}");
    assert!(text.contains("OPENAI_API_KEY"), "{text}");
    assert!(!text.contains("sk-very-secret"), "{text}");
}

/// Lines not yet taken are bounded in bytes: a child that floods stdout while nobody
/// reads blocks on its own output (back-pressure) instead of knife buffering it all;
/// once the lines are taken it finishes.
#[tokio::test]
async fn unread_output_is_bounded_in_bytes_and_blocks_the_child() {
    let mut spec = sh(
        "i=0; while [ $i -lt 8 ]; do head -c 524288 /dev/zero | tr '\\0' x; echo; i=$((i+1)); done",
    );
    spec.max_queued_bytes = 1024 * 1024;
    let (child, mut lines) = ChildProcess::spawn(spec, None).await.unwrap();
    // 4 MiB written, at most ~1 MiB queued plus pipe and read buffers: still writing.
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert!(child.exit_info().is_none(), "the child was not held back");
    let mut taken = 0;
    while let Some(line) = tokio::time::timeout(Duration::from_secs(5), lines.next())
        .await
        .unwrap()
    {
        assert_eq!(line.len(), 524_288);
        taken += 1;
    }
    assert_eq!(taken, 8);
    assert_eq!(child.wait_exit().await.status_text(), "exit status 0");
}
