//! The HTTP server loop (SPEC.md SEC-04): hyper's HTTP/1.1 connections over an
//! accept loop with a connection cap, a header read timeout and graceful drain.
//!
//! axum's `serve` has neither a header timeout nor a connection cap, so idle sockets
//! could exhaust file descriptors before any authentication. Here every accepted
//! socket takes a permit of a semaphore (`max_connections`); past the cap a new
//! connection is answered `503` at once (one non-blocking write) and closed. hyper's
//! `header_read_timeout` closes a connection whose request head does not arrive in
//! time (also between keep-alive requests). HTTP/1.1 only: knife's clients (CLI,
//! browsers, MCP clients) speak it, and HTTP/2 detection would read the first bytes
//! of every connection with no timeout at all.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// Default cap on concurrent connections: above the 1,000 live subscribers the
/// streaming target asks for (LIVE), with room for API calls beside them.
pub const DEFAULT_MAX_CONNECTIONS: usize = 4096;
/// Default time a client has to send a request head (seconds).
pub const DEFAULT_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// Bounds of the server loop (`[server]` in knife.toml).
#[derive(Clone, Debug)]
pub struct ServerLimits {
    /// Connections open at once; one more is refused with 503 and closed.
    pub max_connections: usize,
    /// A connection whose request head (request line + headers) has not fully
    /// arrived this long after it was awaited is closed.
    pub header_read_timeout: Duration,
}

impl Default for ServerLimits {
    fn default() -> Self {
        Self {
            max_connections: DEFAULT_MAX_CONNECTIONS,
            header_read_timeout: DEFAULT_HEADER_READ_TIMEOUT,
        }
    }
}

/// Serves `router` on `listener` until `shutdown` resolves; then stops accepting,
/// asks every connection to finish its current request (idle keep-alive connections
/// close at once) and waits for them. Upgraded connections (WebSocket) live on in
/// their own tasks and end with the server's `closing` token.
///
/// Every accepted socket gets `TCP_NODELAY` (small SSE frames and WebSocket
/// messages go out at once). Accept errors (e.g. out of file descriptors) are
/// logged and retried after a short pause instead of ending the server.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: ServerLimits,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let permits = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let stop = CancellationToken::new();
    let connections = TaskTracker::new();
    tokio::pin!(shutdown);
    let mut refused: u64 = 0;
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = &mut shutdown => break,
        };
        let (socket, peer) = match accepted {
            Ok(pair) => pair,
            Err(e) => {
                // EMFILE/ENFILE and friends: the listener stays usable once
                // descriptors free up; a tight loop would only burn a core.
                tracing::warn!(error = %e, "cannot accept a connection; retrying shortly");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Ok(permit) = Arc::clone(&permits).try_acquire_owned() else {
            refused += 1;
            if refused.is_power_of_two() {
                tracing::warn!(
                    %peer,
                    refused,
                    max_connections = limits.max_connections,
                    "connection refused: the server holds [server] max_connections already"
                );
            }
            refuse(socket);
            continue;
        };
        if let Err(e) = socket.set_nodelay(true) {
            tracing::debug!(%peer, error = %e, "cannot set TCP_NODELAY");
        }
        let service = TowerToHyperService::new(router.clone());
        let stop = stop.clone();
        let timeout = limits.header_read_timeout;
        connections.spawn(async move {
            let _permit = permit;
            serve_connection(socket, peer, service, timeout, stop).await;
        });
    }
    drop(listener);
    stop.cancel();
    connections.close();
    connections.wait().await;
    Ok(())
}

/// One connection: HTTP/1.1 with upgrades, until the client leaves or `stop` asks
/// for a graceful end (the request in flight finishes first).
async fn serve_connection(
    socket: TcpStream,
    peer: SocketAddr,
    service: TowerToHyperService<Router>,
    header_read_timeout: Duration,
    stop: CancellationToken,
) {
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(header_read_timeout)
        .keep_alive(true);
    let conn = builder
        .serve_connection(TokioIo::new(socket), service)
        .with_upgrades();
    tokio::pin!(conn);
    let result = tokio::select! {
        result = conn.as_mut() => result,
        () = stop.cancelled() => {
            conn.as_mut().graceful_shutdown();
            conn.await
        }
    };
    if let Err(e) = result {
        // Timeouts, resets and half-sent requests are the client's business.
        tracing::debug!(%peer, error = %e, "connection ended with an error");
    }
}

/// Answers a connection past the cap with a 503 in one non-blocking write (a
/// client that does not read never holds the accept loop) and closes it.
fn refuse(socket: TcpStream) {
    const BODY: &str = "{\"error\":{\"code\":\"too_many_connections\",\"message\":\"the server is at \
its connection limit ([server] max_connections); retry later\"}}";
    let answer = format!(
        "HTTP/1.1 503 Service Unavailable\r\nconnection: close\r\ncontent-type: \
application/json\r\ncontent-length: {}\r\n\r\n{BODY}",
        BODY.len()
    );
    let _ = socket.try_write(answer.as_bytes());
    drop(socket);
}
