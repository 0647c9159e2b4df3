//! Execution service against knife-testkit's scripted fake adapter and a real SQLite
//! store on disk: run lifecycle, one run per thread, interrupts, failures.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use knife_protocol::*;
use knife_runtime::commands::{create_project, create_thread};
use knife_runtime::*;
use knife_store::Store;
use knife_testkit::sessions::{FakeAdapter, FakeBehaviour, TurnPlan, TurnScript};

/// What the fake runtime does on `start_turn`.
#[derive(Clone, Default)]
struct Behaviour {
    /// Texts of assistant snapshots to emit before finishing.
    snapshots: Vec<String>,
    /// Finish with this outcome (None = never finish on its own).
    outcome: Option<TurnOutcome>,
    /// Answer interrupts with an `Interrupted` terminal.
    honour_interrupt: bool,
    /// Fail `open`.
    fail_open: bool,
    /// End the event stream right after the snapshots, with no terminal.
    drop_stream: bool,
}

impl Behaviour {
    /// knife-testkit's fake adapter behaving like this.
    fn adapter(self) -> FakeAdapter {
        let usage = TokenUsage {
            input_tokens: 3,
            output_tokens: 2,
            total_tokens: 5,
            ..Default::default()
        };
        FakeAdapter::new(FakeBehaviour {
            turns: TurnPlan::Script(TurnScript {
                snapshots: self.snapshots,
                outcome: self.outcome,
                usage: Some(usage),
                end_stream: self.drop_stream,
                ..Default::default()
            }),
            interrupt_ends_turn: self.honour_interrupt,
            open_error: self.fail_open.then(|| "fake refuses to open".to_owned()),
            ..Default::default()
        })
    }
}

struct Harness {
    _dir: tempfile::TempDir,
    store: Store,
    exec: ExecutionService,
    thread: Thread,
    adapter: FakeAdapter,
    project_root: std::path::PathBuf,
}

impl Harness {
    /// Opens that reached the adapter (failed ones included).
    fn opens(&self) -> usize {
        self.adapter.state().opens_started_count()
    }
}

async fn harness(behaviour: Behaviour) -> Harness {
    harness_with_grace(behaviour, INTERRUPT_GRACE).await
}

async fn harness_with_grace(behaviour: Behaviour, grace: Duration) -> Harness {
    harness_with(behaviour, grace, SessionManagerOptions::default()).await
}

async fn harness_with(
    behaviour: Behaviour,
    grace: Duration,
    options: SessionManagerOptions,
) -> Harness {
    let dir = tempfile::tempdir().unwrap();
    let store = knife_store_sqlite::open(dir.path().join("knife.db"))
        .await
        .unwrap();
    let clock: SharedClock = Arc::new(SystemClock);
    let instance = ProviderInstanceId::from("fake");
    let adapter = behaviour.adapter();
    let mut adapters: HashMap<ProviderInstanceId, Arc<dyn ProviderAdapter>> = HashMap::new();
    adapters.insert(instance.clone(), Arc::new(adapter.clone()));
    let manager = SessionManager::new(Arc::new(store.clone()), clock.clone(), adapters, options);
    let exec =
        ExecutionService::new(store.clone(), clock.clone(), manager).with_interrupt_grace(grace);
    let root = dir.path().join("project");
    std::fs::create_dir(&root).unwrap();
    let (project, _created) = create_project(
        &store,
        clock.as_ref(),
        CreateProjectRequest {
            root: root.display().to_string(),
            name: None,
        },
    )
    .await
    .unwrap();
    let thread = create_thread(
        &store,
        clock.as_ref(),
        CreateThreadRequest {
            project_id: project.id,
            title: None,
            provider_instance_id: None,
            model: None,
            parent_thread_id: None,
            worktree: None,
        },
        &instance,
        std::slice::from_ref(&instance),
    )
    .await
    .unwrap();
    Harness {
        _dir: dir,
        store,
        exec,
        thread,
        adapter,
        project_root: root,
    }
}

