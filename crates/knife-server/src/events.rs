//! Event streaming: `GET /api/threads/{id}/events` (SSE) and `GET /api/ws`
//! (WebSocket, subscribe per thread). Both replay from a sequence, then follow live.

use std::collections::HashMap;
use std::convert::Infallible;
use std::time::Duration;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderMap, header};
use axum::response::Response;
use bytes::Bytes;
use futures::{SinkExt, StreamExt};
use knife_protocol::*;
use knife_store::StreamFilter;
use serde::Deserialize;
use tokio::task::JoinHandle;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::Utf8Bytes;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;

use crate::AppState;
use crate::error::ApiErr;
use crate::live::{self, Out};
use crate::subscribers::{Frame, FrameRx, Wire, ws_message};
use crate::ws;

/// Query of the SSE route: `after` (exclusive sequence; `Last-Event-ID` wins when sent)
/// and an optional event `type` filter.
#[derive(Deserialize, schemars::JsonSchema)]
pub(crate) struct EventsQuery {
    /// Events after this sequence (exclusive; `Last-Event-ID` wins when sent).
    #[serde(default)]
    after: u64,
    /// Only events of this type (one of the event types).
    #[serde(rename = "type")]
    event_type: Option<String>,
}

/// SSE: `id: <sequence>`, `event: <type>`, `data: <StoredEvent JSON>` per event.
///
/// Errors (JSON, before the stream starts): 400 `invalid_request` for a malformed
/// query (`after` not a number) or an unknown `type` (the message lists
/// [`EVENT_TYPES`]); 404 `not_found` for an unknown thread.
pub(crate) async fn sse_events(
    State(s): State<AppState>,
    Path(id): Path<ThreadId>,
    query: Result<Query<EventsQuery>, QueryRejection>,
    headers: HeaderMap,
) -> Result<Response, ApiErr> {
    let Query(q) = query
        .map_err(|e| ApiErr::bad_request(format!("invalid query string: {}", e.body_text())))?;
    if let Some(t) = q.event_type.as_deref().filter(|t| !EVENT_TYPES.contains(t)) {
        // A filter no event can match would stream nothing, forever: refuse it.
        return Err(ApiErr::bad_request(format!(
            "unknown event type `{t}`; valid types: {}",
            EVENT_TYPES.join(", ")
        )));
    }
    if s.store.get_thread(&id).await?.is_none() {
        return Err(thread_not_found(&id));
    }
    let resume = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    let filter = StreamFilter {
        thread_id: Some(id.clone()),
        after: resume.unwrap_or(q.after),
        event_type: q.event_type,
    };
    check_after(&s, &id, filter.after).await?;
    let durable = drain_on_close(&s, filter.clone());
    let (tx, rx) = s.subscribers.queue();
    let out = Out {
        tx,
        wire: Wire::Sse,
        subs: s.subscribers.clone(),
        refs: live::ItemRefs::default(),
    };
    // Ends with the subscriber: its queue's consumer is the response body.
    drop(live::feed(&s, filter, durable, out));
    Ok(sse_response(rx))
}

/// Idle time after which an SSE stream sends a keep-alive comment.
const SSE_KEEP_ALIVE: Duration = Duration::from_secs(15);

/// The SSE response streaming `rx`'s frames (shared `Bytes`, written as they are). A
/// frame's bytes stay counted against the bounds until the body asks for the next
/// one (LIVE-06); a closing frame (overflow) ends the stream after it.
fn sse_response(rx: FrameRx) -> Response {
    struct Body {
        rx: FrameRx,
        /// The frame handed to the connection last (released on the next poll).
        sent: Option<Frame>,
        done: bool,
    }
    let body = futures::stream::unfold(
        Body {
            rx,
            sent: None,
            done: false,
        },
        |mut st| async move {
            st.sent = None;
            if st.done {
                return None;
            }
            let bytes = match tokio::time::timeout(SSE_KEEP_ALIVE, st.rx.next()).await {
                Err(_) => Bytes::from_static(b":\n\n"),
                Ok(None) => return None,
                Ok(Some(frame)) => {
                    st.done = frame.close.is_some();
                    let bytes = frame.bytes.clone();
                    st.sent = Some(frame);
                    bytes
                }
            };
            Some((Ok::<_, Infallible>(bytes), st))
        },
    );
    Response::builder()
        .header(header::CONTENT_TYPE, "text/event-stream")
        .header(header::CACHE_CONTROL, "no-cache")
        .body(axum::body::Body::from_stream(body))
        .unwrap_or_else(|_| Response::new(axum::body::Body::empty()))
}

