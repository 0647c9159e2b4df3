//! `knife serve`: opens the data dir, wires everything and serves the API until
//! SIGINT/SIGTERM (graceful; a second signal exits at once).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::bail;
use clap::Args;

use crate::app::{App, bind};
use crate::config::Config;

/// Flags of `knife serve`.
#[derive(Args)]
pub struct ServeArgs {
    /// Listen address (default 127.0.0.1:7878). Non-loopback addresses need an API token.
    #[arg(long, env = "KNIFE_LISTEN")]
    pub listen: Option<String>,
    /// Data directory (default $XDG_DATA_HOME/knife).
    #[arg(long, env = "KNIFE_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    /// Database URL (overrides `[store] url`): `postgres://user:password@host:port/db`
    /// runs knife on PostgreSQL; unset: SQLite in the data directory.
    #[arg(long, env = "KNIFE_DATABASE_URL")]
    pub database: Option<String>,
    /// This node's id among the nodes sharing one PostgreSQL database (overrides
    /// `[store] node_id`; default `local`). Every node needs its own.
    #[arg(long, env = "KNIFE_NODE_ID")]
    pub node_id: Option<String>,
}

pub async fn serve(config_path: Option<&Path>, args: ServeArgs) -> anyhow::Result<ExitCode> {
    let mut config = Config::load(config_path)?;
    if let Some(url) = args.database {
        config.store.url = Some(url);
    }
    if let Some(node) = args.node_id {
        config.store.node_id = Some(node);
    }
    let addr = config.listen(args.listen.as_deref())?;
    let data_dir = config.data_dir(args.data_dir.as_deref())?;
    let token_env = config
        .server
        .api_token_env
        .clone()
        .unwrap_or_else(|| "KNIFE_API_TOKEN".into());
    let token = std::env::var(&token_env).ok().filter(|t| !t.is_empty());
    if !addr.ip().is_loopback() {
        let Some(token) = token.as_deref() else {
            bail!(
                "listening on {addr} exposes knife beyond this machine; set an API token in \
                 ${token_env} first (`knife token new` prints one)"
            );
        };
        // SEC-05: a guessable token on a public address is no protection.
        if let Err(why) = crate::token::check_strength(token, &token_env) {
            bail!("refusing to listen on {addr}: {why}");
        }
    } else if let Some(token) = token.as_deref()
        && let Err(why) = crate::token::check_strength(token, &token_env)
    {
        tracing::warn!("{why} (accepted on a loopback address only)");
    }
    raise_open_file_limit(config.server.limits().max_connections);
    let otlp = match config.telemetry.otlp_endpoint.as_deref() {
        Some(endpoint) => {
            let guard = crate::telemetry::export_otlp(endpoint).await?;
            tracing::info!(endpoint, "exporting traces over OTLP/HTTP");
            Some(guard)
        }
        None => None,
    };
    let app = App::build(&config, &data_dir, token).await?;
    let listener = bind(addr).await?;
    let local = listener.local_addr()?;
    tracing::info!(%local, data_dir = %data_dir.display(), "knife is serving");
    println!(
        "knife listening on http://{local} (data: {})",
        data_dir.display()
    );
    println!("web page: http://{local}/");
    app.serve(listener, shutdown_signal()).await?;
    tracing::info!("knife stopped");
    if let Some(otlp) = otlp {
        otlp.shutdown().await;
    }
    Ok(ExitCode::SUCCESS)
}

/// Raises the soft `RLIMIT_NOFILE` to the hard limit and logs both (SEC-04): each
/// connection holds a descriptor, and the default soft limit (often 1024) would be
/// hit long before `[server] max_connections`. Warns when the cap does not fit.
fn raise_open_file_limit(max_connections: usize) {
    #[cfg(target_os = "linux")]
    {
        use nix::sys::resource::{Resource, getrlimit, setrlimit};
        let (soft, hard) = match getrlimit(Resource::RLIMIT_NOFILE) {
            Ok(limits) => limits,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read RLIMIT_NOFILE");
                return;
            }
        };
        let raised = if soft < hard {
            match setrlimit(Resource::RLIMIT_NOFILE, hard, hard) {
                Ok(()) => hard,
                Err(e) => {
                    tracing::warn!(error = %e, soft, hard, "cannot raise the soft RLIMIT_NOFILE");
                    soft
                }
            }
        } else {
            soft
        };
        tracing::info!(
            soft_before = soft,
            soft = raised,
            hard,
            max_connections,
            "open file limit (RLIMIT_NOFILE)"
        );
        // Leave room for the database, child processes' pipes and logs.
        if (max_connections as u64).saturating_add(256) > raised {
            tracing::warn!(
                max_connections,
                open_file_limit = raised,
                "[server] max_connections does not fit under the open file limit: accepts \
                 will fail before the cap; lower max_connections or raise the hard limit \
                 (ulimit -Hn, LimitNOFILE= in a systemd unit)"
            );
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = max_connections;
}

/// Resolves on the first SIGINT/SIGTERM; a second one exits the process at once.
async fn shutdown_signal() {
    wait_signal().await;
    tracing::info!("shutting down (send the signal again to exit at once)");
    tokio::spawn(async {
        wait_signal().await;
        std::process::exit(130);
    });
}

async fn wait_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
