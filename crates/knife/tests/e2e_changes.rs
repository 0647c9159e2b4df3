// Checkpoints, change sets, diffs and reverts through the real binary (SPEC.md CHG):
// the built-in agent editing with `write` and `bash` against the mock LLM, real git.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use knife_protocol::*;

/// Run 1 writes `hello.txt` with `write` and `notes/todo.md` with `bash`; run 2
/// edits `hello.txt` with `bash` and deletes `notes/todo.md`.
const SCRIPT: &str = r#"
[[response]]
[[response.tool_calls]]
name = "write"
arguments = { path = "hello.txt", content = "hello\nworld\n" }
[[response.tool_calls]]
name = "bash"
arguments = { command = "mkdir -p notes && printf 'one\ntwo\n' > notes/todo.md" }

[[response]]
text = "wrote two files"

[[response]]
[[response.tool_calls]]
name = "bash"
arguments = { command = "printf 'hello\nthere\nworld\n' > hello.txt && rm notes/todo.md" }

[[response]]
text = "edited"
"#;

fn allow_all(base_url: &str) -> String {
    format!(
        "{}\n[[permissions]]\ntool = \"*\"\naction = \"allow\"\n",
        config_toml(base_url)
    )
}

async fn run_to_end(api: &Api, thread: &str, text: &str) -> Run {
    let run = api.post_message(thread, text).await;
    let (_, done) = api.follow_run(thread, &run, 0).await;
    done
}

