// Process tests of several `knife serve` nodes on one PostgreSQL database (SPEC.md SCALE-04,
// SCALE-05): leases per node, a killed node's claimed turn taken over by another node once.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../common/mod.rs"]
mod common;
mod streams;

use std::collections::BTreeMap;
use std::time::Duration;

use common::*;
use knife_protocol::*;
use knife_store::StreamFilter;
use knife_store_postgres::testing::cluster;

/// Lease length of the test nodes: short, so a dead node's work moves on quickly.
const LEASE_MS: u64 = 1500;
/// Kills of the ID-named test (SCALE-05: at least 5).
const KILLS: usize = 5;

/// For each kill: a slow answer (about 4 s) that is cut by the kill, then the quick
/// answer of the continuation run another node resumes with.
fn script(kills: usize) -> String {
    let mut s = String::new();
    for i in 0..kills {
        s.push_str(&format!(
            "[[response]]\ntext = \"slow answer {i} that is still streaming when its node dies\"\n\
             deltas = 80\nstream_deltas_ms = 50\n\n[[response]]\ntext = \"resumed answer {i}\"\n\n"
        ));
    }
    s
}

fn node_config(mock: &str, url: &str, node: &str) -> String {
    format!(
        "{}\n[store]\nurl = \"{url}\"\nnode_id = \"{node}\"\nlease_ms = {LEASE_MS}\n",
        config_toml(mock)
    )
}

/// Waits until `thread`'s assistant text is streaming (the turn is mid-way).
async fn wait_streaming(api: &Api, thread: &str) {
    poll_until("the slow answer to stream", RUN_TIMEOUT, || async {
        let p = api.projection(thread).await;
        p.turn_items
            .iter()
            .any(|i| {
                matches!(&i.kind, TurnItemKind::AssistantMessage { text, .. } if text.contains("slow"))
            })
            .then_some(())
    })
    .await;
}

/// Continuation runs of a thread (the system message a resume opens with).
fn continuations(p: &ThreadProjection) -> usize {
    p.turn_items
        .iter()
        .filter(|i| {
            matches!(
                &i.kind,
                TurnItemKind::UserMessage {
                    origin: MessageOrigin::System,
                    ..
                }
            )
        })
        .count()
}

/// SCALE-05 (and SCALE-04 across processes): three `knife serve` nodes on one
/// PostgreSQL database with 1.5 s leases. Five times, a turn runs on one node and that
/// node is SIGKILLed mid-turn; another node takes the expired claim over and resumes it
/// in a continuation run within lease + 5 s, and the killed node is started again.
/// Checks: every killed turn resumed exactly once (0 twice), 0 runs left running,
/// the log gap-free (0 committed events lost) and every node serving the same thread.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(knife_has_postgres),
    ignore = "needs PostgreSQL (Debian package postgresql, or KNIFE_PG_BIN)"
)]
async fn scale_05_a_killed_nodes_turn_is_taken_over_by_another_node_once() {
    kill_loop(KILLS).await;
}

