//! `knife threads list | show ID`: reads threads from a running server, or
//! straight from the data directory's database when no server answers.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, Subcommand};
use knife_protocol::*;
use knife_store::Store;

use crate::app::DB_FILE;
use crate::client::{ApiClient, find_server};
use crate::config::Config;

/// `knife threads …`.
#[derive(Subcommand)]
pub enum ThreadsCommand {
    /// Threads, newest activity first (archived ones only with `--archived`).
    List {
        #[command(flatten)]
        source: Source,
        /// Also list archived threads.
        #[arg(long)]
        archived: bool,
    },
    /// One thread's state and transcript.
    Show {
        /// The thread: its id or a unique prefix of one.
        id: String,
        #[command(flatten)]
        source: Source,
        /// Print the projection as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Rename a thread (at most 200 characters).
    Rename {
        /// The thread: its id or a unique prefix of one.
        id: String,
        title: String,
        #[command(flatten)]
        target: crate::thread_lifecycle::Target,
    },
    /// Archive a thread: hidden from `threads list`, its provider session released,
    /// nothing deleted. Refused while a run is active.
    Archive {
        /// The thread: its id or a unique prefix of one.
        id: String,
        #[command(flatten)]
        target: crate::thread_lifecycle::Target,
    },
    /// Bring an archived thread back into the lists.
    Unarchive {
        /// The thread: its id or a unique prefix of one.
        id: String,
        #[command(flatten)]
        target: crate::thread_lifecycle::Target,
    },
    /// Delete a thread: releases its session, revokes its MCP credential, records a
    /// tombstone and drops it from every list (`knife db purge` removes its events).
    /// Refused while a run is active unless `--force`, which stops the run first.
    Delete {
        /// The thread: its id or a unique prefix of one.
        id: String,
        /// Stop an active run first (and drop a worktree holding work).
        #[arg(long)]
        force: bool,
        #[command(flatten)]
        target: crate::thread_lifecycle::Target,
    },
    /// Fork a thread after one of its runs: a new thread whose history is the
    /// source's up to that run (prints the new thread's id).
    Fork {
        /// The thread: its id or a unique prefix of one.
        id: String,
        /// Last run (ordinal) the fork keeps; default: the last finished run.
        #[arg(long = "after")]
        after: Option<u32>,
        /// Title of the new thread (default: "<source title> (fork)").
        #[arg(long)]
        title: Option<String>,
        #[command(flatten)]
        target: crate::thread_lifecycle::Target,
    },
    /// Stop the run in progress of a thread (started from any terminal or client),
    /// through the running server; the run ends `interrupted`.
    Interrupt {
        /// The thread: its id or a unique prefix of one.
        id: String,
        /// Server to use (default: the one holding the data directory, else the
        /// configured listen address).
        #[arg(long, env = "KNIFE_SERVER")]
        server: Option<String>,
        /// Data directory whose server to use.
        #[arg(long, env = "KNIFE_DATA_DIR")]
        data_dir: Option<PathBuf>,
    },
    /// A thread's message queue (messages sent while a run was active): list it,
    /// `--cancel ID`, `--clear`, or `--resume` it after an interrupt paused it.
    Queue(crate::queue::QueueArgs),
    /// Raise a thread's budgets after a run ended `budget_exceeded` (`--tokens N`,
    /// `--cost-usd X`), and `--continue` its work in a new run.
    Budget(crate::queue::BudgetArgs),
    /// Merge the work of a thread's worktree (branch `knife/<short id>`) into the
    /// project's current branch; refused with the conflicting files on conflict
    /// (nothing changed). Needs the running server.
    Merge {
        /// The thread: its id or a unique prefix of one.
        id: String,
        #[arg(long, env = "KNIFE_SERVER")]
        server: Option<String>,
        #[arg(long, env = "KNIFE_DATA_DIR")]
        data_dir: Option<PathBuf>,
    },
}

/// `knife db …`.
#[derive(Subcommand)]
pub enum DbCommand {
    /// Drop and recompute every projection table from the `events` table alone.
    /// Stop the server first: it runs against the database file directly.
    Rebuild {
        /// Data directory (default $XDG_DATA_HOME/knife).
        #[arg(long, env = "KNIFE_DATA_DIR")]
        data_dir: Option<PathBuf>,
    },
    /// Remove the events of deleted threads for good (then rebuild the projections
    /// and vacuum the file). Stop the server first.
    Purge {
        /// Data directory (default $XDG_DATA_HOME/knife).
        #[arg(long, env = "KNIFE_DATA_DIR")]
        data_dir: Option<PathBuf>,
    },
    /// Copy this (stopped) SQLite installation into a PostgreSQL database: the events
    /// with their sequences, then the projections, compared with the source's (SCALE-09).
    /// Refused while a server uses the data directory, and into a non-empty database
    /// unless `--continue` finishes an interrupted copy.
    Copy {
        /// Data directory (default $XDG_DATA_HOME/knife).
        #[arg(long, env = "KNIFE_DATA_DIR")]
        data_dir: Option<PathBuf>,
        /// The target: postgres://user:password@host:port/database.
        #[arg(long)]
        to: String,
        /// Continue an earlier copy into a target that holds this installation's first
        /// events.
        #[arg(long = "continue")]
        resume: bool,
    },
    /// Space used: the event log (database files) and the checkpoint repositories
    /// (reads file sizes: works next to a running server).
    Stats {
        /// Data directory (default $XDG_DATA_HOME/knife).
        #[arg(long, env = "KNIFE_DATA_DIR")]
        data_dir: Option<PathBuf>,
    },
}

pub async fn db(config_path: Option<&Path>, cmd: DbCommand) -> anyhow::Result<ExitCode> {
    let config = Config::load(config_path)?;
    let (data_dir, what) = match &cmd {
        DbCommand::Rebuild { data_dir } => (data_dir, "rebuild"),
        DbCommand::Purge { data_dir } => (data_dir, "purge"),
        DbCommand::Copy { data_dir, .. } => (data_dir, "copy"),
        DbCommand::Stats { data_dir } => {
            crate::changes::db_stats(&config.data_dir(data_dir.as_deref())?).await?;
            return Ok(ExitCode::SUCCESS);
        }
    };
    if let (DbCommand::Rebuild { .. } | DbCommand::Purge { .. }, Some(url)) =
        (&cmd, postgres_url(&config)?)
    {
        return db_on_postgres(&url, &cmd, what).await;
    }
    let db = config.data_dir(data_dir.as_deref())?.join(DB_FILE);
    if !db.is_file() {
        anyhow::bail!("there is no database at {}; pass --data-dir", db.display());
    }
    // Rebuilding or purging under a running server would race its writes.
    let dir = db.parent().unwrap_or(Path::new("."));
    if let Some(owner) = crate::lock::current_owner(dir).await {
        let who = match &owner.url {
            Some(url) => format!("the knife server at {url} (pid {})", owner.pid),
            None => format!("knife process {}", owner.pid),
        };
        anyhow::bail!(
            "{who} is using {}; stop it first (it owns the data directory), then run `knife db {what}` again",
            dir.display()
        );
    }
    let _lock = crate::lock::DataDirLock::acquire(dir).await?;
    if let DbCommand::Copy { to, resume, .. } = &cmd {
        return crate::db_copy::copy(&db, to, *resume).await;
    }
    let store = knife_store_sqlite::open(&db).await?;
    maintain(&store, &db.display().to_string(), &cmd).await
}

/// `[store] url` when it names PostgreSQL (SCALE-01): `knife db rebuild|purge` and
/// `knife threads` then work on that database instead of the data directory's file.
fn postgres_url(config: &Config) -> anyhow::Result<Option<String>> {
    Ok(
        match crate::store_url::StoreLocation::parse(config.store.url.as_deref())? {
            crate::store_url::StoreLocation::Postgres(url) => Some(url),
            _ => None,
        },
    )
}

/// `knife db rebuild|purge` on PostgreSQL: refused while any node is live on it (its
/// membership heartbeat, SCALE-05), since the nodes' writes would race it.
async fn db_on_postgres(url: &str, cmd: &DbCommand, what: &str) -> anyhow::Result<ExitCode> {
    let shown = knife_store_postgres::redact(url);
    let store = knife_store_postgres::open(url).await?;
    let live = store.live_nodes().await?;
    if !live.is_empty() {
        let nodes: Vec<String> = live
            .iter()
            .map(|m| format!("{} at {}", m.node, m.location))
            .collect();
        anyhow::bail!(
            "knife nodes are running on {shown} ({}); stop them first, then run `knife db {what}` again",
            nodes.join(", ")
        );
    }
    maintain(&store, &shown, cmd).await
}

/// Runs `knife db rebuild|purge` on `store` (described as `shown`).
async fn maintain(store: &Store, shown: &str, cmd: &DbCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        DbCommand::Rebuild { .. } => {
            let stats = store.rebuild().await?;
            println!(
                "rebuilt the projections of {shown} from {} events in {:.1} ms",
                stats.events,
                stats.elapsed.as_secs_f64() * 1000.0
            );
        }
        DbCommand::Purge { .. } => {
            let stats = store.purge_deleted_threads().await?;
            println!(
                "purged {} deleted thread(s): removed {} events, {} kept, in {:.1} ms",
                stats.threads.len(),
                stats.events,
                stats.events_kept,
                stats.elapsed.as_secs_f64() * 1000.0
            );
            for thread in &stats.threads {
                println!("  {thread}");
            }
        }
        // Answered before.
        DbCommand::Stats { .. } | DbCommand::Copy { .. } => {}
    }
    Ok(ExitCode::SUCCESS)
}

