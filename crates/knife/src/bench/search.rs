//! `knife bench search` (SPEC.md TURN-08): N completed turn items over many threads in a
//! real SQLite file, then timed searches for words of varied frequency, over every
//! project and filtered to a big and a small project: p50/p99/max.

use std::time::Instant;

use knife_protocol::*;

/// Words the generated items are made of; the first ones are common, the last rare.
const WORDS: &[&str] = &[
    "the",
    "retry",
    "config",
    "server",
    "thread",
    "error",
    "build",
    "test",
    "cache",
    "index",
    "parser",
    "token",
    "stream",
    "socket",
    "branch",
    "commit",
    "deploy",
    "queue",
    "budget",
    "schema",
    "migration",
    "lease",
    "fence",
    "snapshot",
    "checkpoint",
    "sandbox",
    "bubblewrap",
    "landlock",
    "compaction",
    "tokenizer",
    "zeppelin",
    "quixotic",
];

pub async fn run(items: usize, queries: usize) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let store = knife_store_sqlite::open(dir.path().join("bench.db")).await?;
    let now = chrono::Utc::now();
    // The first thread is a project of its own: a small project among many items.
    let [big, small] = ["bench", "small"].map(|name| Project {
        id: ProjectId::new(),
        name: name.into(),
        root: dir.path().join(name).display().to_string(),
        created_at: now,
        updated_at: now,
    });
    store
        .write(
            [&big, &small]
                .map(|p| DomainEvent::new(now, EventBody::ProjectCreated(p.clone())))
                .to_vec(),
        )
        .await?;
    let per_thread = 1000usize;
    let threads = items.div_ceil(per_thread).max(1);
    println!(
        "knife bench search: {items} completed turn items over {threads} threads (the first \
         in a project of its own), then {queries} searches per scope (all, big project, small project)"
    );
    let mut rng = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let start = Instant::now();
    let mut written = 0usize;
    for t in 0..threads {
        let thread = Thread {
            id: ThreadId::new(),
            project_id: if t == 0 { &small } else { &big }.id.clone(),
            title: format!("bench thread {t}"),
            provider_instance_id: ProviderInstanceId::from("bench"),
            model: None,
            status: ThreadStatus::Idle,
            active_run_id: None,
            run_count: 1,
            last_error: None,
            created_at: now,
            updated_at: now,
            agent_status: None,
            claimed_at: None,
            resume_attempts: 0,
            parent_thread_id: None,
            archived_at: None,
            untitled: false,
            forked_from: None,
            worktree: None,
            queue: MessageQueue::default(),
            budget_raise: None,
        };
        let run = RunId::for_thread(&thread.id, 1);
        let mut batch = vec![DomainEvent::new(
            now,
            EventBody::ThreadCreated(thread.clone()),
        )];
        for n in 0..per_thread.min(items - written) {
            // Zipf-ish: word k appears with probability ~ 1/(k+1).
            let text: Vec<&str> = (0..24)
                .map(|_| {
                    let r = (next() % 1_000_000) as f64 / 1_000_000.0;
                    let k = ((WORDS.len() as f64).powf(r) - 1.0) as usize;
                    WORDS[k.min(WORDS.len() - 1)]
                })
                .collect();
            let kind = if n % 2 == 0 {
                TurnItemKind::AssistantMessage {
                    text: text.join(" "),
                    streaming: false,
                }
            } else {
                TurnItemKind::UserMessage {
                    text: text.join(" "),
                    origin: MessageOrigin::User,
                    description: None,
                }
            };
            batch.push(DomainEvent::new(
                now,
                EventBody::TurnItemUpdated(TurnItem {
                    id: TurnItemId::from(format!("item:{run}:{n}")),
                    thread_id: thread.id.clone(),
                    run_id: Some(run.clone()),
                    provider_turn_id: None,
                    ordinal: n as u64,
                    status: TurnItemStatus::Completed,
                    started_at: Some(now),
                    completed_at: Some(now),
                    updated_at: now,
                    kind,
                }),
            ));
            if batch.len() >= 500 {
                store.write(std::mem::take(&mut batch)).await?;
            }
            written += 1;
        }
        if !batch.is_empty() {
            store.write(batch).await?;
        }
    }
    let secs = start.elapsed().as_secs_f64();
    println!(
        "indexed while writing: {written} items in {secs:.1} s ({:.0} items/s)",
        written as f64 / secs.max(1e-9)
    );
    println!(
        "{:<26} {:>8} {:>10} {:>10} {:>10}",
        "query", "hits", "p50 ms", "p99 ms", "max ms"
    );
    let mut all = Vec::with_capacity(queries * 3);
    let scopes = [
        ("", None),
        (" (big)", Some(&big.id)),
        (" (small)", Some(&small.id)),
    ];
    for (words, (scope, project)) in [
        &["retry"][..],
        &["zeppelin"],
        &["retry", "budget"],
        &["the"],
        &["quixotic", "lease"],
    ]
    .iter()
    .flat_map(|w| scopes.iter().map(move |s| (w, s)))
    {
        let q = words.join(" ");
        let mut times = Vec::with_capacity(queries);
        let mut hits = 0;
        for _ in 0..queries.div_ceil(5) {
            let t0 = Instant::now();
            let found = store
                .search(&knife_store::SearchQuery {
                    text: q.clone(),
                    project: project.cloned(),
                    limit: SEARCH_DEFAULT_LIMIT,
                })
                .await?;
            times.push(t0.elapsed().as_micros() as u64);
            hits = found.len();
        }
        times.sort_unstable();
        all.extend_from_slice(&times);
        println!(
            "{:<26} {:>8} {:>10.2} {:>10.2} {:>10.2}",
            format!("{q}{scope}"),
            hits,
            super::quantile(&times, 0.5) as f64 / 1000.0,
            super::quantile(&times, 0.99) as f64 / 1000.0,
            times.last().copied().unwrap_or(0) as f64 / 1000.0
        );
    }
    all.sort_unstable();
    println!(
        "all searches: p50 {:.2} ms, p99 {:.2} ms (target p99 <= 50 ms)",
        super::quantile(&all, 0.5) as f64 / 1000.0,
        super::quantile(&all, 0.99) as f64 / 1000.0
    );
    Ok(())
}
