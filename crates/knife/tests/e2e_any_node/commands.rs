// SCALE-06 commands sent to node B for node A's runs: steers and queued messages, an
// interrupt, an approval answer, a stop the paused owning node never applied; and the opt-in
// latency measurement of a command from B to A.

use super::*;

/// Run 1 streams a slow answer that ends in a tool call, so its turn makes a second
/// model call (where steers join); then one answer per queued message.
const QUEUE_SCRIPT: &str = r#"
[[response]]
text = "a slow answer that node A is still streaming while node B takes messages"
deltas = 80
stream_deltas_ms = 50
tool_calls = [{ name = "list", arguments = { path = "." } }]

[[response]]
text = "answer after the steers"

[[response]]
text = "answer to the message queued on node A"

[[response]]
text = "answer to the message queued on node B"
"#;

/// SCALE-06: while node A runs a turn, a steer and a queued message sent to node B get
/// the same 202 answers as the same messages sent to A itself (one node). The steer
/// reaches A's running turn (its delivery item is in run 1); the queued message waits
/// in the thread row and A starts it after its own queued message, when run 1 ends (A's
/// terminal write re-reads the queue from the database). `GET /api/sessions` on either
/// node names the node holding each session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(knife_has_postgres),
    ignore = "needs PostgreSQL (Debian package postgresql, or KNIFE_PG_BIN)"
)]
async fn scale_06_a_steer_and_a_queued_message_sent_to_node_b_reach_node_as_run() {
    let nodes = two_nodes(QUEUE_SCRIPT).await;
    let (a, b) = (&nodes.a.api, &nodes.b.api);
    let thread = a.create_thread(&nodes.project).await;
    let run1 = RunId::from(a.post_message(&thread, "answer slowly").await);
    wait_streaming(b, &thread).await;
    // B's thread view names the node running it.
    let lease = b.projection(&thread).await.lease.unwrap();
    assert_eq!(lease.node, "node-a", "{lease:?}");
    let url = nodes.b.proc.url();
    let show = run_cli(
        nodes.b.path(),
        &["threads", "show", &thread, "--server", &url],
    )
    .await;
    assert!(show.status.success(), "{}", show.stderr);
    assert!(
        show.stdout.contains("node     node-a (lease epoch"),
        "{}",
        show.stdout
    );

    // The session runs on A, and A says so; B holds none of it.
    let (s, sessions) = a.get("/api/sessions").await;
    assert_eq!(s, StatusCode::OK, "{sessions}");
    let held = sessions
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["threads"].as_array().unwrap().contains(&json!(thread)))
        .unwrap_or_else(|| panic!("no session of the thread on A: {sessions}"));
    assert_eq!(held["node"], "node-a", "{held}");
    assert_eq!(held["remote"], false, "{held}");
    // B runs none of it, and lists it as node A's (from the store).
    let (_, on_b) = b.get("/api/sessions").await;
    let listed = on_b
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["provider_session_id"] == held["provider_session_id"])
        .unwrap_or_else(|| panic!("B does not list A's session: {on_b}"));
    assert_eq!(
        (&listed["node"], &listed["remote"]),
        (&json!("node-a"), &json!(true)),
        "{listed}"
    );

    // Queued: to A, then to B; same answers, B's one place later.
    let (s, queued_a) = message(a, &thread, json!({"text": "queued on A"})).await;
    assert_eq!(s, StatusCode::ACCEPTED, "{queued_a}");
    let (s, queued_b) = message(b, &thread, json!({"text": "queued on B"})).await;
    assert_eq!(s, StatusCode::ACCEPTED, "{queued_b}");
    assert_eq!(queued_a["status"], "queued", "{queued_a}");
    assert_eq!(queued_a["run_id"], run1.as_str(), "{queued_a}");
    assert_eq!(
        shape(&queued_b),
        shape(&queued_a),
        "{queued_b} vs {queued_a}"
    );
    assert_eq!(
        queued_b["position"].as_u64().unwrap(),
        queued_a["position"].as_u64().unwrap() + 1,
        "{queued_a} then {queued_b}"
    );
    // Steers: to A (one node) and to B; both handed to A's running turn.
    let (s, steer_a) = message(
        a,
        &thread,
        json!({"text": "steer sent to A", "mode": "steer"}),
    )
    .await;
    assert_eq!(s, StatusCode::ACCEPTED, "{steer_a}");
    let (s, steer_b) = message(
        b,
        &thread,
        json!({"text": "steer sent to B", "mode": "steer"}),
    )
    .await;
    assert_eq!(s, StatusCode::ACCEPTED, "{steer_b}");
    assert_eq!(steer_a["status"], "steering", "{steer_a}");
    assert_eq!(shape(&steer_b), shape(&steer_a), "{steer_b} vs {steer_a}");

    // B's rejection is one node's 409 too.
    let (s, rejected) = message(b, &thread, json!({"text": "no", "mode": "reject"})).await;
    assert_eq!(s, StatusCode::CONFLICT, "{rejected}");
    assert_api_error(&rejected, "run_in_progress");

    // Run 1 took both steers; A then ran A's queued message and B's, in that order.
    let p = wait_settled(b, &thread, 3).await;
    for (answer, text) in [(&steer_a, "steer sent to A"), (&steer_b, "steer sent to B")] {
        let entry = QueuedMessageId::from(answer["queued"]["id"].as_str().unwrap());
        let id = TurnItemId::steer_of(&run1, &entry);
        let item = p.turn_items.iter().find(|i| i.id == id);
        assert!(
            matches!(item.map(|i| &i.kind), Some(TurnItemKind::UserMessage { text: t, .. }) if t == text),
            "steer {text} not delivered into run 1: {:?}",
            p.turn_items
        );
    }
    assert!(
        p.runs.iter().all(|r| r.status == RunStatus::Completed),
        "{:?}",
        p.runs
    );
    assert_eq!(user_text(&p, &p.runs[1].id), "queued on A");
    assert_eq!(user_text(&p, &p.runs[2].id), "queued on B");
    assert!(p.thread.queue.is_empty(), "{:?}", p.thread.queue);
    assert_eq!(nodes.lease_node(&thread).await, "node-a");
    nodes.stop().await;
}

