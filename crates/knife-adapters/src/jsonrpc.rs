//! JSON-RPC 2.0 over the lines of a supervised child ([`crate::process`]).
//!
//! [`RpcConnection::start`] takes the child and its stdout lines and starts one reader
//! task. It returns the connection (cheap to clone) and a receiver of [`Incoming`]
//! messages: the child's notifications and its server→client requests, in the order
//! the child wrote them. The driver must answer every [`Incoming::Request`] with
//! [`RpcConnection::respond`] or [`RpcConnection::respond_error`].
//!
//! - [`RpcConnection::request`] sends a request with the next integer id and waits for
//!   the answer with the same id, at most [`RpcOptions::request_timeout`] (default
//!   60 s; [`RpcConnection::request_with_timeout`] for another bound). A JSON-RPC
//!   `error` answer becomes [`RpcError::Remote`].
//! - [`RpcConnection::notify`] sends a notification.
//! - A line that is not JSON, not an object, or not a request / notification / answer,
//!   and an answer to an id nobody waits for (late after a timeout, or made up), is
//!   logged and counted in the child's [`LineStats`] (`malformed`) and otherwise ignored.
//! - When stdout closes (the child exited or closed it), or 500 ms after the child
//!   exited when its stdout stays open (a process that left its group inherited it),
//!   every waiting request fails
//!   with [`RpcError::Closed`], the [`Incoming`] receiver ends, and
//!   [`RpcConnection::closed`] resolves. The child's exit status is then in
//!   [`ChildProcess::wait_exit`].
//!
//! Outgoing messages carry `"jsonrpc":"2.0"` unless [`RpcOptions::version_field`] is
//! false (Codex's app-server omits it and ignores it); incoming messages are accepted
//! with or without it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use crate::process::{ChildProcess, LineStats, ProcessError, ProcessLines};

/// How long the output is still read after the process exited when it does not close
/// (a process outside the group inherited it).
const EXIT_DRAIN: Duration = Duration::from_millis(500);

