//! Metrics of the session manager (MGR-48), recorded through the `metrics` crate;
//! the server exposes them at `/metrics` in Prometheus text format.

/// Counter `knife_provider_sessions_total{provider, operation=open|release, reason, outcome}`
/// (`reason` only on `release`).
pub const SESSIONS_TOTAL: &str = "knife_provider_sessions_total";
/// Counter `knife_provider_turns_total{provider, operation=send|steer|interrupt|runtime-request-response, modelFamily, outcome}`
/// (`modelFamily` only when a model is known).
pub const TURNS_TOTAL: &str = "knife_provider_turns_total";
/// Histogram `knife_provider_turn_duration_seconds{provider, operation}`: seconds until
/// the provider accepted the turn.
pub const TURN_DURATION_SECONDS: &str = "knife_provider_turn_duration_seconds";

/// `outcome` label.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The operation did what was asked.
    Success,
    /// The operation returned an error.
    Failure,
    /// The operation was cancelled (its future dropped).
    Interrupt,
}

impl Outcome {
    /// `success`, `failure`, `interrupt`.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Success => "success",
            Outcome::Failure => "failure",
            Outcome::Interrupt => "interrupt",
        }
    }
}

/// `modelFamily` label: `gpt`, `claude`, `gemini` or `other` (lower-cased
/// substring match); `None` for an empty or unknown model.
pub fn model_family(model: Option<&str>) -> Option<&'static str> {
    let model = model?.trim().to_lowercase();
    if model.is_empty() {
        return None;
    }
    Some(if model.contains("gpt") {
        "gpt"
    } else if model.contains("claude") {
        "claude"
    } else if model.contains("gemini") {
        "gemini"
    } else {
        "other"
    })
}

pub(crate) fn session_op(
    provider: &str,
    operation: &'static str,
    reason: Option<&'static str>,
    outcome: Outcome,
) {
    let mut labels = vec![
        ("provider", provider.to_owned()),
        ("operation", operation.to_owned()),
    ];
    if let Some(reason) = reason {
        labels.push(("reason", reason.to_owned()));
    }
    labels.push(("outcome", outcome.as_str().to_owned()));
    metrics::counter!(SESSIONS_TOTAL, &labels).increment(1);
}

pub(crate) fn turn_op(
    provider: &str,
    operation: &'static str,
    model: Option<&str>,
    outcome: Outcome,
) {
    let mut labels = vec![
        ("provider", provider.to_owned()),
        ("operation", operation.to_owned()),
    ];
    if let Some(family) = model_family(model) {
        labels.push(("modelFamily", family.to_owned()));
    }
    labels.push(("outcome", outcome.as_str().to_owned()));
    metrics::counter!(TURNS_TOTAL, &labels).increment(1);
}

pub(crate) fn turn_duration(provider: &str, operation: &'static str, seconds: f64) {
    metrics::histogram!(
        TURN_DURATION_SECONDS,
        "provider" => provider.to_owned(),
        "operation" => operation
    )
    .record(seconds);
}

/// Records one operation's outcome exactly once: [`OpMetric::finish`] with the result,
/// or `interrupt` when the operation's future is dropped first.
pub(crate) struct OpMetric {
    record: Option<Box<dyn FnOnce(Outcome) + Send>>,
}

impl OpMetric {
    pub(crate) fn new(record: impl FnOnce(Outcome) + Send + 'static) -> Self {
        Self {
            record: Some(Box::new(record)),
        }
    }

    pub(crate) fn finish(mut self, ok: bool) {
        if let Some(record) = self.record.take() {
            record(if ok {
                Outcome::Success
            } else {
                Outcome::Failure
            });
        }
    }
}

impl Drop for OpMetric {
    fn drop(&mut self) {
        if let Some(record) = self.record.take() {
            record(Outcome::Interrupt);
        }
    }
}
