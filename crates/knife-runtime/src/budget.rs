//! Budgets (SPEC.md TURN-07): limits in tokens or cost per thread, per project and
//! per day, what has been spent against them, and the check execution runs before a
//! run's turn, at each usage report of the turn and (through [`TurnBudget`]) before
//! each model call of the built-in agent.

use std::collections::HashMap;
use std::sync::Arc;

use knife_protocol::*;
use knife_store::Store;

use crate::error::RuntimeError;

/// Error type (`RunError::error_type`) of a run stopped by a budget (TURN-07).
pub const BUDGET_EXCEEDED: &str = "budget_exceeded";

/// One limit: tokens (input + output, all kinds) and/or cost in micro-dollars. `None` = no limit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Limit {
    /// Most tokens; `None` = no token limit.
    pub tokens: Option<u64>,
    /// Most cost, micro-dollars (1 USD = 1,000,000); `None` = no cost limit.
    pub cost_microdollars: Option<u64>,
}

impl Limit {
    fn is_set(&self) -> bool {
        self.tokens.is_some() || self.cost_microdollars.is_some()
    }
}

/// The configured budgets (`[budgets]` of knife.toml).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Budgets {
    /// All runs of one thread.
    pub thread: Limit,
    /// All runs of the threads of one project.
    pub project: Limit,
    /// All runs requested since the start of the current day, every thread.
    pub day: Limit,
    /// Offset of the "day" from UTC, in minutes (default 0: days are UTC).
    pub day_offset_minutes: i32,
}

impl Budgets {
    /// True when any limit is set (else nothing is checked).
    pub fn any(&self) -> bool {
        self.thread.is_set() || self.project.is_set() || self.day.is_set()
    }
}

/// Which budget a run went over.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BudgetScope {
    /// The budget of one thread (`[budgets] thread_*`), raise included.
    Thread,
    /// The budget of all threads of one project (`[budgets] project_*`).
    Project,
    /// The budget of one day over every thread (`[budgets] day_*`).
    Day,
}

impl BudgetScope {
    /// `thread`, `project`, `day`.
    pub fn as_str(self) -> &'static str {
        match self {
            BudgetScope::Thread => "thread",
            BudgetScope::Project => "project",
            BudgetScope::Day => "day",
        }
    }
}

/// A budget that is spent: scope, unit, limit (raise included) and what was spent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BudgetExceeded {
    /// Which budget is spent.
    pub scope: BudgetScope,
    /// `true`: cost in micro-dollars; `false`: tokens.
    pub cost: bool,
    /// The limit with the thread's raise added (tokens, or micro-dollars when `cost`).
    pub limit: u64,
    /// What was spent against it, same unit.
    pub spent: u64,
    /// The thread whose run went over.
    pub thread: ThreadId,
}

impl BudgetExceeded {
    /// The run error naming the budget and how to go on (`budget_exceeded`, code
    /// `thread` | `project` | `day`).
    pub fn run_error(&self) -> RunError {
        let (unit, limit, spent, flag) = if self.cost {
            (
                "USD",
                usd(self.limit),
                usd(self.spent),
                "--cost-usd".to_owned(),
            )
        } else {
            (
                "tokens",
                self.limit.to_string(),
                self.spent.to_string(),
                "--tokens".to_owned(),
            )
        };
        let thread = &self.thread;
        RunError {
            code: Some(self.scope.as_str().to_owned()),
            ..RunError::new(
                BUDGET_EXCEEDED,
                format!(
                    "the {scope} budget of {limit} {unit} is spent ({spent} {unit} used), so knife \
                     stopped before the next model call. Raise it for this thread and continue \
                     with `knife threads budget {thread} {flag} N --continue` (POST \
                     /api/threads/{thread}/budget), or raise [budgets] in knife.toml",
                    scope = self.scope.as_str(),
                ),
            )
        }
    }
}

fn usd(micro: u64) -> String {
    format!("{:.2}", micro as f64 / 1_000_000.0)
}

/// What runs have spent, tokens and cost (µ$).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Spent {
    tokens: u64,
    cost: u64,
}

impl Spent {
    fn add(&mut self, usage: &TokenUsage, cost: Option<u64>) {
        self.tokens = self.tokens.saturating_add(tokens_of(usage));
        self.cost = self.cost.saturating_add(cost.unwrap_or(0));
    }
}

/// Tokens of `usage` counted against a budget: its total, else input + output.
pub fn tokens_of(usage: &TokenUsage) -> u64 {
    if usage.total_tokens > 0 {
        usage.total_tokens
    } else {
        usage.input_tokens.saturating_add(usage.output_tokens)
    }
}

/// Checks budgets against the store (TURN-07). Cheap to clone.
#[derive(Clone)]
pub struct BudgetGuard {
    store: Store,
    budgets: Arc<Budgets>,
    prices: Arc<PriceTable>,
    /// Default model of each provider instance (prices a run that names none).
    default_models: Arc<HashMap<ProviderInstanceId, String>>,
}

impl BudgetGuard {
    /// A guard over `store` with `budgets`, pricing with `prices` (a run without a
    /// model is priced with its instance's entry in `default_models`).
    pub fn new(
        store: Store,
        budgets: Budgets,
        prices: Arc<PriceTable>,
        default_models: HashMap<ProviderInstanceId, String>,
    ) -> Self {
        Self {
            store,
            budgets: Arc::new(budgets),
            prices,
            default_models: Arc::new(default_models),
        }
    }

    /// The configured budgets.
    pub fn budgets(&self) -> &Budgets {
        &self.budgets
    }