async fn finished(h: &Harness, run: &RunId) -> (Run, ThreadProjection) {
    tokio::time::timeout(Duration::from_secs(10), h.exec.await_idle(&h.thread.id))
        .await
        .unwrap();
    let p = h
        .store
        .thread_projection(&h.thread.id)
        .await
        .unwrap()
        .unwrap();
    let run = p.runs.iter().find(|r| &r.id == run).cloned().unwrap();
    (run, p)
}

#[tokio::test]
async fn a_run_streams_items_completes_and_its_session_is_released_when_idle() {
    let h = harness_with(
        Behaviour {
            snapshots: vec!["Hel".into(), "Hello".into()],
            outcome: Some(TurnOutcome::Completed),
            ..Default::default()
        },
        INTERRUPT_GRACE,
        SessionManagerOptions {
            idle_timeout: Duration::from_millis(300),
            ..Default::default()
        },
    )
    .await;
    let run = h.exec.start_run(&h.thread.id, "hi".into()).await.unwrap();
    assert_eq!(run.ordinal, 1);
    assert_eq!(run.status, RunStatus::Running);
    let (run, p) = finished(&h, &run.id).await;
    assert_eq!(run.status, RunStatus::Completed);
    assert_eq!(run.usage.as_ref().map(|u| u.total_tokens), Some(5));
    assert_eq!(p.thread.status, ThreadStatus::Idle);
    assert_eq!(p.thread.active_run_id, None);
    assert_eq!(p.thread.run_count, 1);
    let texts: Vec<_> = p.turn_items.iter().map(|i| i.kind.clone()).collect();
    assert!(matches!(&texts[0], TurnItemKind::UserMessage { text, .. } if text == "hi"));
    assert!(matches!(&texts[1], TurnItemKind::AssistantMessage { text, .. } if text == "Hello"));
    assert_eq!(p.nodes.len(), 1, "one root node per run");
    assert_eq!(p.nodes[0].id, NodeId::root_of(&run.id));
    assert_eq!(p.nodes[0].kind, NodeKind::RootTurn);
    assert_eq!(p.nodes[0].status, NodeStatus::Completed);
    assert!(h.exec.active().is_empty());
    // The session outlives the run (no per-run close) and is released by the
    // manager's idle timer (MGR-20).
    assert_eq!(p.provider_sessions.len(), 1);
    let session = p.provider_sessions[0].id.clone();
    assert_eq!(
        session,
        ProviderSessionId::exclusive(&ProviderInstanceId::from("fake"), &h.thread.id)
    );
    assert!(h.exec.manager().is_live(&session));
    let p = projection_until(&h, "the idle release", |p| {
        p.provider_sessions[0].status == SessionStatus::Stopped
    })
    .await;
    assert!(!h.exec.manager().is_live(&p.provider_sessions[0].id));
    assert_eq!(h.opens(), 1);
}

#[tokio::test]
async fn a_second_run_reuses_the_live_session_of_its_thread() {
    let h = harness(Behaviour {
        outcome: Some(TurnOutcome::Completed),
        ..Default::default()
    })
    .await;
    for text in ["one", "two"] {
        let run = h.exec.start_run(&h.thread.id, text.into()).await.unwrap();
        let (run, _) = finished(&h, &run.id).await;
        assert_eq!(run.status, RunStatus::Completed);
    }
    assert_eq!(h.opens(), 1, "one open for both runs");
    let live = h.exec.manager().describe();
    assert_eq!(live.len(), 1);
    assert_eq!(live[0].threads, vec![h.thread.id.clone()]);
    assert!(live[0].busy_turns.is_empty());
    assert!(live[0].idle_deadline.is_some());
    h.exec.manager().shutdown().await;
}

