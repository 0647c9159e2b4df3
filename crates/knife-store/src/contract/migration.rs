// Cases for the backends' migration tests, not run by `store_contract_tests!`: each
// backend writes the log at its old schema itself, opens it (migrating), then calls these.

//! Usage records (SPEC.md TURN-06; SQLite 0085, PostgreSQL 0045): a database written
//! before `model_calls` existed has runs with only a run total. The migration copies
//! each ended run's total into one `run:<run id>` record, so every old run counts once:
//! after the migration, after a rebuild, and when a run still running then ends.

use knife_protocol::*;

use super::fixtures::*;
use crate::{Store, UsageFilter};

fn usage(input: u64, output: u64) -> TokenUsage {
    TokenUsage {
        input_tokens: input,
        output_tokens: output,
        reasoning_tokens: 0,
        cached_input_tokens: 0,
        total_tokens: input + output,
    }
}

fn ended(mut run: Run, status: RunStatus, used: Option<TokenUsage>, at: i64) -> Run {
    run.status = status;
    run.usage = used;
    run.completed_at = Some(ts(at));
    run
}

/// The legacy log's run 4 of t1, still running when the database is migrated.
pub fn legacy_running_run() -> Run {
    run("t1", 4, RunStatus::Running)
}

/// A log as knife wrote it before per-call records: thread t1 (project p1) with run 1
/// completed (1000 in, 500 out, on model `old-model`), run 2 failed (200 in, 100 out),
/// run 3 interrupted without usage, run 4 still running; thread t2 (project p2) with
/// run 1 completed (7 in, 3 out). No `model-call.recorded` anywhere.
pub fn legacy_usage_log() -> Vec<DomainEvent> {
    let mut r1 = run("t1", 1, RunStatus::Running);
    r1.model = Some("old-model".into());
    let r2 = run("t1", 2, RunStatus::Running);
    let r3 = run("t1", 3, RunStatus::Running);
    let other = run("t2", 1, RunStatus::Running);
    let mut events = vec![
        ev(EventBody::ProjectCreated(project("p1", 1))),
        ev(EventBody::ProjectCreated(project("p2", 1))),
        ev(EventBody::ThreadCreated(thread("t1", "p1", 1))),
        ev(EventBody::ThreadCreated(thread("t2", "p2", 1))),
    ];
    for r in [&r1, &r2, &r3, &other] {
        events.push(ev(EventBody::RunCreated(r.clone())));
    }
    events.push(ev(EventBody::RunCreated(legacy_running_run())));
    for r in [
        ended(r1, RunStatus::Completed, Some(usage(1000, 500)), 10),
        ended(r2, RunStatus::Failed, Some(usage(200, 100)), 20),
        ended(r3, RunStatus::Interrupted, None, 30),
        ended(other, RunStatus::Completed, Some(usage(7, 3)), 40),
    ] {
        events.push(ev(EventBody::RunUpdated(r)));
    }
    events
}

/// `(model, runs, calls, input, output)` of every sum of `filter`.
async fn sums(store: &Store, filter: UsageFilter) -> Vec<(Option<String>, u64, u64, u64, u64)> {
    let mut out: Vec<_> = store
        .usage_sums(&filter)
        .await
        .unwrap()
        .into_iter()
        .map(|s| {
            (
                s.model,
                s.runs,
                s.calls,
                s.usage.input_tokens,
                s.usage.output_tokens,
            )
        })
        .collect();
    out.sort();
    out
}

/// Checks `store`, opened (so migrated) on a database holding [`legacy_usage_log`]
/// and its projections at the schema before the usage records.
pub async fn turn_06_runs_from_before_the_usage_records_count_once_after_the_migration(
    store: &Store,
) {
    let t1 = UsageFilter {
        thread: Some(ThreadId::from("t1")),
        ..Default::default()
    };
    let old = Some("old-model".to_owned());
    let expected_t1 = vec![(None, 1, 1, 200, 100), (old.clone(), 1, 1, 1000, 500)];
    assert_eq!(sums(store, t1.clone()).await, expected_t1, "migrated t1");
    let all = vec![(None, 2, 2, 207, 103), (old.clone(), 1, 1, 1000, 500)];
    assert_eq!(
        sums(store, UsageFilter::default()).await,
        all,
        "migrated, every thread"
    );
    let p2 = UsageFilter {
        project: Some(ProjectId::from("p2")),
        ..Default::default()
    };
    assert_eq!(sums(store, p2).await, [(None, 1, 1, 7, 3)]);
    // Each copy is stamped with its run's end: `since` and day budgets see it there.
    let since = UsageFilter {
        since: Some(ts(15)),
        ..Default::default()
    };
    assert_eq!(sums(store, since).await, [(None, 2, 2, 207, 103)]);

    // The fold writes the same records: a rebuild counts nothing twice.
    store.rebuild().await.unwrap();
    assert_eq!(
        sums(store, UsageFilter::default()).await,
        all,
        "after a rebuild"
    );

    // The run that was running at the migration ends with a total: it counts once too.
    store
        .write(vec![ev(EventBody::RunUpdated(ended(
            legacy_running_run(),
            RunStatus::Completed,
            Some(usage(50, 5)),
            50,
        )))])
        .await
        .unwrap();
    assert_eq!(
        sums(store, t1).await,
        [(None, 2, 2, 250, 105), (old, 1, 1, 1000, 500)],
        "the run ended after the migration"
    );
}
