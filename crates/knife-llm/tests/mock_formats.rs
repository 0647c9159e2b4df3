//! `knife_testkit`'s mock LLM speaks Anthropic Messages and OpenAI Responses
//! from the same scripts as Chat Completions: its streams go through the real
//! clients and mappers here (reasoning, text, tool calls, errors, cuts).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use futures::StreamExt;
use knife_llm::anthropic::AnthropicClient;
use knife_llm::openai_chat::OpenAiChatClient;
use knife_llm::openai_responses::OpenAiResponsesClient;
use knife_llm::{ChatMessage, FinishReason, LlmClient, LlmError, LlmEvent, LlmRequest, SseError};
use knife_testkit::mock_llm::{
    ApiFormat, MockLlm, MockLlmConfig, Script, ScriptResponse, ToolCallSpec,
};

const TEST_TIMEOUT: Duration = Duration::from_secs(10);

fn script() -> Script {
    Script::new(vec![
        ScriptResponse {
            reasoning: Some("Look at the folder first.".into()),
            text: Some("Listing it.".into()),
            tool_calls: vec![
                ToolCallSpec {
                    id: None,
                    name: "list".into(),
                    arguments: r#"{"path":"."}"#.into(),
                    ..ToolCallSpec::default()
                },
                ToolCallSpec {
                    id: Some("call_fixed".into()),
                    name: "now".into(),
                    arguments: String::new(),
                    ..ToolCallSpec::default()
                },
            ],
            ..ScriptResponse::default()
        },
        ScriptResponse::text("Two files."),
        ScriptResponse::http(
            503,
            r#"{"error":{"message":"busy","type":"overloaded_error"}}"#,
        )
        .with_header("retry-after", "1"),
        ScriptResponse::text("partial answer").cut(),
    ])
}

fn request() -> LlmRequest {
    LlmRequest {
        model: "mock-model".into(),
        messages: vec![ChatMessage::User {
            text: "what is here?".into(),
        }],
        tools: vec![],
        max_output_tokens: None,
        temperature: None,
    }
}

async fn run(client: &dyn LlmClient) -> Result<Vec<Result<LlmEvent, LlmError>>, LlmError> {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let stream = client.stream(request()).await?;
        Ok(stream.collect().await)
    })
    .await
    .expect("test timed out")
}

#[derive(Debug, Default, PartialEq)]
struct Step {
    reasoning: String,
    signatures: Vec<Option<String>>,
    text: String,
    calls: Vec<(String, String, String)>,
    reason: Option<FinishReason>,
}

fn fold(items: Vec<Result<LlmEvent, LlmError>>) -> Step {
    let mut step = Step::default();
    for item in items {
        match item.unwrap() {
            LlmEvent::ReasoningDelta { text, .. } => step.reasoning.push_str(&text),
            LlmEvent::ReasoningEnd { signature, .. } => step.signatures.push(signature),
            LlmEvent::TextDelta { text, .. } => step.text.push_str(&text),
            LlmEvent::ToolCall {
                id,
                name,
                arguments,
            } => step.calls.push((id, name, arguments)),
            LlmEvent::StepFinish { reason, .. } => step.reason = Some(reason),
            _ => {}
        }
    }
    step
}

