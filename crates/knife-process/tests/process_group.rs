//! `ProcessGroup` over real processes (real time, short timeouts): the time-boxed
//! SIGTERM → SIGKILL, the record's register/unregister, kill on drop, the sandbox seam.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use knife_process::{
    GroupRecord, GroupRecorder, Launch, ProcessGroup, RecordError, Sandbox, SandboxError,
    SpawnError, SpawnSpec, group_alive,
};
use tokio::io::AsyncReadExt;

fn sh(script: &str) -> Launch {
    let mut launch = Launch::new("sh", std::env::temp_dir());
    launch.args = vec!["-c".into(), script.into()];
    launch
}

/// Records the recorder's calls in order, checking the record against the live group.
#[derive(Default)]
struct Recorded(Mutex<Vec<(&'static str, u32, bool)>>);

#[async_trait::async_trait]
impl GroupRecorder for Recorded {
    async fn register(&self, group: &GroupRecord) -> Result<(), RecordError> {
        let ours = group.is_still_ours();
        self.0.lock().unwrap().push(("register", group.pgid, ours));
        Ok(())
    }
    async fn unregister(&self, group: &GroupRecord) -> Result<(), RecordError> {
        let ours = group.is_still_ours();
        self.0
            .lock()
            .unwrap()
            .push(("unregister", group.pgid, ours));
        Ok(())
    }
}

async fn until_gone(pgid: u32) -> bool {
    for _ in 0..500 {
        if !group_alive(pgid) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    false
}

#[tokio::test]
async fn terminate_kills_a_group_that_ignores_sigterm_and_reaps_it() {
    // The trap is inherited by the background `sleep`: both ignore SIGTERM.
    let group = ProcessGroup::spawn(SpawnSpec::new(
        sh("trap '' TERM; sleep 30 & sleep 30"),
        "test: stubborn",
    ))
    .await
    .unwrap();
    let pgid = group.pgid();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(group_alive(pgid));
    let end = group.terminate(Duration::from_millis(200)).await;
    assert!(end.had_members);
    assert!(end.killed, "SIGTERM was ignored, so SIGKILL was needed");
    assert!(end.gone);
    assert!(end.leader.is_some(), "the leader was reaped");
    assert!(!group_alive(pgid));
}

#[tokio::test]
async fn terminate_ends_members_the_leader_left_behind_with_sigterm() {
    let mut group = ProcessGroup::spawn(SpawnSpec::new(sh("sleep 30 & exit 3"), "test: orphan"))
        .await
        .unwrap();
    let status = group.wait_leader().await.unwrap();
    assert_eq!(status.code(), Some(3));
    let pgid = group.pgid();
    assert!(group_alive(pgid), "the background sleep lives on");
    let end = group.terminate(Duration::from_secs(5)).await;
    assert!(end.had_members);
    assert!(!end.killed, "sleep dies of SIGTERM");
    assert!(end.gone);
    assert_eq!(end.leader.and_then(|s| s.code()), Some(3));
}

#[tokio::test]
async fn the_recorder_sees_the_live_group_registered_and_the_gone_group_unregistered() {
    let recorded = Arc::new(Recorded::default());
    let mut spec = SpawnSpec::new(sh("sleep 30"), "test: recorded");
    spec.recorder = Some(recorded.clone());
    let group = ProcessGroup::spawn(spec).await.unwrap();
    let pgid = group.pgid();
    assert_eq!(group.record().label, "test: recorded");
    assert_eq!(
        recorded.0.lock().unwrap().clone(),
        vec![("register", pgid, true)]
    );
    group.terminate(Duration::from_secs(1)).await;
    assert_eq!(
        recorded.0.lock().unwrap().clone(),
        vec![("register", pgid, true), ("unregister", pgid, false)]
    );
}

#[tokio::test]
async fn dropping_the_group_kills_it_and_forgets_the_record() {
    let recorded = Arc::new(Recorded::default());
    let mut spec = SpawnSpec::new(sh("trap '' TERM; sleep 30 & sleep 30"), "test: dropped");
    spec.recorder = Some(recorded.clone());
    spec.drop_grace = Duration::from_millis(100);
    let group = ProcessGroup::spawn(spec).await.unwrap();
    let pgid = group.pgid();
    drop(group);
    assert!(until_gone(pgid).await, "the dropped group was killed");
    for _ in 0..200 {
        if recorded.0.lock().unwrap().len() == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(recorded.0.lock().unwrap()[1].0, "unregister");
}

#[test]
fn dropping_the_group_outside_a_runtime_sends_sigkill() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let group = rt
        .block_on(ProcessGroup::spawn(SpawnSpec::new(
            sh("trap '' TERM; sleep 30"),
            "test: no runtime",
        )))
        .unwrap();
    let pgid = group.pgid();
    drop(rt);
    drop(group);
    let gone = (0..500).any(|_| {
        std::thread::sleep(Duration::from_millis(10));
        !group_alive(pgid)
    });
    assert!(gone);
}

/// Prefixes the command with `env SANDBOXED=1` and drops `HOME`, as a bubblewrap
/// sandbox prefixes `bwrap … --`.
#[derive(Debug)]
struct EnvPrefix;

impl Sandbox for EnvPrefix {
    fn apply(&self, launch: &mut Launch) -> Result<(), SandboxError> {
        let mut args = vec!["SANDBOXED=1".into(), launch.program.clone()];
        args.append(&mut launch.args);
        launch.program = "env".into();
        launch.args = args;
        launch.env_remove.push("HOME".into());
        Ok(())
    }
}

#[derive(Debug)]
struct Refuse;

impl Sandbox for Refuse {
    fn apply(&self, _launch: &mut Launch) -> Result<(), SandboxError> {
        Err("no sandbox here".into())
    }
}

#[tokio::test]
async fn a_sandbox_rewrites_the_launch_before_the_spawn() {
    let mut spec = SpawnSpec::new(sh("echo \"$SANDBOXED:${HOME:-none}\""), "test: sandboxed");
    spec.stdout = std::process::Stdio::piped();
    spec.sandbox = Some(Arc::new(EnvPrefix));
    let mut group = ProcessGroup::spawn(spec).await.unwrap();
    let mut out = String::new();
    group
        .take_stdout()
        .unwrap()
        .read_to_string(&mut out)
        .await
        .unwrap();
    assert_eq!(out.trim(), "1:none");
    assert!(group.wait_leader().await.unwrap().success());
    assert!(group.terminate(Duration::from_secs(1)).await.gone);
}

#[tokio::test]
async fn a_refusing_sandbox_starts_nothing_and_says_why() {
    let recorded = Arc::new(Recorded::default());
    let mut spec = SpawnSpec::new(sh("exit 0"), "test: refused");
    spec.sandbox = Some(Arc::new(Refuse));
    spec.recorder = Some(recorded.clone());
    let err = ProcessGroup::spawn(spec).await.unwrap_err();
    assert!(matches!(err, SpawnError::Sandbox { .. }), "{err:?}");
    assert!(err.to_string().contains("no sandbox here"), "{err}");
    assert!(recorded.0.lock().unwrap().is_empty());
}

#[tokio::test]
async fn a_missing_program_is_a_spawn_error_of_kind_not_found() {
    let err = ProcessGroup::spawn(SpawnSpec::new(
        Launch::new("knife-no-such-program", std::env::temp_dir()),
        "test: missing",
    ))
    .await
    .unwrap_err();
    assert_eq!(err.io_kind(), Some(std::io::ErrorKind::NotFound));
    assert!(err.to_string().contains("knife-no-such-program"), "{err}");
}

#[tokio::test]
async fn env_clear_and_env_set_shape_the_environment() {
    let mut launch = sh("echo \"${PATH:-nopath}:$ONLY\"");
    launch.env_clear = true;
    launch.env.push(("ONLY".into(), "this".into()));
    let mut spec = SpawnSpec::new(launch, "test: env");
    spec.stdout = std::process::Stdio::piped();
    // `sh` is found through knife's PATH even though the child's is empty.
    let mut group = ProcessGroup::spawn(spec).await.unwrap();
    let mut out = String::new();
    group
        .take_stdout()
        .unwrap()
        .read_to_string(&mut out)
        .await
        .unwrap();
    assert!(out.trim().ends_with(":this"), "{out}");
    group.terminate(Duration::from_secs(1)).await;
}
