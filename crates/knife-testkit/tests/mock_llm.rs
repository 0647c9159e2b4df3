// Loopback HTTP tests of the mock LLM: chunks, tool calls, errors, replay, cut, gate, bench.
// Owns the end-to-end checks of knife-testkit's public API with a real reqwest client.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::StreamExt;
use knife_testkit::demo::{DEMO_ANSWER, demo_script};
use knife_testkit::mock_llm::{
    MockLlm, MockLlmConfig, MockLlmHandle, Script, ScriptError, ScriptResponse, ToolCallSpec,
    parse_write_times,
};
use knife_testkit::{fixture, fixtures_dir};
use serde_json::{Value, json};

struct Reply {
    status: u16,
    headers: reqwest::header::HeaderMap,
    chunks: Vec<Bytes>,
    error: Option<reqwest::Error>,
}

impl Reply {
    fn bytes(&self) -> Vec<u8> {
        self.chunks.concat()
    }

    fn text(&self) -> String {
        String::from_utf8(self.bytes()).unwrap()
    }

    /// The `data:` values of complete events.
    fn data(&self) -> Vec<String> {
        let text = self.text();
        let mut out = Vec::new();
        let mut rest = text.as_str();
        while let Some(end) = rest.find("\n\n") {
            let ev = &rest[..end];
            rest = &rest[end + 2..];
            out.push(ev.strip_prefix("data: ").unwrap().to_owned());
        }
        out
    }

    /// The JSON chunks (everything but `[DONE]`).
    fn chunks_json(&self) -> Vec<Value> {
        self.data()
            .iter()
            .filter(|d| *d != "[DONE]")
            .map(|d| serde_json::from_str(d).unwrap())
            .collect()
    }

    fn content(&self, field: &str) -> String {
        self.chunks_json()
            .iter()
            .filter_map(|c| c["choices"][0]["delta"][field].as_str().map(str::to_owned))
            .collect()
    }
}

fn chat_body() -> Value {
    json!({"model": "gpt-test", "stream": true, "messages": [{"role": "user", "content": "hi"}]})
}

async fn post(mock: &MockLlmHandle, path: &str, body: &Value) -> Reply {
    let url = format!("http://{}{path}", mock.addr());
    let response = reqwest::Client::new()
        .post(url)
        .header("authorization", "Bearer sk-test")
        .json(body)
        .send()
        .await
        .unwrap();
    collect(response).await
}

async fn collect(response: reqwest::Response) -> Reply {
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let mut stream = response.bytes_stream();
    let mut chunks = Vec::new();
    let mut error = None;
    while let Some(item) = stream.next().await {
        match item {
            Ok(b) => chunks.push(b),
            Err(e) => {
                error = Some(e);
                break;
            }
        }
    }
    Reply {
        status,
        headers,
        chunks,
        error,
    }
}

async fn chat(mock: &MockLlmHandle) -> Reply {
    post(mock, "/v1/chat/completions", &chat_body()).await
}

fn assert_valid_chunk(chunk: &Value, id: &str) {
    assert_eq!(chunk["id"], id);
    assert_eq!(chunk["object"], "chat.completion.chunk");
    assert!(chunk["created"].as_u64().unwrap() > 1_600_000_000);
    assert_eq!(chunk["model"], "gpt-test");
    let choices = chunk["choices"].as_array().unwrap();
    if let Some(choice) = choices.first() {
        assert_eq!(choices.len(), 1);
        assert_eq!(choice["index"], 0);
        assert!(choice["delta"].is_object());
        assert!(choice.get("finish_reason").is_some());
    } else {
        assert!(chunk["usage"]["total_tokens"].as_u64().is_some());
    }
}

async fn start(config: MockLlmConfig) -> MockLlmHandle {
    MockLlm::start(config).await.unwrap()
}

