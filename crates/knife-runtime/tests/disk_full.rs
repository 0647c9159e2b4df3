//! A full disk at the end of a run (SPEC.md SEC-07): the run's terminal write fails
//! on a real SQLite file capped with `max_page_count` (SQLite answers "database or
//! disk is full" exactly as on a full filesystem), is retried, and commits once space
//! returns, so the run never stays `running`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use knife_protocol::*;
use knife_runtime::commands::{create_project, create_thread};
use knife_runtime::sessions::SessionManagerOptions;
use knife_runtime::*;
use knife_store::Store;
use knife_store_sqlite::SqliteStore;
use knife_testkit::sessions::{FakeAdapter, FakeBehaviour};

struct H {
    _dir: tempfile::TempDir,
    sqlite: SqliteStore,
    store: Store,
    exec: ExecutionService,
    adapter: FakeAdapter,
    thread: ThreadId,
    session: ProviderSessionId,
}

async fn harness() -> H {
    let dir = tempfile::tempdir().unwrap();
    let sqlite = SqliteStore::open(dir.path().join("knife.db"))
        .await
        .unwrap();
    let store = Store::new(sqlite.clone());
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
    let session = ProviderSessionId::exclusive(&instance, &thread);
    let adapter = FakeAdapter::new(FakeBehaviour::default());
    let mut adapters: HashMap<ProviderInstanceId, Arc<dyn ProviderAdapter>> = HashMap::new();
    adapters.insert(instance, Arc::new(adapter.clone()));
    let options = SessionManagerOptions {
        idle_timeout: Duration::from_secs(3600),
        ..Default::default()
    };
    let manager = SessionManager::new(Arc::new(store.clone()), clock.clone(), adapters, options);
    // Quick retries, so that holding the disk full for a second means dozens of
    // failed attempts: far past any fixed number of tries.
    let exec =
        ExecutionService::new(store.clone(), clock, manager).with_terminal_retry(TerminalRetry {
            first: Duration::from_millis(10),
            max: Duration::from_millis(20),
        });
    H {
        _dir: dir,
        sqlite,
        store,
        exec,
        adapter,
        thread,
        session,
    }
}

impl H {
    async fn projection(&self) -> ThreadProjection {
        self.store
            .thread_projection(&self.thread)
            .await
            .unwrap()
            .unwrap()
    }

    /// Waits (real time, at most 10 s) until `done` holds for the thread's projection.
    async fn until(
        &self,
        what: &str,
        done: impl Fn(&ThreadProjection) -> bool,
    ) -> ThreadProjection {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            let p = self.projection().await;
            if done(&p) {
                return p;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "timed out waiting for {what}; thread is {:?}",
                p.thread.status
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// Failed attempts to write a run's end (`knife_terminal_write_failures_total`), from
/// the recorder this test binary installs.
fn failed_terminal_writes() -> u64 {
    let snapshot = recorder().snapshot().into_vec();
    snapshot
        .into_iter()
        .find(|(key, ..)| key.key().name() == "knife_terminal_write_failures_total")
        .map(|(.., value)| match value {
            metrics_util::debugging::DebugValue::Counter(n) => n,
            _ => 0,
        })
        .unwrap_or(0)
}

fn recorder() -> &'static metrics_util::debugging::Snapshotter {
    static SNAPSHOTTER: std::sync::OnceLock<metrics_util::debugging::Snapshotter> =
        std::sync::OnceLock::new();
    SNAPSHOTTER.get_or_init(|| {
        let recorder = metrics_util::debugging::DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        metrics::set_global_recorder(recorder).expect("one recorder per test binary");
        snapshotter
    })
}

fn streaming_message(input: &StartTurnInput, text: String) -> AdapterEvent {
    let now = chrono::Utc::now();
    AdapterEvent::TurnItemUpdated(TurnItem {
        id: TurnItemId::of_turn(&input.provider_turn_id, 1),
        thread_id: input.thread_id.clone(),
        run_id: Some(input.run_id.clone()),
        provider_turn_id: Some(input.provider_turn_id.clone()),
        ordinal: TurnItem::ordinal_in_run(input.run_ordinal, 1),
        status: TurnItemStatus::Running,
        started_at: Some(now),
        completed_at: None,
        updated_at: now,
        kind: TurnItemKind::AssistantMessage {
            text,
            streaming: true,
        },
    })
}

#[tokio::test]
async fn sec_07_a_run_whose_terminal_write_hits_a_full_disk_ends_once_space_returns() {
    recorder();
    let h = harness().await;
    let run = h
        .exec
        .start_run(&h.thread, "write a lot".into())
        .await
        .unwrap();
    let input = loop {
        if let Some(input) = h
            .adapter
            .state()
            .started_turns
            .lock()
            .unwrap()
            .last()
            .cloned()
        {
            break input;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let control = h.adapter.session(&h.session).unwrap();
    // A long message, still streaming: settling it at the run's end rewrites 200 KB.
    assert!(control.push(streaming_message(&input, "x".repeat(200_000))));
    h.until("the streaming message", |p| {
        p.turn_items
            .iter()
            .any(|i| matches!(&i.kind, TurnItemKind::AssistantMessage { text, .. } if text.len() == 200_000))
    })
    .await;

    // The disk is full: the file may not grow by a single page.
    let cap = h.sqlite.set_max_page_count(Some(1)).await.unwrap();
    assert!(
        cap > 1,
        "the cap is clamped to the file's current size ({cap} pages)"
    );
    assert!(control.push(AdapterEvent::TurnTerminal {
        thread_id: input.thread_id.clone(),
        run_id: input.run_id.clone(),
        provider_turn_id: input.provider_turn_id.clone(),
        outcome: TurnOutcome::Completed,
        usage: None,
    }));
    // The run cannot end while the disk stays full (its terminal write keeps
    // failing, ~50 attempts in this second), and nothing already in the log is lost.
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let p = h.projection().await;
    let stuck = p.runs.iter().find(|r| r.id == run.id).unwrap();
    assert_eq!(
        stuck.status,
        RunStatus::Running,
        "no space: nothing committed"
    );
    assert!(p.thread.is_claimed());
    assert_eq!(
        p.turn_items.len(),
        2,
        "user message and the streaming reply are intact"
    );
    let failures = failed_terminal_writes();
    assert!(
        failures >= 10,
        "the terminal write was retried, not given up ({failures} failed attempts)"
    );

    // Space returns: the retried terminal write commits and the thread is free.
    h.sqlite.set_max_page_count(None).await.unwrap();
    let p = h
        .until("the run's end", |p| {
            p.runs
                .iter()
                .any(|r| r.id == run.id && r.status != RunStatus::Running)
        })
        .await;
    let ended = p.runs.iter().find(|r| r.id == run.id).unwrap();
    assert_eq!(ended.status, RunStatus::Completed);
    assert!(ended.completed_at.is_some());
    assert_eq!(p.thread.status, ThreadStatus::Idle);
    assert_eq!(p.thread.active_run_id, None);
    assert!(
        !p.thread.is_claimed(),
        "the claim is released with the terminal"
    );
    assert!(
        p.turn_items
            .iter()
            .all(|i| !matches!(i.status, TurnItemStatus::Running | TurnItemStatus::Pending)),
        "the streaming message was settled by the same terminal write"
    );
    tokio::time::timeout(Duration::from_secs(10), h.exec.await_idle(&h.thread))
        .await
        .unwrap();
}
