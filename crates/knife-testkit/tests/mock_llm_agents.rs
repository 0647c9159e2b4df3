// Loopback HTTP tests of the mock LLM features real agents need: the Gemini
// routes, MCP tool calls named the way each agent names them, side requests
// (`no_tools_text`) and the `GET /_mock/requests` debug route.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use knife_testkit::mock_llm::{MockLlm, MockLlmConfig, MockLlmHandle, Script, ScriptResponse};
use serde_json::{Value, json};

async fn post(mock: &MockLlmHandle, path: &str, body: &Value) -> (u16, String) {
    let response = reqwest::Client::new()
        .post(format!("http://{}{path}", mock.addr()))
        .json(body)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.text().await.unwrap())
}

/// The JSON `data:` payloads of an SSE body (every event must have one).
fn data(body: &str) -> Vec<Value> {
    body.split("\n\n")
        .filter(|e| !e.trim().is_empty())
        .map(|e| {
            let line = e.lines().find(|l| l.starts_with("data: ")).unwrap();
            serde_json::from_str(&line["data: ".len()..]).unwrap()
        })
        .collect()
}

const GEMINI_STREAM: &str = "/v1beta/models/gemini-2.5-flash:streamGenerateContent";

fn gemini_body(tools: &[&str]) -> Value {
    let decls: Vec<Value> = tools
        .iter()
        .map(|n| json!({"name": n, "parameters": {"type": "object"}}))
        .collect();
    json!({
        "contents": [{"role": "user", "parts": [{"text": "hi"}]}],
        "tools": [{"functionDeclarations": decls}],
    })
}

