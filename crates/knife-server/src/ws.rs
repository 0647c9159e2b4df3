//! The WebSocket handshake of `GET /api/ws` and the frame writer (LIVE-06): a big
//! message goes out as fragments of [`FRAGMENT`] bytes, so a connection's write buffer
//! stays that small instead of keeping the capacity of the largest message it sent.
//!
//! (axum's `WebSocket` cannot send fragments; the handshake here checks the same
//! headers as axum's extractor and answers in knife's JSON errors.)

use axum::extract::Request;
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures::{Sink, SinkExt};
use hyper_util::rt::TokioIo;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::frame::Frame;
use tokio_tungstenite::tungstenite::protocol::frame::coding::{Data, OpCode};
use tokio_tungstenite::tungstenite::protocol::{Role, WebSocketConfig};
use tokio_tungstenite::tungstenite::{Error as WsError, Message};

use crate::error::ApiErr;

/// The upgraded connection of a WebSocket client.
pub(crate) type Socket = WebSocketStream<TokioIo<hyper::upgrade::Upgraded>>;

/// Largest frame written: bigger messages are sent as fragments (RFC 6455 §5.4).
pub(crate) const FRAGMENT: usize = 16 * 1024;

/// Largest message accepted from a client (subscribe / unsubscribe are tiny).
const MAX_CLIENT_MESSAGE: usize = 1024 * 1024;

fn header_has(headers: &HeaderMap, name: header::HeaderName, token: &str) -> bool {
    headers.get_all(name).iter().any(|v| {
        v.to_str().is_ok_and(|v| {
            v.split(',')
                .any(|part| part.trim().eq_ignore_ascii_case(token))
        })
    })
}

/// Answers the handshake (101) and runs `serve` on the upgraded socket.
///
/// Errors (JSON): 400 `invalid_request` when the request is not a WebSocket
/// upgrade (method, `Connection`, `Upgrade`, `Sec-WebSocket-Version: 13`, key).
pub(crate) fn upgrade<F, Fut>(mut req: Request, serve: F) -> Response
where
    F: FnOnce(Socket) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let headers = req.headers();
    let key = headers.get(header::SEC_WEBSOCKET_KEY).cloned();
    let valid = req.method() == Method::GET
        && header_has(headers, header::CONNECTION, "upgrade")
        && header_has(headers, header::UPGRADE, "websocket")
        && headers
            .get(header::SEC_WEBSOCKET_VERSION)
            .is_some_and(|v| v.as_bytes() == b"13");
    let (Some(key), true) = (key, valid) else {
        return ApiErr::bad_request(
            "GET /api/ws is a WebSocket endpoint: send a WebSocket upgrade request \
             (Connection: upgrade, Upgrade: websocket, Sec-WebSocket-Version: 13, \
             Sec-WebSocket-Key)",
        )
        .into_response();
    };
    let Some(on_upgrade) = req.extensions_mut().remove::<hyper::upgrade::OnUpgrade>() else {
        return ApiErr::bad_request("this connection cannot be upgraded to a WebSocket")
            .into_response();
    };
    tokio::spawn(async move {
        let Ok(upgraded) = on_upgrade.await else {
            return;
        };
        // Per-connection buffers stay small (LIVE-06): clients send tiny messages, and
        // frames are written out as they come (a fragment at most).
        let mut config = WebSocketConfig::default();
        config.max_message_size = Some(MAX_CLIENT_MESSAGE);
        config.max_frame_size = Some(MAX_CLIENT_MESSAGE);
        config.read_buffer_size = 4 * 1024;
        config.write_buffer_size = 0;
        let socket =
            WebSocketStream::from_raw_socket(TokioIo::new(upgraded), Role::Server, Some(config))
                .await;
        serve(socket).await;
    });
    Response::builder()
        .status(StatusCode::SWITCHING_PROTOCOLS)
        .header(header::CONNECTION, "upgrade")
        .header(header::UPGRADE, "websocket")
        .header(
            header::SEC_WEBSOCKET_ACCEPT,
            derive_accept_key(key.as_bytes()),
        )
        .body(axum::body::Body::empty())
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

/// Sends `text` (valid UTF-8 JSON) as one text message: one frame when it fits
/// [`FRAGMENT`], else a text frame and continuation frames of that size (each a
/// slice of the shared buffer), flushed as it goes.
pub(crate) async fn send_text<S>(sink: &mut S, text: Bytes) -> Result<(), WsError>
where
    S: Sink<Message, Error = WsError> + Unpin,
{
    if text.len() <= FRAGMENT {
        let frame = Frame::message(text, OpCode::Data(Data::Text), true);
        return sink.send(Message::Frame(frame)).await;
    }
    let mut at = 0;
    while at < text.len() {
        let end = (at + FRAGMENT).min(text.len());
        let opcode = if at == 0 { Data::Text } else { Data::Continue };
        let frame = Frame::message(text.slice(at..end), OpCode::Data(opcode), end == text.len());
        sink.send(Message::Frame(frame)).await?;
        at = end;
    }
    Ok(())
}