#[tokio::test]
async fn a_second_run_while_one_is_active_is_refused_and_ordinals_increase() {
    let h = harness(Behaviour {
        honour_interrupt: true,
        ..Default::default()
    })
    .await;
    let first = h.exec.start_run(&h.thread.id, "one".into()).await.unwrap();
    let err = h
        .exec
        .start_run(&h.thread.id, "two".into())
        .await
        .unwrap_err();
    assert!(matches!(err, RuntimeError::RunInProgress { .. }), "{err}");
    assert_eq!(
        h.exec
            .interrupt(&h.thread.id, InterruptReason::User)
            .await
            .unwrap(),
        Some(first.id.clone())
    );
    let (run, _) = finished(&h, &first.id).await;
    assert_eq!(run.status, RunStatus::Interrupted);
    let second = h.exec.start_run(&h.thread.id, "two".into()).await.unwrap();
    assert_eq!(second.ordinal, 2);
    h.exec
        .interrupt(&h.thread.id, InterruptReason::User)
        .await
        .unwrap();
    finished(&h, &second.id).await;
}

// Real time with a short grace: the store does real I/O, so paused time would
// auto-advance past the grace before the interrupt is even delivered.
#[tokio::test]
async fn an_interrupt_the_runtime_ignores_ends_the_run_after_the_grace_period() {
    let h = harness_with_grace(
        Behaviour {
            snapshots: vec!["still streaming".into()],
            ..Default::default()
        },
        Duration::from_millis(200),
    )
    .await;
    let run = h
        .exec
        .start_run(&h.thread.id, "loop forever".into())
        .await
        .unwrap();
    // Interrupt once the turn is really under way (an item is streaming).
    projection_until(&h, "the turn to start", |p| {
        p.turn_items
            .iter()
            .any(|i| matches!(i.kind, TurnItemKind::AssistantMessage { .. }))
    })
    .await;
    h.exec
        .interrupt(&h.thread.id, InterruptReason::User)
        .await
        .unwrap();
    let (run, p) = finished(&h, &run.id).await;
    assert_eq!(run.status, RunStatus::Interrupted);
    assert_eq!(p.thread.status, ThreadStatus::Idle);
    // The runtime never settled its streaming item; the run's end did.
    assert_all_settled(&p);
    // The unresponsive runtime is released, so the next message gets a fresh one.
    let p = projection_until(&h, "the release of the unresponsive session", |p| {
        p.provider_sessions[0].status == SessionStatus::Error
    })
    .await;
    let error = p.provider_sessions[0].last_error.clone().unwrap();
    assert!(error.contains("interrupt grace"), "{error}");
    assert!(!h.exec.manager().is_live(&p.provider_sessions[0].id));
}

#[tokio::test]
async fn interrupting_an_idle_thread_is_a_no_op_and_unknown_threads_are_errors() {
    let h = harness(Behaviour::default()).await;
    assert_eq!(
        h.exec
            .interrupt(&h.thread.id, InterruptReason::User)
            .await
            .unwrap(),
        None
    );
    let err = h
        .exec
        .interrupt(&ThreadId::from("thread_nope"), InterruptReason::User)
        .await
        .unwrap_err();
    assert!(matches!(err, RuntimeError::ThreadNotFound(_)));
    let err = h
        .exec
        .start_run(&ThreadId::from("thread_nope"), "x".into())
        .await
        .unwrap_err();
    assert!(matches!(err, RuntimeError::ThreadNotFound(_)));
    assert!(
        h.exec.active().is_empty(),
        "a refused start leaves no reservation behind"
    );
    let err = h
        .exec
        .start_run(&h.thread.id, "   ".into())
        .await
        .unwrap_err();
    assert!(matches!(err, RuntimeError::Invalid(_)));
}

