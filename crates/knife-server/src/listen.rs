//! Serving the router on a TCP listener: every accepted socket gets TCP_NODELAY
//! (LIVE-04) and its connection facts ([`ConnectionInfo`]) for the handlers.

use std::future::Future;
use std::io;
use std::net::SocketAddr;

use axum::Router;
use axum::extract::connect_info::Connected;
use axum::serve::{IncomingStream, Listener};
use tokio::net::{TcpListener, TcpStream};

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

/// Serves `router` on `listener` until `shutdown` resolves, then drains open
/// connections (axum's graceful shutdown). Every accepted socket has TCP_NODELAY
/// ([`ApiListener`]). Errors: the accept loop failed (rare; axum retries
/// transient accept errors itself).
pub async fn serve(
    listener: TcpListener,
    router: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    axum::serve(
        ApiListener::new(listener),
        router.into_make_service_with_connect_info::<ConnectionInfo>(),
    )
    .with_graceful_shutdown(shutdown)
    .await
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
