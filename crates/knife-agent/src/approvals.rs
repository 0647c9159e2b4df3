//! Interactive tool approvals of the built-in agent (docs/2026-11-29-approvals.md).
//!
//! When the permission rules answer `ask` for a call and the session's
//! [`ToolPolicy`](crate::ToolPolicy) has no automatic gate, the agent loop:
//!
//! 1. registers a fresh [`RuntimeRequestId`] with the session's [`ApprovalBroker`];
//! 2. emits, through the session's adapter events, an approval node (`waiting`), a
//!    transcript item [`TurnItemKind::Approval`] with id `item:<request id>`
//!    (`waiting`), the tool item as `waiting`, and the runtime request (`pending`,
//!    `responseCapability: live{providerSessionId}`, [`ToolApproval`] details);
//! 3. waits for [`ApprovalBroker::answer`] (called by
//!    `SessionRuntime::respond_to_runtime_request`), then marks request, node and
//!    item `resolved` / `completed` with the decision and the user's message.
//!
//! `allow_once` runs the call; `allow_always` runs it and remembers an allow for
//! the same tool on the same exact subject for the rest of the **session** (in
//! memory: a new session, e.g. after a restart or an idle release, asks again;
//! `deny` rules still win, they never reach the broker); `deny` does not run it and
//! the model reads "the user denied this … call: <message>".
//!
//! An interrupt while waiting drops the wait: the broker forgets the request (a
//! late answer gets [`AdapterError::RequestNotPending`]) and the recorder settles
//! request `cancelled`, node and item `cancelled`, tool item failed "Tool execution
//! aborted" (PROC-08).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use knife_protocol::*;
use knife_runtime::AdapterError;
use tokio::sync::oneshot;

/// A session's open approval requests and its `allow_always` grants. Shared by the
/// session (answers arrive there) and its turn tasks (which wait).
#[derive(Debug, Default)]
pub(crate) struct ApprovalBroker {
    pending: Mutex<HashMap<RuntimeRequestId, oneshot::Sender<RequestAnswer>>>,
    /// `(tool, subject)` pairs answered `allow_always` on this session.
    always: Mutex<Vec<(String, String)>>,
}

/// Removes its request from the broker when the wait ends or is dropped.
pub(crate) struct PendingGuard {
    broker: Arc<ApprovalBroker>,
    id: RuntimeRequestId,
}

impl Drop for PendingGuard {
    fn drop(&mut self) {
        if let Ok(mut pending) = self.broker.pending.lock() {
            pending.remove(&self.id);
        }
    }
}

impl ApprovalBroker {
    /// Opens request `id`: the receiver gets the answer; dropping the guard
    /// forgets the request.
    pub(crate) fn register(
        self: &Arc<Self>,
        id: RuntimeRequestId,
    ) -> (oneshot::Receiver<RequestAnswer>, PendingGuard) {
        let (tx, rx) = oneshot::channel();
        if let Ok(mut pending) = self.pending.lock() {
            pending.insert(id.clone(), tx);
        }
        (
            rx,
            PendingGuard {
                broker: Arc::clone(self),
                id,
            },
        )
    }

    /// Delivers `answer` to the turn waiting on request `id`.
    ///
    /// Errors: [`AdapterError::RequestNotPending`] when no turn of this session
    /// waits on `id` (unknown, already answered, or the turn stopped meanwhile).
    pub(crate) fn answer(
        &self,
        id: &RuntimeRequestId,
        answer: RequestAnswer,
    ) -> Result<(), AdapterError> {
        let sender = self.pending.lock().ok().and_then(|mut p| p.remove(id));
        let not_pending = || {
            AdapterError::RequestNotPending(format!(
                "no turn of this session is waiting on request {id}: it is unknown, was \
                 already answered, or its turn stopped; check the request's status with \
                 GET /api/threads/<thread>/requests"
            ))
        };
        match sender {
            Some(tx) => tx.send(answer).map_err(|_| not_pending()),
            None => Err(not_pending()),
        }
    }

    /// Whether `allow_always` was answered for `tool` on exactly `subject`.
    pub(crate) fn always_allows(&self, tool: &str, subject: &str) -> bool {
        self.always
            .lock()
            .map(|a| a.iter().any(|(t, s)| t == tool && s == subject))
            .unwrap_or(false)
    }

    /// Remembers an `allow_always` for `tool` on `subject` (rest of the session).
    pub(crate) fn grant_always(&self, tool: &str, subject: &str) {
        if let Ok(mut always) = self.always.lock()
            && !always.iter().any(|(t, s)| t == tool && s == subject)
        {
            always.push((tool.to_owned(), subject.to_owned()));
        }
    }
}

/// The runtime-request kind of an approval for `tool`: `command` for `bash`,
/// `file_change` for `write` / `edit`, `file_read` for read-only tools, `command`
/// for anything else that mutates.
pub(crate) fn request_kind(tool: &str, mutating: bool) -> RuntimeRequestKind {
    match tool {
        "bash" => RuntimeRequestKind::Command,
        "write" | "edit" => RuntimeRequestKind::FileChange,
        _ if mutating => RuntimeRequestKind::Command,
        _ => RuntimeRequestKind::FileRead,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn allow() -> RequestAnswer {
        RequestAnswer {
            decision: ApprovalDecision::AllowOnce,
            message: None,
        }
    }

    #[tokio::test]
    async fn an_answer_reaches_the_waiter_once() {
        let broker = Arc::new(ApprovalBroker::default());
        let id = RuntimeRequestId::from("request_1");
        let (rx, _guard) = broker.register(id.clone());
        broker.answer(&id, allow()).unwrap();
        assert_eq!(rx.await.unwrap(), allow());
        let again = broker.answer(&id, allow()).unwrap_err();
        assert!(matches!(again, AdapterError::RequestNotPending(_)));
        assert!(again.to_string().contains("request_1"), "{again}");
    }

    #[test]
    fn a_dropped_wait_forgets_the_request() {
        let broker = Arc::new(ApprovalBroker::default());
        let id = RuntimeRequestId::from("request_2");
        let (rx, guard) = broker.register(id.clone());
        drop((rx, guard));
        assert!(broker.answer(&id, allow()).is_err());
        assert!(
            broker
                .answer(&RuntimeRequestId::from("nope"), allow())
                .is_err()
        );
    }

    #[test]
    fn always_grants_are_per_tool_and_exact_subject() {
        let broker = ApprovalBroker::default();
        broker.grant_always("bash", "cargo test");
        broker.grant_always("bash", "cargo test");
        assert!(broker.always_allows("bash", "cargo test"));
        assert!(!broker.always_allows("bash", "cargo test --all"));
        assert!(!broker.always_allows("write", "cargo test"));
        assert_eq!(broker.always.lock().unwrap().len(), 1);
    }
}
