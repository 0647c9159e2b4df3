// Process tests of full-text search (SPEC.md TURN-08) through the real binary: a run's
// messages are found over loopback HTTP and by `knife search`; bad queries are 400 or
// plain words, never 500; `knife db rebuild` rebuilds the index.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use reqwest::StatusCode;

const SCRIPT: &str = r#"
[[response]]
text = "The zeppelin retry policy doubles the backoff after each failure."
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn turn_08_search_over_http_and_cli_finds_messages_and_survives_bad_queries() {
    let mock = MockLlm::script(SCRIPT, &[]).await;
    let mut server = Server::start(&mock.base_url()).await;
    let api = server.api.clone();
    let project = api.create_project(&server.project_dir()).await;
    let thread = api.create_thread(&project).await;
    let run = api
        .post_message(&thread, "where is the quixotic retry policy?")
        .await;
    api.follow_run(&thread, &run, 0).await;

    let (s, found) = api.get("/api/search?q=zeppelin%20backoff").await;
    assert_eq!(s, StatusCode::OK, "{found}");
    let hits = found["hits"].as_array().unwrap();
    assert_eq!(hits.len(), 1, "{found}");
    assert_eq!(hits[0]["kind"], "assistant_message");
    assert_eq!(hits[0]["thread_id"], thread.as_str());
    assert_eq!(hits[0]["run_id"], run.as_str());
    assert!(
        hits[0]["snippet"].as_str().unwrap().contains("[zeppelin]"),
        "{found}"
    );
    let (_, found) = api
        .get(&format!("/api/search?q=quixotic&project_id={project}"))
        .await;
    assert_eq!(found["hits"][0]["kind"], "user_message", "{found}");

    // FTS syntax is words; a missing query or a huge limit is a 400, never a 500.
    for q in ["%22quixotic", "quixotic%20OR%20(", "NEAR(", "*", "%22%22"] {
        let (s, b) = api.get(&format!("/api/search?q={q}")).await;
        assert_eq!(s, StatusCode::OK, "{q}: {b}");
    }
    for path in [
        "/api/search",
        "/api/search?q=a&limit=100000",
        "/api/search?q=a&x=1",
    ] {
        let (s, b) = api.get(path).await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{path}: {b}");
    }

    let url = server.proc.url();
    let out = run_cli(server.path(), &["search", "--server", &url, "zeppelin"]).await;
    assert!(out.status.success(), "{}", out.stderr);
    assert!(out.stdout.contains("[zeppelin]"), "{}", out.stdout);

    // `knife db rebuild` (server stopped) refills the index from the log.
    server.proc.terminate().await;
    let data = server.data_dir().display().to_string();
    let out = run_cli(server.path(), &["db", "rebuild", "--data-dir", &data]).await;
    assert!(out.status.success(), "{}", out.stderr);
    server.respawn().await;
    let (_, found) = server.api.get("/api/search?q=zeppelin").await;
    assert_eq!(found["hits"].as_array().unwrap().len(), 1, "{found}");
}
