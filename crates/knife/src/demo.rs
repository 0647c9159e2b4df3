//! `knife demo` (mock model + in-process server + sample project, one turn end to
//! end) and `knife mock-llm` (the scripted mock LLM server on its own; it answers
//! Chat Completions, Anthropic Messages and OpenAI Responses requests).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use knife_mock_llm::demo::{demo_script, write_sample_project};
use knife_mock_llm::{MockLlm, MockLlmConfig, Script, ScriptResponse};
use knife_store::StreamFilter;

use crate::app::InProcessServer;
use crate::config::Config;
use crate::run::{RunArgs, prompt_once};

/// Flags of `knife mock-llm`.
#[derive(Args)]
pub struct MockLlmArgs {
    /// Listen address.
    #[arg(long, default_value = "127.0.0.1:8089")]
    pub listen: SocketAddr,
    /// Script file (TOML or JSON): `[[response]]` tables served one per model request, in
    /// order (fields: text, reasoning, tool_calls, usage, status/body, headers, cut,
    /// stream_deltas_ms, ...; top-level repeat_last). Format: docs/mock-llm.md.
    #[arg(long, conflicts_with = "replay", required_unless_present = "replay")]
    pub script: Option<PathBuf>,
    /// A `.sse` file replayed byte for byte. Repeat the flag to answer successive
    /// requests with successive files (the last one answers any further request).
    #[arg(long)]
    pub replay: Vec<PathBuf>,
    /// Delay between chunks, in milliseconds.
    #[arg(long, default_value_t = 0)]
    pub chunk_delay: u64,
    /// Write bodies in pieces of N bytes.
    #[arg(long)]
    pub split: Option<usize>,
}

pub async fn mock_llm(args: MockLlmArgs) -> anyhow::Result<ExitCode> {
    for replay in &args.replay {
        anyhow::ensure!(
            replay.is_file(),
            "replay file {} does not exist",
            replay.display()
        );
    }
    let mut config = match (&args.script, args.replay.as_slice()) {
        (Some(script), _) => MockLlmConfig::script(
            Script::load(script)
                .with_context(|| format!("cannot load the script {}", script.display()))?,
        ),
        (None, [one]) => MockLlmConfig::replay_file(one),
        (None, []) => anyhow::bail!("give --script FILE or --replay FILE.sse"),
        (None, many) => {
            let responses = many
                .iter()
                .map(|p| ScriptResponse {
                    sse_file: Some(p.clone()),
                    ..ScriptResponse::default()
                })
                .collect();
            MockLlmConfig::script(Script::new(responses).repeat_last(true))
        }
    };
    config = config
        .with_listen(args.listen)
        .with_chunk_delay(Duration::from_millis(args.chunk_delay));
    if let Some(n) = args.split {
        anyhow::ensure!(n > 0, "--split must be at least 1 byte");
        config = config.with_split(n);
    }
    let handle = MockLlm::start(config)
        .await
        .context("cannot start the mock LLM")?;
    println!("mock-llm listening on {}", handle.base_url());
    let _ = tokio::signal::ctrl_c().await;
    handle.shutdown().await;
    Ok(ExitCode::SUCCESS)
}

/// The prompt of the demo turn.
const DEMO_PROMPT: &str = "What is this project? Look at its files, then summarise it.";

pub async fn demo() -> anyhow::Result<ExitCode> {
    let tmp = tempfile::tempdir().context("cannot create a temporary directory")?;
    let project = tmp.path().join("wordcount");
    write_sample_project(&project).context("cannot write the sample project")?;
    let mock = MockLlm::start(
        MockLlmConfig::script(demo_script()).with_chunk_delay(Duration::from_millis(15)),
    )
    .await
    .context("cannot start the mock LLM")?;
    let config = Config::single_instance("demo", mock.base_url(), "mock-model");
    let data_dir = tmp.path().join("data");
    let server = InProcessServer::start(&config, &data_dir).await?;
    let (addr, store) = (server.addr, server.store.clone());
    println!(
        "knife demo: mock model at {}, server at http://{addr}",
        mock.base_url()
    );
    println!("project: {} (a sample folder)\n", project.display());
    println!("you: {DEMO_PROMPT}\n");
    let client = server.client()?;
    let args = RunArgs {
        project: Some(project.clone()),
        thread: None,
        worktree: false,
        last: false,
        model: None,
        mode: crate::run::ModeArg::Queue,
        provider: None,
        server: None,
        data_dir: None,
        prompt: DEMO_PROMPT.into(),
    };
    let code = prompt_once(&client, &args).await?;

    let events = store
        .read_events(
            &StreamFilter {
                thread_id: None,
                after: 0,
                event_type: None,
            },
            100_000,
        )
        .await?;
    let mut by_type: BTreeMap<&str, usize> = BTreeMap::new();
    for e in &events {
        *by_type.entry(e.event.event_type()).or_default() += 1;
    }
    println!(
        "\nevent log: {} events in {} (a temporary SQLite file, removed when the demo exits):",
        events.len(),
        data_dir.join(crate::app::DB_FILE).display()
    );
    for (t, n) in by_type {
        println!("  {n:>4}  {t}");
    }
    println!("model requests: {}", mock.model_requests().len());
    println!(
        "\nnext: point knife at a real model (README: \"Use it with a real model\"), then\n  knife serve    and    knife run --project DIR \"your question\""
    );
    server.stop().await?;
    mock.shutdown().await;
    Ok(code)
}
