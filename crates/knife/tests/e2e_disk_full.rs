//! `knife serve` on a full disk (SPEC.md SEC-07), for real: the data directory sits
//! on a small tmpfs that bubblewrap mounts (no root needed). A server is SIGKILLed,
//! the disk is filled to the last page, and a new server still starts on it, says
//! what it cannot do (`/healthz/detail`), answers writes 507 `disk_full` with what to
//! do, keeps the log intact, and writes again once space is freed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use common::*;
use reqwest::StatusCode;
use serde_json::json;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::mpsc;

/// The script bubblewrap runs with a 4 MiB tmpfs at `$DISK`: each phase waits for a
/// file the test creates in `$CTL` (outside the tmpfs), so the test drives it.
const SCRIPT: &str = r#"
set -u
data="$DISK/data"
mkdir -p "$data"
serve() {
  "$KNIFE" serve --config "$CTL/knife.toml" --listen 127.0.0.1:0 --data-dir "$data" &
  echo "$!" >> "$CTL/pids"
}
await() { while [ ! -e "$CTL/$1" ]; do sleep 0.02; done; }
serve; first=$!
await crash
kill -KILL "$first"; wait "$first" 2>/dev/null
# Fill the disk to its last page.
dd if=/dev/zero of="$DISK/ballast" bs=4096 2>/dev/null
touch "$CTL/filled"
serve; second=$!
await free
rm -f "$DISK/ballast"
touch "$CTL/freed"
wait "$second"
"#;

/// Kills every server the script started (their pids are in `pids`) when the test ends
/// or panics: killing bubblewrap does not reach the servers its shell started.
struct KillServers(std::path::PathBuf);

impl Drop for KillServers {
    fn drop(&mut self) {
        let pids = std::fs::read_to_string(&self.0).unwrap_or_default();
        for pid in pids.split_whitespace() {
            let _ = std::process::Command::new("kill")
                .args(["-KILL", pid])
                .status();
        }
    }
}

async fn until_file(path: &Path) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while !path.exists() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no {}",
            path.display()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The next server's API, once it printed its listening line and answers `/healthz`.
async fn next_server(urls: &mut mpsc::UnboundedReceiver<String>) -> Api {
    let url = tokio::time::timeout(Duration::from_secs(30), urls.recv())
        .await
        .expect("a knife serve printed its listening line")
        .expect("the script is still running");
    let api = Api::new(&url);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while !api.healthy().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{url} never healthy"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    api
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(not(knife_has_bwrap), ignore = "needs bubblewrap: run scripts/test")]
async fn sec_07_knife_starts_on_a_full_disk_says_what_it_cannot_do_and_writes_once_space_returns() {
    let ctl = tempfile::tempdir().unwrap();
    let disk = ctl.path().join("disk");
    std::fs::create_dir(&disk).unwrap();
    let project = ctl.path().join("project");
    std::fs::create_dir(&project).unwrap();
    let other = ctl.path().join("other");
    std::fs::create_dir(&other).unwrap();
    let mock = MockLlm::script("[[response]]\ntext = \"hi\"\n", &[]).await;
    std::fs::write(ctl.path().join("knife.toml"), config_toml(&mock.base_url())).unwrap();

    let mut cmd = knife_command(ctl.path());
    // `knife_command` targets the knife binary; run bubblewrap with the same scrubbed
    // environment instead, the knife binary given to the script.
    let std = cmd.as_std_mut();
    let mut bwrap = tokio::process::Command::new("bwrap");
    for (key, value) in std.get_envs() {
        match value {
            Some(v) => bwrap.env(key, v),
            None => bwrap.env_remove(key),
        };
    }
    bwrap
        .args(["--dev-bind", "/", "/", "--size", "4194304", "--tmpfs"])
        .arg(&disk)
        .args(["--die-with-parent", "sh", "-c", SCRIPT])
        .env("KNIFE", knife_bin())
        .env("CTL", ctl.path())
        .env("DISK", &disk)
        .current_dir(ctl.path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let _servers = KillServers(ctl.path().join("pids"));
    let mut child = bwrap.spawn().expect("run bwrap");
    let (tx, mut urls) = mpsc::unbounded_channel();
    let stdout = child.stdout.take().unwrap();
    tokio::spawn(async move {
        let mut lines = BufReader::new(stdout).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            eprintln!("[serve stdout] {line}");
            if let Some(rest) = line.split("listening on ").nth(1) {
                let url: String = rest.chars().take_while(|c| !c.is_whitespace()).collect();
                let _ = tx.send(url.trim_end_matches('/').to_owned());
            }
        }
    });
    let stderr = child.stderr.take().unwrap();
    let log = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let sink = log.clone();
    tokio::spawn(async move {
        let mut lines = BufReader::new(stderr).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            eprintln!("[serve] {line}");
            sink.lock().unwrap().push_str(&format!("{line}\n"));
        }
    });

    // A first server records a project, then dies without any shutdown.
    let first = next_server(&mut urls).await;
    let project_id = first.create_project(&project).await;
    std::fs::write(ctl.path().join("crash"), "").unwrap();
    until_file(&ctl.path().join("filled")).await;

    // The disk is full, and a new server starts on it anyway.
    let second = next_server(&mut urls).await;
    let (status, detail) = second.get("/healthz/detail").await;
    assert_eq!(status, StatusCode::OK);
    let disk_json = &detail["disk"];
    assert_eq!(disk_json["low"], true, "{detail}");
    assert!(
        disk_json["free_bytes"].as_u64().unwrap() < 64 * 1024,
        "{detail}"
    );
    assert!(
        disk_json["note"]
            .as_str()
            .unwrap()
            .contains("cannot start or end runs"),
        "says what it cannot do: {detail}"
    );
    assert!(
        log.lock().unwrap().contains("nearly full"),
        "the log says so at boot:\n{}",
        log.lock().unwrap()
    );
    // Reads work and the log is intact.
    let (status, projects) = second.get("/api/projects").await;
    assert_eq!(status, StatusCode::OK);
    assert!(projects.to_string().contains(&project_id), "{projects}");
    // A write is refused with what happened and what to do, and loses nothing.
    let body = json!({ "root": other.display().to_string() });
    let (status, refused) = second.post("/api/projects", &body).await;
    assert_eq!(status, StatusCode::INSUFFICIENT_STORAGE, "{refused}");
    assert_eq!(refused["error"]["code"], "disk_full", "{refused}");
    let message = refused["error"]["message"].as_str().unwrap();
    assert!(message.contains("free space"), "{message}");

    // Space returns: the same write goes through on the same server.
    std::fs::write(ctl.path().join("free"), "").unwrap();
    until_file(&ctl.path().join("freed")).await;
    let (status, created) = second.post("/api/projects", &body).await;
    assert!(status.is_success(), "{status} {created}");
    let (_, projects) = second.get("/api/projects").await;
    assert!(projects.to_string().contains(&project_id), "{projects}");
    assert!(
        projects.to_string().contains(&*other.display().to_string()),
        "{projects}"
    );
    let _ = child.start_kill();
}