/// Where to read from.
#[derive(Args)]
pub struct Source {
    /// Server URL (default: the configured listen address).
    #[arg(long, env = "KNIFE_SERVER")]
    server: Option<String>,
    /// Data directory to read when no server answers.
    #[arg(long, env = "KNIFE_DATA_DIR")]
    data_dir: Option<PathBuf>,
}

enum Reader {
    Api(ApiClient),
    Db(Store),
}

impl Reader {
    /// A running server when there is one (see [`find_server`]), else the data
    /// directory's database, read directly.
    async fn open(config: &Config, source: &Source) -> anyhow::Result<Reader> {
        if let Some(client) =
            find_server(config, source.server.as_deref(), source.data_dir.as_deref()).await?
        {
            return Ok(Reader::Api(client));
        }
        if let Some(url) = postgres_url(config)? {
            return Ok(Reader::Db(knife_store_postgres::open(&url).await?));
        }
        let dir = config.data_dir(source.data_dir.as_deref())?;
        let db = dir.join(DB_FILE);
        if !db.is_file() {
            anyhow::bail!(
                "no knife server is running and there is no database at {}; run `knife serve`, or pass --server or --data-dir",
                db.display()
            );
        }
        Ok(Reader::Db(knife_store_sqlite::open(db).await?))
    }

