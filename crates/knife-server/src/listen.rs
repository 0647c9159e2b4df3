//! Serving the router on a TCP listener: every accepted socket gets TCP_NODELAY
//! (LIVE-04) and its connection facts ([`ConnectionInfo`]) for the handlers; the
//! loop bounds what clients hold before any authentication (SEC-04).
//!
//! axum's `serve` has neither a header timeout nor a connection cap, so idle sockets
//! could exhaust file descriptors before any authentication. Here every accepted
//! socket takes a permit of a semaphore (`max_connections`); past the cap a new
//! connection is answered `503` at once (one non-blocking write) and closed. hyper's
//! `header_read_timeout` closes a connection whose request head does not arrive in
//! time (also between keep-alive requests). HTTP/1.1 only: knife's clients (CLI,
//! browsers, MCP clients) speak it, and HTTP/2 detection would read the first bytes
//! of every connection with no timeout at all.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::ConnectInfo;
use axum::extract::connect_info::Connected;
use axum::serve::{IncomingStream, Listener};
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower::ServiceExt;

/// A TCP listener whose accepted sockets have TCP_NODELAY set (LIVE-04): small
/// frames (one live delta, one event) leave at once instead of waiting for the
/// peer's delayed ACK (Nagle), so ten subscriptions on one WebSocket see the
/// latency of one. Any accept loop that replaces `axum::serve` must accept
/// through [`ApiListener::accept`] (or set the option the same way).
#[derive(Debug)]
pub struct ApiListener {
    inner: TcpListener,
}

impl ApiListener {
    /// Wraps a bound listener.
    pub fn new(inner: TcpListener) -> Self {
        Self { inner }
    }
}

impl Listener for ApiListener {
    type Io = TcpStream;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (TcpStream, SocketAddr) {
        let (tcp, addr) = Listener::accept(&mut self.inner).await;
        if let Err(e) = tcp.set_nodelay(true) {
            // The connection still works, only slower for small frames.
            tracing::debug!(peer = %addr, error = %e, "could not set TCP_NODELAY on an accepted socket");
        }
        (tcp, addr)
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.local_addr()
    }
}

/// What the server knows of a connection when it accepted it; handlers read it
/// with `ConnectInfo<ConnectionInfo>`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnectionInfo {
    /// The client's address.
    pub peer: SocketAddr,
    /// TCP_NODELAY as read back from the accepted socket (LIVE-04; `false` when it
    /// could not be read).
    pub nodelay: bool,
}

impl Connected<IncomingStream<'_, ApiListener>> for ConnectionInfo {
    fn connect_info(stream: IncomingStream<'_, ApiListener>) -> Self {
        Self {
            peer: *stream.remote_addr(),
            nodelay: stream.io().nodelay().unwrap_or(false),
        }
    }
}

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

/// [`serve_with`] with the default [`ServerLimits`].
pub async fn serve(
    listener: TcpListener,
    router: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    serve_with(listener, router, ServerLimits::default(), shutdown).await
}

/// Serves `router` on `listener` until `shutdown` resolves; then stops accepting,
/// asks every connection to finish its current request (idle keep-alive connections
/// close at once) and waits for them. Upgraded connections (WebSocket) live on in
/// their own tasks and end with the server's `closing` token.
///
/// Every socket is accepted through [`ApiListener`] (TCP_NODELAY, LIVE-04; accept
/// errors such as running out of file descriptors are retried there after a pause)
/// and handlers get its [`ConnectionInfo`] as `ConnectInfo<ConnectionInfo>`.
pub async fn serve_with(
    listener: TcpListener,
    router: Router,
    limits: ServerLimits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    let mut listener = ApiListener::new(listener);
    let permits = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let stop = CancellationToken::new();
    let connections = TaskTracker::new();
    tokio::pin!(shutdown);
    let mut refused: u64 = 0;
    loop {
        let (socket, peer) = tokio::select! {
            accepted = Listener::accept(&mut listener) => accepted,
            () = &mut shutdown => break,
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
        let info = ConnectionInfo {
            peer,
            nodelay: socket.nodelay().unwrap_or(false),
        };
        let router = router.clone();
        // Handlers read the connection's facts as `ConnectInfo<ConnectionInfo>`.
        let service = hyper::service::service_fn(
            move |mut request: axum::http::Request<hyper::body::Incoming>| {
                request.extensions_mut().insert(ConnectInfo(info));
                router.clone().oneshot(request)
            },
        );
        let stop = stop.clone();
        let timeout = limits.header_read_timeout;
        connections.spawn(async move {
            let _permit = permit;
            let mut builder = http1::Builder::new();
            builder
                .timer(TokioTimer::new())
                .header_read_timeout(timeout)
                .keep_alive(true);
            let conn = builder
                .serve_connection(TokioIo::new(socket), service)
                .with_upgrades();
            tokio::pin!(conn);
            // A graceful stop lets the request in flight finish first.
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
        });
    }
    drop(listener);
    stop.cancel();
    connections.close();
    connections.wait().await;
    Ok(())
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use axum::extract::ConnectInfo;
    use axum::routing::get;

    /// LIVE-04: the socket the server accepted (read back on the server side, at
    /// accept time) has TCP_NODELAY set, for plain HTTP and for a WebSocket upgrade
    /// request alike (both come through the one accept loop).
    #[tokio::test]
    async fn live_04_accepted_sockets_have_tcp_nodelay() {
        let router = Router::new().route(
            "/conn",
            get(
                |ConnectInfo(info): ConnectInfo<ConnectionInfo>| async move {
                    format!("{}", info.nodelay)
                },
            ),
        );
        let tcp = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = tcp.local_addr().unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(serve(tcp, router, async move {
            let _ = stopped.await;
        }));
        for _ in 0..3 {
            // A fresh connection each time: every accepted socket is checked.
            let client = reqwest::Client::builder()
                .pool_max_idle_per_host(0)
                .build()
                .unwrap();
            let body = client
                .get(format!("http://{addr}/conn"))
                .send()
                .await
                .unwrap()
                .text()
                .await
                .unwrap();
            assert_eq!(body, "true", "an accepted socket lacks TCP_NODELAY");
        }
        let _ = stop.send(());
        server.await.unwrap().unwrap();
    }
}