/// Sleeps until `deadline`, or forever without one.
async fn sleep_until_opt(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

/// Default bound of [`RpcConnection::request`].
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

/// JSON-RPC error code "method not found".
pub const METHOD_NOT_FOUND: i64 = -32601;
/// JSON-RPC error code "invalid params".
pub const INVALID_PARAMS: i64 = -32602;
/// JSON-RPC error code "internal error".
pub const INTERNAL_ERROR: i64 = -32603;

/// Settings of a connection.
#[derive(Clone, Debug)]
pub struct RpcOptions {
    /// Bound of [`RpcConnection::request`]; default [`REQUEST_TIMEOUT`].
    pub request_timeout: Duration,
    /// Whether outgoing messages carry `"jsonrpc":"2.0"` (default true).
    pub version_field: bool,
}

impl Default for RpcOptions {
    fn default() -> Self {
        Self {
            request_timeout: REQUEST_TIMEOUT,
            version_field: true,
        }
    }
}

/// A message the child sent that is not an answer to one of ours.
#[derive(Clone, Debug, PartialEq)]
pub enum Incoming {
    /// A server→client request; answer it with [`RpcConnection::respond`] using `id`
    /// as given (number or string).
    Request {
        id: Value,
        method: String,
        /// `params`, or `null` when absent.
        params: Value,
    },
    /// A notification.
    Notification {
        method: String,
        /// `params`, or `null` when absent.
        params: Value,
    },
}

/// Errors of a JSON-RPC call.
#[derive(Debug, thiserror::Error)]
pub enum RpcError {
    /// No answer within the bound.
    #[error("{method} got no answer from {peer} within {}s; the agent process may be stuck", after.as_secs_f32())]
    Timeout {
        method: String,
        peer: String,
        after: Duration,
    },
    /// The child closed its output (exited) before answering.
    #[error("{peer} closed its output before answering {method} (the agent process exited)")]
    Closed { method: String, peer: String },
    /// The child answered with a JSON-RPC error.
    #[error("{method} failed in {peer}: {message} (code {code})")]
    Remote {
        method: String,
        peer: String,
        code: i64,
        message: String,
        data: Option<Value>,
    },
    /// The message could not be written (stdin closed).
    #[error(transparent)]
    Send(#[from] ProcessError),
    /// The answer did not have the expected shape.
    #[error("{method} answered with an unexpected shape: {error}")]
    Decode { method: String, error: String },
}

type Waiter = oneshot::Sender<Result<Value, (i64, String, Option<Value>)>>;

/// A JSON-RPC connection to a child; see the module docs. Cheap to clone.
#[derive(Clone, Debug)]
pub struct RpcConnection {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    child: ChildProcess,
    options: RpcOptions,
    next_id: AtomicU64,
    pending: Mutex<HashMap<u64, Waiter>>,
    closed: CancellationToken,
}

impl RpcConnection {
    /// Starts the reader task over `lines` (see the module docs).
    pub fn start(
        child: ChildProcess,
        lines: ProcessLines,
        options: RpcOptions,
    ) -> (RpcConnection, mpsc::UnboundedReceiver<Incoming>) {
        let inner = Arc::new(Inner {
            child,
            options,
            next_id: AtomicU64::new(1),
            pending: Mutex::new(HashMap::new()),
            closed: CancellationToken::new(),
        });
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(read_loop(Arc::clone(&inner), lines, tx));
        (RpcConnection { inner }, rx)
    }

    /// The child this connection talks to.
    pub fn child(&self) -> &ChildProcess {
        &self.inner.child
    }

    /// Counters of dropped lines (shared with the child).
    pub fn stats(&self) -> Arc<LineStats> {
        self.inner.child.stats()
    }

    /// True once the child's output closed.
    pub fn is_closed(&self) -> bool {
        self.inner.closed.is_cancelled()
    }

    /// Resolves once the child's output closed.
    pub async fn closed(&self) {
        self.inner.closed.cancelled().await;
    }

    /// Sends request `method` and waits for its result, at most
    /// [`RpcOptions::request_timeout`]. Errors: see [`RpcError`].
    pub async fn request(&self, method: &str, params: Value) -> Result<Value, RpcError> {
        self.request_with_timeout(method, params, self.inner.options.request_timeout)
            .await
    }

    /// [`RpcConnection::request`] with a typed param and result.
    pub async fn call<P: Serialize, R: DeserializeOwned>(
        &self,
        method: &str,
        params: &P,
    ) -> Result<R, RpcError> {
        let params = serde_json::to_value(params).map_err(|e| RpcError::Decode {
            method: method.to_owned(),
            error: e.to_string(),
        })?;
        let value = self.request(method, params).await?;
        serde_json::from_value(value).map_err(|e| RpcError::Decode {
            method: method.to_owned(),
            error: e.to_string(),
        })
    }

    /// Sends request `method` and waits for its result at most `timeout`.
    pub async fn request_with_timeout(
        &self,
        method: &str,
        params: Value,
        timeout: Duration,
    ) -> Result<Value, RpcError> {
        let peer = || self.inner.child.label().to_owned();
        let id = self.inner.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        {
            // Checked under the lock the reader holds while it fails the waiters, so a
            // waiter is never added after that (it would wait out the whole timeout).
            let mut pending = lock_pending(&self.inner);
            if self.is_closed() {
                return Err(RpcError::Closed {
                    method: method.to_owned(),
                    peer: peer(),
                });
            }
            pending.insert(id, tx);
        }
        // Forgets the waiter whatever happens (timeout, error, or this future dropped).
        let _forget = Forget {
            inner: &self.inner,
            id,
        };
        let mut message = self.envelope();
        message.insert("id".into(), json!(id));
        message.insert("method".into(), json!(method));
        message.insert("params".into(), params);
        self.send(&Value::Object(message))?;
        match tokio::time::timeout(timeout, rx).await {
            Err(_) => Err(RpcError::Timeout {
                method: method.to_owned(),
                peer: peer(),
                after: timeout,
            }),
            Ok(Err(_)) => Err(RpcError::Closed {
                method: method.to_owned(),
                peer: peer(),
            }),
            Ok(Ok(Ok(value))) => Ok(value),
            Ok(Ok(Err((code, message, data)))) => Err(RpcError::Remote {
                method: method.to_owned(),
                peer: peer(),
                code,
                message,
                data,
            }),
        }
    }

    /// Sends notification `method` (without `params` when they are `null`). Errors: [`RpcError::Send`] when stdin is closed.
    pub fn notify(&self, method: &str, params: Value) -> Result<(), RpcError> {
        let mut message = self.envelope();
        message.insert("method".into(), json!(method));
        if !params.is_null() {
            message.insert("params".into(), params);
        }
        self.send(&Value::Object(message))
    }

    /// Answers server→client request `id` with `result`.
    pub fn respond(&self, id: &Value, result: Value) -> Result<(), RpcError> {
        let mut message = self.envelope();
        message.insert("id".into(), id.clone());
        message.insert("result".into(), result);
        self.send(&Value::Object(message))
    }

    /// Answers server→client request `id` with a JSON-RPC error.
    pub fn respond_error(&self, id: &Value, code: i64, text: &str) -> Result<(), RpcError> {
        let mut message = self.envelope();
        message.insert("id".into(), id.clone());
        message.insert("error".into(), json!({"code": code, "message": text}));
        self.send(&Value::Object(message))
    }

    fn envelope(&self) -> Map<String, Value> {
        let mut message = Map::new();
        if self.inner.options.version_field {
            message.insert("jsonrpc".into(), json!("2.0"));
        }
        message
    }

    fn send(&self, message: &Value) -> Result<(), RpcError> {
        self.inner.child.send_line(&message.to_string())?;
        Ok(())
    }
}

struct Forget<'a> {
    inner: &'a Inner,
    id: u64,
}

impl Drop for Forget<'_> {
    fn drop(&mut self) {
        lock_pending(self.inner).remove(&self.id);
    }
}

