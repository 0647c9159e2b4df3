//! Steering the built-in agent's running turn (SPEC.md TURN-01): a steer is taken
//! before the turn's next model call, recorded as a user message with the steer's
//! item id, and a steer for another run is refused.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use knife_llm::ChatMessage;
use knife_protocol::*;
use knife_runtime::SteerInput;
use tokio::sync::mpsc;

#[tokio::test(start_paused = true)]
async fn turn_01_builtin_takes_a_steer_before_its_next_model_call() {
    let (tx, rx) = mpsc::unbounded_channel();
    let llm = FakeLlm::with(
        vec![
            Script::Gate(rx),
            Script::Events(text_step(&["Done, with the steer."])),
        ],
        None,
    );
    let mut h = open(llm.clone(), |_| {}, None).await;
    let input = turn(1, "read main", vec![]);
    let run = input.run_id.clone();
    let thread = input.thread_id.clone();
    h.session.start_turn(input).await.unwrap();
    while llm.requests().is_empty() {
        tokio::task::yield_now().await;
    }
    // The first model call is in flight: a steer for another run is refused ...
    let other = SteerInput {
        run_id: RunId::for_thread(&thread, 9),
        item_id: TurnItemId::from("item:x"),
        text: "wrong run".into(),
    };
    assert!(h.session.steer_turn(&thread, other).await.is_err());
    // ... this run's is accepted and waits for the next call.
    let id = TurnItemId::steer_of(&run, &QueuedMessageId::from("queued_1"));
    h.session
        .steer_turn(
            &thread,
            SteerInput {
                run_id: run.clone(),
                item_id: id.clone(),
                text: "also check the tests".into(),
            },
        )
        .await
        .unwrap();
    for event in tool_step("call_1", "read", r#"{"path":"src/main.rs"}"#) {
        tx.send(event).unwrap();
    }
    drop(tx);
    let events = collect_turn(&mut h.events).await;
    assert_eq!(outcome(&events).0, TurnOutcome::Completed);
    let steer = final_items(&events)
        .into_iter()
        .find(|i| i.id == id)
        .expect("the steer is recorded with its id");
    assert!(matches!(&steer.kind,
        TurnItemKind::UserMessage { text, origin: MessageOrigin::User, .. } if text == "also check the tests"));
    assert_eq!(steer.status, TurnItemStatus::Completed);
    let requests = llm.requests();
    assert_eq!(requests.len(), 2);
    assert!(
        !requests[0]
            .messages
            .iter()
            .any(|m| matches!(m, ChatMessage::User { text } if text == "also check the tests"))
    );
    // The second call sees the tool result, then the steer.
    let last = requests[1].messages.last().unwrap();
    assert_eq!(
        last,
        &ChatMessage::User {
            text: "also check the tests".into()
        }
    );
}
