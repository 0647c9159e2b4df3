// Process tests of turn controls through the real binary (SPEC.md TURN-03, TURN-05,
// TURN-10): knife.toml's compaction and limits, the model per run, checked on the
// model requests the mock received.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use knife_protocol::*;
use knife_testkit::mock_llm::{MockLlm, MockLlmConfig, MockLlmHandle, Script};

/// An in-process mock serving the TOML `script`.
async fn mock(script: &str) -> MockLlmHandle {
    let script = Script::from_toml_str(script).unwrap();
    MockLlm::start(MockLlmConfig::script(script)).await.unwrap()
}

/// Sends `text` on a new thread of `server`'s project and follows its run to the end.
async fn run_once(server: &Server, text: &str) -> (String, Run) {
    let project = server.api.create_project(&server.project_dir()).await;
    let thread = server.api.create_thread(&project).await;
    let run = server.api.post_message(&thread, text).await;
    let (_, done) = server.api.follow_run(&thread, &run, 0).await;
    (thread, done)
}

/// True when a recorded request body asks for a summary (the compaction prompt).
fn is_summary_request(body: &str) -> bool {
    body.contains(knife_agent::compaction::COMPACTION_PROMPT)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn turn_03_compaction_off_in_knife_toml_fails_the_overflow_without_a_summary_request() {
    let mock = mock(
        r#"
repeat_last = true
[[response]]
text = "A long answer."
usage = { prompt_tokens = 9000, completion_tokens = 100 }
"#,
    )
    .await;
    let config = format!(
        "{}context_limit = 8000\noutput_limit = 1000\ncompaction = \"off\"\n",
        config_toml(&mock.base_url())
    );
    let server = Server::start_with_config(&config).await;
    let (thread, run) = run_once(&server, "What is here?").await;

    assert_eq!(run.status, RunStatus::Failed);
    let error = run.error.unwrap();
    assert_eq!(error.error_type, "provider.context_overflow");
    assert!(error.message.contains("compaction is off"), "{error:?}");
    let requests = mock.chat_requests();
    assert_eq!(requests.len(), 1, "the model got more than the one step");
    assert!(!requests.iter().any(|r| is_summary_request(&r.body_text)));
    let projection = server.api.projection(&thread).await;
    assert!(
        !projection
            .turn_items
            .iter()
            .any(|i| matches!(i.kind, TurnItemKind::Compaction { .. })),
        "{:?}",
        projection.turn_items
    );
}

/// `context_limit = 8000` without `output_limit` (the default reserve is 32 000):
/// a 500-token step is far below the window and must not compact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn turn_05_a_step_far_below_a_small_window_never_compacts() {
    let mock = mock(
        r#"
repeat_last = true
[[response]]
text = "A short answer."
usage = { prompt_tokens = 500, completion_tokens = 20 }
"#,
    )
    .await;
    let config = format!("{}context_limit = 8000\n", config_toml(&mock.base_url()));
    let server = Server::start_with_config(&config).await;
    let (thread, run) = run_once(&server, "Hello").await;

    assert_eq!(run.status, RunStatus::Completed, "{:?}", run.error);
    let requests = mock.chat_requests();
    assert_eq!(requests.len(), 1, "a summary was asked for");
    assert!(!is_summary_request(&requests[0].body_text));
    let projection = server.api.projection(&thread).await;
    assert!(
        !projection
            .turn_items
            .iter()
            .any(|i| matches!(i.kind, TurnItemKind::Compaction { .. }))
    );
    // The load warned with the numbers to set.
    assert!(
        server.proc.stderr().contains("output_limit = 2000"),
        "{}",
        server.proc.stderr()
    );
}

/// `output_limit >= context_limit` stops `knife serve` at load, naming the numbers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn turn_05_a_reserve_that_leaves_no_context_stops_the_server_at_load() {
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "{}context_limit = 8000\noutput_limit = 8000\n",
        config_toml("http://127.0.0.1:9/v1")
    );
    std::fs::write(dir.path().join("knife.toml"), config).unwrap();
    let out = run_cli(
        dir.path(),
        &[
            "serve",
            "--config",
            "knife.toml",
            "--listen",
            "127.0.0.1:0",
            "--data-dir",
            "data",
        ],
    )
    .await;
    assert!(!out.status.success());
    assert!(
        out.stderr.contains("output_limit = 8000") && out.stderr.contains("context_limit = 8000"),
        "{}",
        out.stderr
    );
}

