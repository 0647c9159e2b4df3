//! Forking a thread after one of its runs (CHG-09): a new thread whose history is
//! the source's runs `1..=after_run` (copied turn items and runs, the source
//! untouched); a runtime with its own history forks it natively (codex `thread/fork`).

use std::path::PathBuf;

use knife_protocol::*;

use crate::adapter::{ForkSupport, ForkThreadInput};
use crate::error::RuntimeError;
use crate::execution::ExecutionService;
use crate::sessions::OpenRequest;

/// Suffix of a fork's default title.
const FORK_TITLE_SUFFIX: &str = " (fork)";

impl ExecutionService {
    /// Forks `source` after run `request.after_run` (default: its last finished run)
    /// and returns the new thread (idle, `forked_from` set, `run_count = after_run`).
    ///
    /// In one transaction: `thread.created`, a copy of each run `1..=after_run` and of
    /// its turn items under the new thread's ids, and — for a runtime that forks
    /// natively ([`ForkSupport::Native`]) — the new thread's provider thread, which the
    /// runtime created first (the source's provider session is opened for that). The
    /// built-in agent replays the copied items; codex continues its forked native
    /// thread. The source is not changed.
    ///
    /// Errors: `ThreadNotFound`; `Invalid` (no such run, run still active, bad
    /// title); [`RuntimeError::ForkUnsupported`] (ACP, or codex without the turn's
    /// native id); `SessionOpen` / `Session` when the runtime fails; `Store`.
    pub async fn fork_thread(
        &self,
        source_id: &ThreadId,
        request: ForkThreadRequest,
    ) -> Result<Thread, RuntimeError> {
        let store = self.store();
        let source = store
            .thread_projection(source_id)
            .await?
            .ok_or_else(|| RuntimeError::ThreadNotFound(source_id.clone()))?;
        let instance = source.thread.provider_instance_id.clone();
        let support = self.manager().fork_support(&instance).ok_or_else(|| {
            RuntimeError::Invalid(format!(
                "provider instance `{instance}` of thread {source_id} is not configured; add it to knife.toml to fork the thread"
            ))
        })?;
        if let ForkSupport::Unsupported(reason) = support {
            return Err(RuntimeError::ForkUnsupported {
                thread: source_id.clone(),
                driver: self.manager().driver(&instance).unwrap_or_default(),
                instance,
                reason,
            });
        }
        let after = match request.after_run {
            Some(n) => n,
            None => source
                .runs
                .iter()
                .filter(|r| r.status.is_terminal())
                .map(|r| r.ordinal)
                .max()
                .ok_or_else(|| {
                    RuntimeError::Invalid(format!(
                        "thread {source_id} has no finished run to fork after; send it a message first"
                    ))
                })?,
        };
        let Some(last) = source.runs.iter().find(|r| r.ordinal == after) else {
            return Err(RuntimeError::Invalid(format!(
                "thread {source_id} has no run {after}; it has runs 1 to {} (`knife threads show {source_id}`)",
                source.thread.run_count
            )));
        };
        if !last.status.is_terminal() {
            return Err(RuntimeError::Invalid(format!(
                "run {after} of thread {source_id} is still {}; fork after a finished run",
                format!("{:?}", last.status).to_lowercase()
            )));
        }
        let title = match request.title.as_deref().map(str::trim) {
            Some(t) if !t.is_empty() => crate::lifecycle::check_title(t)?,
            _ => fork_title(&source.thread.title),
        };
        let now = self.clock().now();
        let target = ThreadId::new();
        let mut events = Vec::new();
        match support {
            ForkSupport::Replay | ForkSupport::Unsupported(_) => {}
            ForkSupport::Native => {
                let record = self.fork_natively(&source, after, &target).await?;
                events.push(DomainEvent::new(
                    now,
                    EventBody::ProviderThreadUpdated(record),
                ));
            }
        }
        let thread = Thread {
            id: target.clone(),
            project_id: source.thread.project_id.clone(),
            title,
            provider_instance_id: instance,
            model: source.thread.model.clone(),
            status: ThreadStatus::Idle,
            active_run_id: None,
            run_count: after,
            last_error: None,
            created_at: now,
            updated_at: now,
            agent_status: None,
            claimed_at: None,
            resume_attempts: 0,
            parent_thread_id: None,
            archived_at: None,
            untitled: false,
            forked_from: Some(ThreadFork {
                thread_id: source_id.clone(),
                after_run: after,
            }),
            // A fork works in the project root: it does not share the source's
            // worktree (CHG-07), whose branch stays the source's.
            worktree: None,
            queue: Default::default(),
            budget_raise: None,
        };
        let mut copied = vec![DomainEvent::new(
            now,
            EventBody::ThreadCreated(thread.clone()),
        )];
        copied.extend(copy_history(&source, after, &target, now));
        copied.extend(events);
        store.write(copied).await?;
        Ok(thread)
    }