fn file<'a>(changes: &'a ChangeSet, path: &str) -> &'a FileChange {
    changes
        .files
        .iter()
        .find(|f| f.path == path)
        .unwrap_or_else(|| panic!("{path} not in {changes:#?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chg_01_chg_02_builtin_agent_runs_get_checkpoints_and_change_sets_of_write_and_bash() {
    let mock = MockLlm::script(SCRIPT, &[]).await;
    let server = Server::start_with_config(&allow_all(&mock.base_url())).await;
    let api = &server.api;
    let project_dir = server.project_dir();
    std::fs::write(project_dir.join(".gitignore"), "ignored.log\n").unwrap();
    std::fs::write(project_dir.join("ignored.log"), "never checkpointed\n").unwrap();
    let project = api.create_project(&project_dir).await;
    let thread = api.create_thread(&project).await;

    let run1 = run_to_end(api, &thread, "write two files").await;
    assert_eq!(run1.status, RunStatus::Completed, "{run1:?}");
    let start = run1.checkpoints.start.clone().expect("start checkpoint");
    let end = run1.checkpoints.end.clone().expect("end checkpoint");
    assert_eq!(
        start.git_ref,
        format!("refs/knife/threads/{thread}/runs/1/start")
    );
    assert_ne!(start.tree, end.tree);
    let changes = run1.changes.clone().expect("change set");
    assert_eq!(file(&changes, "hello.txt").kind, FileChangeKind::Added);
    assert_eq!(file(&changes, "hello.txt").added, 2);
    assert_eq!(file(&changes, "notes/todo.md").kind, FileChangeKind::Added);
    assert!(changes.files.iter().all(|f| f.path != "ignored.log"));
    // The checkpoint repository is knife's, under the data dir; the project has no .git.
    assert!(server.data_dir().join("checkpoints").is_dir());
    assert!(!project_dir.join(".git").exists());

    let run2 = run_to_end(api, &thread, "edit them").await;
    let changes = run2.changes.clone().expect("change set of run 2");
    let hello = file(&changes, "hello.txt");
    assert_eq!(hello.kind, FileChangeKind::Modified);
    assert_eq!((hello.added, hello.removed), (1, 0));
    assert_eq!(
        file(&changes, "notes/todo.md").kind,
        FileChangeKind::Deleted
    );

    // The projection has the change set; the log has both checkpoints of the run.
    let p = api.projection(&thread).await;
    let stored = p.runs.iter().find(|r| r.ordinal == 2).unwrap();
    assert_eq!(stored.changes, run2.changes);
    let (events, _) = api.follow_run(&thread, &run2.id.0, 0).await;
    let kinds: Vec<CheckpointKind> = events
        .iter()
        .filter_map(|e| match &e.event.body {
            EventBody::CheckpointRecorded(c) if c.run_id.as_ref() == Some(&run2.id) => Some(c.kind),
            _ => None,
        })
        .collect();
    assert_eq!(
        kinds,
        vec![CheckpointKind::RunStart, CheckpointKind::RunEnd]
    );
}

/// Two runs of [`SCRIPT`] on a fresh server; returns (server, mock, thread).
async fn two_runs(extra_script: &str) -> (Server, MockLlm, String) {
    let mock = MockLlm::script(&format!("{SCRIPT}{extra_script}"), &[]).await;
    let server = Server::start_with_config(&allow_all(&mock.base_url())).await;
    std::fs::write(server.project_dir().join("keep.txt"), "not touched\n").unwrap();
    let project = server.api.create_project(&server.project_dir()).await;
    let thread = server.api.create_thread(&project).await;
    assert_eq!(
        run_to_end(&server.api, &thread, "one").await.status,
        RunStatus::Completed
    );
    assert_eq!(
        run_to_end(&server.api, &thread, "two").await.status,
        RunStatus::Completed
    );
    (server, mock, thread)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chg_03_diff_route_and_cli_show_a_runs_unified_diff_and_file_stats() {
    let (server, _mock, thread) = two_runs("").await;
    let api = &server.api;
    let (status, body) = api.get(&format!("/api/threads/{thread}/runs/2/diff")).await;
    assert!(status.is_success(), "{body}");
    let diff: RunDiff = serde_json::from_value(body).unwrap();
    assert_eq!(diff.run_ordinal, 2);
    assert!(diff.diff.contains("+there"), "{}", diff.diff);
    assert!(diff.diff.contains("deleted file mode"), "{}", diff.diff);
    assert_eq!(diff.files.len(), 2);
    assert!(!diff.truncated);
    let (status, body) = api.get(&format!("/api/threads/{thread}/runs/9/diff")).await;
    assert_eq!(status.as_u16(), 404, "{body}");
    assert_api_error(&body, "not_found");

    // The CLI finds the server through the data dir; piped output has no colour.
    let data = server.data_dir();
    let out = run_cli(
        server.path(),
        &["diff", &thread, "1", "--data-dir", data.to_str().unwrap()],
    )
    .await;
    assert!(out.status.success(), "{}", out.stderr);
    assert!(out.stdout.contains("A hello.txt  +2 -0"), "{}", out.stdout);
    assert!(out.stdout.contains("+world"), "{}", out.stdout);
    assert!(!out.stdout.contains('\x1b'), "{}", out.stdout);
    // Default run = the last; the colours of a terminal are a pure rendering.
    let out = run_cli(
        server.path(),
        &[
            "diff",
            &thread,
            "--stat",
            "--data-dir",
            data.to_str().unwrap(),
        ],
    )
    .await;
    assert!(out.stdout.contains("run 2 of"), "{}", out.stdout);
    assert!(out.stdout.contains("D notes/todo.md"), "{}", out.stdout);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chg_04_revert_restores_files_of_later_runs_refuses_conflicts_and_undoes() {
    let third = "\n[[response]]\ntext = \"third run\"\n";
    let (server, mock, thread) = two_runs(third).await;
    let api = &server.api;
    let dir = server.project_dir();
    // A person edits a file run 2 touched, after the thread's last checkpoint.
    std::fs::write(dir.join("hello.txt"), "a person's edit\n").unwrap();
    let (status, body) = api
        .post(
            &format!("/api/threads/{thread}/runs/1/revert"),
            &serde_json::json!({}),
        )
        .await;
    assert_eq!(status.as_u16(), 409, "{body}");
    assert_api_error(&body, "revert_conflict");
    assert_eq!(body["error"]["files"], serde_json::json!(["hello.txt"]));
    // Nothing was written.
    assert_eq!(
        std::fs::read_to_string(dir.join("hello.txt")).unwrap(),
        "a person's edit\n"
    );

    // force: run 1 and run 2 are undone: both files run 1 added are gone.
    let (status, body) = api
        .post(
            &format!("/api/threads/{thread}/runs/1/revert"),
            &serde_json::json!({"force": true}),
        )
        .await;
    assert!(status.is_success(), "{body}");
    let revert: Revert = serde_json::from_value(body).unwrap();
    assert_eq!(revert.status, RevertStatus::Applied);
    assert_eq!(revert.files, vec!["hello.txt", "notes/todo.md"]);
    assert!(!dir.join("hello.txt").exists());
    assert!(!dir.join("notes/todo.md").exists());
    assert_eq!(
        std::fs::read_to_string(dir.join("keep.txt")).unwrap(),
        "not touched\n"
    );
    let (_, listed) = api.get(&format!("/api/threads/{thread}/reverts")).await;
    assert_eq!(listed[0]["id"], revert.id.0.as_str());

    // Undo restores what the revert replaced (the person's edit included).
    let (status, body) = api
        .post(
            &format!("/api/threads/{thread}/reverts/{}/undo", revert.id),
            &serde_json::json!({}),
        )
        .await;
    assert!(status.is_success(), "{body}");
    assert_eq!(body["status"], "undone");
    assert_eq!(
        std::fs::read_to_string(dir.join("hello.txt")).unwrap(),
        "a person's edit\n"
    );
    assert!(!dir.join("notes/todo.md").exists(), "run 2 had deleted it");

    // Revert run 2 only (CLI): hello.txt back to run 1's output, todo.md back.
    let data = server.data_dir();
    let out = run_cli(
        server.path(),
        &[
            "revert",
            &thread,
            "2",
            "--force",
            "--data-dir",
            data.to_str().unwrap(),
        ],
    )
    .await;
    assert!(out.status.success(), "{}", out.stderr);
    assert!(out.stdout.contains("notes/todo.md"), "{}", out.stdout);
    assert_eq!(
        std::fs::read_to_string(dir.join("hello.txt")).unwrap(),
        "hello\nworld\n"
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("notes/todo.md")).unwrap(),
        "one\ntwo\n"
    );

    // The next run is told which files were reverted.
    run_to_end(api, &thread, "three").await;
    let requests: serde_json::Value = reqwest::get(format!("{}/_mock/requests", mock.proc.url()))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let last = requests.as_array().unwrap().last().unwrap()["body_text"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        last.contains("reverted to their state before run 2"),
        "{last}"
    );
    assert!(last.contains("notes/todo.md"), "{last}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chg_04_a_revert_while_a_run_is_active_answers_409() {
    let script = r#"
[[response]]
[[response.tool_calls]]
name = "write"
arguments = { path = "a.txt", content = "a\n" }
[[response]]
text = "done"
[[response]]
[[response.tool_calls]]
name = "bash"
arguments = { command = "sleep 20" }
[[response]]
text = "slept"
"#;
    let mock = MockLlm::script(script, &[]).await;
    let server = Server::start_with_config(&allow_all(&mock.base_url())).await;
    let api = &server.api;
    let project = api.create_project(&server.project_dir()).await;
    let thread = api.create_thread(&project).await;
    run_to_end(api, &thread, "one").await;
    let run = api.post_message(&thread, "sleep").await;
    let (status, body) = api
        .post(
            &format!("/api/threads/{thread}/runs/1/revert"),
            &serde_json::json!({}),
        )
        .await;
    assert_eq!(status.as_u16(), 409, "{body}");
    assert_api_error(&body, "run_in_progress");
    assert!(server.project_dir().join("a.txt").exists());
    api.post(
        &format!("/api/threads/{thread}/interrupt"),
        &serde_json::json!({}),
    )
    .await;
    let (_, done) = api.follow_run(&thread, &run, 0).await;
    assert_eq!(done.status, RunStatus::Interrupted);
    assert!(
        done.checkpoints.end.is_some(),
        "an interrupted run gets its end checkpoint"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chg_10_a_run_cut_short_by_sigkill_gets_its_end_checkpoint_after_boot() {
    let script = r#"
[[response]]
[[response.tool_calls]]
name = "bash"
arguments = { command = "printf 'made before the crash\n' > made.txt && sleep 30" }

[[response]]
text = "resumed"
"#;
    let mock = MockLlm::script(script, &[]).await;
    let mut server = Server::start_with_config(&allow_all(&mock.base_url())).await;
    let project = server.api.create_project(&server.project_dir()).await;
    let thread = server.api.create_thread(&project).await;
    let run1 = server.api.post_message(&thread, "make a file").await;
    let made = server.project_dir().join("made.txt");
    poll_until("the command to write its file", RUN_TIMEOUT, || async {
        made.exists().then_some(())
    })
    .await;
    server.proc.kill_hard().await;
    server.respawn().await;

    let p = poll_until("the resumed run to finish", RUN_TIMEOUT, || async {
        let p = server.api.projection(&thread).await;
        (p.runs.len() == 2
            && p.runs.iter().all(|r| r.status.is_terminal())
            && p.runs.iter().all(|r| r.checkpoints.end.is_some()))
        .then_some(p)
    })
    .await;
    let first = p.runs.iter().find(|r| r.id.as_str() == run1).unwrap();
    assert_eq!(first.status, RunStatus::Interrupted);
    let end = first.checkpoints.end.clone().unwrap();
    let changes = first.changes.clone().expect("change set of the killed run");
    assert!(
        changes.files.iter().any(|f| f.path == "made.txt"),
        "{changes:?}"
    );
    // The continuation run starts from that same checkpoint (taken once).
    let second = p.runs.iter().find(|r| r.ordinal == 2).unwrap();
    assert_eq!(
        second.checkpoints.start.as_ref().unwrap().commit,
        end.commit
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chg_10_a_revert_cut_short_by_a_crash_is_finished_at_boot() {
    let (mut server, _mock, thread) = two_runs("").await;
    let api = server.api.clone();
    let p = api.projection(&thread).await;
    let run2 = p.runs.iter().find(|r| r.ordinal == 2).unwrap().clone();
    let status = server.proc.terminate().await;
    assert!(status.success());
    // The state a SIGKILL between two renames of `revert` of run 2 leaves: the
    // journal says `applying`, todo.md is back, hello.txt not yet, its temp file half written.
    let dir = server.project_dir();
    let store = knife_store_sqlite::open(server.data_dir().join("knife.db"))
        .await
        .unwrap();
    let t = store
        .get_thread(&ThreadId::from(thread.as_str()))
        .await
        .unwrap()
        .unwrap();
    let project = store.get_project(&t.project_id).await.unwrap().unwrap();
    let id = RevertId::new();
    let now = chrono::Utc::now();
    let revert = Revert {
        id: id.clone(),
        thread_id: t.id.clone(),
        project_id: t.project_id.clone(),
        root: project.root.clone(),
        run_ordinal: 2,
        runs_before: 2,
        status: RevertStatus::Applying,
        files: vec!["hello.txt".into(), "notes/todo.md".into()],
        target: run2.checkpoints.start.clone().unwrap(),
        before: run2.checkpoints.end.clone().unwrap(),
        after: None,
        after_undo: None,
        forced: false,
        error: None,
        created_at: now,
        updated_at: now,
    };
    store
        .write(vec![DomainEvent::new(
            now,
            EventBody::RevertUpdated(revert),
        )])
        .await
        .unwrap();
    drop(store);
    std::fs::create_dir_all(dir.join("notes")).unwrap();
    std::fs::write(dir.join("notes/todo.md"), "one\ntwo\n").unwrap();
    let temp = dir.join(format!(".hello.txt.knife-{id}.tmp"));
    std::fs::write(&temp, "hel").unwrap();

    server.respawn().await;
    assert_eq!(
        std::fs::read_to_string(dir.join("hello.txt")).unwrap(),
        "hello\nworld\n"
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("notes/todo.md")).unwrap(),
        "one\ntwo\n"
    );
    assert!(
        !temp.exists(),
        "the temp file of the cut-short rename is gone"
    );
    let (_, reverts) = server
        .api
        .get(&format!("/api/threads/{thread}/reverts"))
        .await;
    assert_eq!(reverts[0]["status"], "applied", "{reverts}");
    assert!(reverts[0]["after"]["commit"].is_string(), "{reverts}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chg_11_checkpoint_space_is_reported_by_db_stats_and_metrics() {
    let (server, _mock, _thread) = two_runs("").await;
    let metrics = reqwest::get(format!("{}/metrics", server.proc.url()))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let gauge = metrics
        .lines()
        .find_map(|l| l.strip_prefix("knife_checkpoint_bytes "))
        .unwrap_or_else(|| panic!("no knife_checkpoint_bytes in {metrics}"));
    assert!(gauge.trim().parse::<f64>().unwrap() > 0.0, "{gauge}");
    let data = server.data_dir();
    let out = run_cli(
        server.path(),
        &["db", "stats", "--data-dir", data.to_str().unwrap()],
    )
    .await;
    assert!(out.status.success(), "{}", out.stderr);
    assert!(out.stdout.contains("event log"), "{}", out.stdout);
    let line = out
        .stdout
        .lines()
        .find(|l| l.starts_with("checkpoints"))
        .unwrap();
    let bytes: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    assert!(bytes > 0, "{line}");
    assert!(line.contains("1 project repositories"), "{line}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chg_11_deleting_a_thread_collects_its_checkpoints() {
    let (server, _mock, thread) = two_runs("").await;
    let project = server.api.projection(&thread).await.thread.project_id;
    let repo = server.data_dir().join(format!("checkpoints/{project}.git"));
    let refs = || {
        let out = std::process::Command::new("git")
            .args([
                "--git-dir",
                repo.to_str().unwrap(),
                "for-each-ref",
                "--format=%(refname)",
            ])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).lines().count()
    };
    assert_eq!(refs(), 4, "start and end of two runs");
    let resp = server
        .api
        .http
        .delete(format!("{}/api/threads/{thread}", server.api.base))
        .send()
        .await
        .unwrap();
    assert!(resp.status().is_success(), "{}", resp.text().await.unwrap());
    assert_eq!(refs(), 0, "the deleted thread's checkpoints are gone");
    // The objects go with the background collection.
    poll_until(
        "the checkpoint objects to be collected",
        RUN_TIMEOUT,
        || async {
            let out = std::process::Command::new("git")
                .args(["--git-dir", repo.to_str().unwrap(), "count-objects", "-v"])
                .output()
                .unwrap();
            let text = String::from_utf8_lossy(&out.stdout).into_owned();
            (text.contains("count: 0") && text.contains("in-pack: 0")).then_some(())
        },
    )
    .await;
}
