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
//! - **Handshake rule** (when [`RpcOptions::strict_handshake`] is on, as the drivers
//!   set it): until the child has answered one of our requests (the
//!   handshake's `initialize`), its output must be that answer. A line that is not
//!   JSON, not a JSON-RPC message, or a message that is not the answer (a request or
//!   notification, e.g. knife's own `initialize` echoed back by `cat`) fails every
//!   waiting request, and every later one, with [`RpcError::NotJsonRpc`] quoting the
//!   line, and closes the connection: the program is not the agent knife expected, and
//!   the open fails at once instead of waiting out the timeout.
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

/// Default bound of a driver's first request (`initialize`): 20 s. A real agent answers
/// it within a few seconds of starting (node start-up included); a program that is
/// silent on stdout fails the open after this long instead of the generic
/// [`REQUEST_TIMEOUT`]. Output that is not the answer fails it at once (module docs).
pub const INITIALIZE_TIMEOUT: Duration = Duration::from_secs(20);

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
    /// Whether the handshake rule applies (module docs): before the first answer, any
    /// other output closes the connection with [`RpcError::NotJsonRpc`]. Default false
    /// (everything malformed is counted and skipped); the codex and ACP drivers turn it on.
    pub strict_handshake: bool,
}

impl Default for RpcOptions {
    fn default() -> Self {
        Self {
            request_timeout: REQUEST_TIMEOUT,
            version_field: true,
            strict_handshake: false,
        }
    }
}

/// A message the child sent that is not an answer to one of ours.
#[derive(Clone, Debug, PartialEq)]
pub enum Incoming {
    /// A server→client request; answer it with [`RpcConnection::respond`] using `id`
    /// as given (number or string).
    Request {
        /// The request id, echoed in the answer.
        id: Value,
        /// The method the child calls (e.g. `session/request_permission`).
        method: String,
        /// `params`, or `null` when absent.
        params: Value,
    },
    /// A notification.
    Notification {
        /// The method (e.g. `session/update`, `turn/completed`).
        method: String,
        /// `params`, or `null` when absent.
        params: Value,
    },
}

/// Errors of a JSON-RPC call.
#[derive(Debug, thiserror::Error)]
pub enum RpcError {
    /// No answer within the bound. The session is likely stuck: the caller fails the
    /// open or turn with this message (the manager then releases the session).
    #[error("{method} got no answer from {peer} within {}s; the agent process may be stuck", after.as_secs_f32())]
    Timeout {
        /// The method called.
        method: String,
        /// The child's label (driver and program), for the message.
        peer: String,
        /// How long knife waited.
        after: Duration,
    },
    /// The child closed its output (exited) before answering. The session is gone:
    /// the caller fails the operation; the next turn opens a fresh session.
    #[error("{peer} closed its output before answering {method} (the agent process exited)")]
    Closed {
        /// The method called.
        method: String,
        /// The child's label.
        peer: String,
    },
    /// The child answered with a JSON-RPC error. The caller reports `message` to
    /// the user (the session stays usable).
    #[error("{method} failed in {peer}: {message} (code {code})")]
    Remote {
        /// The method called.
        method: String,
        /// The child's label.
        peer: String,
        /// The JSON-RPC error code.
        code: i64,
        /// The child's error message.
        message: String,
        /// The error's `data`, when the child sent one.
        data: Option<Value>,
    },
    /// The message could not be written (stdin closed): the child is exiting; treat
    /// it like [`RpcError::Closed`].
    #[error(transparent)]
    Send(#[from] ProcessError),
    /// Before its first answer the child wrote something that is not the answer (see
    /// the module docs, "Handshake rule"): it does not speak JSON-RPC over stdio.
    #[error(
        "{peer} does not speak JSON-RPC over stdio: {what} instead of an answer to {method}; its first output was {line}"
    )]
    NotJsonRpc {
        /// The method called.
        method: String,
        /// The child's label.
        peer: String,
        /// What the line was (`a line that is not JSON`, `a request (initialize), e.g. its input echoed back`, …).
        what: String,
        /// The line, quoted and cut to [`QUOTE_CHARS`] characters.
        line: String,
    },
    /// The answer did not have the expected shape (a protocol version knife does not
    /// speak); the caller fails the operation with this message.
    #[error("{method} answered with an unexpected shape: {error}")]
    Decode {
        /// The method called.
        method: String,
        /// The decoder's message (which field, what was expected).
        error: String,
    },
}

/// Characters of a line quoted in [`RpcError::NotJsonRpc`].
pub const QUOTE_CHARS: usize = 120;

/// Why a waiting request ended without a result.
#[derive(Clone, Debug)]
enum Failure {
    /// A JSON-RPC error answer: code, message, data.
    Remote(i64, String, Option<Value>),
    /// The handshake rule was broken: what the line was, and the quoted line.
    NotJsonRpc { what: String, line: String },
}

