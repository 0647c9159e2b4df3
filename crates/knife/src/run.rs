//! `knife run`: one prompt in a project. Uses the server at the configured listen
//! address when one answers, else starts one in-process on a loopback port.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap::Args;
use knife_protocol::*;

use crate::app::InProcessServer;
use crate::approve::Prompter;
use crate::client::{ApiClient, find_server};
use crate::config::Config;
use crate::render::follow_run;

/// `--mode` of `knife run` (mirrors [`MessageMode`]).
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum ModeArg {
    Queue,
    Interrupt,
    Steer,
    Reject,
}

impl From<ModeArg> for MessageMode {
    fn from(m: ModeArg) -> Self {
        match m {
            ModeArg::Queue => MessageMode::Queue,
            ModeArg::Interrupt => MessageMode::Interrupt,
            ModeArg::Steer => MessageMode::Steer,
            ModeArg::Reject => MessageMode::Reject,
        }
    }
}

/// Flags of `knife run`.
#[derive(Args)]
pub struct RunArgs {
    /// Project folder (default: the current directory).
    #[arg(long, conflicts_with = "thread")]
    pub project: Option<PathBuf>,
    /// Run the new thread in its own git worktree on branch `knife/<short id>`
    /// (SPEC.md CHG-07; the project must be a git repository). Bring the work back
    /// with `knife threads merge THREAD`.
    #[arg(long, conflicts_with_all = ["thread", "last"])]
    pub worktree: bool,
    /// Continue this thread instead of starting a new one (its id or a unique prefix).
    #[arg(long)]
    pub thread: Option<String>,
    /// Continue the project's most recently active thread.
    #[arg(long, conflicts_with = "thread")]
    pub last: bool,
    /// Model of this run (default: the thread's, else the provider instance's).
    /// With `--thread` it applies to this run only (recorded on the run).
    #[arg(long)]
    pub model: Option<String>,
    /// With `--thread`, what to do when the thread is busy (TURN-01): `queue`
    /// (default: wait for the active run), `interrupt` (stop it and go first),
    /// `steer` (into the running turn where the runtime can), `reject`.
    #[arg(long, value_enum, default_value = "queue", requires = "thread")]
    pub mode: ModeArg,
    /// Provider instance from knife.toml (default: `default_provider`).
    #[arg(long)]
    pub provider: Option<String>,
    /// Server to use (default: http://<configured listen address>); started in-process when none answers.
    #[arg(long, env = "KNIFE_SERVER")]
    pub server: Option<String>,
    /// Data directory for an in-process server.
    #[arg(long, env = "KNIFE_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    /// The prompt.
    pub prompt: String,
}

pub async fn run(config_path: Option<&Path>, args: RunArgs) -> anyhow::Result<ExitCode> {
    let mut config = Config::load(config_path)?;
    config.default_to(args.provider.as_deref());
    if let Some(server) =
        find_server(&config, args.server.as_deref(), args.data_dir.as_deref()).await?
    {
        eprintln!(
            "using the knife server at {} (its knife.toml and data directory apply)",
            server.base()
        );
        return prompt_once(&server, &args).await;
    }
    let data_dir = config.data_dir(args.data_dir.as_deref())?;
    eprintln!(
        "no knife server is running; serving in-process (data: {})",
        data_dir.display()
    );
    let server = InProcessServer::start(&config, &data_dir).await?;
    let code = prompt_once(&server.client()?, &args).await;
    server.stop().await?;
    code
}

