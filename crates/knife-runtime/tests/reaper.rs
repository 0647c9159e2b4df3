//! The stale provider session reaper (SPEC.md REAP-01..06) over a real store, a
//! settable clock and a fake stopper, under paused time.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::TimeZone;
use knife_protocol::*;
use knife_runtime::reaper::*;
use knife_runtime::{Clock, RuntimeError, SharedClock};
use knife_store::Store;
use tokio_util::sync::CancellationToken;

struct TestClock(Mutex<Timestamp>);

impl Clock for TestClock {
    fn now(&self) -> Timestamp {
        *self.0.lock().unwrap()
    }
}

fn t0() -> Timestamp {
    chrono::Utc
        .with_ymd_and_hms(2026, 11, 29, 12, 0, 0)
        .unwrap()
}

#[derive(Clone, Copy)]
enum Stop {
    Ok,
    Fail,
    Panic,
}

#[derive(Default)]
struct FakeStopper {
    plans: Mutex<HashMap<ThreadId, Stop>>,
    calls: Mutex<Vec<(ThreadId, ProviderSessionId)>>,
}

#[async_trait::async_trait]
impl SessionStopper for FakeStopper {
    async fn stop_session(
        &self,
        thread: &ThreadId,
        session: &ProviderSessionId,
    ) -> Result<StopOutcome, RuntimeError> {
        self.calls
            .lock()
            .unwrap()
            .push((thread.clone(), session.clone()));
        let plan = self.plans.lock().unwrap().get(thread).copied();
        match plan.unwrap_or(Stop::Ok) {
            Stop::Ok => Ok(StopOutcome::Stopped),
            Stop::Fail => Err(RuntimeError::Internal("the runtime refused to stop".into())),
            Stop::Panic => panic!("stop defect"),
        }
    }
}

struct H {
    _dir: tempfile::TempDir,
    store: Store,
    clock: Arc<TestClock>,
    stopper: Arc<FakeStopper>,
}

impl H {
    async fn new() -> H {
        let dir = tempfile::tempdir().unwrap();
        let store = knife_store_sqlite::open(dir.path().join("knife.db"))
            .await
            .unwrap();
        H {
            _dir: dir,
            store,
            clock: Arc::new(TestClock(Mutex::new(t0()))),
            stopper: Arc::default(),
        }
    }

    fn reaper(&self) -> Reaper {
        let clock: SharedClock = self.clock.clone();
        Reaper::new(
            self.store.clone(),
            clock,
            self.stopper.clone(),
            ReaperOptions {
                inactivity_threshold: Duration::from_secs(30 * 60),
                sweep_interval: Duration::from_secs(60),
            },
        )
    }

    fn advance_clock(&self, by: chrono::Duration) {
        let mut now = self.clock.0.lock().unwrap();
        *now += by;
    }

    /// A thread (with an active run when `active`) and its session, last seen `seen`.
    async fn row(
        &self,
        active: bool,
        status: SessionStatus,
        seen: Timestamp,
    ) -> (ThreadId, ProviderSessionId) {
        let id = ThreadId::new();
        let thread = Thread {
            id: id.clone(),
            project_id: ProjectId::from("project_1"),
            title: "t".into(),
            provider_instance_id: ProviderInstanceId::from("fake"),
            model: None,
            status: ThreadStatus::Idle,
            active_run_id: active.then(|| RunId::for_thread(&id, 1)),
            run_count: u32::from(active),
            last_error: None,
            created_at: seen,
            updated_at: seen,
            agent_status: None,
            claimed_at: None,
            resume_attempts: 0,
            parent_thread_id: None,
            worktree: None,
            queue: Default::default(),
            budget_raise: None,
            archived_at: None,
            untitled: false,
            forked_from: None,
        };
        let instance = ProviderInstanceId::from("fake");
        let session = ProviderSession {
            id: ProviderSessionId::exclusive(&instance, &id),
            driver: "fake".into(),
            provider_instance_id: instance,
            status,
            cwd: "/tmp".into(),
            model: None,
            capabilities: ProviderCapabilities::default(),
            created_at: seen,
            updated_at: seen,
            last_error: None,
        };
        let sid = session.id.clone();
        self.store
            .write(vec![
                DomainEvent::new(seen, EventBody::ThreadCreated(thread)),
                DomainEvent::new(seen, EventBody::ProviderSessionAttached(session))
                    .with_thread(&id),
            ])
            .await
            .unwrap();
        (id, sid)
    }

