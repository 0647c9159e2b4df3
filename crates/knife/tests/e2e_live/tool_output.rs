// LIVE-02 for tool output: bash stdout/stderr and codex command output streaming as
// output deltas while the tool runs.

use super::*;

/// What a watcher folded of one tool item's `output` (LIVE-02): durable events and
/// deltas through the checking [`Client`], which asserts that every delta continues
/// exactly what it holds (no text twice, none missing).
struct ToolOutputSeen {
    client: Client,
    item: TurnItemId,
    /// Output deltas of the item that reached the client before its settled snapshot.
    early: usize,
    /// Of those, the ones carrying text no durable event had given it yet.
    ahead: usize,
    /// Durable `turn-item.appended` chunks of the item's output before it settled.
    chunks: usize,
    /// The output the client showed (durable state + deltas) just before the settled snapshot.
    before_settle: String,
    /// The settled snapshot's output.
    settled: String,
}

/// Sends `prompt` on a new thread and follows the run on the WebSocket until it ends,
/// watching the first tool item named `tool`.
async fn watch_tool_output(server: &Server, prompt: &str, tool: &str) -> ToolOutputSeen {
    let project = server.api.create_project(&server.project_dir()).await;
    let thread = server.api.create_thread(&project).await;
    let mut ws = subscribe(server, &thread, 0).await;
    let run = server.api.post_message(&thread, prompt).await;
    let mut client = Client::default();
    let mut item: Option<TurnItemId> = None;
    // At the settled snapshot: the item's output stats and what the client showed.
    let mut seen: Option<(FieldStats, String, String)> = None;
    loop {
        match next(&mut ws).await {
            WsServerMessage::Event { event } => {
                if let EventBody::TurnItemUpdated(it) = &event.event.body
                    && let TurnItemKind::ToolCall {
                        tool: name, output, ..
                    } = &it.kind
                    && name == tool
                    && item.as_ref().is_none_or(|id| *id == it.id)
                {
                    item = Some(it.id.clone());
                    let settled = !matches!(
                        it.status,
                        TurnItemStatus::Pending | TurnItemStatus::Running | TurnItemStatus::Waiting
                    );
                    if settled && seen.is_none() {
                        let key = (it.id.clone(), DeltaField::Output);
                        seen = Some((
                            client.stats.get(&key).copied().unwrap_or_default(),
                            client.shown.get(&key).cloned().unwrap_or_default(),
                            output.clone().unwrap_or_default(),
                        ));
                    }
                }
                client.event(&event);
                if let EventBody::RunUpdated(r) = &event.event.body
                    && r.id.as_str() == run
                    && r.status.is_terminal()
                {
                    assert_eq!(r.status, RunStatus::Completed, "{r:?}");
                    break;
                }
            }
            WsServerMessage::Delta(m) => client.delta(&m),
            WsServerMessage::Reset(r) => panic!("no reset expected: {r:?}"),
            WsServerMessage::Error { error } => panic!("websocket error: {error:?}"),
            WsServerMessage::Subscribed { .. } => {}
        }
    }
    let item = item.unwrap_or_else(|| panic!("no {tool} item in the run"));
    let (stats, before_settle, settled) =
        seen.unwrap_or_else(|| panic!("the {tool} item never settled"));
    let folded = client
        .shown
        .get(&(item.clone(), DeltaField::Output))
        .cloned()
        .unwrap_or_default();
    assert_eq!(
        folded, settled,
        "the client's folded output is not the settled one"
    );
    ToolOutputSeen {
        client,
        item,
        early: stats.deltas,
        ahead: stats.ahead,
        chunks: stats.chunks,
        before_settle,
        settled,
    }
}

impl ToolOutputSeen {
    /// LIVE-02 for tool output: output deltas reached the client while the tool ran,
    /// most ahead of the durable chunk holding them; the output was durable per window
    /// meanwhile; and what the client folded before the settled snapshot (durable
    /// events + deltas) is the settled output's start, at least `streamed`.
    fn assert_streamed(&self, streamed: &str) {
        assert!(
            self.early >= 2,
            "{} output deltas before the item settled; folded {:?}",
            self.early,
            self.before_settle
        );
        assert!(
            self.ahead >= 1,
            "no output delta was ahead of its durable chunk"
        );
        assert!(
            self.chunks >= 1,
            "no durable output chunk before the item settled"
        );
        assert!(
            self.settled.starts_with(&self.before_settle),
            "folded before settling {:?} does not start the settled {:?}",
            self.before_settle,
            self.settled
        );
        assert!(
            self.before_settle.starts_with(streamed),
            "folded before settling {:?}, expected at least {streamed:?}",
            self.before_settle
        );
        assert!(self.client.delta_items.contains(&self.item));
    }
}

/// LIVE-02 for tool output: the built-in `bash` tool runs a real command printing to
/// stdout and stderr, pausing between lines; a WebSocket subscriber gets the tool
/// item's `output` as deltas while the command runs (before its settled snapshot), each
/// continuing what it holds from durable events and deltas, and its folded output is
/// the item's settled output (the command's lines and its exit status).
#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_02_bash_stdout_and_stderr_stream_as_output_deltas_while_the_command_runs() {
    let script = r#"
[[response]]
[[response.tool_calls]]
name = "bash"
arguments = { command = '''for i in 1 2 3; do echo "out $i"; sleep 0.02; echo "err $i" >&2; sleep 0.4; done''' }

[[response]]
text = "ran it"
"#;
    let mock = MockLlm::script(script, &[]).await;
    let config = format!(
        "{}\n[[permissions]]\ntool = \"bash\"\naction = \"allow\"\n\n\
         [[projects]]\nroot = \"project\"\nsandbox = \"off\"\n",
        config_toml(&mock.base_url())
    );
    let server = Server::start_with_config(&config).await;
    let seen = watch_tool_output(&server, "run it", "bash").await;
    let lines = "out 1\nerr 1\nout 2\nerr 2\nout 3\nerr 3\n";
    // The result adds the exit status (and the note that no sandbox ran it).
    assert!(
        seen.settled.starts_with(&format!("{lines}(exit code 0)")),
        "{:?}",
        seen.settled
    );
    seen.assert_streamed(lines);
}

/// LIVE-02 for codex command output (issue 14 item 1): the fake app-server runs a command
/// whose output arrives as `item/commandExecution/outputDelta` notifications 20 ms
/// apart; the `command` item's output streams to the subscriber as deltas, durable per
/// window, and settles as codex's aggregated output.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_05_codex_command_output_streams_as_output_deltas() {
    let home = tempfile::tempdir().unwrap();
    let config = format!(
        "default_provider = \"codex\"\n\n[providers.codex]\ndriver = \"codex\"\n\
         command = \"{}\"\nargs = []\nmodel = \"mock-model\"\n\n[providers.codex.env]\n\
         CODEX_HOME = \"{}\"\n",
        fake_peer_bin("fake_codex").display(),
        home.path().display()
    );
    let server = Server::start_with_config(&config).await;
    // 20 ms apart: most pieces land inside a persistence window (50 ms), so they reach
    // the subscriber as deltas well before the chunk that makes them durable.
    let pieces: Vec<String> = (1..=10).map(|i| format!("line {i} ✓\n")).collect();
    let prompt = format!(
        "FAKE_CODEX: {}",
        json!([{ "run_command": "make", "output": pieces, "pause_ms": 20 }, { "text": "done" }])
    );
    let seen = watch_tool_output(&server, &prompt, "command").await;
    assert_eq!(seen.settled, pieces.concat());
    seen.assert_streamed(&pieces[..9].concat());
}
