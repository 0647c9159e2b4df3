// Process tests of the thread lifecycle against the real binary (SPEC.md CHG-08, CHG-09):
// `knife threads rename|archive|unarchive|delete|fork` and `knife db purge`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use knife_protocol::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chg_08_cli_renames_archives_deletes_and_db_purge_removes_the_events() {
    let mock = MockLlm::script(
        "[[response]]\ntext = \"First.\"\n\n[[response]]\ntext = \"Second.\"\n",
        &[],
    )
    .await;
    let mut server = Server::start(&mock.base_url()).await;
    let url = server.proc.url();
    let cwd = server.path().to_owned();
    let project = server.project_dir().display().to_string();
    let data = server.data_dir().display().to_string();
    for prompt in ["keep me", "delete me"] {
        let out = run_cli(
            &cwd,
            &["run", "--server", &url, "--project", &project, prompt],
        )
        .await;
        assert!(out.status.success(), "{}", out.stderr);
    }
    let (_, threads) = server.api.get("/api/threads").await;
    let threads: Vec<Thread> = serde_json::from_value(threads).unwrap();
    let id_of = |title: &str| {
        threads
            .iter()
            .find(|t| t.title == title)
            .unwrap_or_else(|| panic!("no thread titled {title}: {threads:?}"))
            .id
            .to_string()
    };
    let (keep, gone) = (id_of("keep me"), id_of("delete me"));

    let out = run_cli(
        &cwd,
        &["threads", "rename", &keep, "Kept thread", "--server", &url],
    )
    .await;
    assert!(out.status.success(), "{}", out.stderr);
    assert!(out.stdout.contains("Kept thread"), "{}", out.stdout);
    let out = run_cli(&cwd, &["threads", "archive", &keep, "--server", &url]).await;
    assert!(out.status.success(), "{}", out.stderr);
    let list = run_cli(&cwd, &["threads", "list", "--server", &url]).await;
    assert!(
        !list.stdout.contains(&keep),
        "archived thread listed:\n{}",
        list.stdout
    );
    assert!(list.stdout.contains(&gone));
    let list = run_cli(&cwd, &["threads", "list", "--archived", "--server", &url]).await;
    let line = list.stdout.lines().find(|l| l.starts_with(&keep)).unwrap();
    assert!(
        line.contains("Kept thread") && line.contains("(archived)"),
        "{line}"
    );
    let out = run_cli(&cwd, &["threads", "unarchive", &keep, "--server", &url]).await;
    assert!(out.status.success(), "{}", out.stderr);

    let out = run_cli(&cwd, &["threads", "delete", &gone, "--server", &url]).await;
    assert!(out.status.success(), "{}", out.stderr);
    assert!(out.stdout.contains("knife db purge"), "{}", out.stdout);
    let (status, _) = server.api.get(&format!("/api/threads/{gone}")).await;
    assert_eq!(status, reqwest::StatusCode::NOT_FOUND);
    // Purge needs the server stopped.
    let refused = run_cli(&cwd, &["db", "purge", "--data-dir", &data]).await;
    assert!(!refused.status.success());
    assert!(
        refused.stderr.contains("stop it first"),
        "{}",
        refused.stderr
    );

    let status = server.proc.terminate().await;
    assert!(status.success());
    let db = server.data_dir().join("knife.db");
    // In the database file or its WAL (whichever holds the pages now).
    let contains = |needle: &str| {
        ["", "-wal"].iter().any(|suffix| {
            let path = format!("{}{suffix}", db.display());
            std::fs::read(path)
                .is_ok_and(|bytes| bytes.windows(needle.len()).any(|w| w == needle.as_bytes()))
        })
    };
    assert!(
        contains("delete me"),
        "the deleted thread's events are kept until purge"
    );
    let out = run_cli(&cwd, &["db", "purge", "--data-dir", &data]).await;
    assert!(out.status.success(), "{}", out.stderr);
    assert!(
        out.stdout.contains("purged 1 deleted thread"),
        "{}",
        out.stdout
    );
    assert!(out.stdout.contains(&gone), "{}", out.stdout);
    assert!(
        !contains("delete me"),
        "purged text still in {}",
        db.display()
    );
    assert!(contains("keep me"));

    // The kept thread survives, read straight from the data directory.
    let show = run_cli(&cwd, &["threads", "show", &keep, "--data-dir", &data]).await;
    assert!(show.status.success(), "{}", show.stderr);
    assert!(show.stdout.contains("Kept thread"), "{}", show.stdout);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chg_09_cli_fork_after_a_run_replays_that_history_to_the_model() {
    let mock = MockLlm::script(
        "[[response]]\ntext = \"First answer.\"\n\n[[response]]\ntext = \"Second answer.\"\n\n\
         [[response]]\ntext = \"Third answer.\"\n",
        &[],
    )
    .await;
    let server = Server::start(&mock.base_url()).await;
    let url = server.proc.url();
    let cwd = server.path().to_owned();
    let project = server.project_dir().display().to_string();
    let out = run_cli(
        &cwd,
        &[
            "run",
            "--server",
            &url,
            "--project",
            &project,
            "alpha question",
        ],
    )
    .await;
    assert!(out.status.success(), "{}", out.stderr);
    let (_, threads) = server.api.get("/api/threads").await;
    let threads: Vec<Thread> = serde_json::from_value(threads).unwrap();
    let source = threads[0].id.to_string();
    let out = run_cli(
        &cwd,
        &[
            "run",
            "--server",
            &url,
            "--thread",
            &source,
            "beta question",
        ],
    )
    .await;
    assert!(out.status.success(), "{}", out.stderr);

    let fork = run_cli(
        &cwd,
        &["threads", "fork", &source, "--after", "1", "--server", &url],
    )
    .await;
    assert!(fork.status.success(), "{}", fork.stderr);
    let forked = fork.stdout.trim().to_owned();
    assert!(
        forked.starts_with("thread_") && forked != source,
        "{}",
        fork.stdout
    );
    let out = run_cli(
        &cwd,
        &[
            "run",
            "--server",
            &url,
            "--thread",
            &forked,
            "gamma question",
        ],
    )
    .await;
    assert!(out.status.success(), "{}", out.stderr);
    assert_eq!(out.stdout.trim_end(), "Third answer.");

    // The model saw run 1 of the source, not run 2.
    let requests: serde_json::Value = reqwest::get(format!("{}/_mock/requests", mock.proc.url()))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let last = requests
        .as_array()
        .unwrap()
        .iter()
        .rev()
        .find(|r| {
            r["body_text"]
                .as_str()
                .is_some_and(|b| b.contains("gamma question"))
        })
        .expect("the fork's model request");
    let body = last["body_text"].as_str().unwrap();
    assert!(
        body.contains("alpha question") && body.contains("First answer."),
        "{body}"
    );
    assert!(
        !body.contains("beta question") && !body.contains("Second answer."),
        "{body}"
    );

    // The source is untouched; the fork says where it came from.
    let source_p = server.api.projection(&source).await;
    assert_eq!(source_p.runs.len(), 2);
    let fork_p = server.api.projection(&forked).await;
    assert_eq!(
        fork_p.thread.forked_from.as_ref().map(|f| f.after_run),
        Some(1)
    );
    assert_eq!(fork_p.runs.len(), 2, "the copied run and the fork's own");
    let (status, body) = server
        .api
        .post(
            &format!("/api/threads/{source}/fork"),
            &serde_json::json!({"after_run": 9}),
        )
        .await;
    assert_eq!(status, reqwest::StatusCode::BAD_REQUEST, "{body}");
}