/// Two slow answers (runs 1 and 2), then the answer to the superseding message.
const INTERRUPT_SCRIPT: &str = r#"
[[response]]
text = "a slow answer that node A streams until node B interrupts it"
deltas = 80
stream_deltas_ms = 50

[[response]]
text = "another slow answer that a message sent to node B supersedes"
deltas = 80
stream_deltas_ms = 50

[[response]]
text = "answer to the superseding message"
"#;

/// SCALE-06: `POST /interrupt` sent to node B for a run on node A answers as one node
/// does (the run asked; `null` when idle) and A's run ends `interrupted` (user); a
/// message with `mode = interrupt` sent to B stops A's next run (superseded) and A
/// starts the message next.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(knife_has_postgres),
    ignore = "needs PostgreSQL (Debian package postgresql, or KNIFE_PG_BIN)"
)]
async fn scale_06_an_interrupt_sent_to_node_b_stops_the_run_on_node_a() {
    let nodes = two_nodes(INTERRUPT_SCRIPT).await;
    let (a, b) = (&nodes.a.api, &nodes.b.api);
    let thread = a.create_thread(&nodes.project).await;
    let interrupt = format!("/api/threads/{thread}/interrupt");

    // Idle: both nodes answer the same.
    let (s, idle_a) = a.post(&interrupt, &json!({})).await;
    assert_eq!(s, StatusCode::OK, "{idle_a}");
    let (s, idle_b) = b.post(&interrupt, &json!({})).await;
    assert_eq!(s, StatusCode::OK, "{idle_b}");
    assert_eq!(idle_b, idle_a);
    assert_eq!(idle_b["run_id"], Value::Null, "{idle_b}");

    let run1 = a.post_message(&thread, "answer slowly").await;
    wait_streaming(b, &thread).await;
    let (s, asked) = b.post(&interrupt, &json!({})).await;
    assert_eq!(s, StatusCode::OK, "{asked}");
    assert_eq!(asked, json!({"thread_id": thread, "run_id": run1}));
    let p = wait_settled(b, &thread, 1).await;
    assert_eq!(p.runs[0].status, RunStatus::Interrupted, "{:?}", p.runs);
    assert_eq!(
        p.runs[0].error.as_ref().and_then(|e| e.code.as_deref()),
        Some("user"),
        "{:?}",
        p.runs[0]
    );
    assert!(!p.thread.is_claimed(), "a user stop releases the claim");

    // A message with mode interrupt, sent to B, supersedes A's run 2.
    let run2 = a.post_message(&thread, "answer slowly again").await;
    poll_until("run 2 to stream", RUN_TIMEOUT, || async {
        let p = b.projection(&thread).await;
        p.turn_items
            .iter()
            .any(|i| {
                i.run_id.as_ref().map(RunId::as_str) == Some(run2.as_str())
                    && matches!(&i.kind, TurnItemKind::AssistantMessage { text, .. } if !text.is_empty())
            })
            .then_some(())
    })
    .await;
    let (s, superseding) = message(
        b,
        &thread,
        json!({"text": "do this instead", "mode": "interrupt"}),
    )
    .await;
    assert_eq!(s, StatusCode::ACCEPTED, "{superseding}");
    assert_eq!(superseding["status"], "queued", "{superseding}");
    assert_eq!(superseding["run_id"], run2.as_str(), "{superseding}");
    assert_eq!(superseding["position"], 1, "{superseding}");
    assert_eq!(
        superseding["note"],
        format!("run {run2} is being stopped (superseded); this message starts next"),
    );
    let p = wait_settled(b, &thread, 3).await;
    assert_eq!(p.runs[1].status, RunStatus::Interrupted, "{:?}", p.runs);
    assert_eq!(
        p.runs[1].error.as_ref().and_then(|e| e.code.as_deref()),
        Some("superseded")
    );
    assert_eq!(p.runs[2].status, RunStatus::Completed, "{:?}", p.runs);
    assert_eq!(user_text(&p, &p.runs[2].id), "do this instead");
    assert_eq!(nodes.lease_node(&thread).await, "node-a");
    nodes.stop().await;
}

