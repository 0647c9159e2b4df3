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
    assert_eq!(kinds, vec![CheckpointKind::RunStart, CheckpointKind::RunEnd]);
}
