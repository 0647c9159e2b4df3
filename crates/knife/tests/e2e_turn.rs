// Process tests of a whole turn: recorded tool call + answer through the real binary,
// the projection surviving a restart, and WebSocket replay-then-live delivery.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::HashSet;
use std::time::Duration;

use common::*;
use futures::{SinkExt, StreamExt};
use knife_protocol::*;
use serde_json::json;
use tokio_tungstenite::tungstenite::Message;

const REPLAY_1: &str = "sse/chat-completions/tool-call-then-answer-1.sse";
const REPLAY_2: &str = "sse/chat-completions/tool-call-then-answer-2.sse";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_tool_call_recording_end_to_end() {
    let expected_call = expected_json("sse/chat-completions/tool-call-then-answer-1.expected.json");
    let expected_answer =
        expected_json("sse/chat-completions/tool-call-then-answer-2.expected.json");
    let call = &expected_call["tool_calls"][0];
    let tool_name = call["name"].as_str().unwrap();
    let tool_args: serde_json::Value =
        serde_json::from_str(call["arguments"].as_str().unwrap()).unwrap();
    let call_id = call["id"].as_str().unwrap();
    let answer = expected_answer["text"].as_str().unwrap();

    let mock = MockLlm::replay(&[REPLAY_1, REPLAY_2]).await;
    let mut server = Server::start(&mock.base_url()).await;
    let project = server.api.create_project(&server.project_dir()).await;
    let thread = server.api.create_thread(&project).await;
    let run = server
        .api
        .post_message(&thread, "What is the capital of the UK?")
        .await;
    let (events, done) = server.api.follow_run(&thread, &run, 0).await;

    assert_eq!(done.status, RunStatus::Completed, "run: {done:?}");
    assert!(done.error.is_none(), "run error: {:?}", done.error);
    let sequences: Vec<u64> = events.iter().map(|e| e.sequence).collect();
    assert!(
        sequences.windows(2).all(|w| w[0] < w[1]),
        "SSE sequences not strictly increasing: {sequences:?}"
    );

    let p = server.api.projection(&thread).await;
    assert_eq!(p.runs.len(), 1);
    assert_eq!(p.runs[0].status, RunStatus::Completed);
    assert_eq!(p.thread.status, ThreadStatus::Idle);
    assert!(p.thread.active_run_id.is_none());
    assert!(p.thread.last_error.is_none());

    let tool_calls: Vec<_> = p
        .turn_items
        .iter()
        .filter_map(|i| match &i.kind {
            TurnItemKind::ToolCall {
                call_id,
                tool,
                input,
                ..
            } => Some((call_id.clone(), tool.clone(), input.clone(), i.status)),
            _ => None,
        })
        .collect();
    assert_eq!(tool_calls.len(), 1, "items: {:#?}", p.turn_items);
    let (got_id, got_tool, got_input, got_status) = &tool_calls[0];
    assert_eq!(got_id, call_id);
    assert_eq!(got_tool, tool_name);
    assert_eq!(got_input, &tool_args);
    assert!(
        got_status.is_terminal_item(),
        "tool call item left {got_status:?}"
    );

    let assistant: Vec<&str> = p
        .turn_items
        .iter()
        .filter_map(|i| match &i.kind {
            TurnItemKind::AssistantMessage { text, streaming } if !text.is_empty() => {
                assert!(!streaming, "assistant message still streaming: {i:?}");
                Some(text.as_str())
            }
            _ => None,
        })
        .collect();
    assert_eq!(
        assistant.last().copied(),
        Some(answer),
        "items: {:#?}",
        p.turn_items
    );
    // The user message is the first item of the run.
    match &p.turn_items.first().unwrap().kind {
        TurnItemKind::UserMessage { text, .. } => {
            assert_eq!(text, "What is the capital of the UK?")
        }
        other => panic!("first item is not the user message: {other:?}"),
    }
    // The transcript is ordered by ordinal.
    assert!(p.turn_items.windows(2).all(|w| w[0].ordinal < w[1].ordinal));

    // Sessions outlive runs; a restart releases the live one (`stopped`), so close
    // it first: the projection must then come back from the log unchanged.
    let (_, live) = server.api.get("/api/sessions").await;
    for session in live.as_array().unwrap() {
        let id = session["provider_session_id"].as_str().unwrap();
        let (status, body) = server
            .api
            .post(&format!("/api/sessions/{id}/close"), &json!({}))
            .await;
        assert!(status.is_success(), "{body}");
    }
    let before = server.api.settled_thread_json(&thread).await;
    server.restart().await;
    let after = server.api.settled_thread_json(&thread).await;
    assert_eq!(
        before,
        after,
        "the projection changed across a restart\nbefore: {}\nafter: {}",
        serde_json::to_string_pretty(&before).unwrap(),
        serde_json::to_string_pretty(&after).unwrap()
    );

    // The restarted server runs the next turn of the same thread (the mock repeats
    // the last recording for any further request).
    let latest = after["latest_sequence"].as_u64().unwrap();
    let run2 = server.api.post_message(&thread, "And again?").await;
    let (_, done2) = server.api.follow_run(&thread, &run2, latest).await;
    assert_eq!(done2.status, RunStatus::Completed, "run 2: {done2:?}");
    assert_eq!(done2.ordinal, 2);
}

/// Terminal = not pending/running/waiting.
trait ItemStatusExt {
    fn is_terminal_item(&self) -> bool;
}

