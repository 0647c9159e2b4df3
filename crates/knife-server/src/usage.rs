//! `GET /api/usage`: token and cost totals of runs per project, thread and model,
//! priced with the configured price table (SPEC.md TURN-06).

use std::collections::BTreeMap;

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use knife_protocol::*;
use serde::Deserialize;

use crate::AppState;
use crate::error::ApiErr;

/// Query of `GET /api/usage`: all optional.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct UsageQuery {
    /// Only the threads of this project.
    pub project_id: Option<ProjectId>,
    /// Only this thread.
    pub thread_id: Option<ThreadId>,
    /// Only this run (its ordinal) of `thread_id`: the page's per-run tokens and cost
    /// (UX-07). Needs `thread_id`.
    pub run: Option<u32>,
    /// Only runs requested at or after this instant: RFC 3339, or a date
    /// `YYYY-MM-DD` (its start, UTC).
    pub since: Option<String>,
}

/// `since` as an instant. Errors: 400 naming the accepted forms.
fn parse_since(since: &str) -> Result<Timestamp, ApiErr> {
    if let Ok(at) = chrono::DateTime::parse_from_rfc3339(since) {
        return Ok(at.with_timezone(&chrono::Utc));
    }
    chrono::NaiveDate::parse_from_str(since, "%Y-%m-%d")
        .ok()
        .and_then(|d| d.and_hms_opt(0, 0, 0))
        .map(|t| t.and_utc())
        .ok_or_else(|| {
            ApiErr::bad_request(format!(
                "since = `{since}` is not a date; use YYYY-MM-DD (UTC) or an RFC 3339 time such \
                 as 2026-12-01T09:00:00Z"
            ))
        })
}

/// Sums the runs the query selects: each run's usage priced by its model (else
/// the thread's, else its instance's default model). Errors: 400 for a bad
/// query, 404 for an unknown thread, 500 when the store fails.
pub async fn usage(
    State(s): State<AppState>,
    query: Result<Query<UsageQuery>, QueryRejection>,
) -> Result<Json<UsageReport>, ApiErr> {
    let Query(q) = query
        .map_err(|e| ApiErr::bad_request(format!("invalid query string: {}", e.body_text())))?;
    let since = q.since.as_deref().map(parse_since).transpose()?;
    if q.run.is_some() && q.thread_id.is_none() {
        return Err(ApiErr::bad_request(
            "run = N needs thread_id: a run ordinal counts within one thread".to_owned(),
        ));
    }
    let threads = match &q.thread_id {
        Some(id) => match s.store.get_thread(id).await? {
            Some(t) => vec![t],
            None => {
                return Err(ApiErr::not_found(format!(
                    "thread {id} does not exist; list threads with `knife threads list`"
                )));
            }
        },
        None => s.store.list_threads(q.project_id.as_ref()).await?,
    };
    let mut report = UsageReport::default();
    let mut by_model: BTreeMap<(ProviderInstanceId, Option<String>), UsageTotals> = BTreeMap::new();
    for thread in threads
        .iter()
        .filter(|t| q.project_id.as_ref().is_none_or(|p| &t.project_id == p))
    {
        let Some(projection) = s.store.thread_projection(&thread.id).await? else {
            continue;
        };
        for run in projection
            .runs
            .iter()
            .filter(|r| since.is_none_or(|at| r.requested_at >= at))
            .filter(|r| q.run.is_none_or(|n| r.ordinal == n))
        {
            let model = run
                .model
                .clone()
                .or_else(|| thread.model.clone())
                .or_else(|| {
                    s.providers
                        .iter()
                        .find(|p| p.id == run.provider_instance_id)
                        .and_then(|p| p.model.clone())
                });
            let cost = match (&run.usage, &model) {
                (Some(usage), Some(model)) => s.prices.cost_microdollars(model, usage),
                _ => None,
            };
            report.total.add_run(run.usage.as_ref(), cost);
            if q.thread_id.is_some() {
                let mut totals = UsageTotals::default();
                totals.add_run(run.usage.as_ref(), cost);
                report.by_run.push(RunUsage {
                    run_id: run.id.clone(),
                    ordinal: run.ordinal,
                    model: model.clone(),
                    totals,
                });
            }
            by_model
                .entry((run.provider_instance_id.clone(), model))
                .or_default()
                .add_run(run.usage.as_ref(), cost);
        }
    }
    report.by_run.sort_by_key(|r| r.ordinal);
    report.by_model = by_model
        .into_iter()
        .map(|((provider_instance_id, model), totals)| ModelUsage {
            provider_instance_id,
            model,
            totals,
        })
        .collect();
    Ok(Json(report))
}