/// The soak run of SCALE-05 (opt-in, not ID-named): `KNIFE_SOAK_KILLS` kills (default
/// 20) with the same checks; prints the takeover times for the note.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "soak (opt-in): cargo test -p knife --test e2e_cluster -- --ignored"]
async fn soak_many_kills_each_turn_taken_over_once() {
    let kills = std::env::var("KNIFE_SOAK_KILLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20);
    let mut took = kill_loop(kills).await;
    took.sort();
    let pct = |p: usize| took[(took.len() * p / 100).min(took.len() - 1)];
    eprintln!(
        "SCALE-05 soak: {kills} kills, kill -> continuation started: min {:?} p50 {:?} p90 {:?} max {:?}",
        took[0],
        pct(50),
        pct(90),
        took[took.len() - 1]
    );
}

/// Three nodes, `kills` SIGKILLs of the node running a turn; returns the time from each
/// kill to the continuation run's start.
async fn kill_loop(kills: usize) -> Vec<Duration> {
    let mock = MockLlm::script(&script(kills), &[]).await;
    let cluster = cluster().await;
    let db = cluster.fresh_database().await;
    let url = cluster.tcp_url(&db);
    let mut nodes = Vec::new();
    for n in 0..3 {
        let config = node_config(&mock.base_url(), &url, &format!("node-{n}"));
        nodes.push(Server::start_with_config(&config).await);
    }
    let project = nodes[0].api.create_project(&nodes[0].project_dir()).await;
    let mut takeovers = Vec::new();
    let mut threads = Vec::new();
    for kill in 0..kills {
        let victim = kill % 3;
        let witness = (victim + 1) % 3;
        let thread = nodes[victim].api.create_thread(&project).await;
        let run = nodes[victim]
            .api
            .post_message(&thread, "answer slowly")
            .await;
        wait_streaming(&nodes[witness].api, &thread).await;

        let killed_at = chrono::Utc::now();
        let status = nodes[victim].proc.kill_hard().await;
        assert!(!status.success(), "SIGKILL exit: {status}");

        // Another node resumes it: the killed run ends, a continuation completes.
        let p = poll_until(
            "another node to take the turn over and finish it",
            RUN_TIMEOUT,
            || async {
                let p = nodes[witness].api.projection(&thread).await;
                let first = p.runs.iter().find(|r| r.id.as_str() == run)?;
                (first.status.is_terminal()
                    && p.thread.active_run_id.is_none()
                    && p.runs.len() >= 2)
                    .then_some(p)
            },
        )
        .await;
        let resumed = &p.runs[1];
        // From the kill to the continuation run's start (same machine, same clock).
        let took = (resumed.requested_at - killed_at)
            .to_std()
            .unwrap_or_default();
        assert_eq!(resumed.status, RunStatus::Completed, "{resumed:?}");
        assert_eq!(continuations(&p), 1, "resumed exactly once: {:?}", p.runs);
        assert_eq!(p.runs.len(), 2, "{:?}", p.runs);
        assert!(!p.thread.is_claimed(), "{:?}", p.thread);
        takeovers.push(took);
        threads.push(thread);
        nodes[victim].respawn().await;
    }

    // Nothing is left running on any thread, whichever node is asked, and the answers
    // are the scripted ones: 0 turns resumed twice, 0 left running.
    for thread in &threads {
        for node in &nodes {
            let p = node.api.projection(thread).await;
            assert!(p.thread.active_run_id.is_none(), "{:?}", p.thread);
            assert!(
                p.runs.iter().all(|r| r.status.is_terminal()),
                "{:?}",
                p.runs
            );
            assert_eq!(continuations(&p), 1);
        }
    }
    // 0 committed events lost: the log is gap-free, and every resumed answer is in it.
    let store = knife_store_postgres::open(&cluster.url(&db)).await.unwrap();
    let log = store
        .read_events(&StreamFilter::after(0), 100_000)
        .await
        .unwrap();
    let sequences: Vec<u64> = log.iter().map(|e| e.sequence).collect();
    assert_eq!(sequences, (1..=log.len() as u64).collect::<Vec<_>>());
    let mut resumed_by: BTreeMap<String, usize> = BTreeMap::new();
    for thread in &threads {
        let lease = store
            .get_lease(&ThreadId::from(thread.as_str()))
            .await
            .unwrap()
            .unwrap();
        // Taken once by the taker, once more for the resume run, on top of the first run.
        assert!(lease.epoch >= 3, "{lease:?}");
        *resumed_by.entry(lease.node).or_default() += 1;
    }
    eprintln!(
        "SCALE-05: {kills} kills, kill -> continuation run started: {takeovers:?}; \
         resumed by {resumed_by:?}"
    );
    for took in &takeovers {
        // SCALE-05: within lease + 5 s.
        assert!(
            *took < Duration::from_millis(LEASE_MS) + Duration::from_secs(5),
            "{takeovers:?}"
        );
    }
    for node in &mut nodes {
        assert!(node.proc.terminate().await.success());
    }
    takeovers
}

/// SCALE-05 with per-node checkpoints (docs/2026-12-01-cluster-checkpoints.md): node A
/// starts a turn (its start checkpoint in A's checkpoint repository) and is SIGKILLed;
/// node B takes the turn over and ends the cut run with its own checkpoint. The cut run
/// then says why it has no change set (`checkpoints.changes_error` naming both nodes)
/// instead of showing none, and its diff and revert answer 409 `no_checkpoint` with
/// that reason on either node; the continuation run, all on B, has its diff on B and
/// answers A with the node that holds it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(knife_has_postgres),
    ignore = "needs PostgreSQL (Debian package postgresql, or KNIFE_PG_BIN)"
)]
async fn scale_05_a_run_taken_over_by_another_node_says_why_it_has_no_change_set() {
    let mock = MockLlm::script(&script(1), &[]).await;
    let cluster = cluster().await;
    let db = cluster.fresh_database().await;
    let url = cluster.tcp_url(&db);
    let mut a = Server::start_with_config(&node_config(&mock.base_url(), &url, "node-a")).await;
    let b = Server::start_with_config(&node_config(&mock.base_url(), &url, "node-b")).await;
    let project = a.api.create_project(&a.project_dir()).await;
    let thread = a.api.create_thread(&project).await;
    a.api.post_message(&thread, "answer slowly").await;
    wait_streaming(&b.api, &thread).await;
    assert!(!a.proc.kill_hard().await.success());
    let p = poll_until(
        "node B to take the turn over and finish it",
        RUN_TIMEOUT,
        || async {
            let p = b.api.projection(&thread).await;
            (p.runs.len() == 2
                && p.thread.active_run_id.is_none()
                && p.runs.iter().all(|r| r.status.is_terminal())
                && p.runs[0].checkpoints.end.is_some())
            .then_some(p)
        },
    )
    .await;
    let cut = &p.runs[0].checkpoints;
    assert_eq!(
        cut.start.as_ref().map(CheckpointRef::node),
        Some("node-a"),
        "{cut:?}"
    );
    assert_eq!(
        cut.end.as_ref().map(CheckpointRef::node),
        Some("node-b"),
        "{cut:?}"
    );
    assert!(p.runs[0].changes.is_none(), "{:?}", p.runs[0]);
    let why = cut.changes_error.clone().unwrap_or_default();
    assert!(
        why.contains("node node-a") && why.contains("node node-b"),
        "{why}"
    );
    a.respawn().await;
    for api in [&a.api, &b.api] {
        let (s, diff) = api.get(&format!("/api/threads/{thread}/runs/1/diff")).await;
        assert_eq!(s, reqwest::StatusCode::CONFLICT, "{diff}");
        assert_eq!(diff["error"]["code"], "no_checkpoint", "{diff}");
        assert_eq!(diff["error"]["message"], why.as_str(), "{diff}");
        let (s, revert) = api
            .post(
                &format!("/api/threads/{thread}/runs/1/revert"),
                &serde_json::json!({}),
            )
            .await;
        assert_eq!(s, reqwest::StatusCode::CONFLICT, "{revert}");
        assert_eq!(revert["error"]["code"], "no_checkpoint", "{revert}");
        assert!(
            revert["error"]["message"].as_str().unwrap().contains(&why),
            "{revert}"
        );
    }
    let (s, diff) = b
        .api
        .get(&format!("/api/threads/{thread}/runs/2/diff"))
        .await;
    assert_eq!(s, reqwest::StatusCode::OK, "{diff}");
    let (s, elsewhere) = a
        .api
        .get(&format!("/api/threads/{thread}/runs/2/diff"))
        .await;
    assert_eq!(s, reqwest::StatusCode::CONFLICT, "{elsewhere}");
    assert!(
        elsewhere["error"]["message"]
            .as_str()
            .unwrap()
            .contains("ask node node-b"),
        "{elsewhere}"
    );
    for mut node in [a, b] {
        assert!(node.proc.terminate().await.success());
    }
}