/// Runs the whole script through `client`; `signed` says whether the format
/// carries a thinking signature.
async fn check_script(client: &dyn LlmClient, signed: bool, empty_args: &str) {
    let first = fold(run(client).await.unwrap());
    assert_eq!(first.reasoning, "Look at the folder first.");
    assert_eq!(first.signatures.len(), 1);
    assert_eq!(first.signatures[0].is_some(), signed);
    assert_eq!(first.text, "Listing it.");
    assert_eq!(
        first.calls,
        vec![
            ("call_1".into(), "list".into(), r#"{"path":"."}"#.into()),
            ("call_fixed".into(), "now".into(), empty_args.into()),
        ]
    );
    assert_eq!(first.reason, Some(FinishReason::ToolCalls));

    let second = fold(run(client).await.unwrap());
    assert_eq!(second.text, "Two files.");
    assert_eq!(second.reason, Some(FinishReason::Stop));

    let err = run(client).await.unwrap_err();
    assert!(
        matches!(&err, LlmError::Http { status: 503, retry_after: Some(d), message, .. }
            if *d == Duration::from_secs(1) && message == "busy"),
        "{err:?}"
    );

    // `cut` aborts the connection mid-event: the answer is incomplete, never finished.
    let cut = run(client).await.unwrap();
    assert!(
        matches!(
            cut.last(),
            Some(Err(LlmError::Stream(SseError::ConnectionLost(_))))
        ),
        "{cut:?}"
    );
    assert!(
        !cut.iter()
            .any(|e| matches!(e, Ok(LlmEvent::StepFinish { .. })))
    );
}

#[tokio::test]
async fn mock_llm_serves_anthropic_messages_from_a_script() {
    let mock = MockLlm::start(MockLlmConfig::script(script()).with_split(7))
        .await
        .unwrap();
    let client = AnthropicClient::new(mock.base_url(), Some("sk-ant".into()));
    // The mock sends `""` for a tool with no input; the mapper makes it `{}`.
    check_script(&client, true, "{}").await;
    let requests = mock.model_requests();
    assert_eq!(requests.len(), 4);
    assert!(
        requests
            .iter()
            .all(|r| r.format() == Some(ApiFormat::AnthropicMessages))
    );
    assert_eq!(requests[0].path, "/v1/messages");
    assert_eq!(requests[0].header("x-api-key"), Some("sk-ant"));
    assert_eq!(requests[0].header("anthropic-version"), Some("2023-06-01"));
    assert!(mock.chat_requests().is_empty());
    mock.shutdown().await;
}

#[tokio::test]
async fn mock_llm_serves_openai_responses_from_a_script() {
    let mock = MockLlm::start(MockLlmConfig::script(script()).with_split(7))
        .await
        .unwrap();
    let client = OpenAiResponsesClient::new(mock.base_url(), None);
    check_script(&client, false, "{}").await;
    let requests = mock.model_requests();
    assert_eq!(requests.len(), 4);
    assert!(requests.iter().all(|r| r.path == "/v1/responses"));
    assert_eq!(requests[0].body.as_ref().unwrap()["store"], false);
    mock.shutdown().await;
}

/// Formats share one request counter: a chat request, then a messages request,
/// get script responses 1 and 2.
#[tokio::test]
async fn mock_llm_formats_share_the_script_order() {
    let script = Script::new(vec![
        ScriptResponse::text("one"),
        ScriptResponse::text("two"),
    ]);
    let mock = MockLlm::start(MockLlmConfig::script(script)).await.unwrap();
    let chat = OpenAiChatClient::new(mock.base_url(), None);
    assert_eq!(fold(run(&chat).await.unwrap()).text, "one");
    let anthropic = AnthropicClient::new(mock.base_url(), None);
    assert_eq!(fold(run(&anthropic).await.unwrap()).text, "two");
    assert_eq!(mock.model_requests().len(), 2);
    assert_eq!(mock.chat_requests().len(), 1);
    mock.shutdown().await;
}

/// A scripted `length` finish maps to each protocol's own cap reason.
#[tokio::test]
async fn mock_llm_length_finish_in_every_format() {
    let mut capped = ScriptResponse::text("cut short");
    capped.finish_reason = Some("length".into());
    let script = Script {
        responses: vec![capped],
        repeat_last: true,
        no_tools_text: None,
    };
    let mock = MockLlm::start(MockLlmConfig::script(script)).await.unwrap();
    let clients: Vec<Box<dyn LlmClient>> = vec![
        Box::new(OpenAiChatClient::new(mock.base_url(), None)),
        Box::new(AnthropicClient::new(mock.base_url(), None)),
        Box::new(OpenAiResponsesClient::new(mock.base_url(), None)),
    ];
    for client in clients {
        assert_eq!(
            fold(run(client.as_ref()).await.unwrap()).reason,
            Some(FinishReason::Length)
        );
    }
    mock.shutdown().await;
}