#[tokio::test]
async fn a_failing_open_fails_the_run_with_a_typed_error() {
    let h = harness(Behaviour {
        fail_open: true,
        ..Default::default()
    })
    .await;
    let run = h.exec.start_run(&h.thread.id, "hi".into()).await.unwrap();
    let (run, p) = finished(&h, &run.id).await;
    assert_eq!(run.status, RunStatus::Failed);
    assert_eq!(run.error.as_ref().unwrap().error_type, "provider.open");
    // The adapter's reason, said once ("could not open provider session X: <reason>",
    // not "...: could not open the provider session: <reason>").
    let message = &run.error.as_ref().unwrap().message;
    assert!(
        message.starts_with("could not open provider session ")
            && message.ends_with(": fake refuses to open"),
        "{message}"
    );
    assert_eq!(message.matches("could not open").count(), 1, "{message}");
    assert_eq!(p.thread.status, ThreadStatus::Failed);
    assert!(p.thread.last_error.is_some());
    assert!(
        p.turn_items
            .iter()
            .any(|i| matches!(i.kind, TurnItemKind::Error { .. }))
    );
    // A failed adapter open projects no session (MGR: the attach is written only
    // once the runtime is up).
    assert!(p.provider_sessions.is_empty());
    assert!(!h.exec.manager().is_live(&ProviderSessionId::exclusive(
        &ProviderInstanceId::from("fake"),
        &h.thread.id
    )));
}

#[tokio::test]
async fn a_missing_workspace_fails_the_run_and_opens_nothing() {
    let h = harness(Behaviour {
        outcome: Some(TurnOutcome::Completed),
        ..Default::default()
    })
    .await;
    std::fs::remove_dir(&h.project_root).unwrap();
    let run = h.exec.start_run(&h.thread.id, "hi".into()).await.unwrap();
    let (run, p) = finished(&h, &run.id).await;
    let error = run.error.unwrap();
    assert_eq!(error.error_type, "provider.open");
    assert!(
        error
            .message
            .contains("Restore the folder at this path before retrying."),
        "{}",
        error.message
    );
    assert_eq!(h.opens(), 0);
    assert!(p.provider_sessions.is_empty());
}

#[tokio::test]
async fn a_runtime_that_ends_its_stream_mid_turn_fails_the_run_and_keeps_its_items() {
    let h = harness(Behaviour {
        snapshots: vec!["partial".into()],
        drop_stream: true,
        ..Default::default()
    })
    .await;
    let run = h.exec.start_run(&h.thread.id, "hi".into()).await.unwrap();
    let (run, p) = finished(&h, &run.id).await;
    assert_eq!(run.status, RunStatus::Failed);
    assert_eq!(run.error.unwrap().error_type, "provider.runtime");
    assert!(p.turn_items.iter().any(
        |i| matches!(&i.kind, TurnItemKind::AssistantMessage { text, .. } if text == "partial")
    ));
    assert_all_settled(&p);
}

/// MGR-07 (through execution's manager): a workspace that is missing or is a file fails the open
/// with `ProviderWorkspaceMissingError` naming the path; the adapter is not opened and
/// no provider session is projected.
#[tokio::test]
async fn mgr_07_open_with_missing_workspace_fails_and_projects_nothing() {
    let h = harness(Behaviour::default()).await;
    let instance = ProviderInstanceId::from("fake");
    let file = h.project_root.join("not-a-dir.txt");
    std::fs::write(&file, "x").unwrap();
    for cwd in [h.project_root.join("missing"), file] {
        let request = OpenRequest::new(
            ProviderSessionId::exclusive(&instance, &h.thread.id),
            h.thread.id.clone(),
            instance.clone(),
            &cwd,
        );
        let err = h.exec.manager().open(request).await.err().unwrap();
        let SessionError::WorkspaceMissing(e) = &err else {
            panic!("unexpected {err}")
        };
        assert_eq!(e.path, cwd.display().to_string());
        let message = err.to_string();
        assert!(message.contains(&cwd.display().to_string()), "{message}");
        assert!(
            message.contains("Restore the folder at this path before retrying."),
            "{message}"
        );
    }
    assert_eq!(h.opens(), 0);
    assert!(h.store.list_provider_sessions().await.unwrap().is_empty());
}

