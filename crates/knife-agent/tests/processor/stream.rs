//! Streaming into turn items: PROC-01, PROC-12, PROC-13 (incomplete input), finish reasons.

use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::common::*;
use crate::support::*;
use knife_llm::*;
use knife_protocol::*;
use knife_runtime::InterruptReason;
use serde_json::json;
use tokio::sync::mpsc;

// ---------------------------------------------------------------- PROC-01

#[tokio::test(start_paused = true)]
async fn proc_01_plain_reply_is_one_text_part_from_one_call_with_the_given_messages() {
    let llm = FakeLlm::new(vec![text_step(&["Hello", ", ", "world"])]);
    let mut h = open(llm.clone(), |_| {}, None).await;
    let history = vec![user_item(1, "before"), assistant_item(1, 1, "earlier")];
    h.session
        .start_turn(turn(2, "hi", history.clone()))
        .await
        .unwrap();
    let events = collect_turn(&mut h.events).await;

    assert_eq!(outcome(&events).0, TurnOutcome::Completed);
    let items = final_items(&events);
    assert_eq!(items.len(), 1);
    assert_eq!(text_of(&items[0]), "Hello, world");
    assert_eq!(items[0].status, TurnItemStatus::Completed);
    let requests = llm.requests();
    assert_eq!(requests.len(), 1);
    let ChatMessage::System { text: system } = &requests[0].messages[0] else {
        panic!("no system message");
    };
    assert_eq!(
        requests[0].messages,
        knife_agent::messages::build_messages(system, &history, "hi")
    );
    assert_eq!(last_turn(&events).error, None);
    assert!(errors(&events).is_empty());
}

// ---------------------------------------------------------------- PROC-12

#[tokio::test(start_paused = true)]
async fn proc_12_text_and_reasoning_are_persisted_while_streaming() {
    let (tx, rx) = mpsc::unbounded_channel();
    // A window above the cap is clamped to 250 ms.
    let mut h = open(
        FakeLlm::with(vec![Script::Gate(rx)], None),
        |c| c.flush_interval = Duration::from_secs(5),
        None,
    )
    .await;
    h.session.start_turn(turn(1, "hi", vec![])).await.unwrap();
    let mut states = DurableStates::default();
    for (id, start) in [
        ("r", LlmEvent::ReasoningStart { id: "r".into() }),
        ("t", LlmEvent::TextStart { id: "t".into() }),
    ] {
        tx.send(Ok(start)).unwrap();
        let delta = |text: &str| {
            if id == "r" {
                LlmEvent::ReasoningDelta {
                    id: "r".into(),
                    text: text.into(),
                }
            } else {
                LlmEvent::TextDelta {
                    id: "t".into(),
                    text: text.into(),
                }
            }
        };
        // Every delta is written within 250 ms, without the part ending.
        let t0 = tokio::time::Instant::now();
        tx.send(Ok(delta("a"))).unwrap();
        until_in(&mut h.events, &mut states, |e| {
            is_item(e, |i| {
                matches!(&i.kind,
                TurnItemKind::Reasoning { text, .. } | TurnItemKind::AssistantMessage { text, .. }
                if text == "a")
            })
        })
        .await;
        assert!(
            t0.elapsed() <= Duration::from_millis(250),
            "{:?}",
            t0.elapsed()
        );
        let t0 = tokio::time::Instant::now();
        tx.send(Ok(delta("b"))).unwrap();
        until_in(&mut h.events, &mut states, |e| {
            is_item(e, |i| {
                matches!(&i.kind,
                TurnItemKind::Reasoning { text, streaming: true }
                | TurnItemKind::AssistantMessage { text, streaming: true }
                if text == "ab")
            })
        })
        .await;
        assert!(
            t0.elapsed() <= Duration::from_millis(250),
            "{:?}",
            t0.elapsed()
        );
        // 4 KiB unsent is written at once.
        let t1 = tokio::time::Instant::now();
        tx.send(Ok(delta(&"x".repeat(4096)))).unwrap();
        until_in(&mut h.events, &mut states, |e| {
            is_item(e, |i| {
                matches!(&i.kind,
                TurnItemKind::Reasoning { text, .. } | TurnItemKind::AssistantMessage { text, .. }
                if text.len() == 4098)
            })
        })
        .await;
        assert_eq!(t1.elapsed(), Duration::ZERO);
    }
    tx.send(Ok(finish(FinishReason::Stop, 1, 1))).unwrap();
    let events = collect_turn(&mut h.events).await;
    assert_eq!(outcome(&events).0, TurnOutcome::Completed);
}

// ---------------------------------------------------------------- PROC-13

#[tokio::test(start_paused = true)]
async fn proc_13_incomplete_tool_input_is_settled_as_error() {
    let started = |id: &str| {
        vec![
            Ok(LlmEvent::ToolInputStart {
                id: id.into(),
                name: "probe".into(),
            }),
            Ok(LlmEvent::ToolInputDelta {
                id: id.into(),
                delta: "{\"x\":".into(),
            }),
        ]
    };
    // The stream ends without the call event.
    let (tools, runs) = probe_tools(false);
    let llm = FakeLlm::new(vec![started("c1")]);
    let mut h = open(llm, |_| {}, Some(tools)).await;
    h.session.start_turn(turn(1, "hi", vec![])).await.unwrap();
    let events = collect_turn(&mut h.events).await;
    assert_nothing_pending(&events);
    let item = &final_items(&events)[0];
    assert_eq!(item.status, TurnItemStatus::Failed);
    assert!(matches!(
        &item.kind,
        TurnItemKind::ToolCall { error: Some(_), .. }
    ));
    assert_eq!(runs.load(Ordering::SeqCst), 0);

    // The stream fails (not retried) without the call event.
    let (tools, runs) = probe_tools(false);
    let mut failing = started("c2");
    failing.push(Err(provider_error(json!({"error": {"message": "boom"}}))));
    let mut h = open(FakeLlm::new(vec![failing]), |_| {}, Some(tools)).await;
    h.session.start_turn(turn(1, "hi", vec![])).await.unwrap();
    let events = collect_turn(&mut h.events).await;
    assert_nothing_pending(&events);
    assert_eq!(final_items(&events)[0].status, TurnItemStatus::Failed);
    assert_eq!(runs.load(Ordering::SeqCst), 0);
}

