//! Execution reopens a thread's native conversation (MGR-09, issue 7 item 4): the native
//! id a runtime reported in `provider-thread.updated` is passed to the next open, and a
//! shared session the thread joins is asked to resume it once (MGR-10 dedup).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use knife_protocol::*;
use knife_runtime::commands::{create_project, create_thread};
use knife_runtime::sessions::SessionManagerOptions;
use knife_runtime::*;
use knife_store::Store;
use knife_testkit::sessions::{FakeAdapter, FakeBehaviour};

const NATIVE: &str = "native-1";

struct H {
    _dir: tempfile::TempDir,
    store: Store,
    exec: ExecutionService,
    adapter: FakeAdapter,
    thread: ThreadId,
    session: ProviderSessionId,
}

/// A fake runtime that, on each turn, reports the thread's native id `native-1` and
/// completes the turn.
async fn harness(shared: bool) -> H {
    let dir = tempfile::tempdir().unwrap();
    let store = knife_store_sqlite::open(dir.path().join("knife.db"))
        .await
        .unwrap();
    let clock: SharedClock = Arc::new(SystemClock);
    let instance = ProviderInstanceId::from("fake");
    let root = dir.path().join("project");
    std::fs::create_dir(&root).unwrap();
    let (project, _) = create_project(
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
    .unwrap()
    .id;
    let session = if shared {
        ProviderSessionId::shared(&instance)
    } else {
        ProviderSessionId::exclusive(&instance, &thread)
    };
    let adapter = FakeAdapter::new(FakeBehaviour {
        shared,
        ..Default::default()
    });
    let hook_adapter = adapter.clone();
    let hook_session = session.clone();
    let hook_instance = instance.clone();
    adapter.configure(move |b| {
        b.on_start_turn = Some(Arc::new(move |input: StartTurnInput| {
            let adapter = hook_adapter.clone();
            let session = hook_session.clone();
            let instance = hook_instance.clone();
            Box::pin(async move {
                tokio::spawn(async move {
                    let control = adapter.session(&session).unwrap();
                    let now = chrono::Utc::now();
                    control.push(AdapterEvent::ProviderThreadUpdated(ProviderThread {
                        id: ProviderThreadId::native("fake", NATIVE),
                        driver: "fake".into(),
                        provider_instance_id: instance,
                        provider_session_id: Some(session),
                        app_thread_id: Some(input.thread_id.clone()),
                        native_id: Some(NATIVE.into()),
                        status: ProviderThreadStatus::Idle,
                        last_run_ordinal: Some(input.run_ordinal),
                        pending_background_tasks: Vec::new(),
                        created_at: now,
                        updated_at: now,
                    }));
                    control.push(AdapterEvent::TurnTerminal {
                        thread_id: input.thread_id,
                        run_id: input.run_id,
                        provider_turn_id: input.provider_turn_id,
                        outcome: TurnOutcome::Completed,
                        usage: None,
                    });
                });
                Ok(())
            })
        }));
    });
    let mut adapters: HashMap<ProviderInstanceId, Arc<dyn ProviderAdapter>> = HashMap::new();
    adapters.insert(instance, Arc::new(adapter.clone()));
    let options = SessionManagerOptions {
        idle_timeout: Duration::from_secs(3600),
        ..Default::default()
    };
    let manager = SessionManager::new(Arc::new(store.clone()), clock.clone(), adapters, options);
    let exec = ExecutionService::new(store.clone(), clock, manager);
    H {
        _dir: dir,
        store,
        exec,
        adapter,
        thread,
        session,
    }
}

impl H {
    async fn run(&self, text: &str) -> Run {
        let run = self
            .exec
            .start_run(&self.thread, text.to_owned())
            .await
            .unwrap();
        tokio::time::timeout(Duration::from_secs(10), self.exec.await_idle(&self.thread))
            .await
            .unwrap();
        let p = self
            .store
            .thread_projection(&self.thread)
            .await
            .unwrap()
            .unwrap();
        p.runs.into_iter().find(|r| r.id == run.id).unwrap()
    }

    fn opened_natives(&self) -> Vec<Option<String>> {
        self.adapter
            .state()
            .open_records()
            .into_iter()
            .map(|r| r.input.native_thread_id)
            .collect()
    }
}

#[tokio::test]
async fn mgr_09_the_next_session_of_a_thread_opens_its_native_thread() {
    let h = harness(false).await;
    assert_eq!(h.run("one").await.status, RunStatus::Completed);
    assert_eq!(h.opened_natives(), vec![None]);
    // A new session (the old one closed, as after an idle release or a restart).
    h.exec.manager().close(&h.session).await.unwrap();
    assert_eq!(h.run("two").await.status, RunStatus::Completed);
    assert_eq!(h.opened_natives(), vec![None, Some(NATIVE.to_owned())]);
    // An exclusive session was opened with it: no extra resume.
    assert_eq!(h.adapter.state().resume_count(), 0);
}

#[tokio::test]
async fn mgr_10_a_shared_session_resumes_the_native_thread_once() {
    let h = harness(true).await;
    assert_eq!(h.run("one").await.status, RunStatus::Completed);
    assert_eq!(h.adapter.state().resume_count(), 0, "no native id yet");
    // The live shared session is asked to load the thread's native thread once …
    assert_eq!(h.run("two").await.status, RunStatus::Completed);
    assert_eq!(h.adapter.state().resume_count(), 1);
    // … and not again while it stays loaded.
    assert_eq!(h.run("three").await.status, RunStatus::Completed);
    assert_eq!(h.adapter.state().resume_count(), 1);
    assert_eq!(h.adapter.state().open_count(), 1);
}
