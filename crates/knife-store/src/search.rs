// The full-text index of threads (SPEC.md TURN-08), backend-neutral: which documents a
// thread or turn item puts in it, and the query type every backend answers.

//! Documents are thread titles (`title:<thread id>`) and settled turn items (user
//! messages, assistant text, tool calls with their input and output), folded in the
//! transaction of the event that settled them ([`crate::fold::plan`]); an item is
//! never indexed while it streams, so a turn costs O(text), not O(text²).

use knife_protocol::{ProjectId, SearchKind, Thread, TurnItem, TurnItemKind, TurnItemStatus};

use crate::fold::RowChange;

/// Longest text of one document, in bytes (longer tool output is cut at a char boundary).
pub const DOC_MAX_BYTES: usize = 32 * 1024;

/// A search (TURN-08): `text` is the user's query (reduced to words by
/// [`knife_protocol::search_terms`]; every word must match), `project` limits it to
/// one project's threads, `limit` caps the hits (best first).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SearchQuery {
    /// The user's query as typed; at most [`knife_protocol::SEARCH_MAX_QUERY_CHARS`] characters.
    pub text: String,
    /// Only threads of this project; `None` = every project.
    pub project: Option<ProjectId>,
    /// Most hits to return, 1..=[`knife_protocol::SEARCH_MAX_LIMIT`].
    pub limit: usize,
}

/// The document of thread `t`'s title.
pub fn title_doc(t: &Thread) -> RowChange {
    RowChange::IndexText {
        id: format!("title:{}", t.id),
        thread_id: t.id.as_str().to_owned(),
        run_id: None,
        kind: SearchKind::Title.as_str(),
        body: cut(t.title.clone()),
    }
}

/// The index change of item `i`: none while it is unsettled (pending, running,
/// waiting), removal when cancelled (a discarded attempt) or empty, else its text.
pub fn item_doc(i: &TurnItem) -> Option<RowChange> {
    let unindex = || {
        Some(RowChange::UnindexText {
            id: i.id.as_str().to_owned(),
        })
    };
    match i.status {
        TurnItemStatus::Pending | TurnItemStatus::Running | TurnItemStatus::Waiting => {
            return None;
        }
        TurnItemStatus::Cancelled => return unindex(),
        _ => {}
    }
    let (kind, body) = match &i.kind {
        TurnItemKind::UserMessage { text, .. } => (SearchKind::UserMessage, text.clone()),
        TurnItemKind::AssistantMessage { text, .. } => (SearchKind::AssistantMessage, text.clone()),
        TurnItemKind::ToolCall {
            tool,
            input,
            output,
            error,
            ..
        } => {
            let input = match input {
                serde_json::Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            let parts = [
                Some(tool.as_str()),
                Some(input.as_str()),
                output.as_deref(),
                error.as_deref(),
            ];
            let body: Vec<&str> = parts.into_iter().flatten().collect();
            (SearchKind::ToolCall, body.join("\n"))
        }
        _ => return None,
    };
    if body.trim().is_empty() {
        return unindex();
    }
    Some(RowChange::IndexText {
        id: i.id.as_str().to_owned(),
        thread_id: i.thread_id.as_str().to_owned(),
        run_id: i.run_id.as_ref().map(|r| r.as_str().to_owned()),
        kind: kind.as_str(),
        body: cut(body),
    })
}

fn cut(mut text: String) -> String {
    if text.len() > DOC_MAX_BYTES {
        let mut end = DOC_MAX_BYTES;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
    }
    text
}