#[tokio::test(start_paused = true)]
async fn proc_13_a_tool_call_after_the_abort_is_never_executed() {
    let (tx, rx) = mpsc::unbounded_channel();
    let (tools, runs) = probe_tools(false);
    let mut h = open(
        FakeLlm::with(vec![Script::Gate(rx)], None),
        |_| {},
        Some(tools),
    )
    .await;
    h.session.start_turn(turn(1, "hi", vec![])).await.unwrap();
    tx.send(Ok(LlmEvent::ToolInputStart {
        id: "c1".into(),
        name: "probe".into(),
    }))
    .unwrap();
    let mut seen = until(&mut h.events, |e| is_item(e, |_| true)).await;
    h.session
        .interrupt_turn(&ThreadId::from("thread_1"), InterruptReason::User)
        .await
        .unwrap();
    // The call and the step's end arrive after the abort.
    tx.send(Ok(LlmEvent::ToolCall {
        id: "c1".into(),
        name: "probe".into(),
        arguments: "{}".into(),
    }))
    .unwrap();
    tx.send(Ok(finish(FinishReason::ToolCalls, 1, 1))).unwrap();
    seen.extend(collect_turn(&mut h.events).await);
    // Let anything that could still run, run.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    assert_tool_aborted(&final_items(&seen)[0]);
}

// ---------------------------------------------------------------- finish reasons

#[tokio::test(start_paused = true)]
async fn content_filter_and_length_finishes_stop_with_named_errors() {
    for (reason, name, error_type) in [
        (
            FinishReason::ContentFilter,
            "ContentFilterError",
            "provider.content_filter",
        ),
        (
            FinishReason::Length,
            "MessageOutputLengthError",
            "provider.output_length",
        ),
    ] {
        let mut step = text_step(&["cut ans"]);
        *step.last_mut().unwrap() = Ok(finish(reason, 5, 5));
        let llm = FakeLlm::new(vec![step, text_step(&["never"])]);
        let mut h = open(llm.clone(), |_| {}, None).await;
        h.session.start_turn(turn(1, "hi", vec![])).await.unwrap();
        let events = collect_turn(&mut h.events).await;
        assert_eq!(llm.requests().len(), 1);
        let TurnOutcome::Failed { error } = outcome(&events).0 else {
            panic!("expected a failure for {reason:?}");
        };
        assert_eq!(error.error_type, error_type);
        assert_eq!(last_turn(&events).error.unwrap().name, name);
        // The cut answer itself is kept, complete.
        let items = final_items(&events);
        assert_eq!(text_of(&items[0]), "cut ans");
        assert_eq!(items[0].status, TurnItemStatus::Completed);
    }
    // A `length` step with complete tool calls goes on to run them.
    let mut step = tool_step("c1", "read", r#"{"path":"src/main.rs"}"#);
    *step.last_mut().unwrap() = Ok(finish(FinishReason::Length, 5, 5));
    let llm = FakeLlm::new(vec![step, text_step(&["done"])]);
    let mut h = open(llm.clone(), |_| {}, None).await;
    h.session.start_turn(turn(1, "hi", vec![])).await.unwrap();
    let events = collect_turn(&mut h.events).await;
    assert_eq!(outcome(&events).0, TurnOutcome::Completed);
    assert_eq!(llm.requests().len(), 2);
}

#[tokio::test(start_paused = true)]
async fn signed_reasoning_goes_back_before_the_assistant_message_of_its_step() {
    let mut step = vec![
        Ok(LlmEvent::ReasoningStart {
            id: "reasoning-0".into(),
        }),
        Ok(LlmEvent::ReasoningDelta {
            id: "reasoning-0".into(),
            text: "I should read".into(),
        }),
        Ok(LlmEvent::ReasoningEnd {
            id: "reasoning-0".into(),
            signature: Some("SIG".into()),
        }),
    ];
    step.extend(tool_step("c1", "read", r#"{"path":"src/main.rs"}"#));
    let llm = FakeLlm::new(vec![step, text_step(&["done"])]);
    let mut h = open(llm.clone(), |_| {}, None).await;
    h.session.start_turn(turn(1, "hi", vec![])).await.unwrap();
    let events = collect_turn(&mut h.events).await;
    assert_eq!(outcome(&events).0, TurnOutcome::Completed);
    let second = &llm.requests()[1].messages;
    let at = second
        .iter()
        .position(|m| matches!(m, ChatMessage::Reasoning { .. }))
        .expect("reasoning not sent back");
    assert_eq!(
        second[at],
        ChatMessage::Reasoning {
            text: "I should read".into(),
            signature: Some("SIG".into())
        }
    );
    assert!(
        matches!(&second[at + 1], ChatMessage::Assistant { tool_calls, .. } if tool_calls.len() == 1)
    );
}
