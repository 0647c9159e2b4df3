//! `knife bench checkpoint` (SPEC.md CHG-06): checkpoint and diff times on a generated
//! tree of N files with K changed per round, with the objects each checkpoint stored.

use std::path::Path;
use tokio::time::Instant;

use knife_protocol::{ProjectId, ThreadId};
use knife_workspace::{CheckpointOptions, Checkpoints, Git, WorkTree, run_ref};

/// Files under an ignored `node_modules/` (never read by a checkpoint).
const IGNORED_FILES: usize = 2_000;

pub async fn run(files: usize, changed: usize, rounds: usize) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let root = dir.path().join("project");
    let t0 = Instant::now();
    generate(&root, files)?;
    let generated = t0.elapsed();
    let git = Git::locate().await?;
    let checkpoints = Checkpoints::new(
        git.clone(),
        dir.path().join("data/checkpoints"),
        CheckpointOptions::default(),
    );
    let project = ProjectId::from("project_bench");
    let tree = WorkTree::new(project.clone(), &root);
    let thread = ThreadId::from("thread_bench");
    println!(
        "knife bench checkpoint: {files} files (+{IGNORED_FILES} under node_modules/, ignored), \
         {changed} changed per round, {rounds} rounds, git {} (generated in {:.0} ms)",
        git.version(),
        generated.as_secs_f64() * 1000.0
    );
    let t = Instant::now();
    let mut previous = checkpoints
        .checkpoint(&tree, &run_ref(&thread, 0, "end"), "first")
        .await?;
    println!(
        "first checkpoint (every file hashed and stored): {:>8.1} ms",
        ms(t)
    );
    let repo = checkpoints.repo_dir(&project);
    let t = Instant::now();
    checkpoints
        .checkpoint(&tree, &run_ref(&thread, 0, "again"), "no change")
        .await?;
    println!(
        "checkpoint with nothing changed:                 {:>8.1} ms",
        ms(t)
    );
    let mut cp_ms = Vec::new();
    let mut diff_ms = Vec::new();
    let mut stored = Vec::new();
    for round in 1..=rounds {
        for k in 0..changed {
            let i = (round * 7919 + k * 104_729) % files;
            let path = root.join(file_path(i));
            let mut text = std::fs::read_to_string(&path)?;
            text.push_str(&format!("// edited in round {round}\n"));
            std::fs::write(&path, text)?;
        }
        let before = loose_objects(&repo);
        let t = Instant::now();
        let cp = checkpoints
            .checkpoint(&tree, &run_ref(&thread, round as u32, "end"), "round")
            .await?;
        cp_ms.push(ms(t));
        stored.push(loose_objects(&repo).saturating_sub(before));
        let t = Instant::now();
        let changes = checkpoints
            .changes(&project, &previous.commit, &cp.commit)
            .await?;
        let diff = checkpoints
            .diff(&project, &previous.commit, &cp.commit)
            .await?;
        diff_ms.push(ms(t));
        anyhow::ensure!(
            changes.files.len() == changed && !diff.text.is_empty(),
            "round {round}: expected {changed} changed files, got {}",
            changes.files.len()
        );
        previous = cp;
    }
    let (cp_p50, cp_max) = summary(&mut cp_ms);
    let (diff_p50, diff_max) = summary(&mut diff_ms);
    println!(
        "checkpoint with {changed} files changed:  p50 {cp_p50:>7.1} ms   max {cp_max:>7.1} ms   (target ≤ 300 ms)"
    );
    println!("change set + unified diff:          p50 {diff_p50:>7.1} ms   max {diff_max:>7.1} ms");
    println!(
        "objects stored per checkpoint: {stored:?} (the changed blobs, the trees above them, one commit)"
    );
    println!(
        "checkpoint repository: {} KiB",
        checkpoints.disk_usage().await / 1024
    );
    Ok(())
}

fn file_path(i: usize) -> String {
    format!("src/d{:03}/f{:05}.rs", i / 100, i)
}

/// `files` source files in folders of 100, and an ignored `node_modules/`.
fn generate(root: &Path, files: usize) -> anyhow::Result<()> {
    for i in 0..files {
        let path = root.join(file_path(i));
        if i % 100 == 0
            && let Some(parent) = path.parent()
        {
            std::fs::create_dir_all(parent)?;
        }
        let body: String = (0..8)
            .map(|l| format!("pub fn f{i}_{l}() -> usize {{ {i} + {l} }}\n"))
            .collect();
        std::fs::write(path, body)?;
    }
    let ignored = root.join("node_modules/dep");
    std::fs::create_dir_all(&ignored)?;
    for i in 0..IGNORED_FILES {
        std::fs::write(ignored.join(format!("m{i}.js")), "module.exports = 1;\n")?;
    }
    std::fs::write(root.join(".gitignore"), "*.log\n")?;
    Ok(())
}

/// Loose objects in `repo` (a checkpoint writes its new objects loose).
fn loose_objects(repo: &Path) -> usize {
    let Ok(dirs) = std::fs::read_dir(repo.join("objects")) else {
        return 0;
    };
    dirs.filter_map(Result::ok)
        .filter(|d| d.file_name().len() == 2)
        .filter_map(|d| std::fs::read_dir(d.path()).ok())
        .map(std::iter::Iterator::count)
        .sum()
}

fn ms(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1000.0
}

/// (median, max) of `values`.
fn summary(values: &mut [f64]) -> (f64, f64) {
    values.sort_by(f64::total_cmp);
    let median = values.get(values.len() / 2).copied().unwrap_or(0.0);
    let max = values.last().copied().unwrap_or(0.0);
    (median, max)
}
