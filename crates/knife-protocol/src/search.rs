//! Full-text search over threads (SPEC.md TURN-08): what `GET /api/search`, `knife
//! search` and the MCP tool `threads_search` answer, and how a query is made safe.

use crate::ids::*;
use serde::{Deserialize, Serialize};

/// Default and largest number of hits of one search.
pub const SEARCH_DEFAULT_LIMIT: usize = 20;
/// Largest `limit` a search takes (more answers 400).
pub const SEARCH_MAX_LIMIT: usize = 200;
/// Longest query, in characters (more answers 400).
pub const SEARCH_MAX_QUERY_CHARS: usize = 500;

/// What a search hit is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum SearchKind {
    /// A thread's title.
    Title,
    /// A user message's text.
    UserMessage,
    /// An assistant message's text.
    AssistantMessage,
    /// A tool call's input and output.
    ToolCall,
}

impl SearchKind {
    /// The stored name (`title`, `user_message`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            SearchKind::Title => "title",
            SearchKind::UserMessage => "user_message",
            SearchKind::AssistantMessage => "assistant_message",
            SearchKind::ToolCall => "tool_call",
        }
    }

    /// The kind stored as `name`.
    pub fn parse(name: &str) -> Option<Self> {
        Some(match name {
            "title" => SearchKind::Title,
            "user_message" => SearchKind::UserMessage,
            "assistant_message" => SearchKind::AssistantMessage,
            "tool_call" => SearchKind::ToolCall,
            _ => return None,
        })
    }
}

/// One ranked hit (best first).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SearchHit {
    /// The thread the hit is in.
    pub thread_id: ThreadId,
    /// The thread's project.
    pub project_id: ProjectId,
    /// The thread's title now.
    pub thread_title: String,
    /// The run of the item; `None` for a title.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<RunId>,
    /// The turn item; `None` for a title.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub item_id: Option<TurnItemId>,
    /// What matched: the title, a message or a tool call.
    pub kind: SearchKind,
    /// Text around the match, the matched words between `[` and `]`.
    pub snippet: String,
    /// Relevance, higher is better (backend-specific scale).
    pub score: f64,
}

/// Answer of `GET /api/search?q=&project_id=&limit=`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SearchResponse {
    /// The query as given.
    pub query: String,
    /// Hits, best first; at most `limit` ([`SEARCH_DEFAULT_LIMIT`] by default).
    pub hits: Vec<SearchHit>,
}

/// The words of a user's query, for a full-text match: every run of letters,
/// digits and `_` (so FTS operators and quotes never reach the engine as syntax).
/// Empty when the query has no word.
pub fn search_terms(query: &str) -> Vec<String> {
    query
        .split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn turn_08_query_syntax_is_reduced_to_words() {
        assert_eq!(
            search_terms(r#"retry "NEAR(a b)" -foo* OR) bar:baz"#),
            ["retry", "near", "a", "b", "foo", "or", "bar", "baz"]
        );
        assert!(search_terms("\"*()-").is_empty());
    }
}