#[tokio::test]
async fn a_message_sent_on_the_previous_runs_terminal_event_is_accepted() {
    let h = harness(Behaviour {
        snapshots: vec!["done".into()],
        outcome: Some(TurnOutcome::Completed),
        ..Default::default()
    })
    .await;
    let after = h.store.latest_sequence(None).await.unwrap();
    let mut events = h.store.stream(knife_store::StreamFilter {
        thread_id: Some(h.thread.id.clone()),
        after,
        event_type: Some("run.updated".into()),
    });
    for round in 1..=5u32 {
        let run = h
            .exec
            .start_run(&h.thread.id, format!("round {round}"))
            .await
            .unwrap();
        assert_eq!(run.ordinal, round);
        // React to the committed terminal event at once, as a client would.
        loop {
            let event = tokio::time::timeout(Duration::from_secs(10), events.next())
                .await
                .unwrap()
                .unwrap()
                .unwrap();
            if let EventBody::RunUpdated(r) = &event.event.body
                && r.id == run.id
                && r.status.is_terminal()
            {
                break;
            }
        }
    }
    h.exec.await_idle(&h.thread.id).await;
}

#[tokio::test]
async fn a_run_whose_end_was_never_recorded_is_settled_by_the_next_message() {
    let h = harness(Behaviour {
        outcome: Some(TurnOutcome::Completed),
        ..Default::default()
    })
    .await;
    // What a failed terminal write leaves behind: the store says run 1 is active,
    // but no task in this process runs it.
    let now = chrono::Utc::now();
    let stale_id = RunId::for_thread(&h.thread.id, 1);
    let mut thread = h.thread.clone();
    thread.status = ThreadStatus::Running;
    thread.active_run_id = Some(stale_id.clone());
    thread.run_count = 1;
    let stale = Run {
        id: stale_id.clone(),
        thread_id: h.thread.id.clone(),
        ordinal: 1,
        provider_instance_id: h.thread.provider_instance_id.clone(),
        model: None,
        status: RunStatus::Running,
        user_message_id: TurnItemId::user_message_of(&stale_id),
        requested_at: now,
        started_at: Some(now),
        completed_at: None,
        error: None,
        usage: None,
        checkpoints: Default::default(),
        changes: None,
    };
    h.store
        .write(vec![
            DomainEvent::new(now, EventBody::RunCreated(stale)),
            DomainEvent::new(now, EventBody::ThreadUpdated(thread)),
        ])
        .await
        .unwrap();
    let run = h
        .exec
        .start_run(&h.thread.id, "again".into())
        .await
        .unwrap();
    assert_eq!(run.ordinal, 2);
    let (run, p) = finished(&h, &run.id).await;
    assert_eq!(run.status, RunStatus::Completed);
    let old = p.runs.iter().find(|r| r.id == stale_id).unwrap();
    assert_eq!(old.status, RunStatus::Interrupted);
    assert_eq!(p.thread.status, ThreadStatus::Idle);
}

/// Nothing of a finished run is left pending, running or waiting.
fn assert_all_settled(p: &ThreadProjection) {
    for item in &p.turn_items {
        assert!(
            !matches!(
                item.status,
                TurnItemStatus::Pending | TurnItemStatus::Running | TurnItemStatus::Waiting
            ),
            "item left {:?}: {item:?}",
            item.status
        );
    }
}

#[tokio::test]
async fn a_start_whose_caller_goes_away_still_runs_to_its_end() {
    let h = harness(Behaviour {
        snapshots: vec!["done".into()],
        outcome: Some(TurnOutcome::Completed),
        ..Default::default()
    })
    .await;
    // Polled once (the run's write is queued), then dropped, as when an HTTP client
    // disconnects mid-request.
    let _ = tokio::time::timeout(
        Duration::from_micros(1),
        h.exec.start_run(&h.thread.id, "hi".into()),
    )
    .await;
    let p = projection_until(&h, "the run to end (not left without an owner)", |p| {
        p.runs.len() == 1 && p.runs[0].status.is_terminal() && p.thread.active_run_id.is_none()
    })
    .await;
    assert_eq!(p.runs[0].status, RunStatus::Completed);
    h.exec.await_idle(&h.thread.id).await;
    assert!(h.exec.active().is_empty());
}

