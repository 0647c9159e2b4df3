//! `knife threads rename | archive | unarchive | delete | fork` (CHG-08, CHG-09):
//! through the running server, or a server started in-process on the data directory.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;
use knife_protocol::*;

use crate::app::InProcessServer;
use crate::client::{ApiClient, find_server};
use crate::config::Config;

/// Which server to use.
#[derive(Args, Clone, Debug)]
pub struct Target {
    /// Server to use (default: the one holding the data directory, else the
    /// configured listen address); without one, knife serves in-process.
    #[arg(long, env = "KNIFE_SERVER")]
    pub server: Option<String>,
    /// Data directory (default $XDG_DATA_HOME/knife).
    #[arg(long, env = "KNIFE_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
}

/// One lifecycle change of a thread.
#[derive(Clone, Debug)]
pub enum Change {
    Rename(String),
    Archive(bool),
    Delete {
        force: bool,
    },
    Fork {
        after: Option<u32>,
        title: Option<String>,
    },
}

/// Applies `change` to thread `id` (its id or a unique prefix) and prints what happened.
pub async fn apply(
    config_path: Option<&Path>,
    id: &str,
    change: Change,
    target: &Target,
) -> anyhow::Result<ExitCode> {
    let config = Config::load(config_path)?;
    if let Some(client) = find_server(
        &config,
        target.server.as_deref(),
        target.data_dir.as_deref(),
    )
    .await?
    {
        let thread = crate::thread_ids::resolve(&client, id).await?;
        return send(&client, &thread, change).await;
    }
    let data_dir = config.data_dir(target.data_dir.as_deref())?;
    let server = InProcessServer::start(&config, &data_dir).await?;
    let client = server.client()?;
    let result = match crate::thread_ids::resolve(&client, id).await {
        Ok(thread) => send(&client, &thread, change).await,
        Err(e) => Err(e),
    };
    server.stop().await?;
    result
}

async fn send(client: &ApiClient, thread: &ThreadId, change: Change) -> anyhow::Result<ExitCode> {
    let path = format!("/api/threads/{thread}");
    match change {
        Change::Rename(title) => {
            let t: Thread = client
                .patch(
                    &path,
                    &UpdateThreadRequest {
                        title: Some(title),
                        archived: None,
                    },
                )
                .await?;
            println!("renamed thread {} to \"{}\"", t.id, t.title);
        }
        Change::Archive(archived) => {
            let t: Thread = client
                .patch(
                    &path,
                    &UpdateThreadRequest {
                        title: None,
                        archived: Some(archived),
                    },
                )
                .await?;
            if archived {
                println!(
                    "archived thread {} (hidden from `knife threads list`; `--archived` shows it, `knife threads unarchive {}` brings it back)",
                    t.id, t.id
                );
            } else {
                println!("unarchived thread {}", t.id);
            }
        }
        Change::Delete { force } => {
            let query = if force { "?force=true" } else { "" };
            let d: DeleteThreadResponse = client.delete(&format!("{path}{query}")).await?;
            if let Some(run) = &d.stopped_run_id {
                println!("stopped run {run}");
            }
            println!(
                "deleted thread {}; its events stay in the log until `knife db purge` (server stopped)",
                d.thread_id
            );
        }
        Change::Fork { after, title } => {
            let t: Thread = client
                .post(
                    &format!("{path}/fork"),
                    &ForkThreadRequest {
                        after_run: after,
                        title,
                    },
                )
                .await?;
            let after = t.forked_from.as_ref().map_or(0, |f| f.after_run);
            println!("{}", t.id);
            eprintln!(
                "forked thread {thread} after run {after} into thread {} (\"{}\"); continue it with `knife run --thread {} \"…\"`",
                t.id, t.title, t.id
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}