async fn read_loop(
    inner: Arc<Inner>,
    mut lines: ProcessLines,
    incoming: mpsc::UnboundedSender<Incoming>,
) {
    let stats = inner.child.stats();
    let label = inner.child.label().to_owned();
    let child = inner.child.clone();
    let exited = child.wait_exit();
    tokio::pin!(exited);
    let mut drain_until: Option<tokio::time::Instant> = None;
    loop {
        let line = tokio::select! {
            biased;
            line = lines.next() => line,
            // The process ended (and its group was cleaned up) but something outside
            // its group still holds its stdout open: read what is buffered, then stop
            // waiting for an EOF that may never come.
            _ = &mut exited, if drain_until.is_none() => {
                drain_until = Some(tokio::time::Instant::now() + EXIT_DRAIN);
                continue;
            }
            () = sleep_until_opt(drain_until) => {
                tracing::warn!(child = %label, "the agent process exited but its output stays open (a process outside its group holds it); treating the connection as closed");
                break;
            }
        };
        let Some(line) = line else {
            break;
        };
        match classify(&line) {
            Ok(Message::Incoming(message)) => {
                let _ = incoming.send(message);
            }
            Ok(Message::Answer { id, outcome }) => {
                let waiter = lock_pending(&inner).remove(&id);
                match waiter {
                    Some(waiter) => {
                        let _ = waiter.send(outcome);
                    }
                    None => {
                        stats.record_malformed(&label, "answer to an unknown request id", &line)
                    }
                }
            }
            Err(reason) => stats.record_malformed(&label, reason, &line),
        }
    }
    // stdout closed: fail every waiter (dropping its sender) and end the stream; under
    // the lock, so no request registers a waiter after this (see `request_with_timeout`).
    let mut pending = lock_pending(&inner);
    pending.clear();
    inner.closed.cancel();
}

/// The waiters, also after a panic elsewhere poisoned the lock.
fn lock_pending(inner: &Inner) -> std::sync::MutexGuard<'_, HashMap<u64, Waiter>> {
    inner.pending.lock().unwrap_or_else(|e| e.into_inner())
}

enum Message {
    Incoming(Incoming),
    Answer {
        id: u64,
        outcome: Result<Value, (i64, String, Option<Value>)>,
    },
}

fn classify(line: &str) -> Result<Message, &'static str> {
    let value: Value = serde_json::from_str(line).map_err(|_| "not JSON")?;
    let Value::Object(mut object) = value else {
        return Err("not a JSON object");
    };
    let id = object.remove("id").filter(|id| !id.is_null());
    if let Some(method) = object.get("method").and_then(Value::as_str) {
        let method = method.to_owned();
        let params = object.remove("params").unwrap_or(Value::Null);
        return Ok(Message::Incoming(match id {
            Some(id) => Incoming::Request { id, method, params },
            None => Incoming::Notification { method, params },
        }));
    }
    let id = id
        .and_then(|id| match id {
            Value::Number(n) => n.as_u64(),
            Value::String(s) => s.parse().ok(),
            _ => None,
        })
        .ok_or("neither a request, a notification nor an answer with a known id type")?;
    if let Some(result) = object.remove("result") {
        return Ok(Message::Answer {
            id,
            outcome: Ok(result),
        });
    }
    if let Some(error) = object.remove("error") {
        let code = error.get("code").and_then(Value::as_i64).unwrap_or(0);
        let message = error
            .get("message")
            .and_then(Value::as_str)
            .unwrap_or("no message")
            .to_owned();
        let data = error.get("data").cloned();
        return Ok(Message::Answer {
            id,
            outcome: Err((code, message, data)),
        });
    }
    Err("an answer without result or error")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn classifies_requests_notifications_and_answers() {
        let Ok(Message::Incoming(Incoming::Request { id, method, .. })) =
            classify(r#"{"id":"a","method":"item/commandExecution/requestApproval","params":{}}"#)
        else {
            panic!("not a request");
        };
        assert_eq!(
            (id, method.as_str()),
            (json!("a"), "item/commandExecution/requestApproval")
        );
        assert!(matches!(
            classify(r#"{"method":"turn/started"}"#),
            Ok(Message::Incoming(Incoming::Notification {
                params: Value::Null,
                ..
            }))
        ));
        assert!(matches!(
            classify(r#"{"jsonrpc":"2.0","id":7,"result":{"ok":true}}"#),
            Ok(Message::Answer {
                id: 7,
                outcome: Ok(_)
            })
        ));
        assert!(matches!(
            classify(r#"{"id":8,"error":{"code":-32600,"message":"bad"}}"#),
            Ok(Message::Answer {
                id: 8,
                outcome: Err((-32600, _, None))
            })
        ));
        assert_eq!(classify("{not json").err(), Some("not JSON"));
        assert_eq!(classify("[1,2]").err(), Some("not a JSON object"));
        assert!(classify(r#"{"id":{"x":1},"result":1}"#).is_err());
        assert!(classify(r#"{"id":1}"#).is_err());
    }
}
