//! Model prices and the cost of token usage (SPEC.md TURN-06), in integer
//! micro-dollars (µ$, 10⁻⁶ USD) everywhere a cost is summed.
//!
//! A price is USD per million tokens, as providers publish it, kept as µ$ per
//! million tokens (so `2.50` USD/M is `2_500_000`): the cost of `n` tokens is
//! `n × price / 10⁶` µ$, computed in `u128` and rounded to the nearest µ$.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::TokenUsage;

/// One model's prices, µ$ per million tokens (= USD per million × 10⁶).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
pub struct ModelPrice {
    /// Uncached input (prompt) tokens.
    pub input: u64,
    /// Input tokens served from the provider's cache (`cached_input_tokens`).
    pub cached_input: u64,
    /// Output tokens, reasoning included (providers bill reasoning as output).
    pub output: u64,
}

impl ModelPrice {
    /// A price from USD per million tokens given as µ$ per million (see the module doc).
    pub const fn new(input: u64, cached_input: u64, output: u64) -> Self {
        Self {
            input,
            cached_input,
            output,
        }
    }

    /// The cost of `usage` in µ$: uncached input (`input_tokens −
    /// cached_input_tokens`) at `input`, cached input at `cached_input`, output
    /// at `output`; rounded to the nearest µ$, saturating at `u64::MAX`.
    pub fn cost_microdollars(&self, usage: &TokenUsage) -> u64 {
        let cached = usage.cached_input_tokens.min(usage.input_tokens);
        let uncached = usage.input_tokens - cached;
        let pico = u128::from(uncached) * u128::from(self.input)
            + u128::from(cached) * u128::from(self.cached_input)
            + u128::from(usage.output_tokens) * u128::from(self.output);
        u64::try_from((pico + 500_000) / 1_000_000).unwrap_or(u64::MAX)
    }
}

/// Prices by model name. A model is priced by its exact name, else by the
/// longest entry that prefixes it (`gpt-4o-2024-08-06` → `gpt-4o`,
/// `gpt-4o-mini-2024-07-18` → `gpt-4o-mini`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PriceTable {
    /// Model name (or name prefix) → its prices.
    pub models: BTreeMap<String, ModelPrice>,
}

/// List prices knife starts from (USD per million tokens: input / cached input /
/// output), overridden entry by entry by `[prices."<model>"]` in knife.toml.
/// Providers change prices: check theirs and override what you use.
pub const DEFAULT_PRICES: &[(&str, ModelPrice)] = &[
    ("gpt-4o", ModelPrice::new(2_500_000, 1_250_000, 10_000_000)),
    ("gpt-4o-mini", ModelPrice::new(150_000, 75_000, 600_000)),
    ("gpt-4.1", ModelPrice::new(2_000_000, 500_000, 8_000_000)),
    ("gpt-4.1-mini", ModelPrice::new(400_000, 100_000, 1_600_000)),
    ("gpt-4.1-nano", ModelPrice::new(100_000, 25_000, 400_000)),
    ("o3", ModelPrice::new(2_000_000, 500_000, 8_000_000)),
    ("o4-mini", ModelPrice::new(1_100_000, 275_000, 4_400_000)),
    (
        "claude-sonnet-4",
        ModelPrice::new(3_000_000, 300_000, 15_000_000),
    ),
    (
        "claude-opus-4",
        ModelPrice::new(15_000_000, 1_500_000, 75_000_000),
    ),
    (
        "claude-3-5-haiku",
        ModelPrice::new(800_000, 80_000, 4_000_000),
    ),
];

impl PriceTable {
    /// The [`DEFAULT_PRICES`] table.
    pub fn defaults() -> Self {
        Self {
            models: DEFAULT_PRICES
                .iter()
                .map(|(model, price)| ((*model).to_owned(), *price))
                .collect(),
        }
    }

    /// This table with `overrides` replacing or adding entries.
    pub fn with(mut self, overrides: impl IntoIterator<Item = (String, ModelPrice)>) -> Self {
        self.models.extend(overrides);
        self
    }

    /// The price of `model`: its exact entry, else the longest prefixing entry.
    pub fn price(&self, model: &str) -> Option<&ModelPrice> {
        self.models.get(model).or_else(|| {
            self.models
                .iter()
                .filter(|(name, _)| model.starts_with(name.as_str()))
                .max_by_key(|(name, _)| name.len())
                .map(|(_, price)| price)
        })
    }

    /// The cost of `usage` on `model` in µ$, or `None` when the model has no price.
    pub fn cost_microdollars(&self, model: &str, usage: &TokenUsage) -> Option<u64> {
        self.price(model).map(|p| p.cost_microdollars(usage))
    }
}

/// Token and cost totals over some runs (`GET /api/usage`, TURN-06). Costs are µ$.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct UsageTotals {
    /// Runs counted (those with reported usage or not).
    pub runs: u64,
    /// Prompt tokens, cached ones included, summed over the runs.
    pub input_tokens: u64,
    /// Prompt tokens served from the provider's cache, summed.
    pub cached_input_tokens: u64,
    /// Generated tokens, summed.
    pub output_tokens: u64,
    /// Reasoning tokens (where reported separately), summed.
    pub reasoning_tokens: u64,
    /// Total tokens as the providers report them, summed.
    pub total_tokens: u64,
    /// Cost of the priced runs, µ$ (10⁻⁶ USD).
    pub cost_microdollars: u64,
    /// Runs with usage whose model has no price (their tokens count, their cost is unknown).
    pub unpriced_runs: u64,
}