    async fn threads(&self, archived: bool) -> anyhow::Result<Vec<Thread>> {
        Ok(match self {
            Reader::Api(c) if archived => c.get("/api/threads?archived=true").await?,
            Reader::Api(c) => c.get("/api/threads").await?,
            Reader::Db(s) => {
                let mut threads = s.list_threads(None).await?;
                threads.retain(|t| archived || !t.is_archived());
                threads
            }
        })
    }

    /// True when a run of `thread` waits for an approval. Only a server knows:
    /// without one, no run is live to wait.
    async fn waits_for_approval(&self, thread: &Thread) -> bool {
        let Reader::Api(c) = self else {
            return false;
        };
        if thread.status != ThreadStatus::Running {
            return false;
        }
        c.get::<Vec<RuntimeRequest>>(&format!("/api/threads/{}/requests", thread.id))
            .await
            .is_ok_and(|rs| rs.iter().any(|r| r.status == RuntimeRequestStatus::Pending))
    }

    /// The thread's usage per run (TURN-06): the server's report, or priced here with
    /// this knife.toml's table when reading the data directory. Empty when unknown.
    async fn usage(&self, p: &ThreadProjection, config: &Config) -> UsageReport {
        if let Reader::Api(c) = self {
            return c
                .get(&format!("/api/usage?thread_id={}", p.thread.id))
                .await
                .unwrap_or_default();
        }
        let Reader::Db(store) = self else {
            return UsageReport::default();
        };
        let prices = crate::config::prices::price_table(&config.prices);
        let filter = knife_store::UsageFilter {
            thread: Some(p.thread.id.clone()),
            by_run: true,
            ..Default::default()
        };
        let default_model = |instance: &ProviderInstanceId| {
            config
                .providers
                .get(instance.as_str())
                .map(|c| c.model.clone())
                .filter(|m| !m.is_empty())
        };
        let ordinal_of = |run: &RunId| p.runs.iter().find(|r| &r.id == run).map(|r| r.ordinal);
        knife_runtime::usage::report(store, &filter, &prices, default_model, ordinal_of)
            .await
            .unwrap_or_default()
    }

