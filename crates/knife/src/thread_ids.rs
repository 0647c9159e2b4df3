//! Thread references on the command line (SPEC UX-04): a full thread id, or any prefix of
//! one that only one thread has, and `--last` (the project's most recent thread).

use knife_protocol::{Thread, ThreadId};

/// A thread reference that names no thread, or more than one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ThreadRefError {
    /// No thread id starts with the text.
    #[error("no thread id starts with `{given}`; `knife threads list` shows the threads")]
    NoMatch {
        /// What was typed.
        given: String,
    },
    /// Several thread ids start with the text.
    #[error(
        "`{given}` is the start of {} thread ids ({}); type more of the id",
        candidates.len(),
        candidates.join(", ")
    )]
    Ambiguous {
        /// What was typed.
        given: String,
        /// `id "title"` of each match (at most 5).
        candidates: Vec<String>,
    },
    /// An empty reference.
    #[error(
        "the thread id is empty; pass an id (or a unique prefix of one) from `knife threads list`"
    )]
    Empty,
    /// `--last` in a project without threads.
    #[error("there is no thread in {project} yet; start one with `knife run \"…\"`")]
    NoLast {
        /// The project folder.
        project: String,
    },
}

/// The one thread of `threads` whose id is `given` or starts with it.
///
/// Errors: [`ThreadRefError::Empty`], [`ThreadRefError::NoMatch`],
/// [`ThreadRefError::Ambiguous`] (listing up to five candidates with their titles).
pub fn pick(threads: &[Thread], given: &str) -> Result<ThreadId, ThreadRefError> {
    let given = given.trim();
    if given.is_empty() {
        return Err(ThreadRefError::Empty);
    }
    if let Some(t) = threads.iter().find(|t| t.id.as_str() == given) {
        return Ok(t.id.clone());
    }
    let matches: Vec<&Thread> = threads
        .iter()
        .filter(|t| t.id.as_str().starts_with(given))
        .collect();
    match matches.as_slice() {
        [] => Err(ThreadRefError::NoMatch {
            given: given.to_owned(),
        }),
        [one] => Ok(one.id.clone()),
        many => Err(ThreadRefError::Ambiguous {
            given: given.to_owned(),
            candidates: many
                .iter()
                .take(5)
                .map(|t| format!("{} \"{}\"", t.id, t.title))
                .collect(),
        }),
    }
}

/// The thread `given` names on the server behind `client` (archived threads included):
/// a full id or a unique prefix. Errors: the API's, or a [`ThreadRefError`].
pub async fn resolve(client: &crate::client::ApiClient, given: &str) -> anyhow::Result<ThreadId> {
    let threads: Vec<Thread> = client.get("/api/threads?archived=true").await?;
    Ok(pick(&threads, given)?)
}

/// The 1-based ordinal of a run id (`run:<thread>:<ordinal>`), to print `run 3` rather
/// than the internal id; `None` for an id of another shape.
pub fn run_ordinal(run: &knife_protocol::RunId) -> Option<u32> {
    run.as_str().rsplit(':').next()?.parse().ok()
}

/// The most recently updated thread of the project whose id is `project_id`.
pub fn last(
    threads: &[Thread],
    project_id: &str,
    project: &str,
) -> Result<ThreadId, ThreadRefError> {
    threads
        .iter()
        .filter(|t| t.project_id.as_str() == project_id)
        .max_by_key(|t| t.updated_at)
        .map(|t| t.id.clone())
        .ok_or_else(|| ThreadRefError::NoLast {
            project: project.to_owned(),
        })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn thread(id: &str, project: &str, minute: u32) -> Thread {
        let mut t: Thread = serde_json::from_value(serde_json::json!({
            "id": id, "project_id": project, "title": format!("t {id}"),
            "provider_instance_id": "p", "status": "idle", "run_count": 0,
            "created_at": "2026-12-01T10:00:00Z",
            "updated_at": format!("2026-12-01T10:{minute:02}:00Z"),
        }))
        .unwrap();
        t.title = format!("t {id}");
        t
    }

    #[test]
    fn ux_04_a_unique_prefix_names_its_thread_and_an_ambiguous_one_lists_the_candidates() {
        let threads = vec![
            thread("0a1b2c", "p1", 1),
            thread("0a1fff", "p1", 2),
            thread("9e9e9e", "p2", 3),
        ];
        assert_eq!(pick(&threads, "9").unwrap().as_str(), "9e9e9e");
        assert_eq!(pick(&threads, "0a1b").unwrap().as_str(), "0a1b2c");
        assert_eq!(pick(&threads, "0a1fff").unwrap().as_str(), "0a1fff");
        let err = pick(&threads, "0a1").unwrap_err();
        assert_eq!(
            err.to_string(),
            "`0a1` is the start of 2 thread ids (0a1b2c \"t 0a1b2c\", 0a1fff \"t 0a1fff\"); \
             type more of the id"
        );
        assert!(matches!(
            pick(&threads, "zz"),
            Err(ThreadRefError::NoMatch { .. })
        ));
        assert_eq!(pick(&threads, " "), Err(ThreadRefError::Empty));
        assert_eq!(last(&threads, "p1", "/w").unwrap().as_str(), "0a1fff");
        assert!(matches!(
            last(&threads, "p3", "/w"),
            Err(ThreadRefError::NoLast { .. })
        ));
        let run = knife_protocol::RunId::for_thread(&ThreadId::from("0a1b2c"), 12);
        assert_eq!(run_ordinal(&run), Some(12));
    }
}
