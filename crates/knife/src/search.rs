//! `knife search WORDS [--project P] [--limit N] [--json]`: full-text search over the
//! threads of the running server (`GET /api/search`, SPEC.md TURN-08).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::bail;
use clap::Args;
use knife_protocol::*;

use crate::client::find_server;
use crate::config::Config;

/// Flags of `knife search`.
#[derive(Args)]
pub struct SearchArgs {
    /// The words to find (every one must match).
    #[arg(required = true)]
    pub words: Vec<String>,
    /// Only this project (its id).
    #[arg(long)]
    pub project: Option<String>,
    /// Most hits (default 20, at most 200).
    #[arg(long, default_value_t = SEARCH_DEFAULT_LIMIT)]
    pub limit: usize,
    /// Print the answer as JSON.
    #[arg(long)]
    pub json: bool,
    #[arg(long, env = "KNIFE_SERVER")]
    pub server: Option<String>,
    #[arg(long, env = "KNIFE_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
}

pub async fn search(config_path: Option<&Path>, args: SearchArgs) -> anyhow::Result<ExitCode> {
    let config = Config::load(config_path)?;
    let Some(api) = find_server(&config, args.server.as_deref(), args.data_dir.as_deref()).await?
    else {
        bail!("no knife server is running; `knife search` asks it: start `knife serve` first");
    };
    let mut url = reqwest::Url::parse("http://knife/api/search")?;
    url.query_pairs_mut()
        .append_pair("q", &args.words.join(" "))
        .append_pair("limit", &args.limit.to_string());
    if let Some(p) = &args.project {
        url.query_pairs_mut().append_pair("project_id", p);
    }
    let path = format!("{}?{}", url.path(), url.query().unwrap_or_default());
    let found: SearchResponse = api.get(&path).await?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&found)?);
        return Ok(ExitCode::SUCCESS);
    }
    if found.hits.is_empty() {
        println!("nothing found for {:?}", found.query);
    }
    for hit in &found.hits {
        let what = match hit.kind {
            SearchKind::Title => "title".to_owned(),
            kind => format!(
                "{} · {}",
                kind.as_str().replace('_', " "),
                hit.run_id
                    .as_ref()
                    .map(knife_protocol::RunId::as_str)
                    .unwrap_or("")
            ),
        };
        println!("{} · {} · {what}", hit.thread_id, hit.thread_title);
        println!("    {}", hit.snippet.replace('\n', " "));
    }
    Ok(ExitCode::SUCCESS)
}