#[tokio::test]
async fn text_response_streams_valid_chunks_ending_with_done() {
    let script = Script::new(vec![ScriptResponse {
        reasoning: Some("Think it over".into()),
        ..ScriptResponse::text("Hello big world")
    }]);
    let mock = start(MockLlmConfig::script(script)).await;
    let reply = chat(&mock).await;
    assert_eq!(reply.status, 200);
    assert_eq!(reply.headers["content-type"], "text/event-stream");
    assert!(reply.error.is_none());
    assert!(reply.text().ends_with("data: [DONE]\n\n"));
    let chunks = reply.chunks_json();
    for c in &chunks {
        assert_valid_chunk(c, "chatcmpl-mock-1");
    }
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    assert_eq!(reply.content("reasoning_content"), "Think it over");
    assert_eq!(reply.content("content"), "Hello big world");
    // One delta per word, after the reasoning deltas.
    let texts: Vec<_> = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .filter(|s| !s.is_empty())
        .collect();
    assert_eq!(texts, ["Hello", " big", " world"]);
    let n = chunks.len();
    assert_eq!(chunks[n - 2]["choices"][0]["finish_reason"], "stop");
    assert_eq!(chunks[n - 1]["choices"], json!([]));
    let usage = &chunks[n - 1]["usage"];
    assert_eq!(
        usage["total_tokens"].as_u64().unwrap(),
        usage["prompt_tokens"].as_u64().unwrap() + usage["completion_tokens"].as_u64().unwrap()
    );
    // Each event was its own HTTP chunk (no split): at least one chunk per event.
    assert!(reply.chunks.len() > 1);
}

#[tokio::test]
async fn deltas_and_usage_override() {
    let script = Script::from_toml_str(
        r#"
        [[response]]
        text = "abcdefghi"
        deltas = 3
        usage = { prompt_tokens = 7, completion_tokens = 2 }
        "#,
    )
    .unwrap();
    let mock = start(MockLlmConfig::script(script)).await;
    let reply = chat(&mock).await;
    let texts: Vec<_> = reply
        .chunks_json()
        .iter()
        .filter_map(|c| {
            c["choices"][0]["delta"]["content"]
                .as_str()
                .map(str::to_owned)
        })
        .filter(|s| !s.is_empty())
        .collect();
    assert_eq!(texts, ["abc", "def", "ghi"]);
    let last = reply.chunks_json().pop().unwrap();
    assert_eq!(
        last["usage"],
        json!({"prompt_tokens": 7, "completion_tokens": 2, "total_tokens": 9})
    );
}

