//! Steering the built-in agent's running turn (SPEC.md TURN-01): a steer is taken
//! before the turn's next model call, recorded as a user message with the steer's
//! item id, and a steer for another run is refused. And its budget gate (TURN-07):
//! checked before each model call; and its usage records (TURN-06): one per model call.
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

/// A budget that lets `allowed` model calls through, then refuses.
struct CallBudget {
    allowed: usize,
    seen: std::sync::Mutex<Vec<Option<u64>>>,
}

#[async_trait::async_trait]
impl knife_runtime::budget::TurnBudget for CallBudget {
    async fn check(&self, turn_usage: Option<&TokenUsage>) -> Result<(), RunError> {
        let mut seen = self.seen.lock().unwrap();
        seen.push(turn_usage.map(|u| u.total_tokens));
        if seen.len() > self.allowed {
            return Err(RunError::new(
                knife_runtime::budget::BUDGET_EXCEEDED,
                "the thread budget is spent",
            ));
        }
        Ok(())
    }
}

#[tokio::test(start_paused = true)]
async fn turn_07_builtin_checks_the_budget_before_each_model_call() {
    let llm = FakeLlm::new(vec![
        tool_step("call_1", "read", r#"{"path":"src/main.rs"}"#),
        text_step(&["never asked"]),
    ]);
    let mut h = open(llm.clone(), |_| {}, None).await;
    let budget = std::sync::Arc::new(CallBudget {
        allowed: 1,
        seen: Default::default(),
    });
    let mut input = turn(1, "read main", vec![]);
    input.budget = Some(knife_runtime::budget::BudgetGate(budget.clone()));
    h.session.start_turn(input).await.unwrap();
    let events = collect_turn(&mut h.events).await;
    match outcome(&events).0 {
        TurnOutcome::Failed { error } => {
            assert_eq!(error.error_type, knife_runtime::budget::BUDGET_EXCEEDED)
        }
        other => panic!("{other:?}"),
    }
    // The second call was never made; the check saw the first call's usage.
    assert_eq!(llm.requests().len(), 1);
    let seen = budget.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[0], None);
    assert!(seen[1].is_some_and(|t| t > 0), "{seen:?}");
}

#[tokio::test(start_paused = true)]
async fn turn_06_builtin_records_each_model_call_before_the_usage_report_that_sums_it() {
    let llm = FakeLlm::new(vec![
        tool_step("call_1", "read", r#"{"path":"src/main.rs"}"#),
        text_step(&["Read it."]),
    ]);
    let mut h = open(llm.clone(), |_| {}, None).await;
    let input = turn(1, "read main", vec![]);
    let turn_id = input.provider_turn_id.clone();
    h.session.start_turn(input).await.unwrap();
    let events = collect_turn(&mut h.events).await;
    assert_eq!(outcome(&events).0, TurnOutcome::Completed);
    let calls: Vec<&ModelCall> = events
        .iter()
        .filter_map(|e| match e {
            AdapterEvent::ModelCallRecorded(c) => Some(c),
            _ => None,
        })
        .collect();
    assert_eq!(calls.len(), 2, "one record per model call");
    for (n, call) in calls.iter().enumerate() {
        let n = u32::try_from(n).unwrap() + 1;
        assert_eq!(call.id, ModelCall::id_of(&turn_id, n));
        assert_eq!(call.ordinal, n);
        assert_eq!(call.provider_instance_id, ProviderInstanceId::from("local"));
        assert_eq!(call.model.as_deref(), Some("test-model"));
    }
    assert_eq!(calls[0].usage.input_tokens, 20);
    assert_eq!(calls[0].usage.output_tokens, 7);
    // Each record goes out before the turn's usage report that includes it, so a
    // budget check at that report finds it stored.
    let first_record = events
        .iter()
        .position(|e| matches!(e, AdapterEvent::ModelCallRecorded(_)))
        .unwrap();
    let first_report = events
        .iter()
        .position(|e| matches!(e, AdapterEvent::ProviderTurnUpdated(t) if t.usage.is_some()))
        .unwrap();
    assert!(first_record < first_report);
    // The turn's usage is the sum of its records.
    let mut sum = TokenUsage::default();
    for c in &calls {
        sum.add(&c.usage);
    }
    assert_eq!(outcome(&events).1, Some(sum));
}