const APPROVAL_SCRIPT: &str = r#"
[[response]]
[[response.tool_calls]]
name = "bash"
arguments = { command = "echo approved > approved.txt && echo wrote it" }

[[response]]
text = "all done"
"#;

/// SCALE-06: a turn on node A waits for a tool approval; the answer sent to node B
/// resolves it on A (the same 200 answer, the resolved request, as on one node), the
/// command runs on A and the turn completes. A second answer gets one node's 409 from
/// either node, and an unknown request one node's 404.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(knife_has_postgres),
    ignore = "needs PostgreSQL (Debian package postgresql, or KNIFE_PG_BIN)"
)]
async fn scale_06_an_approval_answer_sent_to_node_b_resolves_the_request_on_node_a() {
    let nodes = two_nodes(APPROVAL_SCRIPT).await;
    let (a, b) = (&nodes.a.api, &nodes.b.api);
    let thread = a.create_thread(&nodes.project).await;
    let run = a.post_message(&thread, "write the file").await;
    let request = poll_until("the approval request", RUN_TIMEOUT, || async {
        let (_, list) = b.get(&format!("/api/threads/{thread}/requests")).await;
        list.as_array()?
            .iter()
            .find(|r| r["status"] == "pending")
            .map(|r| r["id"].as_str().unwrap().to_owned())
    })
    .await;
    let answer = format!("/api/threads/{thread}/requests/{request}");

    let (s, resolved) = b.post(&answer, &json!({"decision": "allow_once"})).await;
    assert_eq!(s, StatusCode::OK, "{resolved}");
    let resolved: RuntimeRequest = serde_json::from_value(resolved).unwrap();
    assert_eq!(resolved.id.as_str(), request);
    assert_eq!(
        resolved.status,
        RuntimeRequestStatus::Resolved,
        "{resolved:?}"
    );
    assert_eq!(resolved.decision, Some(ApprovalDecision::AllowOnce));
    assert_eq!(
        resolved.run_id.as_ref().map(RunId::as_str),
        Some(run.as_str())
    );

    let p = wait_settled(b, &thread, 1).await;
    assert_eq!(p.runs[0].status, RunStatus::Completed, "{:?}", p.runs);
    let written = std::fs::read_to_string(nodes.a.project_dir().join("approved.txt")).unwrap();
    assert_eq!(written.trim(), "approved");

    // Answered already: 409 from B, as from A.
    let (s, again_b) = b.post(&answer, &json!({"decision": "deny"})).await;
    assert_eq!(s, StatusCode::CONFLICT, "{again_b}");
    let (s, again_a) = a.post(&answer, &json!({"decision": "deny"})).await;
    assert_eq!(s, StatusCode::CONFLICT, "{again_a}");
    assert_eq!(again_b, again_a);
    assert_api_error(&again_b, "request_not_pending");
    let (s, unknown) = b
        .post(
            &format!("/api/threads/{thread}/requests/request_unknown"),
            &json!({"decision": "deny"}),
        )
        .await;
    assert_eq!(s, StatusCode::NOT_FOUND, "{unknown}");
    nodes.stop().await;
}