#[tokio::test]
async fn tool_calls_stream_ids_names_and_arguments() {
    let script = Script::from_toml_str(
        r#"
        [[response]]
        tool_calls = [
          { name = "list", arguments = '{"path":"."}' },
          { name = "read", arguments = { path = "README.md" } },
        ]
        [[response]]
        tool_calls = [{ name = "list" }]
        "#,
    )
    .unwrap();
    let mock = start(MockLlmConfig::script(script)).await;
    let reply = chat(&mock).await;
    let chunks = reply.chunks_json();
    let mut calls: Vec<(String, String, String)> = Vec::new();
    for c in &chunks {
        assert_valid_chunk(c, "chatcmpl-mock-1");
        let Some(deltas) = c["choices"][0]["delta"]["tool_calls"].as_array() else {
            continue;
        };
        for d in deltas {
            let index = d["index"].as_u64().unwrap() as usize;
            if let Some(id) = d["id"].as_str() {
                assert_eq!(d["type"], "function");
                assert_eq!(index, calls.len());
                calls.push((
                    id.into(),
                    d["function"]["name"].as_str().unwrap().into(),
                    String::new(),
                ));
            }
            calls[index].2 += d["function"]["arguments"].as_str().unwrap();
        }
    }
    assert_eq!(
        calls,
        vec![
            ("call_1".into(), "list".into(), r#"{"path":"."}"#.into()),
            (
                "call_2".into(),
                "read".into(),
                r#"{"path":"README.md"}"#.into()
            ),
        ]
    );
    // Arguments arrive in several pieces.
    let arg_pieces = chunks
        .iter()
        .filter(|c| c["choices"][0]["delta"]["tool_calls"][0]["id"].is_null())
        .filter(|c| c["choices"][0]["delta"]["tool_calls"].is_array())
        .count();
    assert!(arg_pieces >= 4, "{arg_pieces}");
    let n = chunks.len();
    assert_eq!(chunks[n - 2]["choices"][0]["finish_reason"], "tool_calls");
    assert!(reply.text().ends_with("data: [DONE]\n\n"));

    // Ids keep counting across requests; a call without arguments streams "{}".
    let second = chat(&mock).await;
    let c = &second.chunks_json()[1]["choices"][0]["delta"]["tool_calls"][0];
    assert_eq!(c["id"], "call_3");
    assert_eq!(second.chunks_json()[0]["id"], "chatcmpl-mock-2");
}

#[tokio::test]
async fn http_error_with_body_and_headers_then_exhausted() {
    let script = Script::from_toml_str(
        r#"
        [[response]]
        status = 500
        body = '{"error":{"message":"boom","type":"server_error"}}'
        headers = { "retry-after-ms" = "0" }
        "#,
    )
    .unwrap();
    let mock = start(MockLlmConfig::script(script)).await;
    let reply = post(&mock, "/chat/completions", &chat_body()).await;
    assert_eq!(reply.status, 500);
    assert_eq!(reply.headers["retry-after-ms"], "0");
    assert_eq!(reply.headers["content-type"], "application/json");
    assert_eq!(
        reply.text(),
        r#"{"error":{"message":"boom","type":"server_error"}}"#
    );

    let exhausted = chat(&mock).await;
    assert_eq!(exhausted.status, 500);
    let body: Value = serde_json::from_slice(&exhausted.bytes()).unwrap();
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("script exhausted after 1 response ("),
        "{message}"
    );
    assert!(message.contains("repeat_last"), "{message}");
}

#[tokio::test]
async fn repeat_last_serves_the_last_response_again() {
    let script = Script::new(vec![
        ScriptResponse::text("one"),
        ScriptResponse::text("two"),
    ])
    .repeat_last(true);
    let mock = start(MockLlmConfig::script(script)).await;
    for expected in ["one", "two", "two", "two"] {
        assert_eq!(chat(&mock).await.content("content"), expected);
    }
}

#[tokio::test]
async fn replay_fixture_is_byte_identical_and_split_into_chunks() {
    let rel = "sse/chat-completions/text-markdown.sse";
    let expected = fixture(rel);
    let path = fixtures_dir().join(rel);

    let whole = start(MockLlmConfig::replay_file(&path)).await;
    for _ in 0..2 {
        let reply = chat(&whole).await;
        assert_eq!(reply.bytes(), expected);
    }

    let split = start(MockLlmConfig::replay_file(&path).with_split(4096)).await;
    let reply = chat(&split).await;
    assert_eq!(reply.bytes(), expected);
    assert!(reply.error.is_none());
    assert!(reply.chunks.len() > 2, "{} chunks", reply.chunks.len());
    assert!(reply.chunks.iter().all(|c| c.len() <= 4096));
    assert_eq!(
        split.gate().chunks_sent(),
        expected.len().div_ceil(4096) as u64
    );

    // An adversarial file one byte per chunk: still byte-identical.
    let rel = "adversarial/utf8-multibyte.sse";
    let bytes = start(MockLlmConfig::replay_file(fixtures_dir().join(rel)).with_split(1)).await;
    let reply = chat(&bytes).await;
    assert_eq!(reply.bytes(), fixture(rel));
    assert!(reply.chunks.len() > 100);
}

#[tokio::test]
async fn chunk_delay_spaces_the_chunks() {
    let mock = start(
        MockLlmConfig::replay_bytes(&b"data: a\n\ndata: b\n\ndata: c\n\n"[..])
            .with_split(9)
            .with_chunk_delay(Duration::from_millis(40)),
    )
    .await;
    let started = Instant::now();
    let reply = chat(&mock).await;
    assert_eq!(reply.chunks.len(), 3);
    assert!(started.elapsed() >= Duration::from_millis(80));
}

