//! `GET /api/search?q=&project_id=&limit=`: full-text search over threads (SPEC.md
//! TURN-08): ranked hits with thread, run and item ids and snippets, from the store's index.

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use knife_protocol::*;
use serde::Deserialize;

use crate::AppState;
use crate::error::ApiErr;

/// Query of `GET /api/search`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SearchParams {
    /// The words to find (all of them); FTS syntax is treated as plain words.
    pub q: Option<String>,
    /// Only the threads of this project.
    pub project_id: Option<ProjectId>,
    /// Most hits (default 20, at most 200).
    pub limit: Option<usize>,
}

/// Checks the query and asks the store. Errors: 400 without `q`, with a query over
/// [`SEARCH_MAX_QUERY_CHARS`] or a `limit` over [`SEARCH_MAX_LIMIT`]; 500 when the
/// store fails. A query of only punctuation finds nothing (200, no hits).
pub async fn search(
    State(s): State<AppState>,
    query: Result<Query<SearchParams>, QueryRejection>,
) -> Result<Json<SearchResponse>, ApiErr> {
    let Query(p) = query
        .map_err(|e| ApiErr::bad_request(format!("invalid query string: {}", e.body_text())))?;
    let Some(q) = p.q.filter(|q| !q.trim().is_empty()) else {
        return Err(ApiErr::bad_request(
            "give the words to find as q, e.g. GET /api/search?q=retry+policy",
        ));
    };
    if q.chars().count() > SEARCH_MAX_QUERY_CHARS {
        return Err(ApiErr::bad_request(format!(
            "the query has more than {SEARCH_MAX_QUERY_CHARS} characters; search for fewer words"
        )));
    }
    let limit = p.limit.unwrap_or(SEARCH_DEFAULT_LIMIT);
    if limit == 0 || limit > SEARCH_MAX_LIMIT {
        return Err(ApiErr::bad_request(format!(
            "limit = {limit} is out of range; give 1 to {SEARCH_MAX_LIMIT}"
        )));
    }
    let hits = s
        .store
        .search(&knife_store::SearchQuery {
            text: q.clone(),
            project: p.project_id,
            limit,
        })
        .await?;
    Ok(Json(SearchResponse { query: q, hits }))
}