/// Two slow answers (one per thread), then the superseding message's answer.
const STOPPED_OWNER_SCRIPT: &str = r#"
[[response]]
text = "a slow answer of thread one that node A streams when it is paused"
deltas = 160
stream_deltas_ms = 50

[[response]]
text = "a slow answer of thread two that node A streams when it is paused"
deltas = 160
stream_deltas_ms = 50

[[response]]
text = "answer to the superseding message"
"#;

/// SCALE-06, the owning node down: node A is paused (SIGSTOP) mid-turn on two threads.
/// An interrupt of thread one and a superseding message to thread two, sent to node B,
/// are answered as on one node once B's wait for A runs out (the commands are durable).
/// When B takes the expired claims over it does not resume the stopped runs: thread
/// one's run ends `interrupted` (user) with its claim released, thread two's ends
/// `interrupted` (superseded) and the message starts in its place.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(knife_has_postgres),
    ignore = "needs PostgreSQL (Debian package postgresql, or KNIFE_PG_BIN)"
)]
async fn scale_06_a_stop_the_owning_node_never_applied_is_honoured_by_the_takeover() {
    let mut nodes = two_nodes(STOPPED_OWNER_SCRIPT).await;
    let (a, b) = (nodes.a.api.clone(), nodes.b.api.clone());
    let one = a.create_thread(&nodes.project).await;
    let run_one = a.post_message(&one, "answer slowly").await;
    wait_streaming(&b, &one).await;
    let two = a.create_thread(&nodes.project).await;
    let run_two = a.post_message(&two, "answer slowly too").await;
    poll_until("thread two to stream", RUN_TIMEOUT, || async {
        let p = b.projection(&two).await;
        p.turn_items
            .iter()
            .any(|i| matches!(&i.kind, TurnItemKind::AssistantMessage { text, .. } if text.contains("two")))
            .then_some(())
    })
    .await;

    let pid = nodes.a.proc.pid().to_string();
    assert!(
        std::process::Command::new("kill")
            .args(["-STOP", &pid])
            .status()
            .unwrap()
            .success()
    );
    // Both sent at once, while A's leases are still live. B answers after its wait for
    // A (3 s), and its write may first wait for the database to drop A's session if A
    // was paused inside an append (idle_in_transaction_session_timeout, 5 s): a longer
    // HTTP timeout than the harness's 10 s.
    let slow_post = |path: String, body: Value| {
        let b = b.clone();
        async move {
            let resp = b
                .http
                .post(format!("{}{path}", b.base))
                .json(&body)
                .timeout(Duration::from_secs(40))
                .send()
                .await
                .unwrap();
            let status = resp.status();
            (status, resp.json::<Value>().await.unwrap_or(Value::Null))
        }
    };
    let ((s1, asked), (s2, superseding)) = tokio::join!(
        slow_post(format!("/api/threads/{one}/interrupt"), json!({})),
        slow_post(
            format!("/api/threads/{two}/messages"),
            json!({"text": "do this instead", "mode": "interrupt"})
        ),
    );
    assert_eq!(s1, StatusCode::OK, "{asked}");
    assert_eq!(asked, json!({"thread_id": one, "run_id": run_one}));
    assert_eq!(s2, StatusCode::ACCEPTED, "{superseding}");
    assert_eq!(superseding["status"], "queued", "{superseding}");
    assert_eq!(superseding["run_id"], run_two.as_str(), "{superseding}");
    assert_eq!(
        superseding["note"],
        format!("run {run_two} is being stopped (superseded); this message starts next"),
    );

    let p = poll_until(
        "node B to end thread one's run",
        TAKEOVER_TIMEOUT,
        || async {
            let p = b.projection(&one).await;
            (p.runs[0].status.is_terminal() && p.thread.active_run_id.is_none()).then_some(p)
        },
    )
    .await;
    assert_eq!(p.runs.len(), 1, "not resumed: {:?}", p.runs);
    assert_eq!(p.runs[0].status, RunStatus::Interrupted);
    assert_eq!(
        p.runs[0].error.as_ref().and_then(|e| e.code.as_deref()),
        Some("user")
    );
    assert!(!p.thread.is_claimed(), "{:?}", p.thread);
    let p = wait_settled_within(&b, &two, 2, TAKEOVER_TIMEOUT).await;
    assert_eq!(p.runs[0].status, RunStatus::Interrupted, "{:?}", p.runs);
    assert_eq!(
        p.runs[0].error.as_ref().and_then(|e| e.code.as_deref()),
        Some("superseded")
    );
    assert_eq!(p.runs[1].status, RunStatus::Completed, "{:?}", p.runs);
    assert_eq!(user_text(&p, &p.runs[1].id), "do this instead");
    assert_eq!(nodes.lease_node(&two).await, "node-b");

    let status = nodes.a.proc.kill_hard().await;
    assert!(!status.success());
    assert!(nodes.b.proc.terminate().await.success());
}