#[tokio::test]
async fn gemini_stream_carries_text_thoughts_calls_and_usage() {
    let mut response = ScriptResponse::text("Hello big world");
    response.reasoning = Some("think first".into());
    let script = Script::new(vec![
        response,
        ScriptResponse::tool_call("run_shell_command", r#"{"command":"ls"}"#),
    ]);
    let mock = MockLlm::start(MockLlmConfig::script(script)).await.unwrap();
    let (status, body) = post(&mock, GEMINI_STREAM, &gemini_body(&["run_shell_command"])).await;
    assert_eq!(status, 200, "{body}");
    let chunks = data(&body);
    let parts: Vec<&Value> = chunks
        .iter()
        .flat_map(|c| c["candidates"][0]["content"]["parts"].as_array().unwrap())
        .collect();
    let text: String = parts
        .iter()
        .filter(|p| p.get("thought").is_none())
        .filter_map(|p| p["text"].as_str())
        .collect();
    let thought: String = parts
        .iter()
        .filter(|p| p["thought"] == true)
        .filter_map(|p| p["text"].as_str())
        .collect();
    assert_eq!(text, "Hello big world");
    assert_eq!(thought, "think first");
    for c in &chunks {
        assert_eq!(c["candidates"][0]["content"]["role"], "model");
        assert_eq!(c["modelVersion"], "gemini-2.5-flash");
    }
    let last = chunks.last().unwrap();
    assert_eq!(last["candidates"][0]["finishReason"], "STOP");
    assert!(last["usageMetadata"]["totalTokenCount"].as_u64().unwrap() > 0);

    let (_, body) = post(&mock, GEMINI_STREAM, &gemini_body(&["run_shell_command"])).await;
    let calls: Vec<Value> = data(&body)
        .iter()
        .flat_map(|c| {
            c["candidates"][0]["content"]["parts"]
                .as_array()
                .unwrap()
                .clone()
        })
        .filter_map(|p| p.get("functionCall").cloned())
        .collect();
    assert_eq!(
        calls,
        vec![json!({"name": "run_shell_command", "args": {"command": "ls"}})]
    );
    mock.shutdown().await;
}

#[tokio::test]
async fn gemini_unary_generate_content_is_one_json_body() {
    let script = Script::new(vec![ScriptResponse::text("one two")]);
    let mock = MockLlm::start(MockLlmConfig::script(script)).await.unwrap();
    let (status, body) = post(
        &mock,
        "/v1beta/models/gemini-2.5-flash-lite:generateContent",
        &gemini_body(&[]),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let value: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        value["candidates"][0]["content"]["parts"],
        json!([{"text": "one two"}])
    );
    assert_eq!(value["modelVersion"], "gemini-2.5-flash-lite");
    // Exhausted: a Gemini-shaped error body with the script message.
    let (status, body) = post(&mock, GEMINI_STREAM, &gemini_body(&[])).await;
    assert_eq!(status, 500);
    assert!(body.contains("mock-llm script exhausted"), "{body}");
    mock.shutdown().await;
}

/// One MCP tool call scripted once, answered in each agent's format: the name
/// comes from the request's own tool list.
#[tokio::test]
async fn mcp_tool_calls_use_each_agents_name_for_the_tool() {
    let script =
        Script::new(vec![ScriptResponse::mcp_tool_call("knife", "whoami", "{}")]).repeat_last(true);
    let mock = MockLlm::start(MockLlmConfig::script(script)).await.unwrap();

    // codex: a `namespace` tool; the call carries `namespace` + the bare name.
    let codex = json!({"model": "m", "stream": true, "input": [], "tools": [
        {"type": "function", "name": "exec_command", "parameters": {}},
        {"type": "namespace", "name": "mcp__knife", "description": "x",
         "tools": [{"type": "function", "name": "whoami", "parameters": {}}]},
    ]});
    let (_, body) = post(&mock, "/v1/responses", &codex).await;
    let done = data(&body)
        .into_iter()
        .find(|e| e["type"] == "response.output_item.done")
        .unwrap();
    assert_eq!(done["item"]["type"], "function_call");
    assert_eq!(done["item"]["namespace"], "mcp__knife");
    assert_eq!(done["item"]["name"], "whoami");

    // Claude: `mcp__<server>__<tool>`.
    let claude = json!({"model": "m", "stream": true, "messages": [], "tools": [
        {"name": "Bash", "input_schema": {}}, {"name": "mcp__knife__whoami", "input_schema": {}},
    ]});
    let (_, body) = post(&mock, "/v1/messages", &claude).await;
    let start = data(&body)
        .into_iter()
        .find(|e| e["type"] == "content_block_start" && e["content_block"]["type"] == "tool_use")
        .unwrap();
    assert_eq!(start["content_block"]["name"], "mcp__knife__whoami");

    // opencode: `<server>_<tool>` over Chat Completions.
    let opencode = json!({"model": "m", "stream": true, "messages": [], "tools": [
        {"type": "function", "function": {"name": "bash"}},
        {"type": "function", "function": {"name": "knife_whoami"}},
    ]});
    let (_, body) = post(&mock, "/v1/chat/completions", &opencode).await;
    let name = body
        .split("\n\n")
        .filter_map(|e| e.strip_prefix("data: "))
        .filter(|d| *d != "[DONE]")
        .map(|d| serde_json::from_str::<Value>(d).unwrap())
        .find_map(|c| {
            c["choices"][0]["delta"]["tool_calls"][0]["function"]["name"]
                .as_str()
                .map(str::to_owned)
        })
        .unwrap();
    assert_eq!(name, "knife_whoami");

    // Gemini CLI: `mcp_<server>_<tool>`.
    let (_, body) = post(
        &mock,
        GEMINI_STREAM,
        &gemini_body(&["run_shell_command", "mcp_knife_whoami"]),
    )
    .await;
    let called: Vec<Value> = data(&body)
        .iter()
        .flat_map(|c| {
            c["candidates"][0]["content"]["parts"]
                .as_array()
                .unwrap()
                .clone()
        })
        .filter_map(|p| p.get("functionCall").cloned())
        .collect();
    assert_eq!(
        called,
        vec![json!({"name": "mcp_knife_whoami", "args": {}})]
    );
    mock.shutdown().await;
}

#[tokio::test]
async fn side_requests_without_tools_do_not_use_up_the_script() {
    let script = Script::new(vec![
        ScriptResponse::text("first"),
        ScriptResponse::text("second"),
    ])
    .no_tools_text("A title");
    let mock = MockLlm::start(MockLlmConfig::script(script)).await.unwrap();
    let with_tools = json!({"model": "m", "stream": true, "messages": [{"role": "user", "content": "x"}],
        "tools": [{"type": "function", "function": {"name": "bash"}}]});
    let without =
        json!({"model": "m", "stream": true, "messages": [{"role": "user", "content": "x"}]});
    let text = |body: &str| -> String {
        body.split("\n\n")
            .filter_map(|e| e.strip_prefix("data: "))
            .filter(|d| *d != "[DONE]")
            .filter_map(|d| {
                serde_json::from_str::<Value>(d).unwrap()["choices"][0]["delta"]["content"]
                    .as_str()
                    .map(str::to_owned)
            })
            .collect()
    };
    let (_, a) = post(&mock, "/v1/chat/completions", &without).await;
    let (_, b) = post(&mock, "/v1/chat/completions", &with_tools).await;
    let (_, c) = post(&mock, "/v1/chat/completions", &without).await;
    let (_, d) = post(&mock, "/v1/chat/completions", &with_tools).await;
    assert_eq!(
        [text(&a), text(&b), text(&c), text(&d)],
        ["A title", "first", "A title", "second"]
    );
    // Every request is still recorded, side requests included.
    assert_eq!(mock.model_requests().len(), 4);
    mock.shutdown().await;
}

#[tokio::test]
async fn debug_route_lists_the_model_requests() {
    let script = Script::new(vec![ScriptResponse::text("hi")]);
    let mock = MockLlm::start(MockLlmConfig::script(script)).await.unwrap();
    let body =
        json!({"model": "m", "stream": true, "input": [{"role": "user", "content": "ping"}]});
    post(&mock, "/v1/responses", &body).await;
    let url = format!("http://{}/_mock/requests", mock.addr());
    let listed: Value = reqwest::get(url).await.unwrap().json().await.unwrap();
    let listed = listed.as_array().unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0]["path"], "/v1/responses");
    assert_eq!(listed[0]["method"], "POST");
    assert_eq!(listed[0]["body"]["input"][0]["content"], "ping");
    mock.shutdown().await;
}

/// Claude Code posts to `/v1/messages?beta=true`: the query is ignored.
#[tokio::test]
async fn anthropic_beta_query_is_ignored() {
    let script = Script::new(vec![ScriptResponse::text("hi there")]);
    let mock = MockLlm::start(MockLlmConfig::script(script)).await.unwrap();
    let body = json!({"model": "claude-x", "stream": true, "max_tokens": 10,
        "messages": [{"role": "user", "content": "hi"}]});
    let (status, text) = post(&mock, "/v1/messages?beta=true", &body).await;
    assert_eq!(status, 200, "{text}");
    let deltas: String = data(&text)
        .iter()
        .filter(|e| e["type"] == "content_block_delta")
        .filter_map(|e| e["delta"]["text"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(deltas, "hi there");
    assert_eq!(mock.model_requests()[0].path, "/v1/messages");
    mock.shutdown().await;
}
