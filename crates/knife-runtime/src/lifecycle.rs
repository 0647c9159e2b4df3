//! Thread lifecycle (CHG-08): rename, archive / unarchive, delete (tombstone), the
//! title rules and automatic titles; the hook through which delete drops a thread's
//! worktree and checkpoints ([`ThreadWorkspace`]).
//!
//! Decisions (docs/2026-12-01-thread-lifecycle.md):
//! * archive is refused while a run is active (it releases the provider session the
//!   run works on); a new message to an archived thread unarchives it;
//! * delete is refused while a run is active unless `force`, which stops the run
//!   first (interrupt, then wait up to [`DELETE_STOP_WAIT`] for its terminal write).

use std::sync::Arc;
use std::time::Duration;

use knife_protocol::*;
use knife_store::{EntityKind, RowGuard};

use crate::adapter::InterruptReason;
use crate::error::RuntimeError;
use crate::execution::ExecutionService;

/// Longest a forced delete waits for the stopped run to record its end.
pub const DELETE_STOP_WAIT: Duration = Duration::from_secs(15);

/// How often a lifecycle write is retried when the thread row moved under it (a
/// run writing at the same time); each try re-reads the thread.
const CAS_TRIES: usize = 5;

/// `not_resumable` reason of the runtime requests a delete cancels.
pub const REQUEST_CANCELLED_BY_DELETE: &str =
    "The thread was deleted before this runtime request was answered.";

/// What knife-workspace does for a thread that is deleted (CHG-08): its worktree,
/// the worktree's merged branch and its checkpoints. Installed with
/// [`ExecutionService::with_thread_workspace`]; without one, delete drops only the
/// thread's log state (the hook the checkpoints branch fills in).
#[async_trait::async_trait]
pub trait ThreadWorkspace: Send + Sync + 'static {
    /// Called before anything is changed: `Err(why)` refuses the delete (HTTP 409
    /// `workspace_not_clean`), e.g. while the worktree holds uncommitted or unmerged
    /// work and `force` is false.
    async fn check_delete(&self, thread: &Thread, force: bool) -> Result<(), String>;
    /// Called after the tombstone is committed: removes the worktree, its merged
    /// branch and the checkpoints. A failure is logged (the thread is deleted anyway;
    /// the checkpoint garbage collection picks up what is left).
    async fn drop_thread(&self, thread: &Thread) -> Result<(), String>;
}

/// The shared handle to a [`ThreadWorkspace`].
pub type SharedThreadWorkspace = Arc<dyn ThreadWorkspace>;

/// Checks a title given by a user (rename, create): trimmed, not empty, at most
/// [`TITLE_MAX_CHARS`] characters, no control characters (a title is one line).
/// Returns the trimmed title. Errors: [`RuntimeError::Invalid`] (HTTP 400) saying which rule.
pub fn check_title(title: &str) -> Result<String, RuntimeError> {
    let title = title.trim();
    if title.is_empty() {
        return Err(RuntimeError::Invalid(
            "the title is empty; give the thread a name of 1 to 200 characters".into(),
        ));
    }
    let chars = title.chars().count();
    if chars > TITLE_MAX_CHARS {
        return Err(RuntimeError::Invalid(format!(
            "the title has {chars} characters; a thread title has at most {TITLE_MAX_CHARS}"
        )));
    }
    if title.chars().any(char::is_control) {
        return Err(RuntimeError::Invalid(
            "the title contains control characters (line breaks, tabs…); a title is one line of text"
                .into(),
        ));
    }
    Ok(title.to_owned())
}

/// The automatic title of a thread whose first message is `text` (CHG-08): its first
/// non-blank line, trimmed, cut to [`AUTO_TITLE_MAX_CHARS`] characters (the last one
/// then `…`), control characters replaced by spaces. `None` when the text is blank.
pub fn auto_title(text: &str) -> Option<String> {
    let line = text.lines().map(str::trim).find(|l| !l.is_empty())?;
    let clean: String = line
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if clean.chars().count() <= AUTO_TITLE_MAX_CHARS {
        return Some(clean);
    }
    let mut cut: String = clean.chars().take(AUTO_TITLE_MAX_CHARS - 1).collect();
    cut.truncate(cut.trim_end().len());
    cut.push('…');
    Some(cut)
}

impl ExecutionService {
    /// Renames `thread` (CHG-08). The title is checked with [`check_title`].
    /// Errors: `Invalid`, `ThreadNotFound`, `Conflict` (the row kept moving), `Store`.
    pub async fn rename_thread(
        &self,
        thread: &ThreadId,
        title: &str,
    ) -> Result<Thread, RuntimeError> {
        let title = check_title(title)?;
        self.update_thread(thread, |t, _| {
            t.title = title.clone();
            t.untitled = false;
            Ok(())
        })
        .await
    }

