//! `knife diff THREAD [RUN]` and `knife revert THREAD RUN` (SPEC.md CHG-03/04): a
//! run's changes, coloured on a terminal, and reverting / undoing through the server.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;
use knife_protocol::*;

use crate::app::DB_FILE;
use crate::client::find_server;
use crate::config::Config;

/// `knife diff`.
#[derive(Args)]
pub struct DiffArgs {
    /// The thread: its id or a unique prefix of one.
    thread: String,
    /// The run's ordinal (1, 2, …); default: the thread's last run.
    run: Option<u32>,
    /// Only the file list with +/- counts.
    #[arg(long)]
    stat: bool,
    /// Print the diff as JSON (`RunDiff`).
    #[arg(long)]
    json: bool,
    /// Server to use (default: the one holding the data directory); without one the
    /// data directory is read directly.
    #[arg(long, env = "KNIFE_SERVER")]
    server: Option<String>,
    #[arg(long, env = "KNIFE_DATA_DIR")]
    data_dir: Option<PathBuf>,
}

/// `knife revert`.
#[derive(Args)]
pub struct RevertArgs {
    /// The thread: its id or a unique prefix of one.
    thread: String,
    /// The first run to revert: its files and those of every later run go back to
    /// their state before it.
    run: Option<u32>,
    /// Overwrite files someone changed since the thread's last checkpoint.
    #[arg(long)]
    force: bool,
    /// Undo revert REVERT_ID instead (restores what it replaced).
    #[arg(long, value_name = "REVERT_ID", conflicts_with = "run")]
    undo: Option<String>,
    #[arg(long, env = "KNIFE_SERVER")]
    server: Option<String>,
    #[arg(long, env = "KNIFE_DATA_DIR")]
    data_dir: Option<PathBuf>,
}

pub async fn diff(config_path: Option<&Path>, args: DiffArgs) -> anyhow::Result<ExitCode> {
    let config = Config::load(config_path)?;
    let client = find_server(&config, args.server.as_deref(), args.data_dir.as_deref()).await?;
    let diff: RunDiff = match client {
        Some(client) => {
            let thread = crate::thread_ids::resolve(&client, &args.thread).await?;
            let ordinal = match args.run {
                Some(n) => n,
                None => {
                    let t: ThreadProjection = client.get(&format!("/api/threads/{thread}")).await?;
                    last_run(&t.thread)?
                }
            };
            client
                .get(&format!("/api/threads/{thread}/runs/{ordinal}/diff"))
                .await?
        }
        None => offline_diff(&config, args.data_dir.as_deref(), &args.thread, args.run).await?,
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&diff)?);
        return Ok(ExitCode::SUCCESS);
    }
    let colour = std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    print!("{}", render(&diff, args.stat, colour));
    Ok(ExitCode::SUCCESS)
}