    fn calls(&self) -> Vec<ThreadId> {
        self.stopper
            .calls
            .lock()
            .unwrap()
            .iter()
            .map(|c| c.0.clone())
            .collect()
    }
}

fn stale() -> Timestamp {
    t0() - chrono::Duration::minutes(45)
}

#[tokio::test(start_paused = true)]
async fn reap_01_a_stale_session_of_an_idle_thread_is_stopped() {
    let h = H::new().await;
    let (thread, session) = h.row(false, SessionStatus::Ready, stale()).await;
    let report = h.reaper().sweep().await.unwrap();
    assert_eq!(report.reaped, vec![(session.clone(), thread.clone())]);
    assert_eq!(
        h.stopper.calls.lock().unwrap().clone(),
        vec![(thread, session)]
    );
}

#[tokio::test(start_paused = true)]
async fn reap_01_the_reaper_sweeps_at_start_and_every_interval() {
    let h = H::new().await;
    let (first, _) = h.row(false, SessionStatus::Ready, stale()).await;
    let (later, _) = h.row(false, SessionStatus::Ready, t0()).await;
    let stop = CancellationToken::new();
    let task = h.reaper().start(stop.clone());
    // The sweep at start stops the stale one only.
    tokio::time::sleep(Duration::from_millis(10)).await;
    wait_calls(&h, 1).await;
    assert_eq!(h.calls(), vec![first.clone()]);
    // 31 minutes later the other one is stale; the next sweep (60 s) stops it.
    h.advance_clock(chrono::Duration::minutes(31));
    tokio::time::sleep(Duration::from_secs(61)).await;
    wait_calls(&h, 3).await;
    let calls = h.calls();
    assert!(calls.contains(&later), "{calls:?}");
    stop.cancel();
    task.await.unwrap();
}

