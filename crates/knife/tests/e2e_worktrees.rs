// Threads in their own git worktree (SPEC.md CHG-07) through the real binary and real
// git: created with the thread, the agent works there, merge back, conflicts refused.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;

use common::*;
use knife_protocol::*;
use serde_json::json;

const SCRIPT: &str = r#"
[[response]]
[[response.tool_calls]]
name = "write"
arguments = { path = "feature.txt", content = "made in the worktree\n" }
[[response]]
text = "done"

[[response]]
[[response.tool_calls]]
name = "write"
arguments = { path = "README.md", content = "the agent's readme\n" }
[[response]]
text = "done"
"#;

fn git(dir: &Path, args: &[&str]) -> String {
    let out = std::process::Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_AUTHOR_NAME", "person")
        .env("GIT_AUTHOR_EMAIL", "person@example.com")
        .env("GIT_COMMITTER_NAME", "person")
        .env("GIT_COMMITTER_EMAIL", "person@example.com")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

async fn worktree_thread(api: &Api, project: &str) -> Thread {
    let (status, body) = api
        .post(
            "/api/threads",
            &json!({"project_id": project, "worktree": true}),
        )
        .await;
    assert_eq!(status.as_u16(), 201, "{body}");
    serde_json::from_value(body).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chg_07_a_worktree_thread_works_on_its_branch_and_merges_back_or_refuses_conflicts() {
    let mock = MockLlm::script(SCRIPT, &[]).await;
    let config = format!(
        "{}\n[[permissions]]\ntool = \"*\"\naction = \"allow\"\n",
        config_toml(&mock.base_url())
    );
    let server = Server::start_with_config(&config).await;
    let api = &server.api;
    let root = server.project_dir();
    std::fs::write(root.join("README.md"), "the person's readme\n").unwrap();
    git(&root, &["init", "-q", "-b", "main"]);
    git(&root, &["add", "-A"]);
    git(&root, &["commit", "-q", "-m", "init"]);
    let project = api.create_project(&root).await;

    let thread = worktree_thread(api, &project).await;
    let wt = thread.worktree.clone().expect("the thread has a worktree");
    assert!(wt.branch.starts_with("knife/"), "{wt:?}");
    assert!(Path::new(&wt.path).starts_with(server.data_dir()), "{wt:?}");
    assert_eq!(
        git(&root, &["branch", "--list", &wt.branch])
            .trim_start_matches("+ ")
            .trim(),
        wt.branch
    );
    let shown = api.projection(thread.id.as_str()).await.thread;
    assert_eq!(shown.worktree.as_ref(), Some(&wt));

    // The agent writes in the worktree, not in the project folder.
    let run = api.post_message(thread.id.as_str(), "add a feature").await;
    let (_, done) = api.follow_run(thread.id.as_str(), &run, 0).await;
    assert_eq!(done.status, RunStatus::Completed, "{done:?}");
    assert!(Path::new(&wt.path).join("feature.txt").is_file());
    assert!(!root.join("feature.txt").exists());
    let changes = done.changes.expect("change set in the worktree");
    assert_eq!(changes.files[0].path, "feature.txt");

    let (status, body) = api
        .post(&format!("/api/threads/{}/merge", thread.id), &json!({}))
        .await;
    assert!(status.is_success(), "{body}");
    assert_eq!(body["status"], "merged");
    assert_eq!(body["into"], "main");
    assert_eq!(
        std::fs::read_to_string(root.join("feature.txt")).unwrap(),
        "made in the worktree\n"
    );
    assert_eq!(git(&root, &["status", "--porcelain"]), "");

    // A second thread edits README.md while the person commits another edit to it.
    let second = worktree_thread(api, &project).await;
    let run = api
        .post_message(second.id.as_str(), "rewrite the readme")
        .await;
    api.follow_run(second.id.as_str(), &run, 0).await;
    std::fs::write(root.join("README.md"), "the person's new readme\n").unwrap();
    git(&root, &["commit", "-q", "-am", "person edits the readme"]);
    let head = git(&root, &["rev-parse", "HEAD"]);
    let (status, body) = api
        .post(&format!("/api/threads/{}/merge", second.id), &json!({}))
        .await;
    assert_eq!(status.as_u16(), 409, "{body}");
    assert_api_error(&body, "merge_conflict");
    assert_eq!(body["error"]["files"], json!(["README.md"]));
    // Nothing half-applied: same HEAD, clean tree, the person's text.
    assert_eq!(git(&root, &["rev-parse", "HEAD"]), head);
    assert_eq!(git(&root, &["status", "--porcelain"]), "");
    assert_eq!(
        std::fs::read_to_string(root.join("README.md")).unwrap(),
        "the person's new readme\n"
    );

    // Delete refuses unmerged work unless forced; forced, the worktree and branch go.
    let url = format!("{}/api/threads/{}", api.base, second.id);
    let resp = api.http.delete(&url).send().await.unwrap();
    assert_eq!(
        resp.status().as_u16(),
        409,
        "{}",
        resp.text().await.unwrap()
    );
    let resp = api
        .http
        .delete(format!("{url}?force=true"))
        .send()
        .await
        .unwrap();
    assert!(resp.status().is_success(), "{}", resp.text().await.unwrap());
    let second_wt = second.worktree.unwrap();
    assert!(!Path::new(&second_wt.path).exists());
    assert_eq!(git(&root, &["branch", "--list", &second_wt.branch]), "");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chg_07_worktree_on_a_folder_that_is_not_a_git_repository_is_a_clear_400() {
    let mock = MockLlm::script("[[response]]\ntext = \"hi\"\n", &[]).await;
    let server = Server::start(&mock.base_url()).await;
    let project = server.api.create_project(&server.project_dir()).await;
    let (status, body) = server
        .api
        .post(
            "/api/threads",
            &json!({"project_id": project, "worktree": true}),
        )
        .await;
    assert_eq!(status.as_u16(), 400, "{body}");
    assert_api_error(&body, "not_a_git_repository");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("git init"),
        "{body}"
    );
    // No thread was created; without worktree it works (checkpoints need no repository).
    let (_, threads) = server.api.get("/api/threads").await;
    assert_eq!(threads.as_array().unwrap().len(), 0, "{threads}");
}

/// A worktree thread's `bash` runs in bubblewrap with the worktree and the project's
/// `.git` writable, so git works there (status, add, commit on the thread's branch);
/// and the project's settings apply in the worktree: its `permissions` (the global
/// rules would ask for the command) and its `env`.
const GIT_IN_WORKTREE: &str = r#"
[[response]]
[[response.tool_calls]]
name = "bash"
arguments = { command = '''echo "mark=$PROJECT_MARK"; echo made > made.txt && git add made.txt && git -c user.name=agent -c user.email=agent@example.com commit -qm "agent commit" && git status --porcelain && echo committed''' }
[[response]]
text = "committed"

[[response]]
text = "the fork answers"
"#;

#[cfg_attr(not(knife_has_bwrap), ignore = "needs bubblewrap: run scripts/test")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chg_07_git_works_in_a_worktree_threads_sandboxed_bash_under_the_projects_settings() {
    let mock = MockLlm::script(GIT_IN_WORKTREE, &[]).await;
    // No global rule allows bash: only the project's does (it must apply in the worktree).
    let config = format!(
        "{}\n[[projects]]\nroot = \"project\"\nenv = {{ PROJECT_MARK = \"from-the-project\" }}\n\
         [[projects.permissions]]\ntool = \"*\"\naction = \"allow\"\n",
        config_toml(&mock.base_url())
    );
    let server = Server::start_with_config(&config).await;
    let api = &server.api;
    let root = server.project_dir();
    std::fs::write(root.join("README.md"), "readme\n").unwrap();
    git(&root, &["init", "-q", "-b", "main"]);
    git(&root, &["add", "-A"]);
    git(&root, &["commit", "-q", "-m", "init"]);
    let project = api.create_project(&root).await;
    let thread = worktree_thread(api, &project).await;
    let wt = thread.worktree.clone().unwrap();

    let run = api.post_message(thread.id.as_str(), "commit a file").await;
    let (_, done) = api.follow_run(thread.id.as_str(), &run, 0).await;
    assert_eq!(done.status, RunStatus::Completed, "{done:?}");
    let p = api.thread_json(thread.id.as_str()).await;
    let output = p["turn_items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["type"] == "tool_call")
        .and_then(|i| i["output"].as_str())
        .unwrap_or_default()
        .to_owned();
    assert!(output.contains("mark=from-the-project"), "{output}");
    assert!(output.contains("committed"), "{output}");
    assert!(!output.contains("without a sandbox"), "{output}");
    assert_eq!(
        git(&root, &["log", "-1", "--format=%s", &wt.branch]),
        "agent commit"
    );
    assert_eq!(git(&root, &["log", "-1", "--format=%s", "main"]), "init");
    assert!(!root.join("made.txt").exists());

    // The CLI shows the thread's branch (list) and its worktree (show).
    let url = api.base.clone();
    let list = run_cli(&root, &["threads", "list", "--server", &url]).await;
    assert!(
        list.stdout.contains(&format!("[{}]", wt.branch)),
        "{}",
        list.stdout
    );
    let show = run_cli(
        &root,
        &["threads", "show", thread.id.as_str(), "--server", &url],
    )
    .await;
    assert!(
        show.stdout
            .contains(&format!("worktree {} at {}", wt.branch, wt.path)),
        "{}",
        show.stdout
    );

    // A fork of a worktree thread starts without the worktree: it works in the
    // project root, and the source keeps its worktree and branch (CHG-07, CHG-09).
    let (status, body) = api
        .post(&format!("/api/threads/{}/fork", thread.id), &json!({}))
        .await;
    assert_eq!(status.as_u16(), 201, "{body}");
    let fork: Thread = serde_json::from_value(body).unwrap();
    assert_eq!(fork.worktree, None, "{fork:?}");
    let run = api.post_message(fork.id.as_str(), "hello").await;
    let (_, done) = api.follow_run(fork.id.as_str(), &run, 0).await;
    assert_eq!(done.status, RunStatus::Completed, "{done:?}");
    let source = api.projection(thread.id.as_str()).await.thread;
    assert_eq!(source.worktree.as_ref(), Some(&wt));
    assert!(Path::new(&wt.path).join("made.txt").is_file());
}