/// SCALE-04 across processes: node A runs a turn and is paused (SIGSTOP) past its
/// lease; node B takes the claim over (epoch + 1) and finishes the turn. When A wakes
/// (SIGCONT) its writes for the thread are refused by the fence: it writes nothing for
/// the thread any more (not its streaming turn, not its run's end), its lease keeper
/// reports the lease lost, and the thread keeps B's outcome.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(knife_has_postgres),
    ignore = "needs PostgreSQL (Debian package postgresql, or KNIFE_PG_BIN)"
)]
async fn scale_04_a_paused_node_that_lost_its_lease_writes_nothing_for_the_thread_afterwards() {
    const SCRIPT: &str = r#"
[[response]]
text = "a slow answer that node A is still streaming when it is paused"
deltas = 80
stream_deltas_ms = 50

[[response]]
text = "node B's answer"

[[response]]
text = "spare answer"
"#;
    let mock = MockLlm::script(SCRIPT, &[]).await;
    let cluster = cluster().await;
    let db = cluster.fresh_database().await;
    let url = cluster.tcp_url(&db);
    let mut a = Server::start_with_config(&node_config(&mock.base_url(), &url, "node-a")).await;
    let b = Server::start_with_config(&node_config(&mock.base_url(), &url, "node-b")).await;
    let project = a.api.create_project(&a.project_dir()).await;
    let thread = a.api.create_thread(&project).await;
    let run = a.api.post_message(&thread, "answer slowly").await;
    wait_streaming(&b.api, &thread).await;

    let pid = a.proc.pid().to_string();
    let signal = |sig: &str| {
        assert!(
            std::process::Command::new("kill")
                .args([sig, &pid])
                .status()
                .unwrap()
                .success()
        );
    };
    signal("-STOP");
    let p = poll_until(
        "node B to take the paused node's turn over",
        RUN_TIMEOUT,
        || async {
            let p = b.api.projection(&thread).await;
            (p.runs.len() >= 2 && p.thread.active_run_id.is_none()).then_some(p)
        },
    )
    .await;
    assert_eq!(p.runs[1].status, RunStatus::Completed, "{:?}", p.runs);
    let store = knife_store_postgres::open(&cluster.url(&db)).await.unwrap();
    let head = store.latest_sequence(None).await.unwrap();
    let lease = store
        .get_lease(&ThreadId::from(thread.as_str()))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(lease.node, "node-b");

    // A wakes up with its turn half-streamed and its old epoch.
    signal("-CONT");
    poll_until(
        "node A to notice it lost the lease",
        RUN_TIMEOUT,
        || async {
            a.proc
                .stderr()
                .contains("lost the thread's lease")
                .then_some(())
        },
    )
    .await;
    // Give A's turn time to try to stream on and to end.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let thread_id = ThreadId::from(thread.as_str());
    let after = store
        .read_events(&StreamFilter::thread(thread_id, head), 10_000)
        .await
        .unwrap();
    assert!(
        after.is_empty(),
        "node A wrote for the thread after losing its lease: {:?}",
        after
            .iter()
            .map(|e| e.event.event_type())
            .collect::<Vec<_>>()
    );
    let end = b.api.projection(&thread).await;
    let first = end.runs.iter().find(|r| r.id.as_str() == run).unwrap();
    assert_eq!(
        first.status,
        RunStatus::Interrupted,
        "B's end of the cut run stays"
    );
    assert_eq!(end.runs[1].status, RunStatus::Completed);
    assert!(end.thread.active_run_id.is_none());
    // Both nodes still serve; A answers for the thread with B's state.
    assert_eq!(a.api.projection(&thread).await.runs.len(), 2);
    assert!(a.proc.terminate().await.success());
}

