//! Prometheus counters of tokens and cost per provider instance and model
//! (SPEC.md TURN-06), counted at each recorded model call of every driver.

use std::collections::HashMap;
use std::sync::Arc;

use knife_protocol::{ModelCall, PriceTable};
use knife_runtime::ModelCallObserver;

/// `knife_tokens_total{instance,model,kind}`: tokens of recorded model calls; `kind` is
/// `input` (all prompt tokens), `cached_input` (of those, from the cache),
/// `output` (reasoning included) or `reasoning`.
pub const TOKENS_TOTAL: &str = "knife_tokens_total";
/// `knife_cost_microdollars_total{instance,model}`: cost of recorded model calls whose
/// model has a price, µ$ (10⁻⁶ USD).
pub const COST_TOTAL: &str = "knife_cost_microdollars_total";

/// Counts each `model-call.recorded` under its model (else its instance's default
/// model, else `unknown`), priced with `prices`, as the call is written: a long run's
/// spend shows while it runs, and codex's and ACP's calls count like the built-in
/// agent's.
#[derive(Debug)]
pub struct UsageMetrics {
    pub prices: Arc<PriceTable>,
    /// Provider instance id → its configured default model.
    pub default_models: HashMap<String, String>,
}

impl ModelCallObserver for UsageMetrics {
    fn model_call_recorded(&self, call: &ModelCall) {
        let instance = call.provider_instance_id.to_string();
        let model = call
            .model
            .clone()
            .or_else(|| self.default_models.get(&instance).cloned())
            .unwrap_or_else(|| "unknown".to_owned());
        let usage = &call.usage;
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
