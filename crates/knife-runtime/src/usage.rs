//! Usage reports (SPEC.md TURN-06): the totals of `GET /api/usage`, `knife usage` and
//! `knife threads show`, from the store's sums over its model-call records.

use knife_protocol::*;
use knife_store::{Store, UsageFilter, UsageSum};

use crate::error::RuntimeError;

/// The report of the model calls `filter` selects: totals, per instance and model
/// (sorted by instance, then model) and, with [`UsageFilter::by_run`], per run (by
/// ordinal). Each group is priced with `prices` by its model, else by
/// `default_model(instance)`; a group without a price counts its tokens and its runs
/// as `unpriced_runs`. `ordinal_of` names a run's ordinal (by_run only).
///
/// Errors: `Store`. Cost: one grouped SQL sum (TURN-07's budget checks use the same).
pub async fn report(
    store: &Store,
    filter: &UsageFilter,
    prices: &PriceTable,
    default_model: impl Fn(&ProviderInstanceId) -> Option<String>,
    ordinal_of: impl Fn(&RunId) -> Option<u32>,
) -> Result<UsageReport, RuntimeError> {
    let sums = store.usage_sums(filter).await?;
    let mut report = UsageReport::default();
    let mut by_model: std::collections::BTreeMap<
        (ProviderInstanceId, Option<String>),
        UsageTotals,
    > = Default::default();
    let mut by_run: std::collections::BTreeMap<RunId, (Option<String>, UsageTotals)> =
        Default::default();
    for sum in &sums {
        let model = sum
            .model
            .clone()
            .or_else(|| default_model(&sum.provider_instance_id));
        let cost = model
            .as_deref()
            .and_then(|m| prices.cost_microdollars(m, &sum.usage));
        add(&mut report.total, sum, cost);
        add(
            by_model
                .entry((sum.provider_instance_id.clone(), model.clone()))
                .or_default(),
            sum,
            cost,
        );
        if let Some(run) = &sum.run_id {
            let entry = by_run.entry(run.clone()).or_default();
            entry.0 = entry.0.take().or(model);
            add(&mut entry.1, sum, cost);
        }
    }
    report.by_model = by_model
        .into_iter()
        .map(|((provider_instance_id, model), totals)| ModelUsage {
            provider_instance_id,
            model,
            totals,
        })
        .collect();
    report.by_run = by_run
        .into_iter()
        .map(|(run_id, (model, totals))| RunUsage {
            ordinal: ordinal_of(&run_id).unwrap_or(0),
            run_id,
            model,
            totals,
        })
        .collect();
    report.by_run.sort_by_key(|r| r.ordinal);
    Ok(report)
}

fn add(totals: &mut UsageTotals, sum: &UsageSum, cost: Option<u64>) {
    totals.add_calls(sum.runs, &sum.usage, cost);
}