    /// Archives `thread` (CHG-08): sets `archived_at` (default lists hide it), then
    /// detaches it from its provider sessions with its MCP credential revoked (an
    /// exclusive session is released). Nothing is deleted. Archiving an archived
    /// thread changes nothing.
    ///
    /// Errors: [`RuntimeError::ActiveRunRefuses`] (409) while a run is active;
    /// `ThreadNotFound`, `Conflict`, `Store`.
    pub async fn archive_thread(&self, thread: &ThreadId) -> Result<Thread, RuntimeError> {
        if let Some(run) = self.active_run_of(thread).await {
            return Err(RuntimeError::ActiveRunRefuses {
                thread: thread.clone(),
                run,
                action: "archiving",
                hint: "stop it first (`knife threads interrupt`), then archive",
            });
        }
        let archived = self
            .update_thread(thread, |t, now| {
                if t.archived_at.is_none() {
                    t.archived_at = Some(now);
                }
                Ok(())
            })
            .await?;
        self.release_sessions_of(thread, "thread archived").await;
        Ok(archived)
    }

    /// Unarchives `thread` (CHG-08): clears `archived_at`. Its next run opens a
    /// provider session again as usual. Errors: `ThreadNotFound`, `Conflict`, `Store`.
    pub async fn unarchive_thread(&self, thread: &ThreadId) -> Result<Thread, RuntimeError> {
        self.update_thread(thread, |t, _| {
            t.archived_at = None;
            Ok(())
        })
        .await
    }

    /// Deletes `thread` (CHG-08), in this order:
    ///
    /// 1. a run active in this process refuses the delete
    ///    ([`RuntimeError::ActiveRunRefuses`], 409) unless `force`;
    /// 2. the [`ThreadWorkspace`] hook may refuse (uncommitted / unmerged worktree
    ///    work without `force`; [`RuntimeError::WorkspaceNotClean`], 409);
    /// 3. with `force`, the active run is interrupted and its end awaited (up to
    ///    [`DELETE_STOP_WAIT`]);
    /// 4. the thread leaves its provider sessions with its MCP credential revoked
    ///    (MCP-07; an exclusive session is released);
    /// 5. one transaction cancels its pending runtime requests and writes the
    ///    `thread.deleted` tombstone, which drops the thread from the projections;
    /// 6. the hook removes its worktree and checkpoints.
    ///
    /// The events stay in the log until `knife db purge`. Errors: `ThreadNotFound`,
    /// `ActiveRunRefuses`, `WorkspaceNotClean`, `Conflict`, `Store`, `Internal` (the
    /// stopped run did not end in time).
    pub async fn delete_thread(
        &self,
        thread_id: &ThreadId,
        force: bool,
    ) -> Result<DeleteThreadResponse, RuntimeError> {
        let store = self.store();
        let thread = store
            .get_thread(thread_id)
            .await?
            .ok_or_else(|| RuntimeError::ThreadNotFound(thread_id.clone()))?;
        let active = self.active_run_of(thread_id).await;
        if let (Some(run), false) = (&active, force) {
            return Err(RuntimeError::ActiveRunRefuses {
                thread: thread_id.clone(),
                run: run.clone(),
                action: "deleting",
                hint: "stop it first (`knife threads interrupt`), or delete with force \
                       (`knife threads delete --force`, `DELETE …?force=true`), which stops it",
            });
        }
        if let Some(workspace) = self.thread_workspace() {
            workspace
                .check_delete(&thread, force)
                .await
                .map_err(RuntimeError::WorkspaceNotClean)?;
        }
        let mut stopped_run_id = None;
        if self.is_active(thread_id) {
            stopped_run_id = self.interrupt(thread_id, InterruptReason::User).await?;
            if tokio::time::timeout(DELETE_STOP_WAIT, self.await_idle(thread_id))
                .await
                .is_err()
            {
                return Err(RuntimeError::Internal(format!(
                    "the run of thread {thread_id} did not stop within {} s; the thread was not deleted, try again",
                    DELETE_STOP_WAIT.as_secs()
                )));
            }
        }
        self.release_sessions_of(thread_id, "thread deleted").await;
        let deleted_at = self.write_tombstone(thread_id).await?;
        if let Some(workspace) = self.thread_workspace()
            && let Err(why) = workspace.drop_thread(&thread).await
        {
            tracing::warn!(thread = %thread_id, %why, "could not remove the deleted thread's worktree or checkpoints");
        }
        Ok(DeleteThreadResponse {
            thread_id: thread_id.clone(),
            deleted_at,
            stopped_run_id,
        })
    }

    /// The run active in this process on `thread`, if any (a run still being created
    /// is reported as `(starting)`); a run whose turn already ended is waited for
    /// first (it is writing its terminal state).
    async fn active_run_of(&self, thread: &ThreadId) -> Option<RunId> {
        self.wait_if_finishing(thread).await;
        if !self.is_active(thread) {
            return None;
        }
        Some(
            self.active()
                .into_iter()
                .find(|(t, _)| t == thread)
                .map(|(_, r)| r)
                .unwrap_or_else(|| RunId::from("(starting)")),
        )
    }

