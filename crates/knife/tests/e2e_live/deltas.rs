// LIVE-01, LIVE-02, LIVE-05: deltas on the WebSocket and SSE ahead of their snapshots,
// offsets across a reconnect and a retried attempt, every driver streaming live deltas.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_01_deltas_reach_ws_and_sse_subscribers_before_their_snapshots() {
    let answer = words("w", 60);
    let script = format!(
        "[[response]]\nreasoning = \"{}\"\ntext = \"{answer}\"\nstream_deltas_ms = 10\n",
        words("r", 20)
    );
    let mock = MockLlm::script(&script, &[]).await;
    let server = Server::start(&mock.base_url()).await;
    let project = server.api.create_project(&server.project_dir()).await;
    let thread = server.api.create_thread(&project).await;
    let mut ws = subscribe(&server, &thread, 0).await;
    assert!(matches!(
        next(&mut ws).await,
        WsServerMessage::Subscribed { .. }
    ));
    // SSE, from the same start.
    let sse = reqwest::Client::new()
        .get(format!(
            "{}/api/threads/{thread}/events?after=0",
            server.proc.url()
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(sse.status(), 200);
    let run = server.api.post_message(&thread, "go").await;
    let mut client = Client::default();
    assert!(follow(&mut ws, &mut client, &run, |_| false).await);
    assert!(
        client.deltas >= 60,
        "deltas on the WebSocket: {}",
        client.deltas
    );
    assert!(
        client.fields.contains(&DeltaField::Text) && client.fields.contains(&DeltaField::Reasoning),
        "fields: {:?}",
        client.fields
    );
    // Paced 10 ms apart inside a 50 ms window: most arrive before any snapshot has them.
    assert!(
        client.ahead * 2 > client.deltas,
        "{} of {} deltas were ahead of their snapshot",
        client.ahead,
        client.deltas
    );
    assert_eq!(client.text_of(DeltaField::Text), vec![answer.clone()]);
    // LIVE-03 slim deltas: each item is introduced once (thread, run, ordinal), every
    // other delta names only its item.
    assert_eq!(
        client.introductions,
        client.delta_items.len(),
        "introductions on the WebSocket"
    );

    // The SSE stream carried the same deltas as `event: delta` (no `id:`).
    let mut sse = Box::pin(knife_llm::sse::decode_stream(sse.bytes_stream()));
    let mut sse_client = Client::default();
    let mut done = false;
    while !done {
        let item = tokio::time::timeout(Duration::from_secs(30), sse.next())
            .await
            .expect("SSE stalled")
            .expect("SSE ended")
            .expect("SSE broke");
        match item.event.as_str() {
            "delta" => sse_client.delta(&serde_json::from_str(&item.data).unwrap()),
            "reset" => sse_client.reset(&serde_json::from_str(&item.data).unwrap()),
            _ => {
                let ev: StoredEvent = serde_json::from_str(&item.data).unwrap();
                sse_client.event(&ev);
                done = matches!(&ev.event.body, EventBody::RunUpdated(r) if r.id.as_str() == run && r.status.is_terminal());
            }
        }
    }
    assert!(
        sse_client.deltas >= 60,
        "deltas on SSE: {}",
        sse_client.deltas
    );
    assert_eq!(sse_client.text_of(DeltaField::Text), vec![answer]);
    assert_eq!(
        sse_client.introductions,
        sse_client.delta_items.len(),
        "introductions on SSE"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_02_offsets_continue_across_a_reconnect_and_a_retried_attempt() {
    let first = words("one", 30);
    let second = words("two", 80);
    // Attempt 1 breaks mid-stream (retried, PROC-03); attempt 2 streams slowly.
    let script = format!(
        "[[response]]\ntext = \"{first}\"\nstream_deltas_ms = 10\ncut = true\n\n\
         [[response]]\ntext = \"{second}\"\nstream_deltas_ms = 15\n"
    );
    let mock = MockLlm::script(&script, &[]).await;
    let server = Server::start(&mock.base_url()).await;
    let project = server.api.create_project(&server.project_dir()).await;
    let thread = server.api.create_thread(&project).await;
    let mut ws = subscribe(&server, &thread, 0).await;
    assert!(matches!(
        next(&mut ws).await,
        WsServerMessage::Subscribed { .. }
    ));
    let run = server.api.post_message(&thread, "go").await;
    let mut client = Client::default();
    // Until attempt 2 has streamed a while (after the reset of attempt 1).
    let ended = follow(&mut ws, &mut client, &run, |c| {
        c.resets > 0 && c.text_of(DeltaField::Text).iter().any(|t| t.len() > 100)
    })
    .await;
    assert!(!ended, "the run ended before the reconnect");
    assert!(client.resets >= 1, "no reset for the discarded attempt");
    // Forced reconnect mid-stream: drop the socket, resume after the last sequence.
    drop(ws);
    client.reconnect();
    let mut ws = subscribe(&server, &thread, client.after).await;
    let before = client.deltas;
    assert!(follow(&mut ws, &mut client, &run, |_| false).await);
    assert!(client.deltas > before, "no delta after the reconnect");
    assert_eq!(client.text_of(DeltaField::Text), vec![second.clone()]);
    let p = server.api.projection(&thread).await;
    let texts: Vec<_> = p
        .turn_items
        .iter()
        .filter_map(|i| match &i.kind {
            TurnItemKind::AssistantMessage { text, .. } if !text.is_empty() => Some(text.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(texts, vec![second]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_02_a_sequence_from_the_future_is_refused_clearly() {
    let mock = MockLlm::script("[[response]]\ntext = \"hi\"\n", &[]).await;
    let server = Server::start(&mock.base_url()).await;
    let project = server.api.create_project(&server.project_dir()).await;
    let thread = server.api.create_thread(&project).await;
    let mut ws = subscribe(&server, &thread, 1_000_000).await;
    match next(&mut ws).await {
        WsServerMessage::Error { error } => {
            assert_eq!(error.code, "invalid_request", "{error:?}");
            assert!(error.message.contains("1000000"), "{}", error.message);
        }
        other => panic!("expected an error, got {other:?}"),
    }
    let (status, body) = server
        .api
        .get(&format!("/api/threads/{thread}/events?after=1000000"))
        .await;
    assert_eq!(status, 400, "{body}");
}

/// Subscribes to a new thread, sends `prompt`, follows the run on the WebSocket with
/// the checking [`Client`] and returns it.
async fn watch_run(server: &Server, prompt: &str) -> Client {
    let project = server.api.create_project(&server.project_dir()).await;
    let thread = server.api.create_thread(&project).await;
    let mut ws = subscribe(server, &thread, 0).await;
    assert!(matches!(
        next(&mut ws).await,
        WsServerMessage::Subscribed { .. }
    ));
    let run = server.api.post_message(&thread, prompt).await;
    let mut client = Client::default();
    assert!(follow(&mut ws, &mut client, &run, |_| false).await);
    client
}

/// What every driver must show (LIVE-05 → LIVE-01/02): deltas whose offsets continue
/// the text held, most of them ahead of their snapshot, adding up to the answer.
fn assert_live(client: &Client, answer: &str, words: usize) {
    // The server may merge deltas (gap fill) or drop the last ones once the settled
    // snapshot has delivered their text, so not every adapter delta is a message.
    assert!(client.deltas * 2 >= words, "deltas: {}", client.deltas);
    assert!(
        client.ahead * 2 > client.deltas,
        "{} of {} deltas were ahead of their snapshot",
        client.ahead,
        client.deltas
    );
    assert_eq!(client.text_of(DeltaField::Text), vec![answer.to_owned()]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_05_builtin_agent_streams_live_deltas() {
    let answer = words("b", 40);
    let script = format!("[[response]]\ntext = \"{answer}\"\nstream_deltas_ms = 5\n");
    let mock = MockLlm::script(&script, &[]).await;
    let server = Server::start(&mock.base_url()).await;
    let client = watch_run(&server, "go").await;
    assert_live(&client, &answer, 40);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_05_codex_driver_streams_live_deltas() {
    let home = tempfile::tempdir().unwrap();
    let config = format!(
        "default_provider = \"codex\"\n\n[providers.codex]\ndriver = \"codex\"\n\
         command = \"{}\"\nargs = []\nmodel = \"mock-model\"\n\n[providers.codex.env]\n\
         CODEX_HOME = \"{}\"\n",
        fake_peer_bin("fake_codex").display(),
        home.path().display()
    );
    let server = Server::start_with_config(&config).await;
    let answer = words("c", 40);
    let prompt = format!("FAKE_CODEX: {}", json!([{ "text": answer }]));
    let client = watch_run(&server, &prompt).await;
    assert_live(&client, &answer, 40);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_05_acp_driver_streams_live_deltas() {
    let state = tempfile::tempdir().unwrap();
    let config = format!(
        "default_provider = \"agent\"\n\n[providers.agent]\ndriver = \"acp\"\n\
         command = \"{}\"\nenv = {{ FAKE_ACP_STATE_DIR = \"{}\" }}\n",
        fake_peer_bin("fake_acp").display(),
        state.path().display()
    );
    let server = Server::start_with_config(&config).await;
    let answer = words("a", 40);
    let steps: Vec<serde_json::Value> = answer
        .split_inclusive(' ')
        .flat_map(|w| [json!({ "text": w }), json!({ "sleep_ms": 3 })])
        .collect();
    let prompt = json!({ "steps": steps }).to_string();
    let client = watch_run(&server, &prompt).await;
    assert_live(&client, &answer, 40);
}