#[tokio::test]
async fn split_applies_to_generated_streams() {
    let script = Script::new(vec![ScriptResponse::text("héllo wörld ✓")]);
    let mock = start(MockLlmConfig::script(script).with_split(5)).await;
    let reply = chat(&mock).await;
    assert!(reply.chunks.iter().all(|c| c.len() <= 5));
    assert_eq!(reply.content("content"), "héllo wörld ✓");
    assert!(reply.text().ends_with("data: [DONE]\n\n"));
}

#[tokio::test]
async fn raw_bytes_are_sent_as_they_are() {
    let script = Script::from_toml_str("[[response]]\nraw = \"data: garbage\\n\\n\"\n").unwrap();
    let mock = start(MockLlmConfig::script(script)).await;
    let reply = chat(&mock).await;
    assert_eq!(reply.status, 200);
    assert_eq!(reply.text(), "data: garbage\n\n");
}

#[tokio::test]
async fn cut_closes_the_connection_mid_event() {
    let script =
        Script::from_toml_str("[[response]]\ntext = \"partial answer\"\ncut = true\n").unwrap();
    let mock = start(MockLlmConfig::script(script)).await;
    let reply = chat(&mock).await;
    assert_eq!(reply.status, 200);
    assert!(
        reply.error.is_some(),
        "the body must end with a transport error"
    );
    let text = reply.text();
    assert!(!text.contains("[DONE]"));
    assert!(!text.ends_with("\n\n"), "must stop mid-event: {text:?}");
    assert!(text.contains(r#""content":" answer""#));
    // The complete events before the cut are valid chunks.
    assert_eq!(reply.content("content"), "partial answer");
}

#[tokio::test]
async fn sse_file_resolves_relative_to_the_script_file() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("streams")).unwrap();
    std::fs::write(
        dir.path().join("streams/a.sse"),
        "data: {\"x\":1}\n\ndata: [DONE]\n\n",
    )
    .unwrap();
    let script_path = dir.path().join("script.toml");
    std::fs::write(&script_path, "[[response]]\nsse_file = \"streams/a.sse\"\n").unwrap();
    let script = Script::load(&script_path).unwrap();
    let mock = start(MockLlmConfig::script(script)).await;
    assert_eq!(
        chat(&mock).await.text(),
        "data: {\"x\":1}\n\ndata: [DONE]\n\n"
    );

    // JSON scripts by extension.
    let json_path = dir.path().join("script.json");
    std::fs::write(
        &json_path,
        r#"{"response":[{"text":"hi"}],"repeat_last":true}"#,
    )
    .unwrap();
    let script = Script::load(&json_path).unwrap();
    assert!(script.repeat_last);
    assert_eq!(script.responses[0].text.as_deref(), Some("hi"));
}