    /// Asks the source's runtime to fork its native thread through the last native
    /// turn of runs `1..=after` (opening the source's session for it) and returns the
    /// target's provider thread.
    async fn fork_natively(
        &self,
        source: &ThreadProjection,
        after: u32,
        target: &ThreadId,
    ) -> Result<ProviderThread, RuntimeError> {
        let thread = &source.thread;
        let instance = &thread.provider_instance_id;
        let unsupported = |reason: String| RuntimeError::ForkUnsupported {
            thread: thread.id.clone(),
            instance: instance.clone(),
            driver: self.manager().driver(instance).unwrap_or_default(),
            reason,
        };
        let native = source
            .provider_threads
            .iter()
            .rev()
            .find(|p| &p.provider_instance_id == instance && p.native_id.is_some())
            .and_then(|p| p.native_id.clone())
            .ok_or_else(|| {
                unsupported(
                    "the runtime never reported a conversation for this thread, so there is nothing to fork"
                        .into(),
                )
            })?;
        let run_of = |turn: &ProviderTurn| {
            source
                .runs
                .iter()
                .find(|r| r.id == turn.run_id)
                .map(|r| r.ordinal)
        };
        let mut turns: Vec<(u32, u32, &ProviderTurn)> = source
            .provider_turns
            .iter()
            .filter_map(|t| Some((run_of(t)?, t.ordinal, t)))
            .collect();
        turns.sort_by_key(|(run, attempt, _)| (*run, *attempt));
        let last_native_turn_id = turns
            .iter()
            .rev()
            .filter(|(run, _, _)| *run <= after)
            .find_map(|(_, _, t)| t.native_turn_id.clone());
        let later_turns = turns.iter().any(|(run, _, _)| *run > after);
        if last_native_turn_id.is_none() && later_turns {
            return Err(unsupported(format!(
                "the runtime did not report its turn id for run {after} (runs recorded before \
                 knife kept it), so it cannot be told where to cut; fork after the last run instead"
            )));
        }
        let project = self
            .store()
            .get_project(&thread.project_id)
            .await?
            .ok_or_else(|| RuntimeError::ProjectNotFound(thread.project_id.clone()))?;
        let shared = self
            .manager()
            .capabilities(instance)
            .is_some_and(|c| c.shared_sessions);
        let session_id = if shared {
            ProviderSessionId::shared_on(instance, self.store().node().node())
        } else {
            ProviderSessionId::exclusive_on(instance, &thread.id, self.store().node().node())
        };
        let root = PathBuf::from(&project.root);
        let mut open = OpenRequest::new(session_id, thread.id.clone(), instance.clone(), &root);
        open.model = thread.model.clone();
        open.native_thread_id = Some(native.clone());
        let handle = self.manager().open(open).await?;
        handle
            .runtime()
            .fork_thread(ForkThreadInput {
                source_thread_id: thread.id.clone(),
                source_native_thread_id: native,
                last_native_turn_id,
                target_thread_id: target.clone(),
                cwd: root,
                model: thread.model.clone(),
            })
            .await
            .map_err(|e| RuntimeError::Session(crate::sessions::SessionError::Runtime(e)))
    }
}

/// `<title> (fork)`, cut so it stays within [`TITLE_MAX_CHARS`].
fn fork_title(title: &str) -> String {
    let room = TITLE_MAX_CHARS - FORK_TITLE_SUFFIX.chars().count();
    let base: String = title.chars().take(room).collect();
    format!("{}{FORK_TITLE_SUFFIX}", base.trim_end())
}

/// The events that copy runs `1..=after` of `source` and their turn items into
/// thread `target`: run ids `run:<target>:<n>`, user-message items under the new run's
/// id, other items `fork:<target>:<old id>`; statuses, texts and ordinals kept.
fn copy_history(
    source: &ThreadProjection,
    after: u32,
    target: &ThreadId,
    now: Timestamp,
) -> Vec<DomainEvent> {
    let mut events = Vec::new();
    let mut runs = std::collections::HashMap::new();
    for run in source.runs.iter().filter(|r| r.ordinal <= after) {
        let id = RunId::for_thread(target, run.ordinal);
        let mut copy = run.clone();
        copy.id = id.clone();
        copy.thread_id = target.clone();
        copy.user_message_id = TurnItemId::user_message_of(&id);
        runs.insert(run.id.clone(), (run.clone(), id));
        events.push(DomainEvent::new(now, EventBody::RunCreated(copy)));
    }
    for item in &source.turn_items {
        let Some((run, new_run)) = item.run_id.as_ref().and_then(|r| runs.get(r)) else {
            continue;
        };
        let mut copy = item.clone();
        copy.id = if item.id == run.user_message_id {
            TurnItemId::user_message_of(new_run)
        } else {
            TurnItemId(format!("fork:{target}:{}", item.id))
        };
        copy.thread_id = target.clone();
        copy.run_id = Some(new_run.clone());
        copy.provider_turn_id = None;
        events.push(DomainEvent::new(now, EventBody::TurnItemUpdated(copy)));
    }
    events
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chg_09_fork_titles_stay_within_the_limit() {
        assert_eq!(fork_title("Login bug"), "Login bug (fork)");
        let long = fork_title(&"t".repeat(TITLE_MAX_CHARS));
        assert_eq!(long.chars().count(), TITLE_MAX_CHARS);
        assert!(long.ends_with(" (fork)"));
    }
}
