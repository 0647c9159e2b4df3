//! `knife`: the command-line entry point and composition root of knife, a
//! crash-safe session runtime for AI coding agents.

mod app;
mod approve;
mod attach;
mod bench;
mod changes;
mod checkpoints;
mod client;
mod config;
mod demo;
mod disk;
mod doctor;
mod human;
mod lock;
mod markdown;
mod pipe;
mod providers;
mod queue;
mod render;
mod run;
mod sandbox;
mod search;
mod serve;
mod sessions;
mod store_url;
mod telemetry;
mod thread_ids;
mod thread_lifecycle;
mod threads;
mod token;
mod tui;
mod usage;
mod usage_metrics;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// knife hosts agent threads inside project folders, records every turn in
/// SQLite, and streams it over HTTP, WebSocket and this CLI.
#[derive(Parser)]
#[command(
    name = "knife",
    version,
    about,
    long_about = None,
    args_conflicts_with_subcommands = true
)]
struct Cli {
    /// Config file (default: ./knife.toml, then $XDG_CONFIG_HOME/knife/knife.toml).
    #[arg(long, global = true, env = "KNIFE_CONFIG")]
    config: Option<PathBuf>,
    /// Without a command, in a terminal: the interactive view (`knife tui`).
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    tui: tui::TuiArgs,
}

#[derive(Subcommand)]
enum Command {
    /// The interactive terminal: threads, the live transcript, approvals, Esc to
    /// interrupt (also `knife` alone).
    Tui(tui::TuiArgs),
    /// Run the knife server (HTTP + WebSocket API).
    Serve(serve::ServeArgs),
    /// Send one prompt to an agent in a project and stream the answer.
    Run(run::RunArgs),
    /// Follow a thread's run in progress live (started anywhere, or resumed after a
    /// restart); Ctrl-C detaches and leaves it running.
    Attach(attach::AttachArgs),
    /// Answer a tool approval of a running turn from another terminal (or list a
    /// thread's pending approvals).
    Approve(approve::ApproveArgs),
    /// Threads: list, show, interrupt, queue, rename, archive, unarchive, delete, fork.
    #[command(subcommand)]
    Threads(threads::ThreadsCommand),
    /// Live provider sessions of the running server: `sessions list`, `sessions close ID`.
    #[command(subcommand)]
    Sessions(sessions::SessionsCommand),
    /// A run's changes: the file list with +/- and the unified diff (coloured on a
    /// terminal). Default run: the thread's last.
    Diff(changes::DiffArgs),
    /// Restore the files touched by a run and every later run to their state before
    /// it (`--force` over files changed since; `--undo REVERT_ID` undoes a revert).
    Revert(changes::RevertArgs),
    /// Tokens and cost of runs per provider instance and model (`--project`,
    /// `--thread`, `--since`), priced with knife.toml's `[prices]`.
    Usage(usage::UsageArgs),
    /// Full-text search over threads: titles, messages, tool calls (`--project`, `--json`).
    Search(search::SearchArgs),
    /// A scripted streaming LLM server (Chat Completions, Anthropic Messages, OpenAI
    /// Responses and Gemini streamGenerateContent from one script), for tests, demos,
    /// benchmarks and external agents (codex, Claude, Gemini CLI, opencode). Script
    /// format: docs/mock-llm.md.
    MockLlm(demo::MockLlmArgs),
    /// A self-contained demo: mock model + in-process server + a sample project.
    Demo,
    /// Check the config, data dir, provider instances, peer programs, git, sandbox and
    /// database, and say what to fix (exit 1 when something is broken).
    Doctor(doctor::DoctorArgs),
    /// Database maintenance: `db rebuild` recomputes every projection from the event
    /// log; `db purge` removes deleted threads' events for good.
    #[command(subcommand)]
    Db(threads::DbCommand),
    /// Benchmarks: `bench store`, `bench stream`, `bench processor`, `bench restart`.
    #[command(subcommand)]
    Bench(bench::BenchCommand),
    /// API tokens: `token new` prints one strong enough for a non-loopback listen.
    #[command(subcommand)]
    Token(token::TokenCommand),
}

/// Makes this process non-dumpable (Linux `PR_SET_DUMPABLE` = 0): its
/// `/proc/<pid>/environ`, `mem`, `maps`, … become readable by root only, so a
/// `bash` command the model runs (a child of this process, same user) cannot read
/// the API keys and `KNIFE_*` secrets of the server's environment through
/// `/proc/$PPID/environ`, nor attach a debugger. No core dumps either. A failure
/// is reported and startup continues (the process is merely less protected).
fn protect_process_memory() {
    #[cfg(target_os = "linux")]
    if let Err(e) = nix::sys::prctl::set_dumpable(false) {
        eprintln!(
            "warning: cannot make the process non-dumpable ({e}); commands run by the agent \
             may read this process's environment (API keys) through /proc"
        );
    }
}

fn main() -> ExitCode {
    protect_process_memory();
    pipe::exit_quietly_on_broken_pipe();
    let cli = Cli::parse();
    let command = cli.command.unwrap_or(Command::Tui(cli.tui));
    // The full-screen view has no log lines: they would draw over it.
    if !matches!(command, Command::Tui(_)) {
        telemetry::init_tracing(matches!(command, Command::Serve(_) | Command::MockLlm(_)));
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async move {
        let config = cli.config.as_deref();
        match command {
            Command::Tui(args) => tui::tui(config, args).await,
            Command::Serve(args) => serve::serve(config, args).await,
            Command::Run(args) => run::run(config, args).await,
            Command::Approve(args) => approve::approve(config, args).await,
            Command::Attach(args) => attach::attach(config, args).await,
            Command::Threads(cmd) => threads::threads(config, cmd).await,
            Command::Sessions(cmd) => sessions::sessions(config, cmd).await,
            Command::Usage(args) => usage::usage(config, args).await,
            Command::Search(args) => search::search(config, args).await,
            Command::MockLlm(args) => demo::mock_llm(args).await,
            Command::Diff(args) => changes::diff(config, args).await,
            Command::Revert(args) => changes::revert(config, args).await,
            Command::Demo => demo::demo().await,
            Command::Doctor(args) => doctor::doctor(config, args).await,
            Command::Db(cmd) => threads::db(config, cmd).await,
            Command::Bench(cmd) => bench::bench(cmd).await,
            Command::Token(cmd) => token::token(cmd),
        }
    });
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