    /// The first budget `run` of `thread` is over, counting the finished runs in the
    /// store and `in_flight` (the run's usage so far); `None` when all hold. A
    /// thread's `budget_raise` is added to every limit it is checked against.
    ///
    /// Errors: `Store`. Cost: reads every thread of the project (project budget) and
    /// every thread (day budget) — one projection each.
    pub async fn check(
        &self,
        thread: &Thread,
        run: &Run,
        in_flight: Option<&TokenUsage>,
        now: Timestamp,
    ) -> Result<Option<BudgetExceeded>, RuntimeError> {
        let b = &self.budgets;
        if !b.any() {
            return Ok(None);
        }
        let raise = thread.budget_raise.unwrap_or_default();
        let current = match in_flight {
            Some(usage) => {
                let mut s = Spent::default();
                s.add(usage, self.cost(run, thread, usage));
                s
            }
            None => Spent::default(),
        };
        let day_start = day_start(now, b.day_offset_minutes);
        let mut thread_spent = current;
        let mut project_spent = current;
        let mut day_spent = current;
        let threads = if b.day.is_set() {
            self.store.list_threads(None).await?
        } else if b.project.is_set() {
            self.store.list_threads(Some(&thread.project_id)).await?
        } else {
            vec![thread.clone()]
        };
        for t in &threads {
            let same_project = t.project_id == thread.project_id;
            let Some(p) = self.store.thread_projection(&t.id).await? else {
                continue;
            };
            for r in p.runs.iter().filter(|r| r.id != run.id) {
                let Some(usage) = &r.usage else { continue };
                let cost = self.cost(r, t, usage);
                if t.id == thread.id {
                    thread_spent.add(usage, cost);
                }
                if same_project {
                    project_spent.add(usage, cost);
                }
                if r.requested_at >= day_start {
                    day_spent.add(usage, cost);
                }
            }
        }
        for (scope, limit, spent) in [
            (BudgetScope::Thread, b.thread, thread_spent),
            (BudgetScope::Project, b.project, project_spent),
            (BudgetScope::Day, b.day, day_spent),
        ] {
            let over = |limit: Option<u64>, extra: u64, spent: u64, cost: bool| {
                limit.map(|l| l.saturating_add(extra)).and_then(|l| {
                    (spent >= l).then_some(BudgetExceeded {
                        scope,
                        cost,
                        limit: l,
                        spent,
                        thread: thread.id.clone(),
                    })
                })
            };
            if let Some(e) = over(limit.tokens, raise.tokens, spent.tokens, false).or_else(|| {
                over(
                    limit.cost_microdollars,
                    raise.cost_microdollars,
                    spent.cost,
                    true,
                )
            }) {
                return Ok(Some(e));
            }
        }
        Ok(None)
    }

    fn cost(&self, run: &Run, thread: &Thread, usage: &TokenUsage) -> Option<u64> {
        let model = run
            .model
            .clone()
            .or_else(|| thread.model.clone())
            .or_else(|| self.default_models.get(&run.provider_instance_id).cloned())?;
        self.prices.cost_microdollars(&model, usage)
    }
}

/// Start of the day holding `now`, for a day `offset_minutes` ahead of UTC.
pub fn day_start(now: Timestamp, offset_minutes: i32) -> Timestamp {
    let shift = chrono::Duration::minutes(i64::from(offset_minutes));
    let local = now + shift;
    let midnight = local
        .date_naive()
        .and_hms_opt(0, 0, 0)
        .map(|t| t.and_utc())
        .unwrap_or(local);
    midnight - shift
}

/// Checked by a runtime before each model call of a turn (TURN-07): `Err` with the
/// run error to fail the turn with. Given to the runtime in
/// [`crate::StartTurnInput::budget`].
#[async_trait::async_trait]
pub trait TurnBudget: Send + Sync {
    /// `turn_usage`: what the turn used so far (`None` before its first call).
    async fn check(&self, turn_usage: Option<&TokenUsage>) -> Result<(), RunError>;
}

/// A shared [`TurnBudget`] (Debug so [`crate::StartTurnInput`] stays Debug).
#[derive(Clone)]
pub struct BudgetGate(pub Arc<dyn TurnBudget>);

impl std::fmt::Debug for BudgetGate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BudgetGate")
    }
}

/// The gate of one run: the guard with the run's thread and run.
pub(crate) struct RunGate {
    pub guard: BudgetGuard,
    pub thread: Thread,
    pub run: Run,
    pub clock: crate::clock::SharedClock,
}

#[async_trait::async_trait]
impl TurnBudget for RunGate {
    async fn check(&self, turn_usage: Option<&TokenUsage>) -> Result<(), RunError> {
        let thread = match self.guard.store.get_thread(&self.thread.id).await {
            Ok(Some(t)) => t,
            _ => self.thread.clone(),
        };
        match self
            .guard
            .check(&thread, &self.run, turn_usage, self.clock.now())
            .await
        {
            Ok(Some(e)) => Err(e.run_error()),
            Ok(None) => Ok(()),
            Err(e) => {
                // A store failure must not stop the work; the next check tries again.
                tracing::warn!(thread = %self.thread.id, error = %e, "could not check the budgets");
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn turn_07_the_day_starts_at_utc_midnight_unless_offset() {
        let at = |s: &str| chrono::DateTime::parse_from_rfc3339(s).map(|t| t.to_utc());
        let now = at("2026-12-01T23:30:00Z").unwrap();
        assert_eq!(day_start(now, 0), at("2026-12-01T00:00:00Z").unwrap());
        // UTC+2: it is already 01:30 on 2 December there.
        assert_eq!(day_start(now, 120), at("2026-12-01T22:00:00Z").unwrap());
        assert_eq!(day_start(now, -60), at("2026-12-01T01:00:00Z").unwrap());
    }
}
