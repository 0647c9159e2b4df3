//! Process groups left by a dead server are killed at the next boot; groups already
//! gone and pids reused by other processes are only forgotten.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::process::CommandExt;
use std::os::unix::process::ExitStatusExt;
use std::process::Command;
use std::time::Duration;

use knife_process::signals::process_start_ticks;
use knife_runtime::process_groups::kill_leftover_process_groups;
use knife_store::ProcessGroupRecord;

fn record(pgid: i32, leader_start: Option<u64>) -> ProcessGroupRecord {
    ProcessGroupRecord {
        node: "local".into(),
        pgid,
        // Not this process: a previous server.
        owner_pid: std::process::id() + 1,
        leader_start,
        thread_id: None,
        label: format!("sleep {pgid}"),
        registered_at: chrono::Utc::now(),
    }
}

fn spawn_group() -> std::process::Child {
    Command::new("sleep")
        .arg("100")
        .process_group(0)
        .spawn()
        .unwrap()
}

#[tokio::test]
async fn leftover_groups_are_killed_and_forgotten_reused_pids_are_spared() {
    let dir = tempfile::tempdir().unwrap();
    let store = knife_store_sqlite::open(dir.path().join("knife.db"))
        .await
        .unwrap();
    let mut leftover = spawn_group();
    let mut reused = spawn_group();
    let leftover_pgid = i32::try_from(leftover.id()).unwrap();
    let reused_pgid = i32::try_from(reused.id()).unwrap();
    let start = process_start_ticks(leftover.id());
    assert!(start.is_some(), "/proc is readable");
    store
        .register_process_group(record(leftover_pgid, start))
        .await
        .unwrap();
    // Recorded with another start time: the pid now belongs to someone else.
    store
        .register_process_group(record(reused_pgid, start.map(|s| s + 12_345)))
        .await
        .unwrap();
    // A group that no longer exists.
    store
        .register_process_group(record(i32::MAX - 7, None))
        .await
        .unwrap();
    // This process's own groups are never touched.
    store
        .register_process_group(ProcessGroupRecord {
            owner_pid: std::process::id(),
            ..record(i32::MAX - 9, None)
        })
        .await
        .unwrap();

    let report = kill_leftover_process_groups(&store).await.unwrap();
    assert_eq!(report.killed.len(), 1, "{report:?}");
    assert_eq!(report.killed[0].0, leftover_pgid);
    assert_eq!(report.gone, 2);
    let status = tokio::task::spawn_blocking(move || leftover.wait().unwrap())
        .await
        .unwrap();
    assert_eq!(status.signal(), Some(9), "{status:?}");
    // The reused pid's process is alive.
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(reused.try_wait().unwrap().is_none());
    reused.kill().unwrap();
    reused.wait().unwrap();
    let left: Vec<i32> = store
        .list_process_groups()
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.pgid)
        .collect();
    assert_eq!(left, vec![i32::MAX - 9]);
}

/// SCALE-07: on a database shared by several nodes, a node at boot kills only the
/// leftovers its own node recorded; a group another node recorded (here a live process
/// whose pid would be another host's) is neither signalled nor forgotten.
#[tokio::test]
async fn scale_07_a_restarted_node_kills_only_its_own_leftovers_never_another_node_s_pids() {
    let dir = tempfile::tempdir().unwrap();
    let shared = knife_store_sqlite::open(dir.path().join("knife.db"))
        .await
        .unwrap();
    let node_a = shared.clone().with_node(knife_store::NodeLeases::new(
        "node-a",
        Duration::from_secs(10),
    ));
    let mut mine = spawn_group();
    let mut theirs = spawn_group();
    let (mine_pgid, theirs_pgid) = (
        i32::try_from(mine.id()).unwrap(),
        i32::try_from(theirs.id()).unwrap(),
    );
    node_a
        .register_process_group(ProcessGroupRecord {
            node: "node-a".into(),
            ..record(mine_pgid, process_start_ticks(mine.id()))
        })
        .await
        .unwrap();
    node_a
        .register_process_group(ProcessGroupRecord {
            node: "node-b".into(),
            ..record(theirs_pgid, process_start_ticks(theirs.id()))
        })
        .await
        .unwrap();

    let report = kill_leftover_process_groups(&node_a).await.unwrap();
    assert_eq!(
        report.killed,
        vec![(mine_pgid, format!("sleep {mine_pgid}"))]
    );
    assert_eq!(report.other_nodes, 1, "{report:?}");
    let status = tokio::task::spawn_blocking(move || mine.wait().unwrap())
        .await
        .unwrap();
    assert_eq!(status.signal(), Some(9), "{status:?}");
    // node-b's group lives on and stays recorded for node-b.
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(
        theirs.try_wait().unwrap().is_none(),
        "another node's group was signalled"
    );
    let left: Vec<(String, i32)> = node_a
        .list_process_groups()
        .await
        .unwrap()
        .into_iter()
        .map(|r| (r.node, r.pgid))
        .collect();
    assert_eq!(left, vec![("node-b".to_owned(), theirs_pgid)]);
    theirs.kill().unwrap();
    theirs.wait().unwrap();
}
