//! Closing a provider session another node runs (SPEC.md SCALE-06): the node that took
//! `POST /api/sessions/{id}/close` writes a `session.command`; the session's node closes it.
//!
//! The same channel as the thread commands (execution/remote.rs): a durable event, a
//! NOTIFY wake-up on PostgreSQL, the command listener of every node following the log.
//! Only the node the session id names applies it (a session runs on one node: only that
//! node can stop its process), so a command is applied once at most.

use futures::StreamExt;
use knife_store::StreamFilter;

use super::*;

/// What became of a close sent to another node ([`ExecutionService::close_remote_session`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RemoteClose {
    /// The session's node answered.
    Answered(SessionCommandOutcome),
    /// No answer within [`COMMAND_WAIT`]: the node is gone or cannot write.
    NoAnswer,
}

impl ExecutionService {
    /// Asks node `node` to close provider session `id` through the log and waits up to
    /// [`COMMAND_WAIT`] for its answer. Errors: `Store` (writing the command).
    pub async fn close_remote_session(
        &self,
        id: &ProviderSessionId,
        node: &str,
    ) -> Result<RemoteClose, RuntimeError> {
        let store = &self.inner.store;
        let now = self.inner.clock.now();
        let command = SessionCommand {
            id: SessionCommandId::new(),
            provider_session_id: id.clone(),
            node: node.to_owned(),
            from_node: store.node().node().to_owned(),
            issued_at: now,
            action: SessionAction::Close,
        };
        let command_id = command.id.clone();
        let stored = store
            .write(vec![DomainEvent::new(
                now,
                EventBody::SessionCommanded(command),
            )])
            .await?;
        let after = stored.last().map_or(0, |e| e.sequence);
        let mut answers = store.stream(StreamFilter {
            thread_id: None,
            after,
            event_type: Some(SESSION_COMMAND_APPLIED.to_owned()),
        });
        let answer = async {
            while let Some(event) = answers.next().await {
                if let EventBody::SessionCommandApplied(applied) = event?.event.body
                    && applied.command_id == command_id
                {
                    return Ok(Some(applied.outcome));
                }
            }
            Ok::<_, knife_store::StoreError>(None)
        };
        match tokio::time::timeout(COMMAND_WAIT, answer).await {
            Ok(Ok(Some(outcome))) => Ok(RemoteClose::Answered(outcome)),
            Ok(Ok(None)) => Ok(RemoteClose::NoAnswer),
            Ok(Err(e)) => Err(e.into()),
            Err(_) => {
                tracing::warn!(session = %id, %node, command = %command_id,
                    "the session's node did not answer the close in time");
                Ok(RemoteClose::NoAnswer)
            }
        }
    }

    /// Applies a `session.command` for a session of this node in the background (the
    /// same release as a local close), then appends the answer; commands for other
    /// nodes' sessions are left to them.
    pub(super) fn on_session_command(&self, command: SessionCommand) {
        let store = &self.inner.store;
        if command.node != store.node().node() {
            return;
        }
        let this = self.clone();
        tokio::spawn(async move {
            let id = &command.provider_session_id;
            let manager = this.manager();
            let outcome = if !manager.is_live(id) {
                SessionCommandOutcome::NotLive
            } else {
                match manager.close(id).await {
                    Ok(()) => SessionCommandOutcome::Closed,
                    Err(e) => SessionCommandOutcome::Failed {
                        reason: e.to_string(),
                    },
                }
            };
            let store = &this.inner.store;
            let now = this.inner.clock.now();
            let applied = SessionCommandApplied {
                command_id: command.id.clone(),
                provider_session_id: id.clone(),
                node: store.node().node().to_owned(),
                applied_at: now,
                outcome,
            };
            let event = DomainEvent::new(now, EventBody::SessionCommandApplied(applied));
            if let Err(e) = store.write(vec![event]).await {
                tracing::warn!(session = %id, command = %command.id, error = %e,
                    "could not record the answer to a session command; its sender times out");
            }
        });
    }
}