/// WebSocket: the client sends `{"type":"subscribe","thread_id":…,"after":N}` /
/// `{"type":"unsubscribe",…}`; the server answers `subscribed`, then `event` messages,
/// or one `error` message (`not_found`) for a thread that does not exist.
///
/// Access: the only route that takes the API token as `?token=` besides the
/// `Authorization` header (browsers cannot set headers on a WebSocket).
///
/// Errors: 400 `invalid_request` (JSON) for a request that is not a WebSocket upgrade.
pub(crate) async fn websocket(State(s): State<AppState>, request: Request) -> Response {
    ws::upgrade(request, move |socket| serve_socket(s, socket))
}

async fn serve_socket(state: AppState, socket: ws::Socket) {
    let (mut sink, mut source) = socket.split();
    // One bounded queue per connection (LIVE-06): every subscription of the socket
    // feeds it; a frame is released once sent and flushed.
    let (tx, mut rx) = state.subscribers.queue();
    let writer = tokio::spawn(async move {
        while let Some(frame) = rx.next().await {
            if ws::send_text(&mut sink, frame.bytes.clone()).await.is_err() {
                return;
            }
            if let Some(reason) = &frame.close {
                // Fell behind (its queue stayed full): close with the reason; the
                // client resubscribes after its last sequence.
                let close = CloseFrame {
                    code: CloseCode::Again,
                    reason: close_reason(reason),
                };
                let _ = sink.send(Message::Close(Some(close))).await;
                return;
            }
            drop(frame);
        }
        // Every sender is gone (the client left or the server is shutting down).
        let _ = sink.send(Message::Close(None)).await;
    });
    let mut subscriptions: HashMap<ThreadId, JoinHandle<()>> = HashMap::new();
    // Item references of live deltas, one numbering for all of the connection's subscriptions.
    let refs = live::ItemRefs::default();
    loop {
        let message = tokio::select! {
            message = source.next() => message,
            // Shutdown: stop reading; the writer sends a close frame below.
            () = state.closing.cancelled() => break,
            // The writer ended (the client is gone or was closed for falling behind).
            () = tx.closed() => break,
        };
        let Some(Ok(message)) = message else { break };
        let text = match message {
            Message::Text(t) => t,
            Message::Close(_) => break,
            _ => continue,
        };
        match serde_json::from_str::<WsClientMessage>(&text) {
            Ok(WsClientMessage::Subscribe { thread_id, after }) => {
                // Like the SSE route's 404: an unknown thread would otherwise be a
                // subscription that never yields anything.
                let error = match state.store.get_thread(&thread_id).await {
                    Ok(Some(_)) => check_after(&state, &thread_id, after).await.err(),
                    Ok(None) => Some(thread_not_found(&thread_id)),
                    Err(e) => Some(ApiErr::from(e)),
                };
                if let Some(e) = error {
                    let error = ApiError {
                        code: e.code.into(),
                        message: e.message,
                        files: e.files,
                    };
                    tx.push_control(ws_message(&WsServerMessage::Error { error }));
                    continue;
                }
                if let Some(old) = subscriptions.remove(&thread_id) {
                    old.abort();
                }
                tx.push_control(ws_message(&WsServerMessage::Subscribed {
                    thread_id: thread_id.clone(),
                    after,
                }));
                let filter = StreamFilter {
                    thread_id: Some(thread_id.clone()),
                    after,
                    event_type: None,
                };
                let durable = drain_on_close(&state, filter.clone());
                let out = Out {
                    tx: tx.clone(),
                    wire: Wire::Ws,
                    subs: state.subscribers.clone(),
                    refs: refs.clone(),
                };
                let task = live::feed(&state, filter, durable, out);
                subscriptions.insert(thread_id, task);
            }
            Ok(WsClientMessage::Unsubscribe { thread_id }) => {
                if let Some(task) = subscriptions.remove(&thread_id) {
                    task.abort();
                }
            }
            Err(e) => {
                let error = ApiError {
                    code: "invalid_request".into(),
                    message: format!("invalid message: {e}"),
                    files: Vec::new(),
                };
                tx.push_control(ws_message(&WsServerMessage::Error { error }));
            }
        }
    }
    if state.closing.is_cancelled() {
        // Shutdown: each subscription delivers what was committed, then ends.
        let _ = tokio::time::timeout(
            2 * DRAIN_IDLE,
            futures::future::join_all(subscriptions.into_values()),
        )
        .await;
    } else {
        for (_, task) in subscriptions {
            task.abort();
        }
    }
    drop(tx);
    let _ = writer.await;
}