#[tokio::test]
async fn after_shutdown_new_runs_are_refused_and_active_ones_end_interrupted() {
    let h = harness(Behaviour {
        honour_interrupt: true,
        ..Default::default()
    })
    .await;
    let run = h.exec.start_run(&h.thread.id, "long".into()).await.unwrap();
    h.exec.shutdown(Duration::from_secs(10)).await;
    let p = h
        .store
        .thread_projection(&h.thread.id)
        .await
        .unwrap()
        .unwrap();
    let ended = p.runs.iter().find(|r| r.id == run.id).unwrap();
    assert_eq!(ended.status, RunStatus::Interrupted);
    assert!(ended.error.as_ref().unwrap().message.contains("shutdown"));
    let err = h
        .exec
        .start_run(&h.thread.id, "more".into())
        .await
        .unwrap_err();
    assert!(matches!(err, RuntimeError::ShuttingDown), "{err}");
}

/// Polls the thread's projection (real time, 10 s at most) until `done` holds.
async fn projection_until(
    h: &Harness,
    what: &str,
    done: impl Fn(&ThreadProjection) -> bool,
) -> ThreadProjection {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let p = h
            .store
            .thread_projection(&h.thread.id)
            .await
            .unwrap()
            .unwrap();
        if done(&p) {
            return p;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}: {:?}",
            p.thread
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Issue 5 item 7 through execution: a turn whose runtime goes silent is ended by the
/// session manager's stuck-turn watchdog, and the run fails with `provider.stalled`
/// (execution acts on the first terminal of its turn, the synthetic one).
#[tokio::test]
async fn a_stalled_turn_fails_the_run_through_the_watchdog() {
    let h = harness_with(
        Behaviour {
            snapshots: vec!["thinking".into()],
            ..Default::default()
        },
        INTERRUPT_GRACE,
        SessionManagerOptions {
            turn_stall_timeout: Duration::from_millis(300),
            ..Default::default()
        },
    )
    .await;
    let run = h.exec.start_run(&h.thread.id, "hi".into()).await.unwrap();
    let (run, p) = finished(&h, &run.id).await;
    assert_eq!(run.status, RunStatus::Failed);
    assert_eq!(
        run.error.unwrap().error_type,
        knife_runtime::sessions::STALLED_ERROR_TYPE
    );
    assert_eq!(p.thread.status, ThreadStatus::Failed);
    assert_all_settled(&p);
}

/// `session_of` hands out the active run's session handle (for answering runtime
/// requests of the running turn); none once the run ended.
#[tokio::test]
async fn session_of_names_the_active_runs_session() {
    let h = harness(Behaviour {
        honour_interrupt: true,
        ..Default::default()
    })
    .await;
    assert!(h.exec.session_of(&h.thread.id).is_none());
    let run = h.exec.start_run(&h.thread.id, "hi".into()).await.unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let handle = loop {
        if let Some(handle) = h.exec.session_of(&h.thread.id) {
            break handle;
        }
        assert!(tokio::time::Instant::now() < deadline, "no session handle");
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert_eq!(
        handle.id(),
        &ProviderSessionId::exclusive(&ProviderInstanceId::from("fake"), &h.thread.id)
    );
    assert_eq!(handle.attached_threads(), vec![h.thread.id.clone()]);
    h.exec
        .interrupt(&h.thread.id, InterruptReason::User)
        .await
        .unwrap();
    finished(&h, &run.id).await;
    assert!(h.exec.session_of(&h.thread.id).is_none());
}