type Waiter = oneshot::Sender<Result<Value, Failure>>;

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
    /// The waiters; also holds the handshake-rule violation once there was one
    /// (checked under the same lock as `closed`).
    pending: Mutex<Pending>,
    closed: CancellationToken,
}

#[derive(Debug, Default)]
struct Pending {
    waiters: HashMap<u64, Waiter>,
    /// Set when the child broke the handshake rule (module docs).
    violation: Option<Failure>,
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
            pending: Mutex::new(Pending::default()),
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
            if let Some(Failure::NotJsonRpc { what, line }) = &pending.violation {
                return Err(RpcError::NotJsonRpc {
                    method: method.to_owned(),
                    peer: peer(),
                    what: what.clone(),
                    line: line.clone(),
                });
            }
            if self.is_closed() {
                return Err(RpcError::Closed {
                    method: method.to_owned(),
                    peer: peer(),
                });
            }
            pending.waiters.insert(id, tx);
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
            Ok(Ok(Err(Failure::Remote(code, message, data)))) => Err(RpcError::Remote {
                method: method.to_owned(),
                peer: peer(),
                code,
                message,
                data,
            }),
            Ok(Ok(Err(Failure::NotJsonRpc { what, line }))) => Err(RpcError::NotJsonRpc {
                method: method.to_owned(),
                peer: peer(),
                what,
                line,
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
        lock_pending(self.inner).waiters.remove(&self.id);
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
    // The handshake rule holds until the first answer to one of our requests.
    let mut answered = !inner.options.strict_handshake;
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
        let message = classify(&line);
        if !answered && let Some(what) = handshake_violation(&inner, &message) {
            stats.record_malformed(&label, "not a JSON-RPC answer during the handshake", &line);
            tracing::warn!(child = %label, "the agent process does not speak JSON-RPC over stdio (its first output was not an answer); closing the connection");
            let failure = Failure::NotJsonRpc {
                what,
                line: quote(&line),
            };
            let mut pending = lock_pending(&inner);
            for (_, waiter) in pending.waiters.drain() {
                let _ = waiter.send(Err(failure.clone()));
            }
            pending.violation = Some(failure);
            break;
        }
        match message {
            Ok(Message::Incoming(message)) => {
                let _ = incoming.send(message);
            }
            Ok(Message::Answer { id, outcome }) => {
                let waiter = lock_pending(&inner).waiters.remove(&id);
                match waiter {
                    Some(waiter) => {
                        answered = true;
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
    pending.waiters.clear();
    inner.closed.cancel();
}

/// The waiters, also after a panic elsewhere poisoned the lock.
fn lock_pending(inner: &Inner) -> std::sync::MutexGuard<'_, Pending> {
    inner
        .pending
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Before the first answer: what is wrong with `message` (module docs, "Handshake
/// rule"), or `None` when it is the answer to a waiting request.
fn handshake_violation(inner: &Inner, message: &Result<Message, &'static str>) -> Option<String> {
    match message {
        Err("not JSON") => Some("a line that is not JSON".to_owned()),
        Err(reason) => Some(format!("a line that is not a JSON-RPC message ({reason})")),
        Ok(Message::Incoming(Incoming::Request { method, .. })) => Some(format!(
            "a request (`{}`; a program that echoes its input, like `cat`, does this)",
            cut(method, 60)
        )),
        Ok(Message::Incoming(Incoming::Notification { method, .. })) => {
            Some(format!("a notification (`{}`)", cut(method, 60)))
        }
        Ok(Message::Answer { id, .. }) => {
            if lock_pending(inner).waiters.contains_key(id) {
                None
            } else {
                Some(format!("an answer to request {id}, which knife never sent"))
            }
        }
    }
}

/// `line` cut to [`QUOTE_CHARS`] characters and quoted (`"…"` marks a cut).
fn quote(line: &str) -> String {
    format!("{:?}", cut(line, QUOTE_CHARS))
}

fn cut(text: &str, chars: usize) -> String {
    let mut out: String = text.chars().take(chars).collect();
    if text.chars().nth(chars).is_some() {
        out.push('…');
    }
    out
}

/// Whether `line` classifies as a JSON-RPC message (for the SEC-09 fuzz targets).
#[cfg(test)]
pub(crate) fn classifies(line: &str) -> bool {
    classify(line).is_ok()
}

enum Message {
    Incoming(Incoming),
    Answer {
        id: u64,
        outcome: Result<Value, Failure>,
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
            outcome: Err(Failure::Remote(code, message, data)),
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
                outcome: Err(Failure::Remote(-32600, _, None))
            })
        ));
        assert_eq!(classify("{not json").err(), Some("not JSON"));
        assert_eq!(classify("[1,2]").err(), Some("not a JSON object"));
        assert!(classify(r#"{"id":{"x":1},"result":1}"#).is_err());
        assert!(classify(r#"{"id":1}"#).is_err());
    }
}
