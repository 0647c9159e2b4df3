//! The protocol-independent half of every client's stream: SSE events in, a
//! per-protocol [`EventMapper`] in the middle, an [`LlmStream`] out.

use std::collections::VecDeque;
use std::pin::Pin;

use futures::{Stream, StreamExt};

use crate::error::{LlmError, SseError};
use crate::sse::SseEvent;
use crate::types::{LlmEvent, LlmStream};

/// One item of mapper output.
pub type MappedEvent = Result<LlmEvent, LlmError>;

/// A pure state machine turning the SSE events of one response into
/// [`LlmEvent`]s (Chat Completions, Anthropic Messages, OpenAI Responses).
pub trait EventMapper: Send + 'static {
    /// Maps one SSE event; returns what it produced (possibly nothing).
    fn push(&mut self, event: &SseEvent) -> Vec<MappedEvent>;

    /// Declares a clean EOF: emits the `StepFinish` when the protocol's answer is
    /// complete, else `Err(LlmError::Stream(SseError::Incomplete))`; nothing when
    /// the step already ended.
    fn finish(&mut self) -> Vec<MappedEvent>;

    /// True once `StepFinish` or an error was emitted: nothing more comes out.
    fn is_ended(&self) -> bool;

    /// True when the answer is complete enough that a stream cut inside the
    /// last (unterminated) event may end as at a clean EOF (the protocol's
    /// finish reason was seen; only trailers such as usage or a terminator
    /// sentinel may be missing).
    fn answer_complete(&self) -> bool;
}

/// Maps a stream of SSE events of one response with `mapper`.
///
/// Output: the mapped events, ending after the `StepFinish` or with the first
/// `Err` (input errors are passed through unchanged; a clean end of input runs
/// [`EventMapper::finish`]). Input after the end is not polled.
///
/// One input error is forgiven: [`SseError::EndedEarly`] when
/// [`EventMapper::answer_complete`] holds. Per the SSE spec the unterminated last
/// event is discarded, not dispatched; the stream then ends as at a clean EOF.
pub fn map_event_stream<S, M>(events: S, mapper: M) -> LlmStream
where
    S: Stream<Item = Result<SseEvent, LlmError>> + Send + 'static,
    M: EventMapper,
{
    struct State<S, M> {
        inner: Pin<Box<S>>,
        mapper: M,
        queue: VecDeque<MappedEvent>,
        done: bool,
    }
    let state = State {
        inner: Box::pin(events),
        mapper,
        queue: VecDeque::new(),
        done: false,
    };
    futures::stream::unfold(state, |mut st| async move {
        loop {
            if let Some(item) = st.queue.pop_front() {
                if item.is_err() {
                    // First Err ends the stream.
                    st.queue.clear();
                    st.done = true;
                }
                return Some((item, st));
            }
            if st.done || st.mapper.is_ended() {
                return None;
            }
            match st.inner.next().await {
                Some(Ok(event)) => st.queue.extend(st.mapper.push(&event)),
                Some(Err(LlmError::Stream(SseError::EndedEarly)))
                    if st.mapper.answer_complete() =>
                {
                    tracing::debug!("stream ended inside an event after the answer was complete");
                    st.done = true;
                    st.queue.extend(st.mapper.finish());
                }
                Some(Err(err)) => st.queue.push_back(Err(err)),
                None => {
                    st.done = true;
                    st.queue.extend(st.mapper.finish());
                }
            }
        }
    })
    .boxed()
}