pub async fn revert(config_path: Option<&Path>, args: RevertArgs) -> anyhow::Result<ExitCode> {
    let config = Config::load(config_path)?;
    let Some(client) =
        find_server(&config, args.server.as_deref(), args.data_dir.as_deref()).await?
    else {
        anyhow::bail!(
            "no knife server is running; start it with `knife serve` (a revert runs in the server, which owns the thread's files while it works)"
        );
    };
    let thread = crate::thread_ids::resolve(&client, &args.thread).await?;
    let body = RevertRequest { force: args.force };
    let revert: Revert = match (&args.undo, args.run) {
        (Some(id), _) => {
            client
                .post(&format!("/api/threads/{thread}/reverts/{id}/undo"), &body)
                .await?
        }
        (None, Some(run)) => {
            client
                .post(&format!("/api/threads/{thread}/runs/{run}/revert"), &body)
                .await?
        }
        (None, None) => {
            anyhow::bail!("name the run to revert (`knife revert THREAD RUN`) or --undo REVERT_ID")
        }
    };
    let verb = if revert.status == RevertStatus::Undone {
        "undid revert"
    } else {
        "reverted"
    };
    println!(
        "{verb} {} ({}, to their state before run {}):",
        revert.id,
        crate::human::count(revert.files.len(), "file"),
        revert.run_ordinal
    );
    for f in &revert.files {
        println!("  {f}");
    }
    if revert.status == RevertStatus::Applied {
        println!(
            "undo with `knife revert {} --undo {}`",
            revert.thread_id, revert.id
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn last_run(thread: &Thread) -> anyhow::Result<u32> {
    match thread.run_count {
        0 => anyhow::bail!("thread {} has no runs yet", thread.id),
        n => Ok(n),
    }
}

/// The diff read from the data directory without a server (store + checkpoint repo).
async fn offline_diff(
    config: &Config,
    data_dir: Option<&Path>,
    given: &str,
    run: Option<u32>,
) -> anyhow::Result<RunDiff> {
    let dir = config.data_dir(data_dir)?;
    let db = dir.join(DB_FILE);
    if !db.is_file() {
        anyhow::bail!(
            "no knife server is running and there is no database at {}; pass --server or --data-dir",
            db.display()
        );
    }
    let store = knife_store_sqlite::open(&db).await?;
    let thread = &crate::thread_ids::pick(&store.list_threads(None).await?, given)?;
    let t = store
        .get_thread(thread)
        .await?
        .ok_or_else(|| anyhow::anyhow!("thread {thread} does not exist"))?;
    let ordinal = match run {
        Some(n) => n,
        None => last_run(&t)?,
    };
    let r = store
        .get_run(&RunId::for_thread(thread, ordinal))
        .await?
        .ok_or_else(|| anyhow::anyhow!("thread {thread} has no run {ordinal}"))?;
    let (Some(start), Some(end)) = (&r.checkpoints.start, &r.checkpoints.end) else {
        anyhow::bail!(
            "{}",
            r.checkpoints
                .missing_reason()
                .unwrap_or_else(|| "no checkpoint".into())
        );
    };
    let git = knife_workspace::Git::locate().await?;
    let c = knife_workspace::Checkpoints::new(
        git,
        dir.join(crate::checkpoints::CHECKPOINTS_DIR),
        config.checkpoint_options(),
    );
    let changes = match r.changes.clone() {
        Some(c) => c,
        None => c.changes(&t.project_id, &start.commit, &end.commit).await?,
    };
    let text = c.diff(&t.project_id, &start.commit, &end.commit).await?;
    Ok(RunDiff {
        thread_id: thread.clone(),
        run_ordinal: ordinal,
        from: start.commit.clone(),
        to: end.commit.clone(),
        added: changes.added,
        removed: changes.removed,
        files: changes.files,
        diff: text.text,
        truncated: text.truncated,
        note: text.note,
        skipped: changes.skipped,
    })
}

const GREEN: &str = "\x1b[32m";
const RED: &str = "\x1b[31m";
const CYAN: &str = "\x1b[36m";
const BOLD: &str = "\x1b[1m";
const RESET: &str = "\x1b[0m";

/// The file list (+/-), then the unified diff; ANSI colours when `colour`.
pub fn render(diff: &RunDiff, stat_only: bool, colour: bool) -> String {
    let paint = |code: &str, text: &str| {
        if colour {
            format!("{code}{text}{RESET}")
        } else {
            text.to_owned()
        }
    };
    let mut out = format!(
        "run {} of {}: {}, {} {}\n",
        diff.run_ordinal,
        diff.thread_id,
        crate::human::count(diff.files.len(), "file"),
        paint(GREEN, &format!("+{}", diff.added)),
        paint(RED, &format!("-{}", diff.removed)),
    );
    for f in &diff.files {
        let kind = match f.kind {
            FileChangeKind::Added => "A",
            FileChangeKind::Modified => "M",
            FileChangeKind::Deleted => "D",
            FileChangeKind::Renamed => "R",
            FileChangeKind::TypeChanged => "T",
        };
        let name = match &f.old_path {
            Some(old) => format!("{old} -> {}", f.path),
            None => f.path.clone(),
        };
        let counts = if f.binary {
            "binary".to_owned()
        } else {
            format!(
                "{} {}",
                paint(GREEN, &format!("+{}", f.added)),
                paint(RED, &format!("-{}", f.removed))
            )
        };
        out.push_str(&format!("  {kind} {name}  {counts}\n"));
    }
    for s in &diff.skipped {
        out.push_str(&format!(
            "  skipped {} ({} bytes): {}\n",
            s.path, s.bytes, s.reason
        ));
    }
    if stat_only {
        return out;
    }
    out.push('\n');
    for line in diff.diff.lines() {
        let code = if line.starts_with("diff --git")
            || line.starts_with("+++ ")
            || line.starts_with("--- ")
            || line.starts_with("index ")
        {
            Some(BOLD)
        } else if line.starts_with("@@") {
            Some(CYAN)
        } else if line.starts_with('+') {
            Some(GREEN)
        } else if line.starts_with('-') {
            Some(RED)
        } else {
            None
        };
        match code {
            Some(code) => out.push_str(&paint(code, line)),
            None => out.push_str(line),
        }
        out.push('\n');
    }
    if let Some(note) = &diff.note {
        out.push_str(&format!("\n({note})\n"));
    }
    out
}

/// `knife db stats` (CHG-11): bytes of the event log's database files and of the
/// checkpoint repositories in `data_dir`. Reads file sizes only, so it works next to
/// a running server.
pub async fn db_stats(data_dir: &Path) -> anyhow::Result<()> {
    let db = data_dir.join(DB_FILE);
    if !db.is_file() {
        anyhow::bail!("there is no database at {}; pass --data-dir", db.display());
    }
    let mut log = 0;
    for suffix in ["", "-wal", "-shm"] {
        let path = PathBuf::from(format!("{}{suffix}", db.display()));
        log += std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
    }
    let root = data_dir.join(crate::checkpoints::CHECKPOINTS_DIR);
    let repos = std::fs::read_dir(&root)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .filter(|e| e.file_name().to_string_lossy().ends_with(".git"))
                .count()
        })
        .unwrap_or(0);
    let checkpoints = {
        let root = root.clone();
        tokio::task::spawn_blocking(move || dir_bytes(&root)).await?
    };
    println!("data directory   {}", data_dir.display());
    println!("event log        {:>12} bytes  ({})", log, human(log));
    println!(
        "checkpoints      {:>12} bytes  ({}, {repos} project repositories in {})",
        checkpoints,
        human(checkpoints),
        root.display()
    );
    Ok(())
}

fn dir_bytes(path: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(path) else {
        return 0;
    };
    entries
        .filter_map(Result::ok)
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => dir_bytes(&e.path()),
            Ok(_) => e.metadata().map(|m| m.len()).unwrap_or(0),
            Err(_) => 0,
        })
        .sum()
}

fn human(bytes: u64) -> String {
    let mib = bytes as f64 / (1024.0 * 1024.0);
    if mib >= 1.0 {
        format!("{mib:.1} MiB")
    } else {
        format!("{:.1} KiB", bytes as f64 / 1024.0)
    }
}