/// A WebSocket close reason: at most 123 bytes, cut at a character boundary.
fn close_reason(reason: &str) -> Utf8Bytes {
    let mut end = reason.len().min(123);
    while !reason.is_char_boundary(end) {
        end -= 1;
    }
    Utf8Bytes::from(&reason[..end])
}

/// Longest a stream waits for its next committed event once the server is closing.
const DRAIN_IDLE: Duration = Duration::from_millis(500);

/// The store stream for `filter`, ending once the server is closing and the thread's
/// events committed by then were delivered: a client following a run sees the run's
/// terminal event, written just before the streams close. The end comes when the
/// thread's high-water mark at closing time is reached, or after [`DRAIN_IDLE`]
/// without an event (a type filter may skip the last events).
fn drain_on_close(
    state: &AppState,
    filter: StreamFilter,
) -> futures::stream::BoxStream<'static, Result<StoredEvent, knife_store::StoreError>> {
    struct Drain {
        inner: futures::stream::BoxStream<'static, Result<StoredEvent, knife_store::StoreError>>,
        store: knife_store::Store,
        thread: Option<ThreadId>,
        closing: tokio_util::sync::CancellationToken,
        /// Set at closing: the last sequence to deliver.
        target: Option<u64>,
        last: u64,
    }
    let st = Drain {
        inner: state.store.stream(filter.clone()),
        store: state.store.clone(),
        thread: filter.thread_id.clone(),
        closing: state.closing.clone(),
        target: None,
        last: filter.after,
    };
    futures::stream::unfold(st, |mut st| async move {
        loop {
            if let Some(target) = st.target {
                if st.last >= target {
                    return None;
                }
                let item = tokio::time::timeout(DRAIN_IDLE, st.inner.next())
                    .await
                    .ok()??;
                if let Ok(ev) = &item {
                    st.last = ev.sequence;
                }
                return Some((item, st));
            }
            tokio::select! {
                item = st.inner.next() => {
                    let item = item?;
                    if let Ok(ev) = &item {
                        st.last = ev.sequence;
                    }
                    return Some((item, st));
                }
                () = st.closing.cancelled() => {
                    let high = st.store.latest_sequence(st.thread.as_ref()).await.unwrap_or(0);
                    st.target = Some(high);
                }
            }
        }
    })
    .boxed()
}

/// Refuses a resume point past the end of the log (LIVE-02): a client cannot have
/// seen an event that does not exist yet. (Sequences are global, so a position
/// past the thread's own last event, such as the log's end, is valid.)
async fn check_after(state: &AppState, thread: &ThreadId, after: u64) -> Result<(), ApiErr> {
    let latest = state.store.latest_sequence(None).await?;
    if after > latest {
        return Err(ApiErr::bad_request(format!(
            "cannot resume thread {thread} after sequence {after}: the event log ends at \
             {latest} (a sequence from the future, or from another knife's log); subscribe \
             with after = the last sequence you received, or 0 to replay everything"
        )));
    }
    Ok(())
}

fn thread_not_found(id: &ThreadId) -> ApiErr {
    ApiErr::not_found(format!(
        "thread {id} does not exist; list threads with `knife threads list` or GET /api/threads"
    ))
}
