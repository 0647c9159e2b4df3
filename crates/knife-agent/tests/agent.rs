//! Shared support for the built-in agent's tests: a scripted fake `LlmClient` that
//! records requests, a session harness on a temp project, and event helpers.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use knife_agent::tools::{Tool, ToolContext, ToolError, ToolSet};
use knife_llm::*;
use knife_protocol::*;
use knife_runtime::recording::DurableStates;
use knife_runtime::{AdapterError, InterruptReason};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::time::Instant;

mod common;
use common::*;

// ---------------------------------------------------------------- tests

#[tokio::test(start_paused = true)]
async fn plain_reply_completes_with_the_full_text() {
    let llm = FakeLlm::new(vec![text_step(&["Hello", ", world"])]);
    let mut h = open(llm.clone(), |_| {}, None).await;
    let history = vec![
        user_item(1, "earlier question"),
        assistant_item(1, 1, "earlier answer"),
    ];
    h.session
        .start_turn(turn(2, "What is this?", history))
        .await
        .unwrap();
    let events = collect_turn(&mut h.events).await;

    let pturn = ProviderTurnId::for_run(&RunId::for_thread(&ThreadId::from("thread_1"), 2), 1);
    let items = final_items(&events);
    assert_eq!(items.len(), 1);
    let item = &items[0];
    assert_eq!(item.id, TurnItemId::of_turn(&pturn, 1));
    assert_eq!(item.ordinal, 2_000_001);
    assert_eq!(item.status, TurnItemStatus::Completed);
    assert_eq!(
        item.kind,
        TurnItemKind::AssistantMessage {
            text: "Hello, world".into(),
            streaming: false
        }
    );
    let first = &snapshots(&events)[0];
    assert_eq!(first.status, TurnItemStatus::Running);
    assert!(matches!(
        first.kind,
        TurnItemKind::AssistantMessage {
            streaming: true,
            ..
        }
    ));

    let (outcome, usage) = outcome(&events);
    assert_eq!(outcome, TurnOutcome::Completed);
    assert_eq!(usage.unwrap().total_tokens, 15);
    let last_turn = events
        .iter()
        .rev()
        .find(|e| matches!(e, AdapterEvent::ProviderTurnUpdated(_)))
        .unwrap();
    match (&events[0], last_turn) {
        (AdapterEvent::ProviderTurnUpdated(start), AdapterEvent::ProviderTurnUpdated(end)) => {
            assert_eq!(start.status, ProviderTurnStatus::Running);
            assert_eq!(end.status, ProviderTurnStatus::Completed);
            assert_eq!(end.id, pturn);
        }
        other => panic!("provider turn events missing: {other:?}"),
    }

    let requests = llm.requests();
    assert_eq!(requests.len(), 1);
    let req = &requests[0];
    assert_eq!(req.model, "test-model");
    let tool_names: Vec<_> = req.tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(
        tool_names,
        ["bash", "edit", "glob", "grep", "list", "read", "write"]
    );
    assert!(matches!(&req.messages[0], ChatMessage::System { text } if text.contains("read")));
    assert_eq!(
        req.messages[1..],
        [
            ChatMessage::User {
                text: "earlier question".into()
            },
            ChatMessage::Assistant {
                text: Some("earlier answer".into()),
                tool_calls: vec![]
            },
            ChatMessage::User {
                text: "What is this?".into()
            },
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn tool_call_then_answer_round_trips_the_result() {
    let llm = FakeLlm::new(vec![
        tool_step("call_1", "read", r#"{"path":"src/main.rs"}"#),
        text_step(&["It prints hello."]),
    ]);
    let mut h = open(llm.clone(), |_| {}, None).await;
    h.session
        .start_turn(turn(1, "What does main do?", vec![]))
        .await
        .unwrap();
    let events = collect_turn(&mut h.events).await;

    let tool_snaps: Vec<_> = snapshots(&events)
        .into_iter()
        .filter(|i| matches!(i.kind, TurnItemKind::ToolCall { .. }))
        .collect();
    let statuses: Vec<_> = tool_snaps.iter().map(|i| i.status).collect();
    assert_eq!(
        statuses,
        [
            TurnItemStatus::Pending,
            TurnItemStatus::Pending,
            TurnItemStatus::Running,
            TurnItemStatus::Completed
        ]
    );
    let items = final_items(&events);
    assert_eq!(items.len(), 2);
    match &items[0].kind {
        TurnItemKind::ToolCall {
            call_id,
            tool,
            input,
            output,
            error,
        } => {
            assert_eq!((call_id.as_str(), tool.as_str()), ("call_1", "read"));
            assert_eq!(input, &json!({"path": "src/main.rs"}));
            assert!(output.as_deref().unwrap().contains("fn main"));
            assert!(error.is_none());
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(items[0].ordinal, 1_000_001);
    assert_eq!(text_of(&items[1]), "It prints hello.");
    assert_eq!(items[1].ordinal, 1_000_002);
    let (outcome, usage) = outcome(&events);
    assert_eq!(outcome, TurnOutcome::Completed);
    assert_eq!(usage.unwrap().total_tokens, 27 + 15);

    let requests = llm.requests();
    assert_eq!(requests.len(), 2);
    let second = &requests[1].messages;
    let n = second.len();
    assert_eq!(
        second[n - 2],
        ChatMessage::Assistant {
            text: None,
            tool_calls: vec![ToolCallRequest {
                id: "call_1".into(),
                name: "read".into(),
                arguments: r#"{"path":"src/main.rs"}"#.into()
            }]
        }
    );
    match &second[n - 1] {
        ChatMessage::Tool { call_id, content } => {
            assert_eq!(call_id, "call_1");
            assert!(content.contains("     1\tfn main() {"), "{content}");
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn tool_error_goes_back_to_the_model_and_the_turn_completes() {
    let llm = FakeLlm::new(vec![
        tool_step("call_1", "read", r#"{"path":"../x"}"#),
        tool_step("call_2", "grep", "{not json"),
        text_step(&["I cannot read that."]),
    ]);
    let mut h = open(llm.clone(), |_| {}, None).await;
    h.session
        .start_turn(turn(1, "read ../x", vec![]))
        .await
        .unwrap();
    let events = collect_turn(&mut h.events).await;

    assert_eq!(outcome(&events).0, TurnOutcome::Completed);
    assert_nothing_pending(&events);
    let items = final_items(&events);
    assert_eq!(items[0].status, TurnItemStatus::Failed);
    match &items[0].kind {
        TurnItemKind::ToolCall { error, output, .. } => {
            assert!(output.is_none());
            assert!(
                error
                    .as_deref()
                    .unwrap()
                    .contains("path ../x is outside the project root")
            );
        }
        other => panic!("{other:?}"),
    }
    match &items[1].kind {
        TurnItemKind::ToolCall { input, error, .. } => {
            assert_eq!(input, &Value::String("{not json".into()));
            assert!(error.as_deref().unwrap().contains("not valid JSON"));
        }
        other => panic!("{other:?}"),
    }
    let requests = llm.requests();
    assert_eq!(requests.len(), 3);
    match requests[1].messages.last().unwrap() {
        ChatMessage::Tool { content, .. } => {
            assert!(
                content.starts_with("Error: path ../x is outside the project root"),
                "{content}"
            )
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn http_error_fails_the_turn_with_provider_http() {
    let body = json!({"error": {"code": "rate_limit_exceeded", "message": "slow down"}});
    let llm = FakeLlm::new(vec![vec![Err(LlmError::Http {
        status: 429,
        retry_after: None,
        body: Some(body.clone()),
        message: "slow down".into(),
    })]]);
    // One attempt: a rate limit is otherwise retried (PROC-05).
    let mut h = open(llm, |c| c.retry.max_attempts = 1, None).await;
    h.session.start_turn(turn(1, "hi", vec![])).await.unwrap();
    let events = collect_turn(&mut h.events).await;
    let TurnOutcome::Failed { error } = outcome(&events).0 else {
        panic!("expected a failure");
    };
    assert_eq!(error.error_type, "provider.http");
    assert_eq!(error.http_status, Some(429));
    assert_eq!(error.code.as_deref(), Some("rate_limit_exceeded"));
    assert_eq!(error.detail, Some(body));
    assert_eq!(
        error.message,
        "the model endpoint answered HTTP 429: slow down"
    );
    assert!(snapshots(&events).is_empty());
    assert!(events.iter().any(|e| matches!(e,
        AdapterEvent::ProviderTurnUpdated(t) if t.status == ProviderTurnStatus::Failed)));
}

#[tokio::test(start_paused = true)]
async fn stream_error_keeps_partial_text_marked_failed() {
    let llm = FakeLlm::new(vec![vec![
        Ok(LlmEvent::TextStart { id: "t".into() }),
        Ok(LlmEvent::TextDelta {
            id: "t".into(),
            text: "Partial ans".into(),
        }),
        Ok(LlmEvent::ToolInputStart {
            id: "call_9".into(),
            name: "read".into(),
        }),
        Ok(LlmEvent::ToolInputDelta {
            id: "call_9".into(),
            delta: "{\"pa".into(),
        }),
        Err(LlmError::Stream(SseError::EndedEarly)),
    ]]);
    // One attempt: a broken stream is otherwise retried (PROC-03).
    let mut h = open(llm, |c| c.retry.max_attempts = 1, None).await;
    h.session.start_turn(turn(1, "hi", vec![])).await.unwrap();
    let events = collect_turn(&mut h.events).await;

    assert_nothing_pending(&events);
    let TurnOutcome::Failed { error } = outcome(&events).0 else {
        panic!("expected a failure");
    };
    assert_eq!(error.error_type, "provider.stream");
    assert_eq!(
        error.message,
        LlmError::Stream(SseError::EndedEarly).to_string()
    );
    let items = final_items(&events);
    assert_eq!(items[0].status, TurnItemStatus::Failed);
    assert_eq!(text_of(&items[0]), "Partial ans");
    assert_eq!(items[1].status, TurnItemStatus::Failed);
    match &items[1].kind {
        TurnItemKind::ToolCall { input, error, .. } => {
            assert_eq!(input, &Value::String("{\"pa".into()));
            assert!(error.is_some());
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn interrupt_mid_stream_settles_items_as_interrupted() {
    let (tx, rx) = mpsc::unbounded_channel();
    let llm = FakeLlm::with(vec![Script::Gate(rx)], None);
    let mut h = open(llm, |_| {}, None).await;
    h.session.start_turn(turn(1, "hi", vec![])).await.unwrap();
    tx.send(Ok(LlmEvent::ReasoningStart { id: "r".into() }))
        .unwrap();
    tx.send(Ok(LlmEvent::ReasoningDelta {
        id: "r".into(),
        text: "hmm".into(),
    }))
    .unwrap();
    tx.send(Ok(LlmEvent::TextStart { id: "t".into() })).unwrap();
    tx.send(Ok(LlmEvent::TextDelta {
        id: "t".into(),
        text: "Working on".into(),
    }))
    .unwrap();
    // Wait until the text is visible, then interrupt.
    let mut seen = Vec::new();
    let mut states = DurableStates::default();
    loop {
        let e = h.events.next().await.unwrap().unwrap();
        let done = states.fold(std::slice::from_ref(&e)).iter().any(|i| {
            matches!(&i.kind, TurnItemKind::AssistantMessage { text, .. } if text == "Working on")
        });
        seen.push(e);
        if done {
            break;
        }
    }
    h.session
        .interrupt_turn(&ThreadId::from("thread_1"), InterruptReason::User)
        .await
        .unwrap();
    seen.extend(collect_turn(&mut h.events).await);

    assert_eq!(
        outcome(&seen).0,
        TurnOutcome::Interrupted {
            reason: "user".into()
        }
    );
    assert_nothing_pending(&seen);
    let items = final_items(&seen);
    assert_eq!(items.len(), 2);
    assert!(
        items
            .iter()
            .all(|i| i.status == TurnItemStatus::Interrupted)
    );
    assert_eq!(text_of(&items[0]), "hmm");
    assert_eq!(text_of(&items[1]), "Working on");
    drop(tx);
}

/// A tool that never finishes, to interrupt a turn while a tool runs.
struct HangingTool;

#[async_trait::async_trait]
impl Tool for HangingTool {
    fn name(&self) -> &'static str {
        "hang"
    }
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "hang".into(),
            description: "never returns".into(),
            parameters: json!({"type": "object"}),
        }
    }
    async fn execute(&self, _args: Value, _ctx: &ToolContext) -> Result<String, ToolError> {
        futures::future::pending::<()>().await;
        Ok(String::new())
    }
}

#[tokio::test(start_paused = true)]
async fn interrupt_during_a_tool_fails_it_as_aborted() {
    let llm = FakeLlm::new(vec![tool_step("call_1", "hang", "{}")]);
    let mut tools = ToolSet::read_only();
    tools.insert(Arc::new(HangingTool));
    let mut h = open(llm, |_| {}, Some(tools)).await;
    h.session.start_turn(turn(1, "hang", vec![])).await.unwrap();
    let mut seen = Vec::new();
    loop {
        let e = h.events.next().await.unwrap().unwrap();
        let running =
            matches!(&e, AdapterEvent::TurnItemUpdated(i) if i.status == TurnItemStatus::Running);
        seen.push(e);
        if running {
            break;
        }
    }
    // A second turn cannot start while this one runs.
    let err = h
        .session
        .start_turn(turn(2, "again", vec![]))
        .await
        .unwrap_err();
    assert!(matches!(err, AdapterError::Busy(_)), "{err:?}");
    // Interrupting another thread does nothing.
    h.session
        .interrupt_turn(&ThreadId::from("thread_other"), InterruptReason::User)
        .await
        .unwrap();
    h.session
        .interrupt_turn(&ThreadId::from("thread_1"), InterruptReason::Superseded)
        .await
        .unwrap();
    seen.extend(collect_turn(&mut h.events).await);
    assert_eq!(
        outcome(&seen).0,
        TurnOutcome::Interrupted {
            reason: "superseded".into()
        }
    );
    assert_nothing_pending(&seen);
    let items = final_items(&seen);
    assert_eq!(items[0].status, TurnItemStatus::Failed);
    assert!(matches!(&items[0].kind,
        TurnItemKind::ToolCall { error: Some(e), .. } if e == "Tool execution aborted"));
}

#[tokio::test(start_paused = true)]
async fn next_turn_can_start_as_soon_as_the_terminal_arrives() {
    let llm = FakeLlm::new(vec![text_step(&["one"]), text_step(&["two"])]);
    let mut h = open(llm, |_| {}, None).await;
    h.session.start_turn(turn(1, "a", vec![])).await.unwrap();
    collect_turn(&mut h.events).await;
    h.session.start_turn(turn(2, "b", vec![])).await.unwrap();
    let events = collect_turn(&mut h.events).await;
    assert_eq!(text_of(&final_items(&events)[0]), "two");
}

#[tokio::test(start_paused = true)]
async fn max_steps_fails_the_turn_with_a_clear_error() {
    let llm = FakeLlm::new(vec![
        tool_step("c1", "list", "{}"),
        tool_step("c2", "list", "{}"),
        tool_step("c3", "list", "{}"),
    ]);
    let mut h = open(llm.clone(), |c| c.max_steps = 2, None).await;
    h.session.start_turn(turn(1, "loop", vec![])).await.unwrap();
    let events = collect_turn(&mut h.events).await;
    let TurnOutcome::Failed { error } = outcome(&events).0 else {
        panic!("expected a failure");
    };
    assert_eq!(error.error_type, "runtime");
    assert!(error.message.contains("max_steps"), "{}", error.message);
    assert_eq!(llm.requests().len(), 2);
    assert_nothing_pending(&events);
}

#[tokio::test(start_paused = true)]
async fn many_quick_deltas_produce_few_snapshots() {
    let parts: Vec<String> = (0..1000).map(|i| format!("{} ", i % 10)).collect();
    let refs: Vec<&str> = parts.iter().map(String::as_str).collect();
    // One delta per millisecond for one second; the window is 50 ms first, then
    // doubles up to 250 ms (LIVE-03): part start, writes at ~50, 150, 350, 600, 850
    // ms, the settled state (8; a fixed 50 ms window wrote ~22).
    let llm = FakeLlm::with(
        vec![Script::Events(text_step(&refs))],
        Some(Duration::from_millis(1)),
    );
    let mut h = open(llm, |_| {}, None).await;
    h.session
        .start_turn(turn(1, "count", vec![]))
        .await
        .unwrap();
    let events = collect_turn(&mut h.events).await;
    let count = snapshots(&events).len();
    assert!(
        (6..=10).contains(&count),
        "{count} snapshots for 1000 deltas"
    );
    assert_eq!(text_of(&final_items(&events)[0]), parts.concat());
}

#[tokio::test(start_paused = true)]
async fn streamed_text_is_emitted_within_the_flush_interval() {
    let (tx, rx) = mpsc::unbounded_channel();
    let llm = FakeLlm::with(vec![Script::Gate(rx)], None);
    let mut h = open(llm, |c| c.flush_interval = Duration::from_millis(50), None).await;
    h.session.start_turn(turn(1, "hi", vec![])).await.unwrap();
    tx.send(Ok(LlmEvent::TextStart { id: "t".into() })).unwrap();
    let mut seen = DurableStates::default();
    let started = next_item(&mut h.events, &mut seen).await.unwrap();
    assert_eq!(text_of(&started), "");

    let t0 = Instant::now();
    tx.send(Ok(LlmEvent::TextDelta {
        id: "t".into(),
        text: "Hel".into(),
    }))
    .unwrap();
    tx.send(Ok(LlmEvent::TextDelta {
        id: "t".into(),
        text: "lo".into(),
    }))
    .unwrap();
    // Too soon after the start snapshot: held back, then flushed at the deadline.
    let item = next_item(&mut h.events, &mut seen).await.unwrap();
    assert_eq!(text_of(&item), "Hello");
    let waited = t0.elapsed();
    assert!(waited <= Duration::from_millis(50), "waited {waited:?}");
    assert!(
        waited > Duration::ZERO,
        "the second delta should have been held back"
    );

    // Once the window has passed, the next delta goes out at once (leading edge).
    tokio::time::advance(Duration::from_millis(60)).await;
    let t1 = Instant::now();
    tx.send(Ok(LlmEvent::TextDelta {
        id: "t".into(),
        text: "!".into(),
    }))
    .unwrap();
    let item = next_item(&mut h.events, &mut seen).await.unwrap();
    assert_eq!(text_of(&item), "Hello!");
    assert_eq!(t1.elapsed(), Duration::ZERO);

    // 4 KiB unsent forces a snapshot without waiting.
    let t2 = Instant::now();
    for _ in 0..4 {
        tx.send(Ok(LlmEvent::TextDelta {
            id: "t".into(),
            text: "x".repeat(1024),
        }))
        .unwrap();
    }
    let item = next_item(&mut h.events, &mut seen).await.unwrap();
    assert_eq!(text_of(&item).len(), "Hello!".len() + 4096);
    assert_eq!(t2.elapsed(), Duration::ZERO);

    tx.send(Ok(LlmEvent::TextEnd { id: "t".into() })).unwrap();
    tx.send(Ok(finish(FinishReason::Stop, 1, 1))).unwrap();
    let events = collect_turn(&mut h.events).await;
    assert_eq!(outcome(&events).0, TurnOutcome::Completed);
}

/// The next durable state of a turn item (a whole snapshot, or an appended chunk
/// folded into the state `seen` holds, LIVE-03), skipping other events.
async fn next_item(events: &mut Events, seen: &mut DurableStates) -> Option<TurnItem> {
    loop {
        let event = events.next().await.unwrap().unwrap();
        if let Some(item) = seen.fold(&[event]).pop() {
            return Some(item);
        }
    }
}

#[tokio::test(start_paused = true)]
async fn close_interrupts_the_turn_and_ends_the_stream() {
    let (tx, rx) = mpsc::unbounded_channel();
    let llm = FakeLlm::with(vec![Script::Gate(rx)], None);
    let mut h = open(llm, |_| {}, None).await;
    h.session.start_turn(turn(1, "hi", vec![])).await.unwrap();
    tx.send(Ok(LlmEvent::TextStart { id: "t".into() })).unwrap();
    tokio::task::yield_now().await;
    h.session.close().await.unwrap();
    h.session.close().await.unwrap();
    let events = collect_turn(&mut h.events).await;
    assert_eq!(
        outcome(&events).0,
        TurnOutcome::Interrupted {
            reason: "shutdown".into()
        }
    );
    assert_nothing_pending(&events);
    assert!(
        h.events.next().await.is_none(),
        "stream must end after close"
    );
    assert!(matches!(
        h.session.start_turn(turn(2, "again", vec![])).await,
        Err(AdapterError::Closed)
    ));
}

#[tokio::test(start_paused = true)]
async fn dropping_the_session_stops_the_turn_without_pending_items() {
    let (tx, rx) = mpsc::unbounded_channel();
    let llm = FakeLlm::with(vec![Script::Gate(rx)], None);
    let Harness {
        session,
        mut events,
        _project,
    } = open(llm, |_| {}, None).await;
    session.start_turn(turn(1, "hi", vec![])).await.unwrap();
    tx.send(Ok(LlmEvent::TextStart { id: "t".into() })).unwrap();
    tx.send(Ok(LlmEvent::TextDelta {
        id: "t".into(),
        text: "par".into(),
    }))
    .unwrap();
    tokio::task::yield_now().await;
    drop(session);
    let seen = collect_turn(&mut events).await;
    assert_eq!(
        outcome(&seen).0,
        TurnOutcome::Interrupted {
            reason: "shutdown".into()
        }
    );
    assert_nothing_pending(&seen);
    assert_eq!(text_of(&final_items(&seen)[0]), "par");
    assert!(events.next().await.is_none());
}

#[tokio::test(start_paused = true)]
async fn invalid_tool_arguments_and_empty_names_are_not_sent_back_verbatim() {
    let llm = FakeLlm::new(vec![
        tool_step("call_1", "grep", "{not json"),
        tool_step("call_2", "", r#"{"path":"a"}"#),
        text_step(&["Done."]),
    ]);
    let mut h = open(llm.clone(), |_| {}, None).await;
    h.session.start_turn(turn(1, "look", vec![])).await.unwrap();
    let events = collect_turn(&mut h.events).await;
    assert_eq!(outcome(&events).0, TurnOutcome::Completed);
    let requests = llm.requests();
    assert_eq!(requests.len(), 3);
    assert_replayable(&requests[2].messages);
    // The history of the finished turn replays just as cleanly.
    let history = final_items(&events);
    let messages = knife_agent::messages::build_messages("sys", &history, "next");
    assert_replayable(&messages);
    let tool_results: Vec<&ChatMessage> = messages
        .iter()
        .filter(|m| matches!(m, ChatMessage::Tool { .. }))
        .collect();
    let in_turn: Vec<&ChatMessage> = requests[2]
        .messages
        .iter()
        .filter(|m| matches!(m, ChatMessage::Tool { .. }))
        .collect();
    assert_eq!(tool_results, in_turn);
}

/// Servers that send no tool-call id get `call-{index}` from the mapper, so every
/// step calls `call-0`: each step's call still gets its own item and result, and
/// the ids sent back (and replayed next turn) pair each call with its own result.
#[tokio::test(start_paused = true)]
async fn a_tool_call_id_reused_across_steps_gets_its_own_item_and_result() {
    let llm = FakeLlm::new(vec![
        tool_step("call-0", "read", r#"{"path":"src/main.rs"}"#),
        tool_step("call-0", "list", r#"{"path":"src"}"#),
        text_step(&["done"]),
        text_step(&["again"]),
    ]);
    let mut h = open(llm.clone(), |_| {}, None).await;
    h.session.start_turn(turn(1, "look", vec![])).await.unwrap();
    let events = collect_turn(&mut h.events).await;
    assert_eq!(outcome(&events).0, TurnOutcome::Completed);
    assert_nothing_pending(&events);
    let items = final_items(&events);
    let calls: Vec<(String, TurnItemStatus, String)> = items
        .iter()
        .filter_map(|i| match &i.kind {
            TurnItemKind::ToolCall {
                call_id, output, ..
            } => Some((
                i.status,
                call_id.clone(),
                output.clone().unwrap_or_default(),
            )),
            _ => None,
        })
        .map(|(status, id, out)| (id, status, out))
        .collect();
    assert_eq!(calls.len(), 2, "{items:?}");
    assert_eq!(calls[0].0, "call-0");
    assert_eq!(calls[1].0, "call-0_2");
    assert!(
        calls.iter().all(|c| c.1 == TurnItemStatus::Completed),
        "{calls:?}"
    );
    assert!(calls[0].2.contains("fn main"), "{}", calls[0].2);
    assert!(calls[1].2.contains("main.rs") && !calls[1].2.contains("fn main"));

    // In the turn: the third request pairs each call with its own result.
    let requests = llm.requests();
    assert_eq!(requests.len(), 3);
    let wire = &requests[2].messages;
    assert_replayable(wire);
    let results: Vec<(&str, &str)> = wire
        .iter()
        .filter_map(|m| match m {
            ChatMessage::Tool { call_id, content } => Some((call_id.as_str(), content.as_str())),
            _ => None,
        })
        .collect();
    assert_eq!(results.len(), 2);
    assert_eq!(results[0].0, "call-0");
    assert!(results[0].1.contains("fn main"));
    assert_eq!(results[1].0, "call-0_2");
    assert!(!results[1].1.contains("fn main"));

    // Replayed next turn from the transcript: the same pairing.
    h.session.start_turn(turn(2, "and?", items)).await.unwrap();
    collect_turn(&mut h.events).await;
    let replay = &llm.requests()[3].messages;
    assert_replayable(replay);
    let replayed: Vec<&str> = replay
        .iter()
        .filter_map(|m| match m {
            ChatMessage::Tool { call_id, .. } => Some(call_id.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(replayed, ["call-0", "call-0_2"]);
}

/// A step that ends at the output limit (`length`) with tool arguments that do
/// not parse: the call is not run and its result tells the model the limit cut
/// the arguments (not a schema mistake), so it can split the work.
#[tokio::test(start_paused = true)]
async fn cut_tool_arguments_after_a_length_finish_say_the_output_limit_cut_them() {
    let cut = r#"{"path":"big.rs","content":"fn main() { // lots of"#;
    let mut step = tool_step("call_1", "write", cut);
    step.pop();
    step.push(Ok(finish(FinishReason::Length, 20, 4096)));
    let llm = FakeLlm::new(vec![step, text_step(&["ok, in parts then"])]);
    let mut h = open(llm.clone(), |_| {}, None).await;
    h.session
        .start_turn(turn(1, "write a big file", vec![]))
        .await
        .unwrap();
    let events = collect_turn(&mut h.events).await;
    assert_eq!(outcome(&events).0, TurnOutcome::Completed);
    let requests = llm.requests();
    assert_eq!(requests.len(), 2);
    let result = requests[1]
        .messages
        .iter()
        .find_map(|m| match m {
            ChatMessage::Tool { content, .. } => Some(content.clone()),
            _ => None,
        })
        .unwrap();
    assert!(result.contains("output token limit"), "{result}");
    assert!(result.contains("cut off"), "{result}");
    assert!(!h._project.path().join("big.rs").exists());
}