/// Posts the prompt to `--thread`, or to a new thread of the project (registered if
/// new), and renders the run. Ctrl-C interrupts the run on the server (a second
/// Ctrl-C exits at once); exit code 0 when the run completed, 1 otherwise, 130 when
/// interrupted from the keyboard.
pub async fn prompt_once(client: &ApiClient, args: &RunArgs) -> anyhow::Result<ExitCode> {
    let continued = match (&args.thread, args.last) {
        (Some(given), _) => {
            let threads: Vec<Thread> = client.get("/api/threads?archived=true").await?;
            Some(crate::thread_ids::pick(&threads, given)?)
        }
        (None, true) => {
            let project = project(client, args).await?;
            let threads: Vec<Thread> = client.get("/api/threads?archived=true").await?;
            Some(crate::thread_ids::last(
                &threads,
                project.id.as_str(),
                &project.root,
            )?)
        }
        (None, false) => None,
    };
    let (thread, after) = match continued {
        Some(id) => {
            let p: ThreadProjection = client.get(&format!("/api/threads/{id}")).await?;
            (p.thread, p.latest_sequence)
        }
        None => (new_thread(client, args).await?, 0),
    };
    let posted: PostMessageResponse = client
        .post(
            &format!("/api/threads/{}/messages", thread.id),
            &PostMessageRequest {
                text: args.prompt.clone(),
                // With --thread: this run's model (TURN-10); a new thread has it too.
                model: args.model.clone(),
                mode: args.mode.into(),
            },
        )
        .await?;
    if let Some(note) = &posted.note {
        eprintln!("note: {note}");
    }
    let Some(run_id) = posted.run_id.clone() else {
        anyhow::bail!("the server answered without a run id; this is a bug in knife");
    };
    match posted.status {
        MessageDelivery::Started => match crate::thread_ids::run_ordinal(&run_id) {
            Some(n) => eprintln!("thread {} · run {n}", thread.id),
            None => eprintln!("thread {} · {run_id}", thread.id),
        },
        MessageDelivery::Queued => {
            // Queued: it starts when the active run ends (TURN-01); nothing to follow yet.
            let entry = posted.queued.as_ref().map(|e| e.id.to_string());
            eprintln!(
                "thread {} · queued at position {} ({}); it starts when {run_id} ends. \
                 See it with `knife threads queue {}`",
                thread.id,
                posted.position.unwrap_or(0),
                entry.unwrap_or_default(),
                thread.id
            );
            return Ok(ExitCode::SUCCESS);
        }
        MessageDelivery::Steering => {
            eprintln!("thread {} · steering {run_id}", thread.id)
        }
    }
    let posted_run = run_id;
    let mut interrupted = false;
    // Approvals are asked here when there is a terminal; else the renderer prints
    // the `knife approve` command that answers them.
    let prompter = Prompter::start(client.clone(), thread.id.clone());
    let follow = follow_run(client, &thread.id, &posted_run, after, prompter.as_ref());
    tokio::pin!(follow);
    let run = tokio::select! {
        run = &mut follow => run?,
        _ = tokio::signal::ctrl_c() => {
            interrupted = true;
            eprintln!("\ninterrupting the run (Ctrl-C again to quit at once)…");
            let _: InterruptResponse = client
                .post(&format!("/api/threads/{}/interrupt", thread.id), &serde_json::json!({}))
                .await?;
            tokio::select! {
                run = &mut follow => run?,
                // At once: the store is crash-safe and the next start settles the run.
                _ = tokio::signal::ctrl_c() => std::process::exit(130),
            }
        }
    };
    // TURN-06: what the run cost (priced by the server); the tokens are in the summary.
    let spent = client
        .get::<UsageReport>(&format!("/api/usage?thread_id={}", thread.id))
        .await
        .ok()
        .and_then(|u| u.by_run.into_iter().find(|r| r.run_id == run.id))
        .filter(|r| r.totals.total_tokens > 0 && r.totals.unpriced_runs == 0)
        .map(|r| format!(" · {}", format_usd(r.totals.cost_microdollars)))
        .unwrap_or_default();
    let colour = crate::render::colour_for(&std::io::stderr());
    eprintln!(
        "thread {} · {}{spent}",
        thread.id,
        crate::render::run_summary(&run, colour)
    );
    let error_word = if colour {
        "\u{1b}[1;31merror:\u{1b}[0m"
    } else {
        "error:"
    };
    match run.status {
        RunStatus::Completed => Ok(ExitCode::SUCCESS),
        _ if interrupted => Ok(ExitCode::from(130)),
        _ => {
            if let Some(e) = &run.error {
                // The type only when the message does not already say it
                // ("the run was interrupted (user)" is type `interrupted`).
                if e.message.contains(e.error_type.as_str()) {
                    eprintln!("{error_word} {}", e.message);
                } else {
                    eprintln!("{error_word} {} ({})", e.message, e.error_type);
                }
            }
            Ok(ExitCode::FAILURE)
        }
    }
}

/// Registers the project folder (the server returns the existing project for a
/// known root) and creates a thread titled after the prompt.
async fn new_thread(client: &ApiClient, args: &RunArgs) -> anyhow::Result<Thread> {
    let project = project(client, args).await?;
    let title: String = args.prompt.chars().take(60).collect();
    let req = CreateThreadRequest {
        project_id: project.id.clone(),
        title: Some(title),
        provider_instance_id: args.provider.as_deref().map(ProviderInstanceId::from),
        model: args.model.clone(),
        parent_thread_id: None,
        worktree: args.worktree.then_some(true),
    };
    client.post("/api/threads", &req).await
}

/// The project of `--project` (default: the current directory), registered if new.
async fn project(client: &ApiClient, args: &RunArgs) -> anyhow::Result<Project> {
    let dir = match &args.project {
        Some(p) => p.clone(),
        None => std::env::current_dir().context("cannot read the current directory")?,
    };
    let root = std::fs::canonicalize(&dir).with_context(|| {
        format!(
            "project folder {} does not exist; pass an existing folder to --project",
            dir.display()
        )
    })?;
    let req = CreateProjectRequest {
        root: root.display().to_string(),
        name: None,
    };
    client.post("/api/projects", &req).await
}
