//! The default codex lifecycle suite, process supervision of external runtimes (docs/2026-11-29-external-runtimes.md): idle release with no
//! orphan, child crash → `error` with the exit status, malformed and oversized output,
//! close escalation, failed and cancelled opens, resume of the native thread by a new
//! server (and the no-rollout fallback). Harness: `codex_support`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod codex_support;

use std::sync::Arc;
use std::time::Duration;

use codex_support::*;
use knife_adapters::codex::{CodexAdapter, CodexConfig};
use knife_process::group_alive;
use knife_protocol::*;
use knife_runtime::process_groups::ProcessGroups;
use knife_runtime::*;
use knife_store::Store;

#[tokio::test]
async fn codex_mgr_20_idle_release_stops_the_process_and_leaves_no_orphan() {
    let h = harness(Duration::from_millis(400)).await;
    let run = h
        .exec
        .start_run(
            &h.thread.id,
            script(r#"[{"spawn_child":true},{"text":"spawned"}]"#),
        )
        .await
        .unwrap();
    let pgids = {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let pgids = h.pgids().await;
            if !pgids.is_empty() {
                break pgids;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "no process group recorded"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    assert_eq!(pgids.len(), 1);
    let run = h.finish(&run.id).await;
    assert_eq!(run.status, RunStatus::Completed);
    h.until("the idle release", |p| {
        p.provider_sessions
            .iter()
            .any(|s| s.status == SessionStatus::Stopped)
    })
    .await;
    assert!(!h.exec.manager().is_live(&session_id()));
    // The app-server and the `sleep` it started are gone, and the group is forgotten.
    assert!(
        gone_within(pgids[0], Duration::from_secs(5)).await,
        "orphans left in group {}",
        pgids[0]
    );
    let deadline = tokio::time::Instant::now() + WAIT;
    while !h.pgids().await.is_empty() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the process group row stayed"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn codex_mgr_31_child_crash_fails_the_run_and_records_the_exit_status() {
    let h = harness(Duration::from_secs(60)).await;
    let run = h
        .run(script(r#"[{"text":"about to crash"},{"crash":7}]"#))
        .await;
    assert_eq!(run.status, RunStatus::Failed);
    let error = run.error.unwrap();
    assert!(error.message.contains("exit status 7"), "{error:?}");
    let p = h
        .until("the session released with an error", |p| {
            p.provider_sessions
                .iter()
                .any(|s| s.status == SessionStatus::Error)
        })
        .await;
    let last_error = p.provider_sessions[0].last_error.clone().unwrap();
    assert!(
        last_error.contains("exited unexpectedly (exit status 7)"),
        "{last_error}"
    );
    assert!(
        last_error.contains("fake codex crashing with status 7"),
        "{last_error}"
    );
    assert!(!h.exec.manager().is_live(&session_id()));
    // The streamed text is kept; nothing is left running.
    assert_eq!(assistant_texts(&p, &run.id)[0].0, "about to crash");
    assert!(
        p.turn_items.iter().all(|i| !matches!(
            i.status,
            TurnItemStatus::Running | TurnItemStatus::Pending | TurnItemStatus::Waiting
        )),
        "{:?}",
        p.turn_items
    );
    // A new run starts a new process that resumes the same codex thread.
    let native = p.provider_threads[0].native_id.clone().unwrap();
    let next = h.run("after the crash".into()).await;
    assert_eq!(next.status, RunStatus::Completed);
    assert_eq!(h.sent_methods("initialize").len(), 2);
    assert_eq!(
        h.sent_methods("thread/resume")[0]["params"]["threadId"],
        native.as_str()
    );
}

#[tokio::test]
async fn codex_malformed_and_oversized_output_is_skipped() {
    let h = harness(Duration::from_secs(60)).await;
    let oversized = 16 * 1024 * 1024 + 10;
    let run = h
        .run(script(&format!(
            r#"[{{"malformed":true}},{{"oversized":{oversized}}},{{"text":"still fine"}}]"#
        )))
        .await;
    assert_eq!(run.status, RunStatus::Completed, "{:?}", run.error);
    let p = h.projection().await;
    assert_eq!(
        assistant_texts(&p, &run.id),
        vec![("still fine".to_owned(), TurnItemStatus::Completed)]
    );
    assert!(h.exec.manager().is_live(&session_id()));
}

#[tokio::test]
async fn codex_mgr_33_a_process_that_ignores_eof_and_sigterm_is_killed_on_close() {
    let h = harness(Duration::from_secs(60)).await;
    let run = h
        .run(script(r#"[{"hang":true},{"text":"hanging now"}]"#))
        .await;
    assert_eq!(run.status, RunStatus::Completed);
    let pgid = h.pgids().await[0];
    let started = tokio::time::Instant::now();
    h.exec.manager().close(&session_id()).await.unwrap();
    // EOF (300 ms) → SIGTERM ignored (300 ms) → SIGKILL.
    assert!(gone_within(pgid, Duration::from_secs(5)).await);
    assert!(
        started.elapsed() >= Duration::from_millis(600),
        "{:?}",
        started.elapsed()
    );
    let p = h
        .until("the session stopped", |p| {
            p.provider_sessions
                .iter()
                .any(|s| s.status == SessionStatus::Stopped)
        })
        .await;
    assert_eq!(p.provider_sessions[0].last_error, None);
}

#[tokio::test]
async fn codex_a_new_server_resumes_the_native_thread_and_falls_back_when_codex_forgot_it() {
    let h = harness(Duration::from_secs(60)).await;
    let run = h.run("first".into()).await;
    assert_eq!(run.status, RunStatus::Completed);
    let native = h.projection().await.provider_threads[0]
        .native_id
        .clone()
        .unwrap();
    h.exec.shutdown(Duration::from_secs(5)).await;

    // A new server on the same store and CODEX_HOME resumes the recorded thread.
    let (exec, _) = service(&h.store, &h.codex_home, Duration::from_secs(60));
    let second = exec.start_run(&h.thread.id, "second".into()).await.unwrap();
    tokio::time::timeout(WAIT, exec.await_idle(&h.thread.id))
        .await
        .unwrap();
    let p = h.projection().await;
    let second = p.runs.iter().find(|r| r.id == second.id).unwrap();
    assert_eq!(second.status, RunStatus::Completed);
    let resumes = h.sent_methods("thread/resume");
    assert_eq!(resumes.len(), 1);
    assert_eq!(resumes[0]["params"]["threadId"], native.as_str());
    assert_eq!(resumes[0]["params"]["cwd"], h.root.display().to_string());
    assert_eq!(h.sent_methods("thread/start").len(), 1);
    exec.shutdown(Duration::from_secs(5)).await;

    // A CODEX_HOME without the thread: resume fails, a new codex thread is started.
    std::fs::remove_dir_all(h.codex_home.join("fake-threads")).unwrap();
    std::fs::create_dir(h.codex_home.join("fake-threads")).unwrap();
    let (exec, _) = service(&h.store, &h.codex_home, Duration::from_secs(60));
    let third = exec.start_run(&h.thread.id, "third".into()).await.unwrap();
    tokio::time::timeout(WAIT, exec.await_idle(&h.thread.id))
        .await
        .unwrap();
    let p = h.projection().await;
    assert_eq!(
        p.runs.iter().find(|r| r.id == third.id).unwrap().status,
        RunStatus::Completed
    );
    assert_eq!(h.sent_methods("thread/start").len(), 2);
    let newest = p
        .provider_threads
        .iter()
        .max_by_key(|t| t.updated_at)
        .unwrap();
    assert_ne!(newest.native_id.as_deref(), Some(native.as_str()));
    exec.shutdown(Duration::from_secs(5)).await;
    drop(h.dir);
}

/// A codex adapter on the fake whose handshake never completes, recording groups in `store`.
fn mute_adapter(store: &Store, home: &std::path::Path) -> CodexAdapter {
    let mut config = CodexConfig::new(instance());
    config.command = env!("CARGO_BIN_EXE_fake_codex").into();
    config.args = Vec::new();
    config.env = vec![
        ("CODEX_HOME".into(), home.as_os_str().to_owned()),
        ("FAKE_CODEX_MUTE_INITIALIZE".into(), "1".into()),
    ];
    config.process_groups = Some(ProcessGroups::new(store.clone(), Arc::new(SystemClock)));
    config.handshake_timeout = Duration::from_millis(300);
    config.eof_grace = Duration::from_millis(300);
    config.term_grace = Duration::from_millis(300);
    CodexAdapter::new(config)
}

fn open_input(h: &Harness) -> OpenSessionInput {
    OpenSessionInput {
        provider_session_id: session_id(),
        provider_instance_id: instance(),
        thread_id: h.thread.id.clone(),
        cwd: h.root.clone(),
        project_root: None,
        model: None,
        native_thread_id: None,
    }
}

#[tokio::test]
async fn codex_mgr_04_a_handshake_that_times_out_fails_the_open_and_stops_the_process() {
    let h = harness(Duration::from_secs(60)).await;
    let adapter = mute_adapter(&h.store, &h.codex_home);
    let scope = knife_runtime::scope::SessionScope::new();
    let options = OpenSessionOptions {
        scope: scope.clone(),
        ..Default::default()
    };
    let err = adapter
        .open(open_input(&h), options)
        .await
        .err()
        .expect("the open must fail");
    assert!(
        err.to_string().contains("initialize handshake failed")
            && err.to_string().contains("no answer")
            && err
                .to_string()
                .contains("check `command` and `args` of provider instance"),
        "{err}"
    );
    // The manager closes the scope of a failed open; the process is gone after it.
    assert!(scope.close_within(Duration::from_secs(5)).await);
    let deadline = tokio::time::Instant::now() + WAIT;
    while !h.pgids().await.is_empty() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the process group stayed recorded"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn codex_mgr_05_a_cancelled_open_is_stopped_by_closing_its_scope() {
    let h = harness(Duration::from_secs(60)).await;
    let adapter = mute_adapter(&h.store, &h.codex_home);
    let scope = knife_runtime::scope::SessionScope::new();
    let options = OpenSessionOptions {
        scope: scope.clone(),
        ..Default::default()
    };
    let input = open_input(&h);
    let open = adapter.open(input, options);
    // Dropped mid-handshake: once codex got `initialize`, which the driver sends after
    // registering the process on the scope. (Dropping it while the spawn still records
    // the group would SIGKILL the group at once, so the group would be gone already.)
    let pgid = tokio::select! {
        _ = open => panic!("the handshake cannot complete"),
        pgid = async {
            loop {
                if let Some(pgid) = h.pgids().await.first().copied()
                    && !h.sent_methods("initialize").is_empty()
                {
                    break pgid;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        } => pgid,
    };
    assert!(group_alive(u32::try_from(pgid).unwrap()));
    assert!(scope.close_within(Duration::from_secs(5)).await);
    assert!(gone_within(pgid, Duration::from_secs(2)).await);
}

/// MGR-41 for codex: an approval pending when the app-server dies is not cancelled by
/// the driver; the release of the failed session expires it (`not_resumable`), and a
/// late answer is refused with that reason.
#[tokio::test]
async fn codex_mgr_41_an_approval_pending_when_codex_dies_expires() {
    let h = harness(Duration::from_secs(60)).await;
    let run = h
        .exec
        .start_run(
            &h.thread.id,
            script(r#"[{"approve_command":"make deploy"}]"#),
        )
        .await
        .unwrap();
    let request = pending_request(&h).await;
    let pgid = h.pgids().await[0];
    let killed = std::process::Command::new("kill")
        .args(["-KILL", "--", &format!("-{pgid}")])
        .status()
        .unwrap();
    assert!(killed.success());
    let run = h.finish(&run.id).await;
    assert_eq!(run.status, RunStatus::Failed);
    let p = h
        .until("the request settled", |p| {
            p.runtime_requests
                .iter()
                .any(|r| r.id == request.id && r.status != RuntimeRequestStatus::Pending)
        })
        .await;
    let settled = p
        .runtime_requests
        .iter()
        .find(|r| r.id == request.id)
        .unwrap();
    assert_eq!(settled.status, RuntimeRequestStatus::Expired, "{settled:?}");
    assert!(
        matches!(&settled.response_capability, ResponseCapability::NotResumable { reason } if !reason.contains("previous server process")),
        "{settled:?}"
    );
    let approval = p
        .turn_items
        .iter()
        .find(|i| matches!(i.kind, TurnItemKind::Approval { .. }))
        .unwrap();
    assert_eq!(approval.status, TurnItemStatus::Failed);
    let late = h
        .answer(&request.id, ApprovalDecision::AllowOnce)
        .await
        .unwrap_err()
        .to_string();
    assert!(late.contains("expired"), "{late}");
}

/// An interrupt asked while codex had not named the turn yet, after the `start_turn`
/// call was dropped (a run cancelled while codex accepted the turn), still reaches
/// codex once `turn/started` names the turn, and the turn ends interrupted.
#[tokio::test]
async fn codex_an_interrupt_before_codex_named_the_turn_is_sent_when_it_does() {
    use futures::StreamExt;
    let h = harness(Duration::from_secs(60)).await;
    let mut config = CodexConfig::new(instance());
    config.command = env!("CARGO_BIN_EXE_fake_codex").into();
    config.args = Vec::new();
    config.env = vec![("CODEX_HOME".into(), h.codex_home.as_os_str().to_owned())];
    config.eof_grace = Duration::from_millis(300);
    config.term_grace = Duration::from_millis(300);
    let adapter = CodexAdapter::new(config);
    let session = adapter
        .open(open_input(&h), OpenSessionOptions::default())
        .await
        .unwrap();
    let mut events = session.take_events().unwrap();
    let run_id = RunId::for_thread(&h.thread.id, 1);
    let input = StartTurnInput {
        thread_id: h.thread.id.clone(),
        run_id: run_id.clone(),
        run_ordinal: 1,
        provider_turn_id: ProviderTurnId::for_run(&run_id, 1),
        attempt: 1,
        text: script(r#"[{"wait_interrupt":true}]"#),
        history: Vec::new(),
        model: None,
        cwd: None,
        budget: None,
    };
    // Polled once: the thread is loaded, so `turn/start` is written, then dropped.
    let dropped = futures::FutureExt::now_or_never(session.start_turn(input));
    assert!(
        dropped.is_none(),
        "codex cannot have answered yet: {dropped:?}"
    );
    session
        .interrupt_turn(&h.thread.id, InterruptReason::User)
        .await
        .unwrap();
    let outcome = tokio::time::timeout(Duration::from_secs(5), async {
        while let Some(event) = events.next().await {
            if let Ok(AdapterEvent::TurnTerminal { outcome, .. }) = event {
                return Some(outcome);
            }
        }
        None
    })
    .await
    .expect("the turn ended");
    assert!(
        matches!(&outcome, Some(TurnOutcome::Interrupted { reason }) if reason == "user"),
        "{outcome:?}"
    );
    assert_eq!(h.sent_methods("turn/interrupt").len(), 1);
    session.close().await.unwrap();
}
