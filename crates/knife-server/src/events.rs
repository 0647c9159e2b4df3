//! Event streaming: `GET /api/threads/{id}/events` (SSE) and `GET /api/ws`
//! (WebSocket, subscribe per thread). Both replay from a sequence, then follow live.

use std::collections::HashMap;
use std::convert::Infallible;
use std::time::Duration;

use axum::extract::rejection::QueryRejection;
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::Response;
use axum::response::sse::{Event, KeepAlive, Sse};
use futures::{SinkExt, Stream, StreamExt};
use knife_protocol::*;
use knife_store::StreamFilter;
use serde::Deserialize;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::AppState;
use crate::error::ApiErr;
use crate::live::{self, Outgoing};

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
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ApiErr> {
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
    let stream = live::feed(&s, filter, durable).map(|item| {
        Ok(match item {
            Outgoing::Event(ev) => Event::default()
                .id(ev.sequence.to_string())
                .event(ev.event.event_type())
                .data(serde_json::to_string(&ev).unwrap_or_default()),
            // No `id:`: a delta is not durable, `Last-Event-ID` stays the last sequence.
            Outgoing::Delta(d) => Event::default()
                .event("delta")
                .data(serde_json::to_string(&*d).unwrap_or_default()),
            Outgoing::Reset(r) => Event::default()
                .event("reset")
                .data(serde_json::to_string(&*r).unwrap_or_default()),
            Outgoing::Error(e) => Event::default().event("error").data(e.to_string()),
        })
    });
    Ok(Sse::new(stream).keep_alive(KeepAlive::new().interval(Duration::from_secs(15))))
}

/// WebSocket: the client sends `{"type":"subscribe","thread_id":…,"after":N}` /
/// `{"type":"unsubscribe",…}`; the server answers `subscribed`, then `event` messages,
/// or one `error` message (`not_found`) for a thread that does not exist.
///
/// Access: the only route that takes the API token as `?token=` besides the
/// `Authorization` header (browsers cannot set headers on a WebSocket).
pub(crate) async fn websocket(State(s): State<AppState>, upgrade: WebSocketUpgrade) -> Response {
    upgrade.on_upgrade(move |socket| serve_socket(s, socket))
}

async fn serve_socket(state: AppState, socket: WebSocket) {
    let (mut sink, mut source) = socket.split();
    // Bounded: a slow client applies backpressure to its own subscriptions only.
    let (tx, mut rx) = mpsc::channel::<WsServerMessage>(1024);
    let writer = tokio::spawn(async move {
        while let Some(msg) = rx.recv().await {
            let Ok(text) = serde_json::to_string(&msg) else {
                continue;
            };
            if sink.send(Message::Text(text.into())).await.is_err() {
                return;
            }
        }
        // Every sender is gone (the client left or the server is shutting down).
        let _ = sink.send(Message::Close(None)).await;
    });
    let mut subscriptions: HashMap<ThreadId, JoinHandle<()>> = HashMap::new();
    loop {
        let message = tokio::select! {
            message = source.next() => message,
            // Shutdown: stop reading; the writer sends a close frame below.
            () = state.closing.cancelled() => break,
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
                    let _ = tx.send(WsServerMessage::Error { error }).await;
                    continue;
                }
                if let Some(old) = subscriptions.remove(&thread_id) {
                    old.abort();
                }
                let _ = tx
                    .send(WsServerMessage::Subscribed {
                        thread_id: thread_id.clone(),
                        after,
                    })
                    .await;
                let filter = StreamFilter {
                    thread_id: Some(thread_id.clone()),
                    after,
                    event_type: None,
                };
                let durable = drain_on_close(&state, filter.clone());
                let mut stream = live::feed(&state, filter, durable);
                let tx = tx.clone();
                let task = tokio::spawn(async move {
                    while let Some(item) = stream.next().await {
                        let msg = match item {
                            Outgoing::Event(event) => WsServerMessage::Event { event },
                            Outgoing::Delta(d) => WsServerMessage::Delta((*d).clone()),
                            Outgoing::Reset(r) => WsServerMessage::Reset((*r).clone()),
                            Outgoing::Error(e) => WsServerMessage::Error {
                                error: ApiError {
                                    code: "store".into(),
                                    message: e.to_string(),
                                    files: Vec::new(),
                                },
                            },
                        };
                        if tx.send(msg).await.is_err() {
                            break;
                        }
                    }
                });
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
                let _ = tx.send(WsServerMessage::Error { error }).await;
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