impl ItemStatusExt for TurnItemStatus {
    fn is_terminal_item(&self) -> bool {
        !matches!(
            self,
            TurnItemStatus::Pending | TurnItemStatus::Running | TurnItemStatus::Waiting
        )
    }
}

/// A script of two plain text answers (one per run).
const TWO_ANSWERS: &str = r#"
[[response]]
text = "first answer from the mock"

[[response]]
text = "second answer, streamed live"
stream_deltas_ms = 20
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_websocket_subscribe_after_replays_then_follows_live() {
    let mock = MockLlm::script(TWO_ANSWERS, &[]).await;
    let server = Server::start(&mock.base_url()).await;
    let project = server.api.create_project(&server.project_dir()).await;
    let thread = server.api.create_thread(&project).await;
    let run1 = server.api.post_message(&thread, "first").await;
    let (history, done) = server.api.follow_run(&thread, &run1, 0).await;
    assert_eq!(done.status, RunStatus::Completed);
    assert!(history.len() >= 4, "too few events: {history:#?}");
    // Subscribe from the middle of run 1's history.
    let n = history[history.len() / 2].sequence;

    let ws_url = format!("ws://{}/api/ws", server.proc.addr);
    let (mut ws, _) = tokio::time::timeout(
        Duration::from_secs(5),
        tokio_tungstenite::connect_async(ws_url.as_str()),
    )
    .await
    .expect("websocket connect timed out")
    .expect("websocket connect");
    let subscribe = json!({"type": "subscribe", "thread_id": thread, "after": n});
    ws.send(Message::Text(subscribe.to_string().into()))
        .await
        .unwrap();

    let mut received: Vec<StoredEvent> = Vec::new();
    let mut subscribed = false;
    let mut run2: Option<String> = None;
    let replay_end = history.last().unwrap().sequence;
    let deadline = tokio::time::Instant::now() + RUN_TIMEOUT;
    loop {
        let msg = tokio::time::timeout_at(deadline, ws.next())
            .await
            .expect("websocket: run 2 did not finish in time")
            .expect("websocket closed early")
            .expect("websocket error");
        let text = match msg {
            Message::Text(t) => t.to_string(),
            Message::Ping(_) | Message::Pong(_) => continue,
            other => panic!("unexpected websocket message {other:?}"),
        };
        match serde_json::from_str::<WsServerMessage>(&text).unwrap() {
            WsServerMessage::Subscribed { thread_id, after } => {
                assert!(!subscribed, "subscribed twice");
                assert!(received.is_empty(), "events before `subscribed`");
                assert_eq!(thread_id.as_str(), thread);
                assert_eq!(after, n);
                subscribed = true;
            }
            WsServerMessage::Event { event } => {
                assert!(subscribed, "event before `subscribed`");
                let seq = event.sequence;
                received.push(*event);
                // Once the replay of run 1 is through, start run 2: its events are live.
                if seq == replay_end && run2.is_none() {
                    run2 = Some(server.api.post_message(&thread, "second").await);
                }
                let finished = match &received.last().unwrap().event.body {
                    EventBody::RunUpdated(r) => {
                        Some(r.id.as_str()) == run2.as_deref() && r.status.is_terminal()
                    }
                    _ => false,
                };
                if finished {
                    break;
                }
            }
            WsServerMessage::Delta(_) | WsServerMessage::Reset(_) => {
                assert!(subscribed, "delta before `subscribed`");
            }
            WsServerMessage::Error { error } => panic!("websocket error message: {error:?}"),
        }
    }
    let run2 = run2.expect("replay never reached the end of run 1");

    // Exactly the events with sequence > N, in order, no duplicates.
    let seqs: Vec<u64> = received.iter().map(|e| e.sequence).collect();
    assert!(
        seqs.iter().all(|s| *s > n),
        "replayed an event <= {n}: {seqs:?}"
    );
    assert!(
        seqs.windows(2).all(|w| w[0] < w[1]),
        "out of order or duplicated: {seqs:?}"
    );
    let unique: HashSet<&EventId> = received.iter().map(|e| &e.event.id).collect();
    assert_eq!(unique.len(), received.len(), "duplicate event ids");
    // Same events as the SSE feed of the same range.
    let (sse, _) = server.api.follow_run(&thread, &run2, n).await;
    assert_eq!(
        received, sse,
        "WebSocket and SSE disagree on the events after {n}"
    );
    // And nothing of run 1 after N was skipped.
    let expected_replay: Vec<u64> = history
        .iter()
        .map(|e| e.sequence)
        .filter(|s| *s > n)
        .collect();
    assert_eq!(&seqs[..expected_replay.len()], expected_replay.as_slice());
    // Run 2's events arrived live and it completed with the scripted answer.
    assert!(
        received
            .iter()
            .any(|e| e.event.run_id.as_ref().map(RunId::as_str) == Some(&run2))
    );
    let p = server.api.projection(&thread).await;
    assert_eq!(p.runs.len(), 2);
    assert!(p.runs.iter().all(|r| r.status == RunStatus::Completed));
    let last_text = p.turn_items.iter().rev().find_map(|i| match &i.kind {
        TurnItemKind::AssistantMessage { text, .. } => Some(text.clone()),
        _ => None,
    });
    assert_eq!(last_text.as_deref(), Some("second answer, streamed live"));
    let _ = ws.close(None).await;
}
