//! `GET /api/usage`: token and cost totals of runs per project, thread and model,
//! priced with the configured price table (SPEC.md TURN-06).

use std::collections::HashMap;

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use knife_protocol::*;
use knife_store::UsageFilter;
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
    /// Only model calls made at or after this instant: RFC 3339, or a date
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

/// Sums the model calls the query selects (TURN-06: one grouped SQL sum over the
/// store's per-call records), each group priced by its model, else its instance's
/// default model. Errors: 400 for a bad query, 404 for an unknown thread, 500 when
/// the store fails.
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
    let mut ordinals = HashMap::new();
    if let Some(id) = &q.thread_id {
        let Some(projection) = s.store.thread_projection(id).await? else {
            return Err(ApiErr::not_found(format!(
                "thread {id} does not exist; list threads with `knife threads list`"
            )));
        };
        ordinals.extend(projection.runs.iter().map(|r| (r.id.clone(), r.ordinal)));
    }
    let filter = UsageFilter {
        thread: q.thread_id.clone(),
        project: q.project_id.clone(),
        run: match (&q.thread_id, q.run) {
            (Some(t), Some(n)) => Some(RunId::for_thread(t, n)),
            _ => None,
        },
        since,
        by_run: q.thread_id.is_some(),
        ..Default::default()
    };
    let default_model = |instance: &ProviderInstanceId| {
        s.providers
            .iter()
            .find(|p| &p.id == instance)
            .and_then(|p| p.model.clone())
    };
    let report = knife_runtime::usage::report(&s.store, &filter, &s.prices, default_model, |run| {
        ordinals.get(run).copied()
    })
    .await?;
    Ok(Json(report))
}
