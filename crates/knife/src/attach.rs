//! `knife attach THREAD`: follows the run in progress of a thread live (SPEC UX-04),
//! whichever client started it and also after a server restart resumed it.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;
use knife_protocol::*;

use crate::approve::Prompter;
use crate::client::{ApiClient, find_server};
use crate::config::Config;
use crate::render::follow_run_from;

/// Flags of `knife attach`.
#[derive(Args)]
pub struct AttachArgs {
    /// The thread: its id or a unique prefix of one.
    pub thread: String,
    /// Server to use (default: the one holding the data directory, else the configured
    /// listen address).
    #[arg(long, env = "KNIFE_SERVER")]
    pub server: Option<String>,
    /// Data directory whose server to use.
    #[arg(long, env = "KNIFE_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
}

/// Prints what the thread's run in progress said so far, then follows it (and any run
/// queued after it) until none is left. Approvals are asked on a terminal. Ctrl-C
/// detaches and leaves the run going. Exit code 0 when the last followed run completed
/// (or nothing was running), 1 otherwise.
///
/// Errors: no server running, an unknown or ambiguous thread reference, the API's.
pub async fn attach(config_path: Option<&Path>, args: AttachArgs) -> anyhow::Result<ExitCode> {
    let config = Config::load(config_path)?;
    let Some(client) =
        find_server(&config, args.server.as_deref(), args.data_dir.as_deref()).await?
    else {
        anyhow::bail!(
            "no knife server is running, so no run is in progress to follow (a run a stopped \
             server left unfinished resumes when `knife serve` starts; attach then)"
        );
    };
    let thread = crate::thread_ids::resolve(&client, &args.thread).await?;
    tokio::select! {
        code = follow_all(&client, &thread) => code,
        _ = tokio::signal::ctrl_c() => {
            eprintln!("\ndetached; the run goes on (`knife attach {thread}` follows it again)");
            Ok(ExitCode::SUCCESS)
        }
    }
}

async fn follow_all(client: &ApiClient, thread: &ThreadId) -> anyhow::Result<ExitCode> {
    let mut followed: Option<Run> = None;
    loop {
        let p: ThreadProjection = client.get(&format!("/api/threads/{thread}")).await?;
        let active = p
            .runs
            .iter()
            .filter(|r| !r.status.is_terminal())
            .min_by_key(|r| r.ordinal)
            .cloned();
        let Some(run) = active else {
            return Ok(match followed {
                Some(run) if run.status != RunStatus::Completed => ExitCode::FAILURE,
                Some(_) => ExitCode::SUCCESS,
                None => {
                    match p.runs.iter().max_by_key(|r| r.ordinal) {
                        Some(last) => eprintln!(
                            "thread {thread} has no run in progress (run {} {})",
                            last.ordinal,
                            status_word(last.status)
                        ),
                        None => eprintln!("thread {thread} has no runs yet"),
                    }
                    ExitCode::SUCCESS
                }
            });
        };
        eprintln!("thread {thread} · run {} · {}", run.ordinal, p.thread.title);
        if let Some(TurnItemKind::UserMessage { text, .. }) = p
            .turn_items
            .iter()
            .find(|i| i.id == run.user_message_id)
            .map(|i| &i.kind)
        {
            eprintln!("you: {text}");
        }
        let prompter = Prompter::start(client.clone(), thread.clone());
        let done = follow_run_from(
            client,
            thread,
            &run.id,
            p.latest_sequence,
            prompter.as_ref(),
            Some(&p),
        )
        .await?;
        eprintln!(
            "thread {thread} · run {} · {}",
            done.ordinal,
            status_word(done.status)
        );
        if let Some(e) = &done.error
            && done.status != RunStatus::Completed
        {
            eprintln!("error: {}", e.message);
        }
        followed = Some(done);
    }
}

/// A run status as a word (`completed`, `interrupted`, …).
pub fn status_word(status: RunStatus) -> String {
    format!("{status:?}").to_lowercase()
}