/// The `model` field of each chat request the mock received, in order.
fn requested_models(mock: &MockLlmHandle) -> Vec<String> {
    mock.chat_requests()
        .iter()
        .map(|r| {
            r.body.as_ref().unwrap()["model"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn turn_10_the_model_changes_between_runs_and_is_recorded_on_each() {
    let mock = mock(
        r#"
repeat_last = true
[[response]]
text = "Done."
"#,
    )
    .await;
    let server = Server::start(&mock.base_url()).await;
    let url = server.proc.url();
    let project = server.api.create_project(&server.project_dir()).await;
    let thread = server.api.create_thread(&project).await;

    // Run 1: the message names a model.
    let (status, body) = server
        .api
        .post(
            &format!("/api/threads/{thread}/messages"),
            &serde_json::json!({"text": "one", "model": "model-b"}),
        )
        .await;
    assert_eq!(status, reqwest::StatusCode::ACCEPTED, "{body}");
    let run = body["run_id"].as_str().unwrap().to_owned();
    let (_, done) = server.api.follow_run(&thread, &run, 0).await;
    assert_eq!(done.status, RunStatus::Completed);
    assert_eq!(done.model.as_deref(), Some("model-b"));

    // Run 2: `knife run --thread --model`.
    let cwd = server.path().to_owned();
    let out = run_cli(
        &cwd,
        &[
            "run", "--server", &url, "--thread", &thread, "--model", "model-c", "two",
        ],
    )
    .await;
    assert!(out.status.success(), "{}", out.stderr);

    // Run 3: no model: the thread's (here the instance's default).
    let run = server.api.post_message(&thread, "three").await;
    let (_, done) = server.api.follow_run(&thread, &run, 0).await;
    assert_eq!(done.model, None);

    assert_eq!(
        requested_models(&mock),
        ["model-b", "model-c", "gpt-4o-mini"]
    );
    let projection = server.api.projection(&thread).await;
    let models: Vec<Option<&str>> = projection.runs.iter().map(|r| r.model.as_deref()).collect();
    assert_eq!(models, [Some("model-b"), Some("model-c"), None]);
    assert_eq!(
        projection.thread.model, None,
        "the thread's own model stays"
    );

    let show = run_cli(&cwd, &["threads", "show", &thread, "--server", &url]).await;
    assert!(show.status.success(), "{}", show.stderr);
    assert!(
        show.stdout.contains("run 1 · completed · model-b")
            && show.stdout.contains("run 2 · completed · model-c")
            && show.stdout.contains("run 3 · completed"),
        "{}",
        show.stdout
    );

    // A blank model is bad input, answered 400 with what to do.
    let (status, body) = server
        .api
        .post(
            &format!("/api/threads/{thread}/messages"),
            &serde_json::json!({"text": "four", "model": " "}),
        )
        .await;
    assert_eq!(status, reqwest::StatusCode::BAD_REQUEST, "{body}");
    assert!(body.to_string().contains("leave `model` out"), "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn turn_06_usage_totals_per_project_thread_and_model_are_priced_in_microdollars() {
    let mock = mock(
        r#"
repeat_last = true
[[response]]
text = "Counted."
usage = { prompt_tokens = 1000, completion_tokens = 500 }
"#,
    )
    .await;
    // 1 and 2 USD per million tokens: each run costs 1000 + 1000 micro-dollars.
    let config = format!(
        "{}\n[prices.\"gpt-4o-mini\"]\ninput = 1\noutput = 2\n",
        config_toml(&mock.base_url())
    );
    let server = Server::start_with_config(&config).await;
    let (first, _) = run_once(&server, "one").await;
    let run = server.api.post_message(&first, "two").await;
    server.api.follow_run(&first, &run, 0).await;
    // A third run on a model without a price: its tokens count, its cost is unknown.
    let (status, body) = server
        .api
        .post(
            &format!("/api/threads/{first}/messages"),
            &serde_json::json!({"text": "three", "model": "unpriced-model"}),
        )
        .await;
    assert_eq!(status, reqwest::StatusCode::ACCEPTED, "{body}");
    let run = body["run_id"].as_str().unwrap().to_owned();
    server.api.follow_run(&first, &run, 0).await;

    let (status, report) = server.api.get("/api/usage").await;
    assert_eq!(status, reqwest::StatusCode::OK, "{report}");
    let report: UsageReport = serde_json::from_value(report).unwrap();
    assert_eq!(report.total.runs, 3);
    assert_eq!(report.total.input_tokens, 3000);
    assert_eq!(report.total.output_tokens, 1500);
    assert_eq!(report.total.cost_microdollars, 4000);
    assert_eq!(report.total.unpriced_runs, 1);
    let models: Vec<(Option<&str>, u64, u64)> = report
        .by_model
        .iter()
        .map(|m| {
            (
                m.model.as_deref(),
                m.totals.runs,
                m.totals.cost_microdollars,
            )
        })
        .collect();
    assert_eq!(
        models,
        [
            (Some("gpt-4o-mini"), 2, 4000),
            (Some("unpriced-model"), 1, 0)
        ]
    );

    // Per thread, per project, since.
    let projection = server.api.projection(&first).await;
    let project = projection.thread.project_id.to_string();
    for path in [
        format!("/api/usage?thread_id={first}"),
        format!("/api/usage?project_id={project}"),
        "/api/usage?since=2000-01-01".to_owned(),
    ] {
        let (_, r) = server.api.get(&path).await;
        assert_eq!(r["total"]["runs"], 3, "{path}: {r}");
    }
    // Per run with thread_id (TURN-06: per-run totals for the page and CLI).
    let (_, r) = server
        .api
        .get(&format!("/api/usage?thread_id={first}"))
        .await;
    let per_run: UsageReport = serde_json::from_value(r).unwrap();
    let costs: Vec<(u32, u64)> = per_run
        .by_run
        .iter()
        .map(|r| (r.ordinal, r.totals.cost_microdollars))
        .collect();
    assert_eq!(costs, [(1, 2000), (2, 2000), (3, 0)]);
    let url = server.proc.url();
    let show = run_cli(
        server.path(),
        &["threads", "show", &first, "--server", &url],
    )
    .await;
    assert!(show.status.success(), "{}", show.stderr);
    assert!(
        show.stdout.contains("4500 tokens · $0.0040"),
        "thread total with cost: {}",
        show.stdout
    );
    assert!(
        show.stdout.contains("1500 tokens, $0.0020"),
        "{}",
        show.stdout
    );
    let (_, r) = server.api.get("/api/usage?since=2999-01-01").await;
    assert_eq!(r["total"]["runs"], 0, "{r}");
    let (status, r) = server.api.get("/api/usage?since=yesterday").await;
    assert_eq!(status, reqwest::StatusCode::BAD_REQUEST, "{r}");
    assert!(r.to_string().contains("YYYY-MM-DD"), "{r}");

    // `knife usage --project FOLDER`.
    let folder = server.project_dir().display().to_string();
    let out = run_cli(
        server.path(),
        &["usage", "--server", &url, "--project", &folder],
    )
    .await;
    assert!(out.status.success(), "{}", out.stderr);
    assert!(
        out.stdout.contains("gpt-4o-mini") && out.stdout.contains("$0.004000"),
        "{}",
        out.stdout
    );
    assert!(out.stdout.contains("without a price"), "{}", out.stdout);

    // Prometheus counters per instance and model, in integer units.
    let metrics = server
        .api
        .http
        .get(format!("{}/metrics", server.api.base))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let value = |name: &str, labels: &[&str]| -> Option<u64> {
        metrics.lines().find_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            (series.starts_with(&format!("{name}{{")) && labels.iter().all(|p| series.contains(p)))
                .then(|| value.parse().unwrap())
        })
    };
    let priced = [r#"instance="mock""#, r#"model="gpt-4o-mini""#];
    assert_eq!(
        value(
            "knife_tokens_total",
            &[priced[0], priced[1], r#"kind="input""#]
        ),
        Some(2000),
        "{metrics}"
    );
    assert_eq!(
        value(
            "knife_tokens_total",
            &[priced[0], priced[1], r#"kind="output""#]
        ),
        Some(1000)
    );
    assert_eq!(
        value(
            "knife_tokens_total",
            &[r#"model="unpriced-model""#, r#"kind="input""#]
        ),
        Some(1000)
    );
    assert_eq!(value("knife_cost_microdollars_total", &priced), Some(4000));
    assert_eq!(
        value(
            "knife_cost_microdollars_total",
            &[r#"model="unpriced-model""#]
        ),
        None
    );
}

/// The value of the series `name{…}` of the Prometheus text `metrics` whose labels
/// include every one of `labels` (`key="value"`).
fn metric(metrics: &str, name: &str, labels: &[&str]) -> Option<u64> {
    metrics.lines().find_map(|l| {
        let (series, value) = l.rsplit_once(' ')?;
        (series.starts_with(&format!("{name}{{")) && labels.iter().all(|p| series.contains(p)))
            .then(|| value.parse().unwrap())
    })
}

async fn metrics_text(server: &Server) -> String {
    let resp = server
        .api
        .http
        .get(format!("{}/metrics", server.api.base))
        .send()
        .await
        .unwrap();
    resp.text().await.unwrap()
}

/// TURN-06: `/metrics` counts tokens and cost at each recorded model call, not when the
/// run ends: a run of two model calls shows the first call's tokens and cost while it
/// waits on an approval between them, and both calls' afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn turn_06_prometheus_counts_each_model_call_as_it_is_recorded() {
    let mock = mock(
        r#"
[[response]]
usage = { prompt_tokens = 1000, completion_tokens = 100 }
[[response.tool_calls]]
name = "bash"
arguments = { command = "echo metered" }

[[response]]
text = "Metered."
usage = { prompt_tokens = 1200, completion_tokens = 50 }
"#,
    )
    .await;
    // 1 and 2 USD per million tokens: the calls cost 1000 + 200 and 1200 + 100 µ$.
    let config = format!(
        "{}\n[prices.\"gpt-4o-mini\"]\ninput = 1\noutput = 2\n",
        config_toml(&mock.base_url())
    );
    let server = Server::start_with_config(&config).await;
    let api = &server.api;
    let project = api.create_project(&server.project_dir()).await;
    let thread = api.create_thread(&project).await;
    let run = api.post_message(&thread, "meter it").await;
    let labels = [r#"instance="mock""#, r#"model="gpt-4o-mini""#];
    let input = [labels[0], labels[1], r#"kind="input""#];
    let output = [labels[0], labels[1], r#"kind="output""#];

    // The run waits on the bash approval after its first model call.
    let deadline = std::time::Instant::now() + RUN_TIMEOUT;
    let request = loop {
        let (_, listed) = api.get(&format!("/api/threads/{thread}/requests")).await;
        if let Some(r) = listed
            .as_array()
            .and_then(|a| a.iter().find(|r| r["status"] == "pending"))
        {
            break r["id"].as_str().unwrap().to_owned();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no approval request: {listed}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    // The first call's record may be written just after the request: wait for it.
    let mut metrics = metrics_text(&server).await;
    while metric(&metrics, "knife_tokens_total", &input).is_none() {
        assert!(
            std::time::Instant::now() < deadline,
            "no tokens counted mid-run:\n{metrics}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        metrics = metrics_text(&server).await;
    }
    assert_eq!(
        metric(&metrics, "knife_tokens_total", &input),
        Some(1000),
        "{metrics}"
    );
    assert_eq!(metric(&metrics, "knife_tokens_total", &output), Some(100));
    assert_eq!(
        metric(&metrics, "knife_cost_microdollars_total", &labels),
        Some(1200)
    );
    let mid = api.projection(&thread).await;
    assert_eq!(
        mid.thread.active_run_id.as_ref().map(RunId::as_str),
        Some(run.as_str()),
        "still mid-run"
    );

    let (status, body) = api
        .post(
            &format!("/api/threads/{thread}/requests/{request}"),
            &serde_json::json!({"decision": "allow_once"}),
        )
        .await;
    assert_eq!(status, reqwest::StatusCode::OK, "{body}");
    let (_, done) = api.follow_run(&thread, &run, 0).await;
    assert_eq!(done.status, RunStatus::Completed, "{done:?}");
    let metrics = metrics_text(&server).await;
    assert_eq!(
        metric(&metrics, "knife_tokens_total", &input),
        Some(2200),
        "{metrics}"
    );
    assert_eq!(metric(&metrics, "knife_tokens_total", &output), Some(150));
    assert_eq!(
        metric(&metrics, "knife_cost_microdollars_total", &labels),
        Some(2500)
    );
}