#[tokio::test]
async fn gated_stream_releases_chunks_one_by_one() {
    let script = Script::new(vec![ScriptResponse::text("one two three four")]);
    let mock = start(MockLlmConfig::script(script).gated()).await;
    let gate = mock.gate();
    let response = reqwest::Client::new()
        .post(format!("{}/chat/completions", mock.base_url()))
        .json(&chat_body())
        .send()
        .await
        .unwrap();
    // Headers are not gated.
    assert_eq!(response.status(), 200);
    let mut stream = response.bytes_stream();
    let mut received = Vec::new();

    // Nothing comes out before a release.
    let early = tokio::time::timeout(Duration::from_millis(100), stream.next()).await;
    assert!(early.is_err(), "a chunk escaped the gate");
    assert_eq!(gate.chunks_sent(), 0);

    // role chunk + "one" + " two": exactly three events.
    gate.release(3);
    gate.wait_sent(3).await;
    while received.iter().filter(|&&b| b == b'\n').count() < 6 {
        received.extend_from_slice(&stream.next().await.unwrap().unwrap());
    }
    let text = String::from_utf8(received.clone()).unwrap();
    assert_eq!(text.matches("data: ").count(), 3);
    assert!(text.contains(r#""content":" two""#));
    assert!(!text.contains("three"));
    let stalled = tokio::time::timeout(Duration::from_millis(100), stream.next()).await;
    assert!(stalled.is_err(), "a fourth chunk escaped the gate");
    assert_eq!(gate.chunks_sent(), 3);

    gate.open();
    while let Some(chunk) = stream.next().await {
        received.extend_from_slice(&chunk.unwrap());
    }
    let text = String::from_utf8(received).unwrap();
    assert!(text.ends_with("data: [DONE]\n\n"));
    assert!(gate.is_open());
}

#[tokio::test]
async fn shutdown_aborts_a_held_stream() {
    let script = Script::new(vec![ScriptResponse::text("held")]);
    let mock = start(MockLlmConfig::script(script).gated()).await;
    let url = format!("{}/chat/completions", mock.base_url());
    let client = tokio::spawn(async move {
        let response = reqwest::Client::new()
            .post(url)
            .json(&chat_body())
            .send()
            .await
            .unwrap();
        collect(response).await
    });
    while mock.requests().is_empty() {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let started = Instant::now();
    mock.shutdown().await;
    assert!(started.elapsed() < Duration::from_secs(2));
    let reply = client.await.unwrap();
    assert!(reply.error.is_some());
    assert!(reply.chunks.is_empty());
}

#[tokio::test]
async fn bench_markers_parse_back() {
    let mock = start(MockLlmConfig::bench(50)).await;
    let before = knife_testkit::mock_llm::bench::now_unix_micros();
    let reply = chat(&mock).await;
    let after = knife_testkit::mock_llm::bench::now_unix_micros();
    let text = reply.content("content");
    let times = parse_write_times(&text);
    assert_eq!(times.len(), 50);
    assert!(times.windows(2).all(|w| w[0] <= w[1]));
    assert!(times[0] >= before && times[49] <= after);
    // Each delta is exactly one marker.
    for c in reply.chunks_json() {
        if let Some(s) = c["choices"][0]["delta"]["content"].as_str()
            && !s.is_empty()
        {
            assert_eq!(parse_write_times(s).len(), 1);
            assert!(s.starts_with('⟨') && s.ends_with('⟩'));
        }
    }
    assert!(reply.text().ends_with("data: [DONE]\n\n"));

    let script = Script::from_toml_str("[[response]]\nbench_deltas = 7\n").unwrap();
    let scripted = start(MockLlmConfig::script(script)).await;
    assert_eq!(
        parse_write_times(&chat(&scripted).await.content("content")).len(),
        7
    );
}

#[tokio::test]
async fn requests_are_recorded() {
    let mock = start(MockLlmConfig::script(
        Script::new(vec![ScriptResponse::text("ok")]).repeat_last(true),
    ))
    .await;
    chat(&mock).await;
    let http = reqwest::Client::new();
    let models: Value = http
        .get(format!("{}/models", mock.base_url()))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(models["data"][0]["id"], "mock-model");
    let health = http
        .get(format!("http://{}/healthz", mock.addr()))
        .send()
        .await
        .unwrap();
    assert_eq!(health.text().await.unwrap(), "ok");
    let missing = http
        .get(format!("http://{}/nope", mock.addr()))
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), 404);

    let requests = mock.requests();
    assert_eq!(requests.len(), 4);
    let first = &requests[0];
    assert_eq!(first.method, "POST");
    assert_eq!(first.path, "/v1/chat/completions");
    assert_eq!(first.header("Authorization"), Some("Bearer sk-test"));
    assert_eq!(first.body.as_ref().unwrap()["messages"][0]["content"], "hi");
    assert!(first.is_chat());
    assert_eq!(requests[1].path, "/v1/models");
    assert_eq!(requests[2].path, "/healthz");
    assert_eq!(mock.chat_requests().len(), 1);
    assert!(mock.tool_call_violations().is_empty());

    // A request with an orphan tool output is flagged.
    let orphan = json!({"model": "m", "messages": [
        {"role": "user", "content": "hi"},
        {"role": "tool", "tool_call_id": "call_7", "content": "x"},
    ]});
    post(&mock, "/v1/chat/completions", &orphan).await;
    let violations = mock.tool_call_violations();
    assert_eq!(violations.len(), 1, "{violations:?}");
    assert!(violations[0].starts_with("chat request #2") && violations[0].contains("call_7"));
}

#[tokio::test]
async fn demo_script_lists_reads_then_answers() {
    let mock = start(MockLlmConfig::script(demo_script())).await;
    let first = chat(&mock).await.chunks_json();
    let call = |chunks: &[Value]| {
        chunks
            .iter()
            .find_map(|c| {
                c["choices"][0]["delta"]["tool_calls"][0]["function"]["name"]
                    .as_str()
                    .map(str::to_owned)
            })
            .unwrap()
    };
    assert_eq!(call(&first), "list");
    assert_eq!(call(&chat(&mock).await.chunks_json()), "read");
    assert_eq!(chat(&mock).await.content("content"), DEMO_ANSWER);
}

#[test]
fn script_errors_name_the_line_and_field() {
    let err = Script::from_toml_str("[[response]]\ntext = \"a\"\ntxt = \"b\"\n").unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, ScriptError::Toml { .. }));
    assert!(msg.contains("line 3"), "{msg}");
    assert!(msg.contains("txt"), "{msg}");

    let msg = Script::from_toml_str("[[response]]\n\ndeltas = \"three\"\ntext = \"a\"\n")
        .unwrap_err()
        .to_string();
    assert!(msg.contains("line 3") && msg.contains("deltas"), "{msg}");

    let err = Script::from_toml_str(
        "[[response]]\ntext = \"a\"\n[[response]]\ntext = \"b\"\nraw = \"c\"\n",
    )
    .unwrap_err();
    let msg = err.to_string();
    assert!(
        matches!(
            err,
            ScriptError::Invalid {
                index: 2,
                field: "raw",
                ..
            }
        ),
        "{msg}"
    );
    assert!(msg.contains("#2") && msg.contains("`raw`"), "{msg}");

    let msg = Script::from_toml_str("[[response]]\ncut = true\n")
        .unwrap_err()
        .to_string();
    assert!(msg.contains("nothing to send"), "{msg}");

    let msg = Script::from_json_str("{\"response\": [\n {\"text\": 5}]}")
        .unwrap_err()
        .to_string();
    assert!(msg.contains("line 2"), "{msg}");

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.toml");
    std::fs::write(&path, "[[response]]\nsse_file = \"missing.sse\"\n").unwrap();
    let msg = Script::load(&path).unwrap_err().to_string();
    assert!(
        msg.contains("sse_file") && msg.contains("missing.sse"),
        "{msg}"
    );

    let msg = Script::load(&dir.path().join("absent.toml"))
        .unwrap_err()
        .to_string();
    assert!(msg.contains("absent.toml"), "{msg}");
}

#[tokio::test]
async fn start_rejects_bad_config() {
    let err = MockLlm::start(MockLlmConfig::replay_file("/definitely/missing.sse"))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("/definitely/missing.sse"));
    let err = MockLlm::start(MockLlmConfig::bench(1).with_split(0))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("split"));
    let bad = Script::new(vec![ScriptResponse {
        raw: Some("x".into()),
        tool_calls: vec![ToolCallSpec {
            id: None,
            name: "a".into(),
            arguments: "{}".into(),
            ..ToolCallSpec::default()
        }],
        ..ScriptResponse::default()
    }]);
    assert!(MockLlm::start(MockLlmConfig::script(bad)).await.is_err());
}
