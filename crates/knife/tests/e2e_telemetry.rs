// Spans in the log and their OTLP export (issue 19 item 6): a real `knife serve` runs a
// turn against the mock LLM and sends its spans to an OTLP/HTTP receiver on loopback.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::{Arc, Mutex};

use common::*;
use knife_protocol::*;
use serde_json::Value;

const SCRIPT: &str = "[[response]]\ntext = \"Traced answer.\"\n\
                      usage = { prompt_tokens = 321, completion_tokens = 12 }\n";

/// A minimal OTLP/HTTP (JSON) trace receiver: every body POSTed to `/v1/traces`.
async fn otlp_receiver() -> (String, Arc<Mutex<Vec<Value>>>) {
    let bodies = Arc::new(Mutex::new(Vec::new()));
    let kept = bodies.clone();
    let app = axum::Router::new().route(
        "/v1/traces",
        axum::routing::post(move |body: axum::body::Bytes| {
            let kept = kept.clone();
            async move {
                kept.lock()
                    .unwrap()
                    .push(serde_json::from_slice::<Value>(&body).unwrap_or(Value::Null));
                axum::Json(serde_json::json!({}))
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, bodies)
}

/// Every span of every received body, with its attributes as a flat JSON object.
fn spans(bodies: &[Value]) -> Vec<(String, Value, Value)> {
    let mut out = Vec::new();
    for body in bodies {
        for rs in body["resourceSpans"].as_array().into_iter().flatten() {
            for ss in rs["scopeSpans"].as_array().into_iter().flatten() {
                for span in ss["spans"].as_array().into_iter().flatten() {
                    let mut attrs = serde_json::Map::new();
                    for kv in span["attributes"].as_array().into_iter().flatten() {
                        let value = kv["value"]
                            .as_object()
                            .and_then(|v| v.values().next().cloned())
                            .unwrap_or(Value::Null);
                        attrs.insert(kv["key"].as_str().unwrap_or("").to_owned(), value);
                    }
                    out.push((
                        span["name"].as_str().unwrap_or("").to_owned(),
                        Value::Object(attrs),
                        span.clone(),
                    ));
                }
            }
        }
    }
    out
}

/// The log lines written inside a run carry `run{thread=… run=…}`; the run, its model
/// call (GenAI conventions, with tokens) and the HTTP request reach the OTLP receiver,
/// the model call in the run's trace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_carry_thread_and_run_ids_into_the_log_and_the_otlp_export() {
    let (otlp, bodies) = otlp_receiver().await;
    let mock = MockLlm::script(SCRIPT, &[]).await;
    let config = format!(
        "{}\n[telemetry]\notlp_endpoint = \"{otlp}\"\n",
        config_toml(&mock.base_url())
    );
    let mut server = Server::start_with_config(&config).await;
    let project = server.api.create_project(&server.project_dir()).await;
    let thread = server.api.create_thread(&project).await;
    let run = server.api.post_message(&thread, "trace this").await;
    let (_, done) = server.api.follow_run(&thread, &run, 0).await;
    assert_eq!(done.status, RunStatus::Completed, "{done:?}");

    let prefix = format!("run{{thread={thread} run={run} ");
    poll_until("a log line inside the run's span", RUN_TIMEOUT, || async {
        server.proc.stderr().contains(&prefix).then_some(())
    })
    .await;

    // SIGTERM flushes the spans still queued.
    assert!(server.proc.terminate().await.success());
    let received = poll_until("the run's spans at the OTLP receiver", RUN_TIMEOUT, || {
        let bodies = bodies.clone();
        async move {
            let all = spans(&bodies.lock().unwrap());
            let has = |name: &str| all.iter().any(|(n, ..)| n == name);
            (has("run") && has("chat gpt-4o-mini")).then_some(all)
        }
    })
    .await;
    let (_, run_attrs, run_span) = received
        .iter()
        .find(|(n, a, _)| n == "run" && a["run"] == run.as_str())
        .expect("the run's span");
    assert_eq!(run_attrs["thread"], thread.as_str());
    assert_eq!(run_attrs["provider"], "mock");
    let (_, call, call_span) = received
        .iter()
        .find(|(n, ..)| n == "chat gpt-4o-mini")
        .unwrap();
    assert_eq!(call["gen_ai.operation.name"], "chat");
    assert_eq!(call["gen_ai.request.model"], "gpt-4o-mini");
    // OTLP JSON encodes 64-bit integers as strings.
    assert_eq!(
        call["gen_ai.usage.input_tokens"]
            .to_string()
            .trim_matches('"'),
        "321"
    );
    assert_eq!(
        call["gen_ai.usage.output_tokens"]
            .to_string()
            .trim_matches('"'),
        "12"
    );
    assert_eq!(
        call_span["traceId"], run_span["traceId"],
        "the model call is in the run's trace"
    );
    assert!(
        received
            .iter()
            .any(|(n, ..)| n == &format!("POST /api/threads/{thread}/messages")),
        "no span of the HTTP request: {:?}",
        received.iter().map(|(n, ..)| n).collect::<Vec<_>>()
    );
}

/// A `[telemetry] otlp_endpoint` that is no URL stops `knife serve` with what to write.
#[tokio::test]
async fn a_telemetry_endpoint_that_is_no_url_is_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("knife.toml");
    std::fs::write(&config, "[telemetry]\notlp_endpoint = \"localhost:4317\"\n").unwrap();
    let out = run_cli(
        dir.path(),
        &[
            "serve",
            "--config",
            config.to_str().unwrap(),
            "--listen",
            "127.0.0.1:0",
            "--data-dir",
            dir.path().join("data").to_str().unwrap(),
        ],
    )
    .await;
    assert!(!out.status.success());
    assert!(out.stderr.contains("not an http(s) URL"), "{}", out.stderr);
}
