//! A run stopped through another node whose driver died before it applied the stop
//! (SPEC.md SCALE-06): the takeover (or restart) ends it as the stop asked, never resumes it.

use knife_protocol::*;
use knife_store::{EntityKind, RowGuard, Store, StreamFilter};

use crate::error::RuntimeError;
use crate::execution::runs::{Created, OpenRun, end_unfinished_runs, open_run};

/// Most `thread.command` events of one thread read when looking for a stop.
const COMMANDS_READ: usize = 10_000;

/// The reason of an interrupt commanded for `run` of `thread` (a `thread.command` an API
/// request on another node wrote), applied or not: the user asked to stop that run.
/// Errors: `Store`.
pub(crate) async fn stop_asked(
    store: &Store,
    thread: &ThreadId,
    run: &RunId,
) -> Result<Option<CommandInterruptReason>, RuntimeError> {
    let filter = StreamFilter {
        thread_id: Some(thread.clone()),
        after: 0,
        event_type: Some(THREAD_COMMAND.to_owned()),
    };
    let commands = store.read_events(&filter, COMMANDS_READ).await?;
    Ok(commands.into_iter().find_map(|e| match e.event.body {
        EventBody::ThreadCommanded(ThreadCommand {
            run_id,
            action: CommandAction::Interrupt { reason },
            ..
        }) if &run_id == run => Some(reason),
        _ => None,
    }))
}

/// Ends the active run of `thread` (row at `version`) as a commanded stop with `reason`,
/// in one transaction, as its own node's terminal write would have: run `interrupted`
/// with that reason, claim released; `user` pauses what waits in the queue (TURN-02);
/// `superseded` opens the next queued message's run in the same transaction
/// ([`Created::Next`]). Otherwise [`Created::Stopped`]. The lease is let go when no run
/// follows. Errors: `Conflict` (the row moved), `Store`.
pub(crate) async fn stop(
    store: &Store,
    version: Option<i64>,
    mut thread: Thread,
    reason: CommandInterruptReason,
    now: Timestamp,
) -> Result<Created, RuntimeError> {
    let why = match reason {
        CommandInterruptReason::User => "user",
        CommandInterruptReason::Superseded => "superseded",
    };
    let error = RunError {
        code: Some(why.to_owned()),
        ..RunError::new("interrupted", format!("the run was interrupted ({why})"))
    };
    let mut events =
        end_unfinished_runs(store, &thread, RunStatus::Interrupted, &error, now).await?;
    thread.active_run_id = None;
    thread.status = ThreadStatus::Idle;
    if thread.agent_status.is_some() {
        thread.agent_status = Some(AgentStatus::Idle);
    }
    thread.updated_at = now;
    thread.release_claim();
    if reason == CommandInterruptReason::User {
        crate::execution::queue::pause_if_waiting(
            &mut thread,
            QueuePauseReason::UserInterrupt,
            now,
        );
    }
    let next = match thread.queue.next_to_start().cloned() {
        Some(entry) if reason == CommandInterruptReason::Superseded => store
            .get_project(&thread.project_id)
            .await?
            .map(|project| (entry, project)),
        _ => None,
    };
    let next = match next {
        Some((entry, project)) => {
            thread.queue.entries.retain(|e| e.id != entry.id);
            let model = entry.model.clone().or_else(|| thread.model.clone());
            let (run, opened) = open_run(
                &mut thread,
                OpenRun {
                    text: &entry.text,
                    model,
                    origin: MessageOrigin::User,
                    description: None,
                    user_text: Some(&entry.text),
                },
                now,
            );
            events.extend(opened);
            Some((project, run, entry.text))
        }
        None => {
            events.push(DomainEvent::new(
                now,
                EventBody::ThreadUpdated(thread.clone()),
            ));
            None
        }
    };
    let guard = RowGuard::new(EntityKind::Thread, thread.id.as_str(), version);
    if store.write_if(guard, events).await?.is_none() {
        return Err(RuntimeError::Conflict);
    }
    tracing::info!(thread = %thread.id, reason = why,
        "ended a run stopped through another node instead of resuming it");
    Ok(match next {
        Some((project, run, text)) => Created::Next(Box::new((thread, project, run, text))),
        None => {
            if let Err(e) = store.let_go(&thread.id).await {
                tracing::warn!(thread = %thread.id, error = %e, "could not release the thread's lease; it runs out");
            }
            Created::Stopped
        }
    })
}
