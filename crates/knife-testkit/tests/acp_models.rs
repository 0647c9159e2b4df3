//! The model of an ACP run (SPEC.md TURN-10) against the scripted fake ACP agent: a
//! run's `model` is selected with `session/set_model` before its prompt when the agent
//! offers models, the next run without one goes back to the session's model; a model
//! the agent does not offer, or any model on an agent that offers none, fails the run
//! before its prompt with an error saying what to do.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod acp_support;

use std::time::Duration;

use acp_support::*;
use knife_protocol::*;
use knife_runtime::ExecutionService;

const MODELS: (&str, &str) = ("FAKE_ACP_MODELS", "model-a,model-b");

async fn run_on(
    h: &Harness,
    exec: &ExecutionService,
    thread: &ThreadId,
    text: &str,
    model: Option<&str>,
) -> Run {
    let run = exec
        .start_run_with_model(thread, text.to_owned(), model.map(str::to_owned))
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(30), exec.await_idle(thread))
        .await
        .expect("the run ended");
    h.run_row(thread, &run.id).await
}

/// The `modelId` of each `session/set_model` and `prompt` for each prompt, in order.
fn wire(h: &Harness) -> Vec<String> {
    h.received()
        .iter()
        .filter_map(|m| match m["method"].as_str()? {
            "session/set_model" => Some(format!("set {}", m["params"]["modelId"].as_str()?)),
            "session/prompt" => Some("prompt".to_owned()),
            _ => None,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn turn_10_an_acp_run_s_model_is_selected_with_session_set_model() {
    let h = Harness::new().await;
    let exec = h.execution(Duration::from_secs(60), &[MODELS]);
    let thread = h.thread().await;
    let first = run_on(&h, &exec, &thread, "hello", Some("model-b")).await;
    assert_eq!(first.status, RunStatus::Completed, "{:?}", first.error);
    assert_eq!(first.model.as_deref(), Some("model-b"));
    let p = h.projection(&thread).await;
    assert_eq!(
        texts(&p, &first.id),
        vec!["echo #1 (model-b): hello".to_owned()]
    );
    // The next run names no model: back to the session's own.
    let second = run_on(&h, &exec, &thread, "again", None).await;
    assert_eq!(second.status, RunStatus::Completed, "{:?}", second.error);
    let p = h.projection(&thread).await;
    assert_eq!(
        texts(&p, &second.id),
        vec!["echo #2 (model-a): again".to_owned()]
    );
    assert_eq!(wire(&h), ["set model-b", "prompt", "set model-a", "prompt"]);
    // The usage records name the model each prompt ran on.
    let filter = knife_store::StreamFilter {
        thread_id: Some(thread.clone()),
        after: 0,
        event_type: Some("model-call.recorded".into()),
    };
    let models: Vec<Option<String>> = h
        .store
        .read_events(&filter, 100)
        .await
        .unwrap()
        .into_iter()
        .filter_map(|e| match e.event.body {
            EventBody::ModelCallRecorded(c) => Some(c.model),
            _ => None,
        })
        .collect();
    assert_eq!(
        models,
        [Some("model-b".to_owned()), Some("model-a".to_owned())]
    );

    // A model the agent does not offer fails the run before its prompt.
    let wrong = run_on(&h, &exec, &thread, "three", Some("model-z")).await;
    assert_eq!(wrong.status, RunStatus::Failed);
    let message = wrong.error.unwrap().message;
    assert!(
        message.contains("does not offer the model `model-z`")
            && message.contains("model-a, model-b"),
        "{message}"
    );
    assert_eq!(wire(&h).len(), 4, "no prompt for it");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn turn_10_a_model_for_an_acp_agent_that_offers_none_fails_the_run_saying_what_to_do() {
    let h = Harness::new().await;
    let exec = h.execution(Duration::from_secs(60), &[]);
    let thread = h.thread().await;
    let run = run_on(&h, &exec, &thread, "hello", Some("model-b")).await;
    assert_eq!(run.status, RunStatus::Failed);
    let message = run.error.unwrap().message;
    assert!(
        message.contains("offers no models") && message.contains("leave `model` out"),
        "{message}"
    );
    assert!(wire(&h).is_empty(), "{:?}", wire(&h));
    // Without a model the same thread runs as before.
    let ok = run_on(&h, &exec, &thread, "hello", None).await;
    assert_eq!(ok.status, RunStatus::Completed, "{:?}", ok.error);
}
