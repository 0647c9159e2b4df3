// Process tests of the session manager inside `knife serve`: turns run through it
// (one live session reused across messages, released when idle), the sessions API
// and CLI, its metrics at /metrics, and the stale-session reaper of the running server.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::*;
use knife_protocol::*;
use reqwest::StatusCode;
use serde_json::json;

const SCRIPT: &str = "[[response]]\ntext = \"First answer.\"\n\n\
                      [[response]]\ntext = \"Second answer.\"\n\n\
                      [[response]]\ntext = \"Third answer.\"\n";

/// A server on the mock with `[sessions]` = `sessions_toml`.
async fn server(mock: &MockLlm, sessions_toml: &str) -> Server {
    let config = format!(
        "{}\n[sessions]\n{sessions_toml}\n",
        config_toml(&mock.base_url())
    );
    Server::start_with_config(&config).await
}

async fn live_sessions(api: &Api) -> Vec<LiveSession> {
    let (status, body) = api.get("/api/sessions").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    serde_json::from_value(body).unwrap()
}

/// Runs one message to its end; returns every event of the thread so far.
async fn turn(api: &Api, thread: &str, text: &str) -> Vec<StoredEvent> {
    let run = api.post_message(thread, text).await;
    let (events, done) = api.follow_run(thread, &run, 0).await;
    assert_eq!(done.status, RunStatus::Completed, "run: {done:?}");
    events
}

fn attaches(events: &[StoredEvent]) -> usize {
    events
        .iter()
        .filter(|e| matches!(e.event.body, EventBody::ProviderSessionAttached(_)))
        .count()
}

async fn session_status(api: &Api, thread: &str) -> Vec<SessionStatus> {
    api.projection(thread)
        .await
        .provider_sessions
        .iter()
        .map(|s| s.status)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_turns_run_through_the_session_manager_and_idle_sessions_are_released() {
    let mock = MockLlm::script(SCRIPT, &[]).await;
    let server = server(&mock, "idle_timeout_secs = 3").await;
    let api = &server.api;
    let project = api.create_project(&server.project_dir()).await;
    let thread = api.create_thread(&project).await;

    turn(api, &thread, "one").await;
    // The session outlives the run: listed live with the thread, idle, not busy.
    let live = live_sessions(api).await;
    assert_eq!(live.len(), 1, "{live:?}");
    let session = &live[0];
    assert_eq!(session.driver, "builtin");
    assert_eq!(session.provider_instance_id.to_string(), "mock");
    assert_eq!(session.threads, vec![ThreadId::from(thread.as_str())]);
    assert!(session.busy_turns.is_empty());
    assert!(session.idle_deadline.is_some(), "{session:?}");
    assert_eq!(
        session.provider_session_id,
        ProviderSessionId::exclusive(
            &ProviderInstanceId::from("mock"),
            &ThreadId::from(thread.as_str())
        )
    );

    // A second message before the idle timeout reuses the live session: one attach.
    let events = turn(api, &thread, "two").await;
    assert_eq!(attaches(&events), 1, "one provider-session.attached");
    assert_eq!(live_sessions(api).await.len(), 1);

    // MGR-48: the manager's metrics are served at /metrics after a turn.
    let metrics = api
        .http
        .get(format!("{}/metrics", api.base))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for name in [
        "knife_provider_sessions_total",
        "knife_provider_turns_total",
        "knife_provider_turn_duration_seconds",
    ] {
        assert!(
            metrics.contains(name),
            "{name} missing from /metrics:\n{metrics}"
        );
    }

    // Idle past `idle_timeout_secs`: released, recorded `stopped`, no longer live.
    poll_until("the idle release", Duration::from_secs(15), || async {
        (session_status(api, &thread).await == vec![SessionStatus::Stopped]).then_some(())
    })
    .await;
    assert!(live_sessions(api).await.is_empty());

    // The next message opens a new session.
    let events = turn(api, &thread, "three").await;
    assert_eq!(attaches(&events), 2);
    assert_eq!(live_sessions(api).await.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_sessions_close_through_the_cli_and_the_api() {
    let mock = MockLlm::script(SCRIPT, &[]).await;
    let server = server(&mock, "").await;
    let api = &server.api;
    let project = api.create_project(&server.project_dir()).await;
    let thread = api.create_thread(&project).await;
    turn(api, &thread, "one").await;
    let id = live_sessions(api).await[0].provider_session_id.to_string();

    // `knife sessions list` shows it, through the running server.
    let out = run_cli(
        server.path(),
        &["sessions", "list", "--server", &server.proc.url()],
    )
    .await;
    assert!(out.status.success(), "{}", out.stderr);
    assert!(out.stdout.contains(&id), "{}", out.stdout);
    assert!(out.stdout.contains(&thread), "{}", out.stdout);
    let out = run_cli(
        server.path(),
        &["sessions", "list", "--json", "--server", &server.proc.url()],
    )
    .await;
    let listed: Vec<LiveSession> = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].provider_session_id.to_string(), id);

    // Unknown session: 404 through the API and a failing CLI.
    let (status, body) = api
        .post("/api/sessions/provider-session:mock:nope/close", &json!({}))
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_api_error(&body, "not_found");

    let out = run_cli(
        server.path(),
        &["sessions", "close", &id, "--server", &server.proc.url()],
    )
    .await;
    assert!(out.status.success(), "{}", out.stderr);
    assert!(out.stdout.contains(&id), "{}", out.stdout);
    assert!(live_sessions(api).await.is_empty());
    assert_eq!(
        session_status(api, &thread).await,
        vec![SessionStatus::Stopped]
    );
    // Closed twice: no longer live.
    let (status, _) = api
        .post(&format!("/api/sessions/{id}/close"), &json!({}))
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    // The thread goes on with a new session.
    turn(api, &thread, "two").await;
    assert_eq!(live_sessions(api).await.len(), 1);
}

/// REAP-01 in the running server: a session unseen for `inactivity_threshold_secs`
/// whose thread has no active run is stopped by the reaper that `knife serve` starts
/// (the idle timeout is far away, so only the reaper can have stopped it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_reap_01_the_running_server_reaps_a_stale_session() {
    let mock = MockLlm::script(SCRIPT, &[]).await;
    let server = server(
        &mock,
        "idle_timeout_secs = 3600\ninactivity_threshold_secs = 1\nsweep_interval_secs = 1",
    )
    .await;
    let api = &server.api;
    let project = api.create_project(&server.project_dir()).await;
    let thread = api.create_thread(&project).await;
    turn(api, &thread, "one").await;

    poll_until("the reaper", Duration::from_secs(15), || async {
        (session_status(api, &thread).await == vec![SessionStatus::Stopped]).then_some(())
    })
    .await;
    assert!(live_sessions(api).await.is_empty());
    assert!(
        server
            .proc
            .stderr()
            .contains("reaped a stale provider session"),
        "{}",
        server.proc.stderr()
    );
}
