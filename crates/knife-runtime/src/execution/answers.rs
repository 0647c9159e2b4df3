//! Answering runtime requests (tool approvals) on behalf of the API: find the
//! request, check it can still be answered, hand the answer to the live runtime
//! that asked, and return the request once its resolution is stored
//! (`POST /api/threads/{id}/requests/{request_id}`, interactive approvals, docs/2026-11-29-approvals.md).

use std::time::Duration;

use knife_protocol::*;
use knife_store::Store;

use crate::adapter::AdapterError;
use crate::error::RuntimeError;

/// Longest [`crate::ExecutionService::respond_to_request`] waits for the runtime's `resolved` update to be stored.
pub const RESOLUTION_WAIT: Duration = Duration::from_secs(2);

/// The request, when it exists on `thread` and is still `pending` (the first step
/// of [`crate::ExecutionService::respond_to_request`], for callers that reach the runtime another way, e.g.
/// through a session handle).
///
/// Errors: `ThreadNotFound`, `RequestNotFound`, `RequestNotPending`
/// ([`not_pending_reason`]), `Store`.
pub async fn check_pending(
    store: &Store,
    thread: &ThreadId,
    request: &RuntimeRequestId,
) -> Result<RuntimeRequest, RuntimeError> {
    let current = store
        .get_runtime_request(request)
        .await?
        .filter(|r| &r.thread_id == thread);
    let Some(current) = current else {
        if store.get_thread(thread).await?.is_none() {
            return Err(RuntimeError::ThreadNotFound(thread.clone()));
        }
        return Err(RuntimeError::RequestNotFound {
            thread: thread.clone(),
            request: request.clone(),
        });
    };
    if current.status != RuntimeRequestStatus::Pending {
        return Err(RuntimeError::RequestNotPending {
            request: request.clone(),
            reason: not_pending_reason(&current),
        });
    }
    Ok(current)
}

/// `RequestNotPending` for a pending request no live runtime of this server waits on.
pub fn no_live_turn(request: &RuntimeRequestId) -> RuntimeError {
    RuntimeError::RequestNotPending {
        request: request.clone(),
        reason: "no running turn of this server waits for it (the run ended or the server \
                 restarted); it will be marked expired, send a new message instead"
            .into(),
    }
}

/// `RequestNotPending` for an answer the runtime refused with `error`.
pub fn refused(request: &RuntimeRequestId, error: AdapterError) -> RuntimeError {
    RuntimeError::RequestNotPending {
        request: request.clone(),
        reason: match error {
            AdapterError::RequestNotPending(why) => why,
            other => other.to_string(),
        },
    }
}

/// Polls the store (every 10 ms, up to [`RESOLUTION_WAIT`]) until `request` is no
/// longer pending; returns the last row read (the last step of [`crate::ExecutionService::respond_to_request`]).
///
/// Errors: `Store`; `Internal` when the request vanished.
pub async fn wait_resolved(
    store: &Store,
    request: &RuntimeRequestId,
) -> Result<RuntimeRequest, RuntimeError> {
    let deadline = tokio::time::Instant::now() + RESOLUTION_WAIT;
    loop {
        let row = store.get_runtime_request(request).await?.ok_or_else(|| {
            RuntimeError::Internal(format!("runtime request {request} vanished from the store"))
        })?;
        if row.status != RuntimeRequestStatus::Pending || tokio::time::Instant::now() >= deadline {
            return Ok(row);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Why a request that is not pending cannot be answered, for the 409 message.
pub fn not_pending_reason(request: &RuntimeRequest) -> String {
    let when = request
        .resolved_at
        .map(|t| format!(" at {}", t.to_rfc3339()))
        .unwrap_or_default();
    match request.status {
        RuntimeRequestStatus::Pending => "it is still pending".into(),
        RuntimeRequestStatus::Resolved => {
            let decision = request
                .decision
                .map(ApprovalDecision::as_str)
                .unwrap_or("an answer");
            format!("it was already answered with {decision}{when}")
        }
        RuntimeRequestStatus::Expired => match &request.response_capability {
            ResponseCapability::NotResumable { reason } => format!("it expired{when}: {reason}"),
            ResponseCapability::Live { .. } => format!("it expired{when}"),
        },
        RuntimeRequestStatus::Cancelled => {
            format!("it was cancelled{when}: its turn stopped before it was answered")
        }
    }
}
