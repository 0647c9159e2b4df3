//! Prometheus counters of tokens and cost per provider instance and model
//! (SPEC.md TURN-06), counted when a run's terminal state is written.

use std::collections::HashMap;
use std::sync::Arc;

use knife_protocol::{PriceTable, Run};
use knife_runtime::RunObserver;

/// `knife_tokens_total{instance,model,kind}`: tokens of ended runs; `kind` is
/// `input` (all prompt tokens), `cached_input` (of those, from the cache),
/// `output` (reasoning included) or `reasoning`.
pub const TOKENS_TOTAL: &str = "knife_tokens_total";
/// `knife_cost_microdollars_total{instance,model}`: cost of ended runs whose
/// model has a price, µ$ (10⁻⁶ USD).
pub const COST_TOTAL: &str = "knife_cost_microdollars_total";

/// Counts each ended run's usage under its model (else its instance's default
/// model, else `unknown`), priced with `prices`.
pub struct UsageMetrics {
    pub prices: Arc<PriceTable>,
    /// Provider instance id → its configured default model.
    pub default_models: HashMap<String, String>,
}

impl RunObserver for UsageMetrics {
    fn run_finished(&self, run: &Run) {
        let Some(usage) = &run.usage else { return };
        let instance = run.provider_instance_id.to_string();
        let model = run
            .model
            .clone()
            .or_else(|| self.default_models.get(&instance).cloned())
            .unwrap_or_else(|| "unknown".to_owned());
        for (kind, tokens) in [
            ("input", usage.input_tokens),
            ("cached_input", usage.cached_input_tokens),
            ("output", usage.output_tokens),
            ("reasoning", usage.reasoning_tokens),
        ] {
            metrics::counter!(TOKENS_TOTAL, "instance" => instance.clone(), "model" => model.clone(), "kind" => kind)
                .increment(tokens);
        }
        if let Some(cost) = self.prices.cost_microdollars(&model, usage) {
            metrics::counter!(COST_TOTAL, "instance" => instance, "model" => model).increment(cost);
        }
    }
}
