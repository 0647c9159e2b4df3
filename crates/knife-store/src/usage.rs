// Usage sums over the per-model-call records (SPEC.md TURN-06/07), backend-neutral: the
// query every backend answers and the one SQL statement both run for it.

//! The fold keeps one `model_calls` row per [`knife_protocol::ModelCall`] (and a run's
//! whole usage when it has no per-call record, [`crate::fold::RowChange::InsertRunTotal`]);
//! totals of `GET /api/usage` and the budget checks are one grouped `SUM` over them,
//! computed by the database. Costs are not stored: each group is priced by its model
//! when read, so a changed price table applies to every total at once.

use knife_protocol::{ProjectId, ProviderInstanceId, RunId, ThreadId, Timestamp, TokenUsage};

/// Which model calls to sum (every field narrows; all `None` = every call).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UsageFilter {
    /// Calls of this thread.
    pub thread: Option<ThreadId>,
    /// Calls of the threads of this project.
    pub project: Option<ProjectId>,
    /// Calls of this run.
    pub run: Option<RunId>,
    /// Calls of every run but this one (a budget check adds the running run itself).
    pub except_run: Option<RunId>,
    /// Calls that finished at or after this instant.
    pub since: Option<Timestamp>,
    /// One group per run as well (else per instance and model only).
    pub by_run: bool,
}

/// The sum of one group of model calls: per provider instance and model (and run, with
/// [`UsageFilter::by_run`]). Tokens, saturating at `i64::MAX`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UsageSum {
    /// The run (with [`UsageFilter::by_run`]; else `None`).
    pub run_id: Option<RunId>,
    /// The provider instance of the calls.
    pub provider_instance_id: ProviderInstanceId,
    /// The calls' model (`None` = the instance's default model).
    pub model: Option<String>,
    /// Distinct runs of the group.
    pub runs: u64,
    /// Model calls (records) of the group.
    pub calls: u64,
    /// Their usage, field by field.
    pub usage: TokenUsage,
    /// Tokens counted against a token budget: per call its total, else input + output
    /// (as [`knife_protocol::TokenUsage`] totals are counted everywhere).
    pub budget_tokens: u64,
}

/// One parameter of [`sum_sql`]'s statement.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SqlParam {
    /// TEXT.
    Text(String),
    /// BIGINT / INTEGER.
    Integer(i64),
}

/// The grouped `SUM` of `filter` over `model_calls` (alias `m`, joined to `threads`
/// only for a project), with placeholders written by `placeholder(n)` (1-based:
/// `?n` on SQLite, `$n` on PostgreSQL) and its parameters in order. Columns:
/// instance, model, run id (NULL unless by run), runs, calls, input, cached input,
/// output, reasoning, total, budget tokens — every count BIGINT.
pub fn sum_sql(
    filter: &UsageFilter,
    placeholder: impl Fn(usize) -> String,
) -> (String, Vec<SqlParam>) {
    let mut params = Vec::new();
    let mut conds = Vec::new();
    let mut cond = |sql: &str, p: SqlParam| {
        params.push(p);
        conds.push(format!("{sql} {}", placeholder(params.len())));
    };
    if let Some(t) = &filter.thread {
        cond("m.thread_id =", SqlParam::Text(t.as_str().to_owned()));
    }
    if let Some(p) = &filter.project {
        cond("t.project_id =", SqlParam::Text(p.as_str().to_owned()));
    }
    if let Some(r) = &filter.run {
        cond("m.run_id =", SqlParam::Text(r.as_str().to_owned()));
    }
    if let Some(r) = &filter.except_run {
        cond("m.run_id <>", SqlParam::Text(r.as_str().to_owned()));
    }
    if let Some(at) = filter.since {
        cond("m.at_us >=", SqlParam::Integer(at.timestamp_micros()));
    }
    let join = if filter.project.is_some() {
        " JOIN threads t ON t.id = m.thread_id"
    } else {
        ""
    };
    let (run_col, run_group) = if filter.by_run {
        ("m.run_id", ", m.run_id")
    } else {
        ("CAST(NULL AS TEXT)", "")
    };
    let filter_sql = if conds.is_empty() {
        String::new()
    } else {
        format!(" WHERE {}", conds.join(" AND "))
    };
    let sum = |col: &str| format!("CAST(COALESCE(SUM({col}), 0) AS BIGINT)");
    let sql = format!(
        "SELECT m.provider_instance_id, m.model, {run_col}, \
         CAST(COUNT(DISTINCT m.run_id) AS BIGINT), CAST(COUNT(*) AS BIGINT), {input}, {cached}, \
         {output}, {reasoning}, {total}, {budget} \
         FROM model_calls m{join}{filter_sql} \
         GROUP BY m.provider_instance_id, m.model{run_group}",
        input = sum("m.input_tokens"),
        cached = sum("m.cached_input_tokens"),
        output = sum("m.output_tokens"),
        reasoning = sum("m.reasoning_tokens"),
        total = sum("m.total_tokens"),
        budget = sum("CASE WHEN m.total_tokens > 0 THEN m.total_tokens \
             ELSE m.input_tokens + m.output_tokens END"),
    );
    (sql, params)
}

/// One row of [`sum_sql`]'s answer, as read by a backend, into a [`UsageSum`]:
/// `counts` = runs, calls, input, cached, output, reasoning, total, budget tokens.
pub fn sum_of_row(
    instance: String,
    model: Option<String>,
    run: Option<String>,
    counts: [i64; 8],
) -> UsageSum {
    let n = |i: usize| u64::try_from(counts[i]).unwrap_or(0);
    UsageSum {
        run_id: run.map(RunId::from),
        provider_instance_id: ProviderInstanceId::from(instance.as_str()),
        model,
        runs: n(0),
        calls: n(1),
        usage: TokenUsage {
            input_tokens: n(2),
            cached_input_tokens: n(3),
            output_tokens: n(4),
            reasoning_tokens: n(5),
            total_tokens: n(6),
        },
        budget_tokens: n(7),
    }
}

/// Sorts a backend's answer into the contract's order: instance, model (none first), run.
pub fn sort_sums(sums: &mut [UsageSum]) {
    sums.sort_by(|a, b| {
        (a.provider_instance_id.as_str(), &a.model, &a.run_id).cmp(&(
            b.provider_instance_id.as_str(),
            &b.model,
            &b.run_id,
        ))
    });
}
