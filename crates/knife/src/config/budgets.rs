//! `[budgets]` of `knife.toml`: limits in tokens or USD per thread, per project and
//! per day (SPEC.md TURN-07), turned into `knife_runtime::budget::Budgets`.

use knife_runtime::budget::{Budgets, Limit};
use serde::Deserialize;

/// `[budgets]`: every key optional; a missing key is no limit.
#[derive(Clone, Debug, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BudgetsConfig {
    /// Tokens all runs of one thread may use.
    pub thread_tokens: Option<u64>,
    /// USD all runs of one thread may cost (priced with `[prices]`).
    pub thread_cost_usd: Option<f64>,
    /// Tokens all runs of one project's threads may use.
    pub project_tokens: Option<u64>,
    /// USD all runs of one project's threads may cost.
    pub project_cost_usd: Option<f64>,
    /// Tokens all runs requested today may use (every thread).
    pub day_tokens: Option<u64>,
    /// USD all runs requested today may cost.
    pub day_cost_usd: Option<f64>,
    /// Minutes the budget day is ahead of UTC (default 0: days start at 00:00 UTC;
    /// e.g. 60 for CET), -720 to 840.
    pub day_utc_offset_minutes: Option<i32>,
}

impl BudgetsConfig {
    /// The runtime's budgets. Errors: a negative or non-finite cost, an offset
    /// out of range, each naming its key and what to write instead.
    pub fn budgets(&self) -> anyhow::Result<Budgets> {
        let offset = self.day_utc_offset_minutes.unwrap_or(0);
        if !(-720..=840).contains(&offset) {
            anyhow::bail!(
                "[budgets] day_utc_offset_minutes = {offset} is not a UTC offset; use minutes \
                 between -720 and 840 (e.g. 60 for UTC+1)"
            );
        }
        Ok(Budgets {
            thread: limit("thread", self.thread_tokens, self.thread_cost_usd)?,
            project: limit("project", self.project_tokens, self.project_cost_usd)?,
            day: limit("day", self.day_tokens, self.day_cost_usd)?,
            day_offset_minutes: offset,
        })
    }
}

fn limit(scope: &str, tokens: Option<u64>, cost_usd: Option<f64>) -> anyhow::Result<Limit> {
    let cost_microdollars = cost_usd
        .map(|usd| {
            if !usd.is_finite() || usd < 0.0 {
                anyhow::bail!(
                    "[budgets] {scope}_cost_usd = {usd} is not a budget; write an amount of USD, \
                     0 or more (e.g. 5.0)"
                );
            }
            Ok((usd * 1_000_000.0).round() as u64)
        })
        .transpose()?;
    Ok(Limit {
        tokens,
        cost_microdollars,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn turn_07_budgets_load_in_micro_dollars_and_refuse_bad_values() {
        let c: BudgetsConfig =
            toml::from_str("thread_tokens = 1000\nday_cost_usd = 2.5\nday_utc_offset_minutes = 60")
                .unwrap();
        let b = c.budgets().unwrap();
        assert_eq!(b.thread.tokens, Some(1000));
        assert_eq!(b.day.cost_microdollars, Some(2_500_000));
        assert_eq!(b.day_offset_minutes, 60);
        assert!(!BudgetsConfig::default().budgets().unwrap().any());
        let bad: BudgetsConfig = toml::from_str("project_cost_usd = -1.0").unwrap();
        assert!(format!("{}", bad.budgets().unwrap_err()).contains("project_cost_usd"));
        let bad: BudgetsConfig = toml::from_str("day_utc_offset_minutes = 9999").unwrap();
        assert!(bad.budgets().is_err());
    }
}
