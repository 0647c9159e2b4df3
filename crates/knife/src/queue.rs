//! `knife threads queue THREAD`: a thread's message queue (SPEC.md TURN-01/02) through
//! the running server: list it, cancel an entry, clear it, resume it after a pause;
//! and `knife threads budget THREAD`: raise its budgets and continue (TURN-07).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;
use knife_protocol::*;

use crate::client::find_server;
use crate::config::Config;

/// Flags of `knife threads queue`.
#[derive(Args)]
pub struct QueueArgs {
    /// The thread: its id or a unique prefix of one (UX-04).
    pub id: String,
    /// Cancel this queued message (its id from the listing).
    #[arg(long, conflicts_with_all = ["clear", "resume"])]
    pub cancel: Option<String>,
    /// Drop every queued message (and the pause).
    #[arg(long, conflicts_with = "resume")]
    pub clear: bool,
    /// Lift the pause a user interrupt (or a spent resume budget) left; an idle
    /// thread starts its first queued message at once.
    #[arg(long)]
    pub resume: bool,
    /// Server to use (default: the one holding the data directory, else the
    /// configured listen address).
    #[arg(long, env = "KNIFE_SERVER")]
    pub server: Option<String>,
    /// Data directory whose server to use.
    #[arg(long, env = "KNIFE_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
}

pub async fn queue(config_path: Option<&Path>, args: QueueArgs) -> anyhow::Result<ExitCode> {
    let config = Config::load(config_path)?;
    let Some(client) =
        find_server(&config, args.server.as_deref(), args.data_dir.as_deref()).await?
    else {
        anyhow::bail!(
            "no knife server is running; start it with `knife serve` (queued messages wait in \
             the data directory until then)"
        );
    };
    let thread = crate::thread_ids::resolve(&client, &args.id).await?;
    let path = format!("/api/threads/{thread}/queue");
    let queue: QueueResponse = if let Some(entry) = &args.cancel {
        client.delete(&format!("{path}/{entry}")).await?
    } else if args.clear {
        client.delete(&path).await?
    } else if args.resume {
        client
            .post(&format!("{path}/resume"), &serde_json::json!({}))
            .await?
    } else {
        client.get(&path).await?
    };
    print!("{}", render(&queue));
    Ok(ExitCode::SUCCESS)
}

/// The queue as lines: the pause (with the commands that lift it), then one line per
/// entry with its position, id and first line of text.
pub fn render(q: &QueueResponse) -> String {
    let mut out = String::new();
    let thread = &q.thread_id;
    if let Some(pause) = &q.queue.paused {
        let why = match pause.reason {
            QueuePauseReason::UserInterrupt => "a run was interrupted",
            QueuePauseReason::ResumeExhausted => "a run could not be resumed",
            QueuePauseReason::BudgetExceeded => {
                "a budget is spent; raise it with `knife threads budget`"
            }
        };
        out.push_str(&format!(
            "queue paused ({why}): resume it with `knife threads queue {thread} --resume`, or \
             clear it with `--clear`\n"
        ));
    }
    if q.queue.entries.is_empty() {
        out.push_str(&format!("thread {thread} has no queued messages\n"));
    }
    for (i, e) in q.queue.entries.iter().enumerate() {
        let first: String = e
            .text
            .lines()
            .next()
            .unwrap_or("")
            .chars()
            .take(60)
            .collect();
        let kind = match &e.steer_run_id {
            Some(run) => format!("steer → {run}"),
            None => "queued".to_owned(),
        };
        out.push_str(&format!("{:>3}. {}  {kind}  {first}\n", i + 1, e.id));
        if let Some(note) = &e.note {
            out.push_str(&format!("     ({note})\n"));
        }
    }
    out
}

/// Flags of `knife threads budget`.
#[derive(Args)]
pub struct BudgetArgs {
    /// The thread: its id or a unique prefix of one (UX-04).
    pub id: String,
    /// Tokens to add to every budget this thread's runs are checked against.
    #[arg(long)]
    pub tokens: Option<u64>,
    /// USD to add.
    #[arg(long)]
    pub cost_usd: Option<f64>,
    /// Start a run that continues the work.
    #[arg(long = "continue")]
    pub continue_run: bool,
    #[arg(long, env = "KNIFE_SERVER")]
    pub server: Option<String>,
    #[arg(long, env = "KNIFE_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
}

pub async fn budget(config_path: Option<&Path>, args: BudgetArgs) -> anyhow::Result<ExitCode> {
    let config = Config::load(config_path)?;
    let Some(client) =
        find_server(&config, args.server.as_deref(), args.data_dir.as_deref()).await?
    else {
        anyhow::bail!(
            "no knife server is running; start it with `knife serve`, then raise the budget"
        );
    };
    let thread = crate::thread_ids::resolve(&client, &args.id).await?;
    let raised: RaiseBudgetResponse = client
        .post(
            &format!("/api/threads/{thread}/budget"),
            &RaiseBudgetRequest {
                tokens: args.tokens,
                cost_usd: args.cost_usd,
                continue_run: args.continue_run,
            },
        )
        .await?;
    let r = raised.budget_raise;
    println!(
        "thread {}: budgets raised by {} tokens and {:.2} USD in all",
        raised.thread_id,
        r.tokens,
        r.cost_microdollars as f64 / 1_000_000.0
    );
    if let Some(run) = raised.run_id {
        println!("continuing in {run}");
    }
    Ok(ExitCode::SUCCESS)
}
