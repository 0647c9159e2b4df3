//! `knife usage [--project P] [--thread T] [--since D]`: tokens and cost of runs
//! per instance and model, from the running server (`GET /api/usage`, TURN-06).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::bail;
use clap::Args;
use knife_protocol::*;

use crate::client::find_server;
use crate::config::Config;

/// Flags of `knife usage`.
#[derive(Args)]
pub struct UsageArgs {
    /// Only this project: its id, or its folder.
    #[arg(long)]
    pub project: Option<String>,
    /// Only this thread (its id or a unique prefix of one).
    #[arg(long)]
    pub thread: Option<String>,
    /// Only runs since this date (`YYYY-MM-DD`, UTC) or RFC 3339 time.
    #[arg(long)]
    pub since: Option<String>,
    /// Print the report as JSON (costs in integer micro-dollars).
    #[arg(long)]
    pub json: bool,
    /// Server URL (default: the server owning the data directory, then the configured
    /// listen address).
    #[arg(long, env = "KNIFE_SERVER")]
    pub server: Option<String>,
    /// Data directory whose server to ask.
    #[arg(long, env = "KNIFE_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
}

/// Prints the report. Errors: no server (the prices live in its config), an
/// unknown project folder, the API's errors (bad `--since`, unknown thread).
pub async fn usage(config_path: Option<&Path>, args: UsageArgs) -> anyhow::Result<ExitCode> {
    let config = Config::load(config_path)?;
    let Some(api) = find_server(&config, args.server.as_deref(), args.data_dir.as_deref()).await?
    else {
        bail!(
            "no knife server is running; `knife usage` asks it (its knife.toml has the prices): start `knife serve` first"
        );
    };
    let mut query = Vec::new();
    if let Some(project) = &args.project {
        let id = if project.starts_with("project_") {
            project.clone()
        } else {
            let root = std::fs::canonicalize(project).map_err(|e| {
                anyhow::anyhow!("--project {project} is neither a project id nor a folder ({e})")
            })?;
            let projects: Vec<Project> = api.get("/api/projects").await?;
            match projects.iter().find(|p| Path::new(&p.root) == root) {
                Some(p) => p.id.to_string(),
                None => bail!(
                    "no project has the folder {}; `knife run --project {project} …` adds it",
                    root.display()
                ),
            }
        };
        query.push(format!("project_id={id}"));
    }
    if let Some(thread) = &args.thread {
        let thread = crate::thread_ids::resolve(&api, thread).await?;
        query.push(format!("thread_id={thread}"));
    }
    if let Some(since) = &args.since {
        query.push(format!("since={}", since.replace('+', "%2B")));
    }
    let path = if query.is_empty() {
        "/api/usage".to_owned()
    } else {
        format!("/api/usage?{}", query.join("&"))
    };
    let report: UsageReport = api.get(&path).await?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", render(&report));
    }
    Ok(ExitCode::SUCCESS)
}

/// `micro` µ$ as dollars with six decimals (exact): `$0.004210`.
pub fn dollars(micro: u64) -> String {
    format!("${}.{:06}", micro / 1_000_000, micro % 1_000_000)
}

/// The report as a table: one line per instance and model, then the total.
pub fn render(report: &UsageReport) -> String {
    let mut out = format!(
        "{:<16} {:<24} {:>5} {:>12} {:>12} {:>12} {:>12}\n",
        "instance", "model", "runs", "input", "cached", "output", "cost"
    );
    let line = |instance: &str, model: &str, t: &UsageTotals| {
        let cost = if t.unpriced_runs > 0 && t.cost_microdollars == 0 {
            "no price".to_owned()
        } else {
            dollars(t.cost_microdollars)
        };
        format!(
            "{instance:<16} {model:<24} {:>5} {:>12} {:>12} {:>12} {cost:>12}\n",
            t.runs, t.input_tokens, t.cached_input_tokens, t.output_tokens
        )
    };
    for m in &report.by_model {
        out.push_str(&line(
            m.provider_instance_id.as_str(),
            m.model.as_deref().unwrap_or("(default)"),
            &m.totals,
        ));
    }
    out.push_str(&line("total", "", &report.total));
    if report.total.unpriced_runs > 0 {
        out.push_str(&format!(
            "{} run(s) used a model without a price: add [prices.\"<model>\"] input = …, output = … \
             (USD per million tokens) to knife.toml\n",
            report.total.unpriced_runs
        ));
    }
    out
}