impl UsageTotals {
    /// Adds one run's `usage` (if any) and `cost` (µ$, `None` = no price), saturating.
    pub fn add_run(&mut self, usage: Option<&TokenUsage>, cost: Option<u64>) {
        self.runs += 1;
        let Some(u) = usage else { return };
        self.input_tokens = self.input_tokens.saturating_add(u.input_tokens);
        self.cached_input_tokens = self
            .cached_input_tokens
            .saturating_add(u.cached_input_tokens);
        self.output_tokens = self.output_tokens.saturating_add(u.output_tokens);
        self.reasoning_tokens = self.reasoning_tokens.saturating_add(u.reasoning_tokens);
        self.total_tokens = self.total_tokens.saturating_add(u.total_tokens);
        match cost {
            Some(c) => self.cost_microdollars = self.cost_microdollars.saturating_add(c),
            None => self.unpriced_runs += 1,
        }
    }
}

/// One model's share of a [`UsageReport`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ModelUsage {
    /// The provider instance of these runs.
    pub provider_instance_id: crate::ProviderInstanceId,
    /// The run's model, else the instance's default (`null` when neither is known).
    pub model: Option<String>,
    /// Their totals.
    pub totals: UsageTotals,
}

/// One run's share of a [`UsageReport`] (with `thread_id`, TURN-06).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RunUsage {
    /// The run (`run:<thread>:<ordinal>`).
    pub run_id: crate::RunId,
    /// Its ordinal in the thread (1-based).
    pub ordinal: u32,
    /// The model it was priced with (`null` when unknown).
    pub model: Option<String>,
    /// Its totals (one run).
    pub totals: UsageTotals,
}

/// `GET /api/usage?project_id=&thread_id=&since=`: totals of the matching runs,
/// and per instance and model (sorted by instance, then model); with `thread_id`,
/// also per run (by ordinal).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct UsageReport {
    /// Totals over every matching run.
    pub total: UsageTotals,
    /// Per provider instance and model, sorted by instance, then model.
    pub by_model: Vec<ModelUsage>,
    /// Per run, by ordinal; only with `thread_id` (else empty and left out).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub by_run: Vec<RunUsage>,
}

/// `micro` µ$ as dollars for people: `$0.0123` below a dollar, `$4.57` above.
pub fn format_usd(micro: u64) -> String {
    let usd = micro as f64 / 1_000_000.0;
    if usd < 1.0 {
        format!("${usd:.4}")
    } else {
        format!("${usd:.2}")
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn turn_06_dollars_are_shown_with_enough_digits() {
        assert_eq!(format_usd(12_300), "$0.0123");
        assert_eq!(format_usd(4_567_000), "$4.57");
    }

    fn usage(input: u64, cached: u64, output: u64) -> TokenUsage {
        TokenUsage {
            input_tokens: input,
            cached_input_tokens: cached,
            output_tokens: output,
            total_tokens: input.saturating_add(output),
            ..TokenUsage::default()
        }
    }

    #[test]
    fn turn_06_cost_is_integer_microdollars_with_cached_input_at_its_price() {
        let gpt4o = ModelPrice::new(2_500_000, 1_250_000, 10_000_000);
        // 1M input (400k cached) + 100k output: 0.6 × 2.50 + 0.4 × 1.25 + 0.1 × 10 = $3.00.
        assert_eq!(
            gpt4o.cost_microdollars(&usage(1_000_000, 400_000, 100_000)),
            3_000_000
        );
        // One token of gpt-4o-mini input is 0.15 µ$: rounds to 0; seven are 1 µ$.
        let mini = ModelPrice::new(150_000, 75_000, 600_000);
        assert_eq!(mini.cost_microdollars(&usage(1, 0, 0)), 0);
        assert_eq!(mini.cost_microdollars(&usage(7, 0, 0)), 1);
        // Cached counts above the input are clamped; huge counts saturate.
        assert_eq!(gpt4o.cost_microdollars(&usage(10, 50, 0)), 13);
        assert_eq!(
            gpt4o.cost_microdollars(&usage(u64::MAX, 0, u64::MAX)),
            u64::MAX
        );
    }

    #[test]
    fn turn_06_models_are_priced_by_exact_name_else_longest_prefix() {
        let table = PriceTable::defaults()
            .with([("local".to_owned(), ModelPrice::new(1_000_000, 0, 2_000_000))]);
        assert_eq!(
            table.price("gpt-4o-mini-2024-07-18"),
            table.models.get("gpt-4o-mini")
        );
        assert_eq!(table.price("gpt-4o-2024-08-06"), table.models.get("gpt-4o"));
        assert_eq!(
            table.cost_microdollars("local", &usage(1000, 0, 500)),
            Some(2000)
        );
        assert_eq!(table.cost_microdollars("llama3.2", &usage(1, 0, 1)), None);
    }
}