/// Commands of the latency measurement.
const COMMANDS: usize = 20;

/// The SCALE-06 figure (opt-in, prints, asserts no time): `COMMANDS` steers sent to node
/// B while node A streams one slow answer; for each, the time from B writing the
/// `thread.command` to A having applied it (A's `thread.command_applied`, same machine
/// clock) and the HTTP round trip at B. Prints p50 / p99 / max.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "measurement (opt-in): cargo test -p knife --test e2e_any_node -- --ignored --nocapture"]
async fn any_node_command_latency() {
    let script = r#"
[[response]]
text = "a slow answer that node A streams while node B sends it steers"
deltas = 120
stream_deltas_ms = 50
tool_calls = [{ name = "list", arguments = { path = "." } }]

[[response]]
text = "answer after the steers"
"#;
    let nodes = two_nodes(script).await;
    let (a, b) = (&nodes.a.api, &nodes.b.api);
    let thread = a.create_thread(&nodes.project).await;
    a.post_message(&thread, "answer slowly").await;
    wait_streaming(b, &thread).await;
    let mut round_trips = Vec::new();
    for i in 0..COMMANDS {
        let started = std::time::Instant::now();
        let (s, answer) = message(
            b,
            &thread,
            json!({"text": format!("steer {i}"), "mode": "steer"}),
        )
        .await;
        round_trips.push(started.elapsed());
        assert_eq!(s, StatusCode::ACCEPTED, "{answer}");
        assert_eq!(answer["status"], "steering", "{answer}");
    }
    let store = knife_store_postgres::open(&nodes.url).await.unwrap();
    let log = store
        .read_events(
            &StreamFilter::thread(ThreadId::from(thread.as_str()), 0),
            100_000,
        )
        .await
        .unwrap();
    let mut issued = std::collections::HashMap::new();
    let mut one_way = Vec::new();
    for event in &log {
        match &event.event.body {
            EventBody::ThreadCommanded(c) => {
                issued.insert(c.id.clone(), c.issued_at);
            }
            EventBody::ThreadCommandApplied(applied) => {
                let at = issued[&applied.command_id];
                one_way.push((applied.applied_at - at).to_std().unwrap_or_default());
            }
            _ => {}
        }
    }
    assert_eq!(one_way.len(), COMMANDS);
    let pct = |v: &mut Vec<Duration>, p: usize| {
        v.sort();
        v[(v.len() * p / 100).min(v.len() - 1)]
    };
    eprintln!(
        "SCALE-06: {COMMANDS} steers B -> A: command written -> applied on A p50 {:?} p99 {:?} max {:?}; \
         HTTP round trip at B p50 {:?} p99 {:?}",
        pct(&mut one_way, 50),
        pct(&mut one_way, 99),
        one_way.last().unwrap(),
        pct(&mut round_trips, 50),
        pct(&mut round_trips, 99),
    );
    wait_settled(b, &thread, 1).await;
    nodes.stop().await;
}
