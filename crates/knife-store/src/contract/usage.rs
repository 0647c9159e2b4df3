//! Contract cases of usage sums (SPEC.md TURN-06/07): per-model-call records summed by
//! the database per instance and model, per thread, project, run and since an instant;
//! a run without records counts its own usage once; rebuild and tombstones.

use knife_protocol::*;

use super::StoreFactory;
use super::fixtures::*;
use crate::{UsageFilter, UsageSum};

fn tokens(input: u64, cached: u64, output: u64, total: u64) -> TokenUsage {
    TokenUsage {
        input_tokens: input,
        output_tokens: output,
        reasoning_tokens: output / 2,
        cached_input_tokens: cached,
        total_tokens: total,
    }
}

fn call(run: &Run, n: u32, model: Option<&str>, usage: TokenUsage, at: i64) -> EventBody {
    let turn = ProviderTurnId::for_run(&run.id, 1);
    EventBody::ModelCallRecorded(ModelCall {
        id: ModelCall::id_of(&turn, n),
        thread_id: run.thread_id.clone(),
        run_id: run.id.clone(),
        provider_turn_id: Some(turn),
        provider_instance_id: run.provider_instance_id.clone(),
        model: model.map(str::to_owned),
        ordinal: n,
        usage,
        at: ts(at),
    })
}

fn ended(mut run: Run, usage: TokenUsage, at: i64) -> EventBody {
    run.status = RunStatus::Completed;
    run.usage = Some(usage);
    run.completed_at = Some(ts(at));
    EventBody::RunUpdated(run)
}

/// `(instance, model, run id, runs, calls, input, output, budget tokens)` of a sum.
type Shape = (
    String,
    Option<String>,
    Option<String>,
    u64,
    u64,
    u64,
    u64,
    u64,
);

fn shape(sums: &[UsageSum]) -> Vec<Shape> {
    sums.iter()
        .map(|s| {
            (
                s.provider_instance_id.to_string(),
                s.model.clone(),
                s.run_id.as_ref().map(ToString::to_string),
                s.runs,
                s.calls,
                s.usage.input_tokens,
                s.usage.output_tokens,
                s.budget_tokens,
            )
        })
        .collect()
}

pub async fn turn_06_usage_sums_count_each_model_call_once_per_scope_and_survive_a_rebuild(
    factory: &dyn StoreFactory,
) {
    let (_guard, store) = temp_store(factory).await;
    let r1 = run("t1", 1, RunStatus::Running);
    let r2 = run("t1", 2, RunStatus::Running);
    let r3 = run("t2", 1, RunStatus::Running);
    let mut legacy = run("t3", 1, RunStatus::Running);
    legacy.model = Some("old-model".into());
    store
        .write(vec![
            ev(EventBody::ProjectCreated(project("p1", 1))),
            ev(EventBody::ProjectCreated(project("p2", 1))),
            ev(EventBody::ThreadCreated(thread("t1", "p1", 1))),
            ev(EventBody::ThreadCreated(thread("t2", "p1", 1))),
            ev(EventBody::ThreadCreated(thread("t3", "p2", 1))),
            ev(EventBody::RunCreated(r1.clone())),
            ev(EventBody::RunCreated(r2.clone())),
            ev(EventBody::RunCreated(r3.clone())),
            ev(EventBody::RunCreated(legacy.clone())),
            // Run 1 of t1: two calls on the default model, then its terminal with
            // their sum (not counted again).
            ev(call(&r1, 1, None, tokens(100, 40, 10, 110), 10)),
            ev(call(&r1, 2, None, tokens(200, 0, 20, 0), 20)),
            ev(ended(r1.clone(), tokens(300, 40, 30, 110), 21)),
            // Run 2 of t1: one call on another model, still running.
            ev(call(&r2, 1, Some("gpt-x"), tokens(1000, 0, 100, 1100), 100)),
            // t2 (same project): one call.
            ev(call(&r3, 1, None, tokens(7, 0, 3, 10), 50)),
            // t3 (other project): a run that ended with usage and no call record
            // (a log from before the records) counts its usage once.
            ev(ended(legacy.clone(), tokens(5, 0, 5, 10), 60)),
            ev(ended(legacy.clone(), tokens(5, 0, 5, 10), 61)),
        ])
        .await
        .unwrap();
    let sums = |filter: UsageFilter| {
        let store = store.clone();
        async move { shape(&store.usage_sums(&filter).await.unwrap()) }
    };
    let s = |v: &str| Some(v.to_owned());
    let all = sums(UsageFilter::default()).await;
    assert_eq!(
        all,
        [
            ("openai".into(), None, None, 2, 3, 307, 33, 110 + 220 + 10),
            ("openai".into(), s("gpt-x"), None, 1, 1, 1000, 100, 1100),
            ("openai".into(), s("old-model"), None, 1, 1, 5, 5, 10),
        ]
    );
    let thread_t1 = sums(UsageFilter {
        thread: Some(ThreadId::from("t1")),
        by_run: true,
        ..Default::default()
    })
    .await;
    assert_eq!(
        thread_t1,
        [
            ("openai".into(), None, s(r1.id.as_str()), 1, 2, 300, 30, 330),
            (
                "openai".into(),
                s("gpt-x"),
                s(r2.id.as_str()),
                1,
                1,
                1000,
                100,
                1100
            ),
        ]
    );
    // A budget check of run 2 counts every other run of the project.
    let project_but_r2 = sums(UsageFilter {
        project: Some(ProjectId::from("p1")),
        except_run: Some(r2.id.clone()),
        ..Default::default()
    })
    .await;
    assert_eq!(
        project_but_r2,
        [("openai".into(), None, None, 2, 3, 307, 33, 340)]
    );
    let only_run = sums(UsageFilter {
        run: Some(r1.id.clone()),
        ..Default::default()
    })
    .await;
    assert_eq!(
        only_run,
        [("openai".into(), None, None, 1, 2, 300, 30, 330)]
    );
    // Since an instant: the calls that finished at or after it.
    let since = sums(UsageFilter {
        since: Some(ts(50)),
        ..Default::default()
    })
    .await;
    assert_eq!(
        since,
        [
            ("openai".into(), None, None, 1, 1, 7, 3, 10),
            ("openai".into(), s("gpt-x"), None, 1, 1, 1000, 100, 1100),
            ("openai".into(), s("old-model"), None, 1, 1, 5, 5, 10),
        ]
    );
    assert!(
        sums(UsageFilter {
            since: Some(ts(1000)),
            ..Default::default()
        })
        .await
        .is_empty()
    );

    // A rebuild folds the same records; a deleted thread's calls are gone.
    store.rebuild().await.unwrap();
    assert_eq!(sums(UsageFilter::default()).await, all);
    store
        .write(vec![ev(EventBody::ThreadDeleted {
            thread_id: ThreadId::from("t1"),
            deleted_at: ts(200),
        })])
        .await
        .unwrap();
    assert_eq!(
        sums(UsageFilter::default()).await,
        [
            ("openai".into(), None, None, 1, 1, 7, 3, 10),
            ("openai".into(), s("old-model"), None, 1, 1, 5, 5, 10),
        ]
    );
}