    /// Detaches `thread` from every provider session bound to it, revoking its MCP
    /// credentials (MCP-07). With no session bound, the credentials are still revoked.
    /// Failures are logged: the session is then released by its idle timer or the reaper.
    async fn release_sessions_of(&self, thread: &ThreadId, why: &str) {
        let mut sessions: Vec<ProviderSessionId> =
            match self.store().thread_projection(thread).await {
                Ok(Some(p)) => p.provider_sessions.into_iter().map(|s| s.id).collect(),
                _ => Vec::new(),
            };
        if sessions.is_empty()
            && let Ok(Some(t)) = self.store().get_thread(thread).await
        {
            // Not live: `detach` then only revokes the thread's credentials.
            sessions.push(ProviderSessionId::exclusive_on(
                &t.provider_instance_id,
                thread,
                self.store().node().node(),
            ));
        }
        for session in sessions {
            if let Err(e) = self
                .manager()
                .detach(&session, thread, Some(why.to_owned()), true)
                .await
            {
                tracing::warn!(%thread, %session, error = %e, "could not release the thread's provider session");
            }
        }
    }

    /// Writes the cancelled pending requests and the tombstone of `thread` in one
    /// compare-and-set transaction on the thread row (retried when a late write of
    /// the stopped run moved it). Returns `deleted_at`.
    async fn write_tombstone(&self, thread: &ThreadId) -> Result<Timestamp, RuntimeError> {
        let store = self.store();
        for _ in 0..CAS_TRIES {
            let version = store
                .row_version(EntityKind::Thread, thread.as_str())
                .await?;
            let Some(projection) = store.thread_projection(thread).await? else {
                return Err(RuntimeError::ThreadNotFound(thread.clone()));
            };
            let now = self.clock().now();
            let mut events: Vec<DomainEvent> = projection
                .runtime_requests
                .iter()
                .filter(|r| r.status == RuntimeRequestStatus::Pending)
                .map(|r| {
                    let mut r = r.clone();
                    r.status = RuntimeRequestStatus::Cancelled;
                    r.resolved_at = Some(now);
                    r.response_capability = ResponseCapability::NotResumable {
                        reason: REQUEST_CANCELLED_BY_DELETE.into(),
                    };
                    DomainEvent::new(now, EventBody::RuntimeRequestUpdated(r))
                })
                .collect();
            events.push(DomainEvent::new(
                now,
                EventBody::ThreadDeleted {
                    thread_id: thread.clone(),
                    deleted_at: now,
                },
            ));
            let guard = RowGuard::new(EntityKind::Thread, thread.as_str(), version);
            if store.write_if(guard, events).await?.is_some() {
                return Ok(now);
            }
        }
        Err(RuntimeError::Conflict)
    }

    /// Applies `change` to the stored thread (stamping `updated_at`) and writes it as
    /// `thread.updated`, compare-and-set on the row, retried [`CAS_TRIES`] times.
    async fn update_thread(
        &self,
        thread_id: &ThreadId,
        change: impl Fn(&mut Thread, Timestamp) -> Result<(), RuntimeError>,
    ) -> Result<Thread, RuntimeError> {
        let store = self.store();
        for _ in 0..CAS_TRIES {
            let version = store
                .row_version(EntityKind::Thread, thread_id.as_str())
                .await?;
            let mut thread = store
                .get_thread(thread_id)
                .await?
                .ok_or_else(|| RuntimeError::ThreadNotFound(thread_id.clone()))?;
            let now = self.clock().now();
            let before = thread.clone();
            change(&mut thread, now)?;
            if thread == before {
                return Ok(thread);
            }
            thread.updated_at = now;
            let guard = RowGuard::new(EntityKind::Thread, thread_id.as_str(), version);
            let event = DomainEvent::new(now, EventBody::ThreadUpdated(thread.clone()));
            if store.write_if(guard, vec![event]).await?.is_some() {
                return Ok(thread);
            }
        }
        Err(RuntimeError::Conflict)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chg_08_auto_title_is_the_first_line_cut_to_60_characters() {
        assert_eq!(
            auto_title("\n  Fix the login bug  \nand more").as_deref(),
            Some("Fix the login bug")
        );
        let long = "é".repeat(100);
        let title = auto_title(&long).unwrap_or_default();
        assert_eq!(title.chars().count(), AUTO_TITLE_MAX_CHARS);
        assert!(title.ends_with('…'));
        assert_eq!(auto_title(" \n\t\n"), None);
        assert_eq!(auto_title(&"x".repeat(60)).map(|t| t.len()), Some(60));
    }

    #[test]
    fn chg_08_title_limits_refuse_empty_long_and_multiline_titles() {
        assert_eq!(check_title("  ok  ").ok().as_deref(), Some("ok"));
        assert!(check_title("   ").is_err());
        assert!(check_title(&"a".repeat(TITLE_MAX_CHARS)).is_ok());
        let err = check_title(&"a".repeat(TITLE_MAX_CHARS + 1))
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("at most 200"), "{err}");
        assert!(check_title("two\nlines").is_err());
    }
}
