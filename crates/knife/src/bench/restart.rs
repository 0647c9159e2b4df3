//! `knife bench restart`: N claimed threads left by a "dead" process, then a boot's
//! restart sweep over a no-op adapter ([`super::drain_adapter`]; turns complete at once). Measures the time from the start of the sweep
//! to the first drain of the last thread, until every drain finished, and memory.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use super::drain_adapter::DrainAdapter;
use knife_protocol::*;
use knife_runtime::commands::create_project;
use knife_runtime::*;

pub async fn run(threads: usize) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let store = knife_store_sqlite::open(dir.path().join("bench.db")).await?;
    let clock: SharedClock = Arc::new(SystemClock);
    let root = dir.path().join("project");
    std::fs::create_dir(&root)?;
    let (project, _) = create_project(
        &store,
        clock.as_ref(),
        CreateProjectRequest {
            root: root.display().to_string(),
            name: None,
        },
    )
    .await?;
    let instance = ProviderInstanceId::from("noop");
    println!("knife bench restart: {threads} claimed threads, no-op drains");
    let seeded = Instant::now();
    let now = clock.now();
    let mut batch = Vec::new();
    for i in 0..threads {
        let thread = Thread {
            id: ThreadId::new(),
            project_id: project.id.clone(),
            title: format!("bench {i}"),
            provider_instance_id: instance.clone(),
            model: None,
            status: ThreadStatus::Idle,
            active_run_id: None,
            run_count: 0,
            last_error: None,
            created_at: now,
            updated_at: now,
            agent_status: None,
            claimed_at: Some(now),
            resume_attempts: 0,
            parent_thread_id: None,
            worktree: None,
            queue: Default::default(),
            budget_raise: None,
            archived_at: None,
            untitled: false,
            forked_from: None,
        };
        batch.push(DomainEvent::new(now, EventBody::ThreadCreated(thread)));
        if batch.len() == 500 {
            store.write(std::mem::take(&mut batch)).await?;
        }
    }
    store.write(batch).await?;
    println!(
        "seeded in {:.2} s; RSS {} MiB",
        seeded.elapsed().as_secs_f64(),
        rss_mib("VmRSS")
    );

    // Every turn completes at once, with no output.
    let drains = DrainAdapter::new();
    let mut adapters: HashMap<ProviderInstanceId, Arc<dyn ProviderAdapter>> = HashMap::new();
    adapters.insert(instance, Arc::new(drains.clone()));
    let manager = SessionManager::new(
        Arc::new(store.clone()),
        clock.clone(),
        adapters,
        SessionManagerOptions::default(),
    );
    let execution = ExecutionService::new(store.clone(), clock.clone(), manager);
    let seeded_events = store.latest_sequence(None).await?;
    let boot = Instant::now();
    let report = RestartService::new(execution.clone(), RestartOptions::default())
        .resume_suspended_threads()
        .await?;
    let swept = boot.elapsed();
    let rss_after_sweep = rss_mib("VmRSS");
    drains.wait_turns_started(threads).await;
    let last_first_drain = boot.elapsed();
    let mut finished = Vec::new();
    for (thread, _, _) in &report.resumed {
        finished.push(execution.await_idle(thread));
    }
    futures::future::join_all(finished).await;
    let all_done = boot.elapsed();
    let claimed = store.list_suspended_threads().await?.len();
    let written = store.latest_sequence(None).await? - seeded_events;
    println!(
        "{:<44} {:>10}",
        "resumed by the sweep",
        report.resumed.len()
    );
    println!(
        "{:<44} {:>10.3}",
        "sweep returned (all resumes committed), s",
        swept.as_secs_f64()
    );
    println!(
        "{:<44} {:>10.3}",
        "first drain of the last thread, s",
        last_first_drain.as_secs_f64()
    );
    println!(
        "{:<44} {:>10.3}",
        "every drain finished, s",
        all_done.as_secs_f64()
    );
    println!("{:<44} {:>10}", "claims left afterwards", claimed);
    println!(
        "{:<44} {:>10} ({:.1} per thread)",
        "events written by the sweep and the drains",
        written,
        written as f64 / threads.max(1) as f64
    );
    println!("{:<44} {:>10}", "RSS after the sweep, MiB", rss_after_sweep);
    println!("{:<44} {:>10}", "peak RSS (VmHWM), MiB", rss_mib("VmHWM"));
    execution.shutdown(std::time::Duration::from_secs(30)).await;
    Ok(())
}

/// `field` (`VmRSS`, `VmHWM`) of `/proc/self/status` in MiB; 0 when unknown.
fn rss_mib(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<u64>().ok())
        })
        .map_or(0, |kb| kb / 1024)
}