    /// The thread `given` names: its id or a unique prefix of one (UX-04).
    async fn resolve(&self, given: &str) -> anyhow::Result<ThreadId> {
        Ok(crate::thread_ids::pick(&self.threads(true).await?, given)?)
    }

    async fn thread(&self, id: &ThreadId) -> anyhow::Result<ThreadProjection> {
        match self {
            Reader::Api(c) => c.get(&format!("/api/threads/{id}")).await,
            Reader::Db(s) => s
                .thread_projection(id)
                .await?
                .ok_or_else(|| anyhow::anyhow!("thread {id} does not exist")),
        }
    }
}

pub async fn threads(config_path: Option<&Path>, cmd: ThreadsCommand) -> anyhow::Result<ExitCode> {
    let config = Config::load(config_path)?;
    match cmd {
        ThreadsCommand::Rename { id, title, target } => {
            use crate::thread_lifecycle::{Change, apply};
            return apply(config_path, &id, Change::Rename(title), &target).await;
        }
        ThreadsCommand::Archive { id, target } => {
            use crate::thread_lifecycle::{Change, apply};
            return apply(config_path, &id, Change::Archive(true), &target).await;
        }
        ThreadsCommand::Unarchive { id, target } => {
            use crate::thread_lifecycle::{Change, apply};
            return apply(config_path, &id, Change::Archive(false), &target).await;
        }
        ThreadsCommand::Delete { id, force, target } => {
            use crate::thread_lifecycle::{Change, apply};
            return apply(config_path, &id, Change::Delete { force }, &target).await;
        }
        ThreadsCommand::Fork {
            id,
            after,
            title,
            target,
        } => {
            use crate::thread_lifecycle::{Change, apply};
            return apply(config_path, &id, Change::Fork { after, title }, &target).await;
        }
        ThreadsCommand::List { source, archived } => {
            let reader = Reader::open(&config, &source).await?;
            let threads = reader.threads(archived).await?;
            if threads.is_empty() {
                println!("no threads yet; start one with `knife run \"…\"`");
            }
            let mut rows = Vec::new();
            let mut waiting = Vec::new();
            for t in threads {
                let status = if reader.waits_for_approval(&t).await {
                    waiting.push(t.id.clone());
                    "waiting for approval".to_owned()
                } else {
                    format!("{:?}", t.status).to_lowercase()
                };
                rows.push((t, status));
            }
            let id_w = rows
                .iter()
                .map(|(t, _)| t.id.as_str().len())
                .max()
                .unwrap_or(6);
            let status_w = rows.iter().map(|(_, s)| s.len()).max().unwrap_or(6).max(6);
            if !rows.is_empty() {
                println!(
                    "{:<id_w$}  {:<status_w$}  {:>4}  {:<28}  TITLE",
                    "THREAD", "STATUS", "RUNS", "UPDATED"
                );
            }
            let now = chrono::Utc::now();
            for (t, status) in rows {
                // A claim on a thread that is not running: work a restart resumes (EXEC-04).
                let claim = match (t.is_claimed(), t.is_archived()) {
                    (true, _) if t.status != ThreadStatus::Running => {
                        " (unfinished: resumes when the server restarts)"
                    }
                    (true, _) => "",
                    (false, true) => " (archived)",
                    (false, false) => "",
                };
                // A thread in its own worktree shows its branch (CHG-07).
                let branch = t
                    .worktree
                    .as_ref()
                    .map(|w| format!(" [{}]", w.branch))
                    .unwrap_or_default();
                println!(
                    "{:<id_w$}  {status:<status_w$}  {:>4}  {:<28}  {}{branch}{claim}",
                    t.id.as_str(),
                    t.run_count,
                    crate::human::when(t.updated_at, now),
                    t.title
                );
            }
            for id in waiting {
                eprintln!("thread {id} waits for an approval: see it with `knife approve {id}`");
            }
        }
        ThreadsCommand::Interrupt {
            id,
            server,
            data_dir,
        } => {
            let Some(client) = find_server(&config, server.as_deref(), data_dir.as_deref()).await?
            else {
                anyhow::bail!(
                    "no knife server is running, so no run is in progress (a run interrupted by \
                     a stopped server resumes when `knife serve` starts; interrupt it then)"
                );
            };
            let thread = crate::thread_ids::resolve(&client, &id).await?;
            let stopped: InterruptResponse = client
                .post(
                    &format!("/api/threads/{thread}/interrupt"),
                    &serde_json::json!({}),
                )
                .await?;
            match stopped.run_id {
                Some(run) => match crate::thread_ids::run_ordinal(&run) {
                    Some(n) => println!("asked run {n} of thread {thread} to stop"),
                    None => println!("asked run {run} of thread {thread} to stop"),
                },
                None => println!("thread {thread} has no run in progress; nothing to interrupt"),
            }
        }
        ThreadsCommand::Queue(args) => return crate::queue::queue(config_path, args).await,
        ThreadsCommand::Budget(args) => return crate::queue::budget(config_path, args).await,
        ThreadsCommand::Merge {
            id,
            server,
            data_dir,
        } => {
            let Some(client) = find_server(&config, server.as_deref(), data_dir.as_deref()).await?
            else {
                anyhow::bail!(
                    "no knife server is running; start it with `knife serve`, then merge"
                );
            };
            let id = crate::thread_ids::resolve(&client, &id).await?;
            let merged: MergeResponse = client
                .post(&format!("/api/threads/{id}/merge"), &serde_json::json!({}))
                .await?;
            match (&merged.into, &merged.commit) {
                (Some(into), Some(commit)) => {
                    println!("merged {} into {into} ({commit})", merged.branch)
                }
                _ => println!("{} has nothing new to merge", merged.branch),
            }
        }
        ThreadsCommand::Show { id, source, json } => {
            let reader = Reader::open(&config, &source).await?;
            let id = reader.resolve(&id).await?;
            let p = reader.thread(&id).await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&p)?);
            } else {
                let usage = reader.usage(&p, &config).await;
                print_projection(&p, &usage);
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn print_projection(p: &ThreadProjection, usage: &UsageReport) {
    let t = &p.thread;
    println!("thread   {}", t.id);
    println!("title    {}", t.title);
    println!("status   {}", format!("{:?}", t.status).to_lowercase());
    match &t.agent_status {
        Some(AgentStatus::Retry {
            attempt,
            message,
            next,
            ..
        }) => println!("agent    retrying ({message}), attempt {attempt}, next at {next}"),
        Some(AgentStatus::Busy) => println!("agent    busy"),
        Some(AgentStatus::Idle) | None => {}
    }
    println!(
        "provider {}{}",
        t.provider_instance_id,
        t.model
            .as_deref()
            .map(|m| format!(" ({m})"))
            .unwrap_or_default()
    );
    println!("runs     {}", t.run_count);
    // The execution claim (SPEC.md EXEC-04): held while work runs or waits for a restart.
    match t.claimed_at {
        Some(at) => println!(
            "claim    held since {} · resume attempts {}",
            at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            t.resume_attempts
        ),
        None => println!("claim    none"),
    }
    // SCALE-06: the node running the claimed work (or the last one that did).
    if let Some(lease) = &p.lease {
        let until = lease
            .expires_at
            .to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
        match t.claimed_at {
            Some(_) => println!(
                "node     {} (lease epoch {}, until {until})",
                lease.node, lease.epoch
            ),
            None => println!("node     last run on {}", lease.node),
        }
    }
    if let Some(parent) = &t.parent_thread_id {
        println!("parent   {parent}");
    }
    if let Some(at) = t.archived_at {
        println!(
            "archived {}",
            at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
        );
    }
    if let Some(w) = &t.worktree {
        println!("worktree {} at {}", w.branch, w.path);
    }
    if let Some(fork) = &t.forked_from {
        println!(
            "forked   from {} after run {}",
            fork.thread_id, fork.after_run
        );
    }
    if let Some(e) = &t.last_error {
        println!("error    {} ({})", e.message, e.error_type);
    }
    // TURN-06: the thread's tokens and cost (priced with the server's table).
    let total = &usage.total;
    if total.total_tokens > 0 {
        let unpriced = match total.unpriced_runs {
            0 => String::new(),
            n => format!(", {n} run(s) without a price"),
        };
        println!(
            "usage    {} tokens · {}{unpriced}",
            total.total_tokens,
            format_usd(total.cost_microdollars)
        );
    }
    // The MCP credential state (`ThreadProjection::mcp`); only the server knows it.
    match &p.mcp {
        Some(m) if m.active => {
            let caps: Vec<&str> = m.capabilities.iter().map(|c| c.as_str()).collect();
            println!("mcp      active ({})", caps.join(", "));
        }
        Some(_) => println!("mcp      none"),
        None => {}
    }
    for run in &p.runs {
        let status = serde_json::to_value(run.status)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default();
        let cost = usage
            .by_run
            .iter()
            .find(|r| r.run_id == run.id && r.totals.unpriced_runs == 0)
            .map(|r| format!(", {}", format_usd(r.totals.cost_microdollars)))
            .unwrap_or_default();
        let tokens = run
            .usage
            .as_ref()
            .map(|u| format!(", {} tokens{cost}", u.total_tokens))
            .unwrap_or_default();
        // The run's model when it named one (TURN-10): the thread's or the message's.
        let model = run
            .model
            .as_deref()
            .map(|m| format!(" · {m}"))
            .unwrap_or_default();
        println!("\n── run {} · {status}{model}{tokens}", run.ordinal);
        for item in p
            .turn_items
            .iter()
            .filter(|i| i.run_id.as_ref() == Some(&run.id))
        {
            print_item(item);
        }
    }
}

fn print_item(item: &TurnItem) {
    match &item.kind {
        TurnItemKind::UserMessage {
            text,
            origin,
            description,
        } => match origin {
            MessageOrigin::User => println!("you: {text}"),
            MessageOrigin::System => {
                println!(
                    "({})",
                    description
                        .as_deref()
                        .unwrap_or("system message")
                        .to_lowercase()
                )
            }
        },
        TurnItemKind::AssistantMessage { text, .. } => println!("assistant: {text}"),
        TurnItemKind::Reasoning { text, .. } => println!("reasoning: {} chars", text.len()),
        TurnItemKind::ToolCall {
            tool,
            input,
            output,
            error,
            ..
        } => {
            let result = match (output, error) {
                (_, Some(e)) => format!("error: {e}"),
                (Some(o), None) => crate::render::summarize_output(tool, o),
                _ => format!("{:?}", item.status).to_lowercase(),
            };
            println!("tool {tool} {input} → {result}");
        }
        TurnItemKind::Error { error } => {
            println!("error: {} ({})", error.message, error.error_type)
        }
        TurnItemKind::Compaction { summary } => {
            println!("compaction: history summarised ({} chars)", summary.len())
        }
        TurnItemKind::Approval {
            tool,
            subject,
            decision,
            message,
            ..
        } => {
            let answer = match decision {
                Some(decision) => decision.described().to_owned(),
                None => format!("{:?}", item.status).to_lowercase(),
            };
            let note = message
                .as_deref()
                .map(|m| format!(" ({m})"))
                .unwrap_or_default();
            println!("approval {tool} {subject} → {answer}{note}");
            if let (TurnItemStatus::Waiting, TurnItemKind::Approval { request_id, .. }) =
                (item.status, &item.kind)
            {
                println!(
                    "  answer: {}",
                    crate::approve::approve_hint(&item.thread_id, request_id)
                );
            }
        }
    }
}
