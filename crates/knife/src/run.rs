//! `knife run`: one prompt in a project. Uses the server at the configured listen
//! address when one answers, else starts one in-process on a loopback port.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use knife_protocol::*;

use crate::app::InProcessServer;
use crate::client::ApiClient;
use crate::config::Config;
use crate::render::follow_run;

/// Flags of `knife run`.
#[derive(Args)]
pub struct RunArgs {
    /// Project folder (default: the current directory).
    #[arg(long)]
    pub project: Option<PathBuf>,
    /// Model override (default: the provider instance's model).
    #[arg(long)]
    pub model: Option<String>,
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
    let config = Config::load(config_path)?;
    let token = std::env::var("KNIFE_API_TOKEN")
        .ok()
        .filter(|t| !t.is_empty());
    let base = match &args.server {
        Some(s) => s.clone(),
        None => format!("http://{}", config.listen(None)?),
    };
    let remote = ApiClient::new(base, token.clone())?;
    if remote.healthy(Duration::from_millis(500)).await {
        return prompt_once(&remote, &args).await;
    }
    if args.server.is_some() {
        anyhow::bail!(
            "no knife server answers at {}; start it with `knife serve`",
            remote.base()
        );
    }
    let data_dir = config.data_dir(args.data_dir.as_deref())?;
    let server = InProcessServer::start(&config, &data_dir).await?;
    let code = prompt_once(&server.client()?, &args).await;
    server.stop().await?;
    code
}

/// Finds or creates the project, creates a thread, posts the prompt and renders the run.
pub async fn prompt_once(client: &ApiClient, args: &RunArgs) -> anyhow::Result<ExitCode> {
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
    let projects: Vec<Project> = client.get("/api/projects").await?;
    let project = match projects.into_iter().find(|p| Path::new(&p.root) == root) {
        Some(p) => p,
        None => {
            let req = CreateProjectRequest {
                root: root.display().to_string(),
                name: None,
            };
            client.post("/api/projects", &req).await?
        }
    };
    let title: String = args.prompt.chars().take(60).collect();
    let req = CreateThreadRequest {
        project_id: project.id.clone(),
        title: Some(title),
        provider_instance_id: args.provider.as_deref().map(ProviderInstanceId::from),
        model: args.model.clone(),
    };
    let thread: Thread = client.post("/api/threads", &req).await?;
    let posted: PostMessageResponse = client
        .post(
            &format!("/api/threads/{}/messages", thread.id),
            &PostMessageRequest {
                text: args.prompt.clone(),
            },
        )
        .await?;
    let run = follow_run(client, &thread.id, &posted.run_id, 0).await?;
    eprintln!(
        "thread {} · run {} · {}",
        thread.id,
        run.ordinal,
        format!("{:?}", run.status).to_lowercase()
    );
    match run.status {
        RunStatus::Completed => Ok(ExitCode::SUCCESS),
        _ => {
            if let Some(e) = &run.error {
                eprintln!("error: {} ({})", e.message, e.error_type);
            }
            Ok(ExitCode::FAILURE)
        }
    }
}