async fn wait_calls(h: &H, n: usize) {
    for _ in 0..1000 {
        if h.calls().len() >= n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    panic!("expected {n} stop calls, saw {:?}", h.calls());
}

#[tokio::test(start_paused = true)]
async fn reap_02_a_stale_session_whose_thread_has_an_active_turn_is_kept() {
    let h = H::new().await;
    h.row(true, SessionStatus::Running, stale()).await;
    let report = h.reaper().sweep().await.unwrap();
    assert!(report.reaped.is_empty());
    assert_eq!(report.skipped_active, 1);
    assert!(h.calls().is_empty());
}

#[tokio::test(start_paused = true)]
async fn reap_03_a_session_seen_within_the_threshold_is_kept() {
    let h = H::new().await;
    h.row(
        false,
        SessionStatus::Ready,
        t0() - chrono::Duration::minutes(29),
    )
    .await;
    // Last event long ago, but activity was seen recently.
    let (_, touched) = h.row(false, SessionStatus::Ready, stale()).await;
    h.store
        .touch_provider_session(&touched, t0() - chrono::Duration::minutes(1))
        .await
        .unwrap();
    let report = h.reaper().sweep().await.unwrap();
    assert_eq!(report.rows, 2);
    assert!(report.reaped.is_empty(), "{report:?}");
    assert!(h.calls().is_empty());
}

#[tokio::test(start_paused = true)]
async fn reap_04_a_session_already_stopped_is_skipped() {
    let h = H::new().await;
    h.row(false, SessionStatus::Stopped, stale()).await;
    let report = h.reaper().sweep().await.unwrap();
    assert_eq!(report.rows, 1);
    assert!(report.reaped.is_empty());
    assert!(h.calls().is_empty());
}

#[tokio::test(start_paused = true)]
async fn reap_05_one_failing_stop_does_not_stop_the_sweep() {
    let h = H::new().await;
    let (a, _) = h.row(false, SessionStatus::Ready, stale()).await;
    let (b, sb) = h.row(false, SessionStatus::Ready, stale()).await;
    let (c, _) = h.row(false, SessionStatus::Ready, stale()).await;
    h.stopper
        .plans
        .lock()
        .unwrap()
        .insert(b.clone(), Stop::Fail);
    let report = h.reaper().sweep().await.unwrap();
    let reaped: Vec<ThreadId> = report.reaped.iter().map(|r| r.1.clone()).collect();
    assert_eq!(reaped, vec![a, c]);
    assert_eq!(report.failed.len(), 1);
    assert_eq!(report.failed[0].0, sb);
}

#[tokio::test(start_paused = true)]
async fn reap_06_one_panicking_stop_does_not_stop_the_sweep() {
    let h = H::new().await;
    let (a, _) = h.row(false, SessionStatus::Ready, stale()).await;
    let (b, _) = h.row(false, SessionStatus::Ready, stale()).await;
    let (c, _) = h.row(false, SessionStatus::Ready, stale()).await;
    h.stopper
        .plans
        .lock()
        .unwrap()
        .insert(a.clone(), Stop::Panic);
    let report = h.reaper().sweep().await.unwrap();
    let reaped: Vec<ThreadId> = report.reaped.iter().map(|r| r.1.clone()).collect();
    assert_eq!(reaped, vec![b, c]);
    assert_eq!(report.failed.len(), 1);
    assert!(report.failed[0].1.contains("panicked"), "{report:?}");
}

/// A stale session of node `node` (its id names the node) for a fresh idle thread.
async fn row_on(h: &H, node: &str) -> (ThreadId, ProviderSessionId) {
    let (thread, plain) = h.row(false, SessionStatus::Ready, stale()).await;
    let mut session = h.store.get_provider_session(&plain).await.unwrap().unwrap();
    session.id = ProviderSessionId::exclusive_on(&session.provider_instance_id, &thread, node);
    h.store
        .write(vec![
            DomainEvent::new(stale(), EventBody::ProviderSessionAttached(session.clone()))
                .with_thread(&thread),
            DomainEvent::new(
                stale(),
                EventBody::ProviderSessionDetached {
                    provider_session_id: plain,
                    detached_at: stale(),
                    reason: None,
                },
            )
            .with_thread(&thread),
        ])
        .await
        .unwrap();
    (thread, session.id)
}

/// SCALE-07: each node's reaper stops only the sessions its node runs; the rows of a
/// node that is gone are swept by the one node holding the cluster reaper singleton,
/// never by two; a live other node's session is never touched.
#[tokio::test(start_paused = true)]
async fn scale_07_each_node_reaps_its_own_sessions_and_one_node_sweeps_the_gone_nodes_rows() {
    let h = H::new().await;
    let ttl = Duration::from_secs(30);
    let on = |node: &str| {
        h.store
            .clone()
            .with_node(knife_store::NodeLeases::new(node, ttl))
    };
    let (a, b) = (on("node-a"), on("node-b"));
    a.join_cluster("node-a", "host:/a", "pa", ttl)
        .await
        .unwrap();
    b.join_cluster("node-b", "host:/b", "pb", ttl)
        .await
        .unwrap();
    let (ta, sa) = row_on(&h, "node-a").await;
    let (tb, sb) = row_on(&h, "node-b").await;
    let (tc, sc) = row_on(&h, "node-c").await; // never joined: gone
    let reaper = |store: knife_store::Store, stopper: Arc<FakeStopper>| {
        let clock: SharedClock = h.clock.clone();
        Reaper::new(store, clock, stopper, ReaperOptions::default())
    };
    let (stop_a, stop_b) = (
        Arc::new(FakeStopper::default()),
        Arc::new(FakeStopper::default()),
    );
    let report_a = reaper(a.clone(), stop_a.clone()).sweep().await.unwrap();
    let report_b = reaper(b.clone(), stop_b.clone()).sweep().await.unwrap();
    assert!(report_a.cluster_sweep && !report_b.cluster_sweep);
    let calls = |s: &FakeStopper| s.calls.lock().unwrap().clone();
    assert_eq!(calls(&stop_a), vec![(ta, sa), (tc, sc)]);
    assert_eq!(calls(&stop_b), vec![(tb, sb)]);
    assert_eq!(report_a.skipped_other_node, 1, "node-b's live session");
    // node-b's own session plus node-c's row, which node-a sweeps.
    assert_eq!(report_b.skipped_other_node, 2);
}
