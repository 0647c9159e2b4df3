//! What retries tell the user (SPEC.md TURN-09): the final error says how many
//! attempts over how long; retry statuses never show a raw HTML body.

use crate::common::*;
use crate::support::*;
use knife_protocol::*;

const NGINX_502: &str = "<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>\r\n\
<center><h1>502 Bad Gateway</h1></center>\r\n<hr><center>nginx/1.25.3</center>\r\n</body>\r\n</html>\r\n";

fn bad_gateway() -> knife_llm::LlmError {
    knife_llm::http::http_error(502, &Default::default(), NGINX_502)
}

#[tokio::test(start_paused = true)]
async fn turn_09_the_final_error_after_the_retry_budget_says_attempts_and_time() {
    // Default budget: 8 calls, waits 2 + 4 + 8 + 16 + 30 + 30 + 30 s = 2 min.
    let llm = FakeLlm::new((0..20).map(|_| vec![Err(bad_gateway())]).collect());
    let mut h = open(llm.clone(), |_| {}, None).await;
    h.session.start_turn(turn(1, "hi", vec![])).await.unwrap();
    let events = collect_turn(&mut h.events).await;
    assert_eq!(llm.requests().len(), 8);
    let TurnOutcome::Failed { error } = outcome(&events).0 else {
        panic!("expected a failure");
    };
    assert_eq!(error.http_status, Some(502));
    assert!(
        error
            .message
            .ends_with("HTTP 502: Bad Gateway (gave up after 8 attempts over 2m 0s)"),
        "{}",
        error.message
    );
    let recorded = last_turn(&events).error.unwrap();
    assert_eq!(recorded.message, error.message);

    // A single call (no retry) says nothing about attempts.
    let llm = FakeLlm::new(vec![vec![Err(bad_gateway())]]);
    let mut h = open(llm.clone(), |c| c.retry.max_attempts = 1, None).await;
    h.session.start_turn(turn(1, "hi", vec![])).await.unwrap();
    let events = collect_turn(&mut h.events).await;
    let TurnOutcome::Failed { error } = outcome(&events).0 else {
        panic!("expected a failure");
    };
    assert!(!error.message.contains("attempts"), "{}", error.message);
}

#[tokio::test(start_paused = true)]
async fn turn_09_a_502_html_page_shows_as_its_status_line_in_the_retry_status() {
    let llm = FakeLlm::new(vec![vec![Err(bad_gateway())], text_step(&["answer"])]);
    let mut h = open(llm.clone(), |_| {}, None).await;
    h.session.start_turn(turn(1, "hi", vec![])).await.unwrap();
    let events = collect_turn(&mut h.events).await;
    assert_eq!(outcome(&events).0, TurnOutcome::Completed);
    let retries: Vec<String> = statuses(&events)
        .into_iter()
        .filter_map(|s| match s {
            AgentStatus::Retry { message, .. } => Some(message),
            _ => None,
        })
        .collect();
    assert_eq!(retries, ["HTTP 502: Bad Gateway"]);
}