/// `knife serve` in a fresh temp dir with `config`, expected to refuse to start: its
/// exit status and stderr (bounded by `CLI_TIMEOUT`).
async fn refused_start(config: &str) -> (std::process::ExitStatus, String) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("knife.toml"), config).unwrap();
    let mut cmd = knife_command(dir.path());
    cmd.arg("serve")
        .arg("--config")
        .arg(dir.path().join("knife.toml"))
        .args(["--listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir.path().join("data"));
    let out = tokio::time::timeout(CLI_TIMEOUT, cmd.output())
        .await
        .expect("a refused start exits")
        .unwrap();
    (
        out.status,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// SCALE-05 (last sentence): a node id that a live process heartbeats refuses a second
/// process (another data directory) with an error naming the id and what to do; the
/// node SIGKILLed mid-turn and restarted on its own data directory starts at once with
/// the same id, takes its own lease back and resumes the turn once; started from
/// another place after its death, the id is free once the old heartbeat ran out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(knife_has_postgres),
    ignore = "needs PostgreSQL (Debian package postgresql, or KNIFE_PG_BIN)"
)]
async fn scale_05_a_live_node_id_refuses_a_second_process_and_a_restart_takes_its_leases_back() {
    let mock = MockLlm::script(&script(1), &[]).await;
    let cluster = cluster().await;
    let db = cluster.fresh_database().await;
    let url = cluster.tcp_url(&db);
    let config = node_config(&mock.base_url(), &url, "node-a");
    let mut a = Server::start_with_config(&config).await;

    // A second process with the same id, elsewhere, while A heartbeats: refused.
    let (status, stderr) = refused_start(&config).await;
    assert!(!status.success(), "{stderr}");
    assert!(
        stderr.contains("node id node-a is in use by a live knife process")
            && stderr.contains("node_id")
            && stderr.contains("--node-id"),
        "{stderr}"
    );
    assert!(a.api.healthy().await, "the first node keeps serving");

    // A dies mid-turn and comes back on its own data directory at once.
    let project = a.api.create_project(&a.project_dir()).await;
    let thread = a.api.create_thread(&project).await;
    let run = a.api.post_message(&thread, "answer slowly").await;
    wait_streaming(&a.api, &thread).await;
    let store = knife_store_postgres::open(&cluster.url(&db)).await.unwrap();
    let thread_id = ThreadId::from(thread.as_str());
    let before = store.get_lease(&thread_id).await.unwrap().unwrap();
    assert!(!a.proc.kill_hard().await.success());
    a.respawn().await;
    let p = poll_until(
        "the restarted node to resume its turn",
        RUN_TIMEOUT,
        || async {
            let p = a.api.projection(&thread).await;
            let first = p.runs.iter().find(|r| r.id.as_str() == run)?;
            (first.status.is_terminal() && p.thread.active_run_id.is_none() && p.runs.len() >= 2)
                .then_some(p)
        },
    )
    .await;
    assert_eq!(p.runs[1].status, RunStatus::Completed, "{:?}", p.runs);
    assert_eq!(continuations(&p), 1, "resumed once: {:?}", p.runs);
    let after = store.get_lease(&thread_id).await.unwrap().unwrap();
    assert_eq!(after.node, "node-a");
    assert!(after.epoch > before.epoch, "{before:?} -> {after:?}");

    // Dead again; the same id from another data directory waits the row out, then runs.
    assert!(!a.proc.kill_hard().await.success());
    let moved = Server::start_with_config(&config).await;
    assert!(moved.api.healthy().await);
    let members = store.live_nodes().await.unwrap();
    assert_eq!(members.len(), 1, "{members:?}");
    assert!(
        members[0].location.ends_with(
            &moved
                .data_dir()
                .canonicalize()
                .unwrap()
                .display()
                .to_string()
        ),
        "{members:?}"
    );
    let mut moved = moved;
    assert!(moved.proc.terminate().await.success());
    // A clean stop frees the id at once.
    assert!(store.live_nodes().await.unwrap().is_empty());
}

/// SCALE-07 across processes: node B restarting next to a live node A marks stopped
/// only its own node's provider sessions; A's idle session (its id names node-a) stays
/// as A left it, and the two nodes' sessions never share an id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(knife_has_postgres),
    ignore = "needs PostgreSQL (Debian package postgresql, or KNIFE_PG_BIN)"
)]
async fn scale_07_a_restarting_node_stops_only_its_own_sessions_never_a_live_node_s() {
    const SCRIPT: &str =
        "[[response]]\ntext = \"answer on a\"\n\n[[response]]\ntext = \"answer on b\"\n";
    let mock = MockLlm::script(SCRIPT, &[]).await;
    let cluster = cluster().await;
    let db = cluster.fresh_database().await;
    let url = cluster.tcp_url(&db);
    let a = Server::start_with_config(&node_config(&mock.base_url(), &url, "node-a")).await;
    let mut b = Server::start_with_config(&node_config(&mock.base_url(), &url, "node-b")).await;
    let project = a.api.create_project(&a.project_dir()).await;
    let mut sessions = Vec::new();
    for (node, api) in [("node-a", &a.api), ("node-b", &b.api)] {
        let thread = api.create_thread(&project).await;
        let run = api.post_message(&thread, "hello").await;
        let (_, ended) = api.follow_run(&thread, &run, 0).await;
        assert_eq!(ended.status, RunStatus::Completed);
        let p = poll_until("the run's session row", RUN_TIMEOUT, || async {
            let p = api.projection(&thread).await;
            (p.thread.active_run_id.is_none() && !p.provider_sessions.is_empty()).then_some(p)
        })
        .await;
        let session = p.provider_sessions[0].clone();
        assert_eq!(session.id.node(), node, "{:?}", session.id);
        sessions.push(session);
    }
    assert_ne!(sessions[0].id, sessions[1].id);
    let a_session = sessions[0].clone();
    assert_ne!(a_session.status, SessionStatus::Stopped, "{a_session:?}");

    // B crashes and restarts: its boot settles its own session only.
    assert!(!b.proc.kill_hard().await.success());
    b.respawn().await;
    let store = knife_store_postgres::open(&cluster.url(&db)).await.unwrap();
    let b_row = store
        .get_provider_session(&sessions[1].id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(b_row.status, SessionStatus::Stopped, "{b_row:?}");
    let a_row = store
        .get_provider_session(&a_session.id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        a_row.status, a_session.status,
        "node B touched node A's session: {a_row:?}"
    );
    drop(a);
}

/// SCALE-10: `knife bench cluster` at a tiny size against the test cluster: three
/// nodes append, and the table states the batch size, `synchronous_commit` and
/// group-commit size of each row, events/s, and cross-node delivery p50/p99 over every
/// event seen by the two other nodes. The figures themselves are the bench's to print, not asserted here.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(knife_has_postgres),
    ignore = "needs PostgreSQL (Debian package postgresql, or KNIFE_PG_BIN)"
)]
async fn scale_10_bench_cluster_prints_events_per_second_and_cross_node_delivery() {
    let cluster = cluster().await;
    let dir = tempfile::tempdir().unwrap();
    let out = tokio::time::timeout(
        Duration::from_secs(120),
        knife_command(dir.path())
            .args(["bench", "cluster", "--database"])
            .arg(cluster.url("postgres"))
            .args(["--events", "300", "--batch", "10", "--writers", "1"])
            .args(["--synchronous-commit", "on,off", "--group-appends", "1,64"])
            .output(),
    )
    .await
    .expect("the bench to finish within 120 s")
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(
        lines[0].contains("3 nodes") && lines[0].contains("batch size 10"),
        "{stdout}"
    );
    let header: Vec<&str> = lines[1].split_whitespace().collect();
    assert_eq!(
        header,
        [
            "synchronous_commit",
            "batch",
            "size",
            "group",
            "events/s",
            "delivery",
            "p50",
            "delivery",
            "p99",
            "delivery",
            "max",
            "deliveries"
        ],
        "{stdout}"
    );
    let rows = [("on", "1"), ("on", "64"), ("off", "1"), ("off", "64")];
    for (line, (sync, group)) in lines[2..].iter().zip(rows) {
        let cells: Vec<&str> = line.split_whitespace().collect();
        // on 10 64 1234 3.1 ms 9.8 ms 12.0 ms 600
        assert_eq!(cells.len(), 11, "{line}");
        assert_eq!((cells[0], cells[1], cells[2]), (sync, "10", group));
        assert!(cells[3].parse::<f64>().unwrap() > 0.0, "{line}");
        let p50: f64 = cells[4].parse().unwrap();
        let p99: f64 = cells[6].parse().unwrap();
        assert!(p50 <= p99, "{line}");
        assert_eq!((cells[5], cells[7], cells[9]), ("ms", "ms", "ms"));
        // 300 events, each seen by the two nodes that did not write it.
        assert_eq!(cells[10], "600", "{line}");
    }
    assert_eq!(lines.len(), 6, "{stdout}");
}
