//! `knife sessions list | close ID`: the live provider sessions of the running server
//! (`GET /api/sessions`, `POST /api/sessions/{id}/close`).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, bail};
use clap::{Args, Subcommand};
use knife_protocol::*;

use crate::client::{ApiClient, find_server};
use crate::config::Config;

/// `knife sessions …`.
#[derive(Subcommand)]
pub enum SessionsCommand {
    /// Live provider sessions: driver, instance, threads, running turns, idle deadline.
    List {
        #[command(flatten)]
        server: ServerArgs,
        /// Print the sessions as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Release a live provider session now (it is recorded `stopped`; the thread's
    /// next message opens a new one).
    Close {
        /// The provider session id (`knife sessions list` shows them).
        id: String,
        #[command(flatten)]
        server: ServerArgs,
    },
}

/// Which server to ask (live sessions exist only inside a running server).
#[derive(Args)]
pub struct ServerArgs {
    /// Server URL (default: the server owning the data directory, then the configured
    /// listen address).
    #[arg(long, env = "KNIFE_SERVER")]
    server: Option<String>,
    /// Data directory whose server to ask.
    #[arg(long, env = "KNIFE_DATA_DIR")]
    data_dir: Option<PathBuf>,
}

async fn client(config: &Config, args: &ServerArgs) -> anyhow::Result<ApiClient> {
    match find_server(config, args.server.as_deref(), args.data_dir.as_deref()).await? {
        Some(client) => Ok(client),
        None => bail!(
            "no knife server is running; provider sessions live inside `knife serve`, start it first"
        ),
    }
}

pub async fn sessions(
    config_path: Option<&Path>,
    cmd: SessionsCommand,
) -> anyhow::Result<ExitCode> {
    let config = Config::load(config_path)?;
    match cmd {
        SessionsCommand::List { server, json } => {
            let api = client(&config, &server).await?;
            let sessions: Vec<LiveSession> = api.get("/api/sessions").await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&sessions)?);
            } else {
                print!("{}", render_list(&sessions));
            }
        }
        SessionsCommand::Close { id, server } => {
            let api = client(&config, &server).await?;
            let closed: CloseSessionResponse =
                api.post(&close_path(&id)?, &serde_json::json!({})).await?;
            println!("closed {}", closed.provider_session_id);
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `/api/sessions/{id}/close` with `id` percent-encoded as one path segment.
fn close_path(id: &str) -> anyhow::Result<String> {
    let mut url = reqwest::Url::parse("http://knife/api/sessions")?;
    url.path_segments_mut()
        .ok()
        .context("cannot build the session's URL")?
        .push(id)
        .push("close");
    Ok(url.path().to_owned())
}

/// One block per session; "no live provider sessions" when there are none.
fn render_list(sessions: &[LiveSession]) -> String {
    use std::fmt::Write;
    if sessions.is_empty() {
        return "no live provider sessions\n".into();
    }
    let mut out = String::new();
    let now = chrono::Utc::now();
    for s in sessions {
        let _ = writeln!(out, "{}", s.provider_session_id);
        let _ = writeln!(
            out,
            "  {} · {} · {}{}",
            s.driver,
            s.provider_instance_id,
            // The API's name (`ready`, `starting`, …), not the Rust variant.
            serde_json::to_value(s.status)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_else(|| format!("{:?}", s.status).to_lowercase()),
            s.model
                .as_deref()
                .map(|m| format!(" · {m}"))
                .unwrap_or_default()
        );
        let _ = writeln!(out, "  folder   {}", s.cwd);
        match (&s.node, s.remote) {
            (Some(node), true) => {
                let _ = writeln!(
                    out,
                    "  node     {node} (another node: its turns, idle timer and close are there)"
                );
            }
            (Some(node), false) => {
                let _ = writeln!(out, "  node     {node}");
            }
            (None, _) => {}
        }
        let threads: Vec<_> = s
            .threads
            .iter()
            .map(std::string::ToString::to_string)
            .collect();
        let _ = writeln!(out, "  threads  {}", join_or_none(&threads));
        let turns: Vec<_> = s
            .busy_turns
            .iter()
            .map(std::string::ToString::to_string)
            .collect();
        let _ = writeln!(out, "  running  {}", join_or_none(&turns));
        match (&s.idle_deadline, &s.pinned_since) {
            _ if s.remote => {}
            (_, Some(pin)) => {
                let _ = writeln!(
                    out,
                    "  idle     kept by background work since {}",
                    crate::human::when(*pin, now)
                );
            }
            (Some(deadline), None) => {
                let _ = writeln!(
                    out,
                    "  idle     released at {} unless used",
                    crate::human::when(*deadline, now)
                );
            }
            (None, None) => {
                let _ = writeln!(out, "  idle     busy");
            }
        }
        if !s.mcp_threads.is_empty() {
            let mcp: Vec<_> = s
                .mcp_threads
                .iter()
                .map(std::string::ToString::to_string)
                .collect();
            let _ = writeln!(out, "  mcp      {}", mcp.join(", "));
        }
    }
    out
}

fn join_or_none(items: &[String]) -> String {
    if items.is_empty() {
        "none".into()
    } else {
        items.join(", ")
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_session_is_listed_with_its_api_status_and_folder() {
        let session: LiveSession = serde_json::from_value(serde_json::json!({
            "provider_session_id": "provider-session:codex:shared",
            "driver": "codex",
            "provider_instance_id": "codex",
            "status": "ready",
            "cwd": "/srv/app",
            "capabilities": serde_json::to_value(ProviderCapabilities::default()).unwrap(),
            "threads": ["thread_1"],
            "busy_turns": [],
        }))
        .unwrap();
        let text = render_list(&[session]);
        assert!(text.contains("  codex · codex · ready\n"), "{text}");
        assert!(text.contains("  folder   /srv/app\n"), "{text}");
        assert!(text.contains("  threads  thread_1\n"), "{text}");
    }

    #[test]
    fn close_path_encodes_the_id_as_one_segment() {
        assert_eq!(
            close_path("provider-session:fake:thread_1").unwrap(),
            "/api/sessions/provider-session:fake:thread_1/close"
        );
        assert_eq!(
            close_path("a/b c").unwrap(),
            "/api/sessions/a%2Fb%20c/close"
        );
    }
}
