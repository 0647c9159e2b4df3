// Process tests of the `anthropic` and `openai-responses` drivers: `knife serve`
// against `knife mock-llm` speaking Anthropic Messages / OpenAI Responses, one
// turn with reasoning, a tool call and a final answer.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use knife_protocol::*;
use serde_json::{Value, json};

/// Model request 1: reasoning, text and a `list` call; request 2: the answer.
const SCRIPT: &str = r#"
[[response]]
reasoning = "I should look at the folder."
text = "Let me look."
tool_calls = [{ name = "list", arguments = '{"path":"."}' }]

[[response]]
text = "The project holds notes.txt."
"#;

fn config(driver: &str, base_url: &str) -> String {
    format!(
        "default_provider = \"mock\"\n\n[providers.mock]\ndriver = \"{driver}\"\n\
         base_url = \"{base_url}\"\nmodel = \"mock-model\"\napi_key_env = \"KNIFE_E2E_UNSET_KEY\"\n\
         output_limit = 2048\n"
    )
}

/// Runs one turn through `driver` and returns the thread's projection. The run
/// can only complete if knife spoke the driver's protocol: the mock answers each
/// path in its own format, and a mapper fed another protocol's stream never
/// sees its terminal event (the run would fail with `provider.stream`).
async fn one_turn(driver: &str) -> ThreadProjection {
    let mock = MockLlm::script(SCRIPT, &[]).await;
    let server = Server::start_with_config(&config(driver, &mock.base_url())).await;
    std::fs::write(server.project_dir().join("notes.txt"), "hello").unwrap();
    let project = server.api.create_project(&server.project_dir()).await;
    let thread = server.api.create_thread(&project).await;
    let run = server.api.post_message(&thread, "What is in here?").await;
    let (_, done) = server.api.follow_run(&thread, &run, 0).await;
    assert_eq!(
        done.status,
        RunStatus::Completed,
        "run: {done:?}\nserver stderr:\n{}\nmock stderr:\n{}",
        server.proc.stderr(),
        mock.proc.stderr()
    );
    assert!(done.error.is_none(), "run error: {:?}", done.error);
    server.api.projection(&thread).await
}

fn check_projection(p: &ThreadProjection) {
    let tool_calls: Vec<(String, Value, TurnItemStatus)> = p
        .turn_items
        .iter()
        .filter_map(|i| match &i.kind {
            TurnItemKind::ToolCall { tool, input, .. } => {
                Some((tool.clone(), input.clone(), i.status))
            }
            _ => None,
        })
        .collect();
    assert_eq!(tool_calls.len(), 1, "items: {:#?}", p.turn_items);
    assert_eq!(tool_calls[0].0, "list");
    assert_eq!(tool_calls[0].1, json!({"path": "."}));
    assert_eq!(
        tool_calls[0].2,
        TurnItemStatus::Completed,
        "{:#?}",
        p.turn_items
    );

    let assistant: Vec<&str> = p
        .turn_items
        .iter()
        .filter_map(|i| match &i.kind {
            TurnItemKind::AssistantMessage { text, streaming } if !text.is_empty() => {
                assert!(!streaming, "still streaming: {i:?}");
                Some(text.as_str())
            }
            _ => None,
        })
        .collect();
    assert_eq!(
        assistant,
        vec!["Let me look.", "The project holds notes.txt."]
    );
    let reasoning = p
        .turn_items
        .iter()
        .any(|i| matches!(&i.kind, TurnItemKind::Reasoning { text, .. } if text == "I should look at the folder."));
    assert!(reasoning, "items: {:#?}", p.turn_items);
    assert_eq!(p.thread.status, ThreadStatus::Idle);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_anthropic_driver_tool_call_and_answer() {
    let p = one_turn("anthropic").await;
    check_projection(&p);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_openai_responses_driver_tool_call_and_answer() {
    let p = one_turn("openai-responses").await;
    check_projection(&p);
}

/// An Anthropic `error` event mid-stream (after some text) fails the run with a
/// typed `provider.error` whose code is the error's type, so a retry policy can
/// classify it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_anthropic_error_event_is_a_typed_run_error() {
    let script = r#"
[[response]]
raw = """
event: message_start
data: {"type":"message_start","message":{"id":"msg_x","model":"mock-model","usage":{"input_tokens":3,"output_tokens":1}}}

event: content_block_start
data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Partial"}}

event: error
data: {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}

"""
"#;
    let mock = MockLlm::script(script, &[]).await;
    let server = Server::start_with_config(&config("anthropic", &mock.base_url())).await;
    let project = server.api.create_project(&server.project_dir()).await;
    let thread = server.api.create_thread(&project).await;
    let run = server.api.post_message(&thread, "hi").await;
    let (_, done) = server.api.follow_run(&thread, &run, 0).await;
    assert_eq!(done.status, RunStatus::Failed, "run: {done:?}");
    let error = done.error.expect("a failed run records its error");
    assert_eq!(error.error_type, "provider.error", "{error:?}");
    assert_eq!(error.code.as_deref(), Some("overloaded_error"), "{error:?}");
    assert!(error.message.contains("Overloaded"), "{error:?}");
}
