//! Server-Sent Events decoding: bytes in, [`SseEvent`]s out (WHATWG HTML "event stream" rules).
//! Owns line splitting, BOM stripping, field parsing, the per-event size cap and the EOF check.
//!
//! The decoder is incremental and chunking-independent: feeding a body whole, one
//! byte at a time or in any other split yields the same events. It buffers raw
//! bytes and decodes only complete lines, so a multi-byte UTF-8 character or a
//! CRLF pair split across network chunks is handled.
//!
//! ```
//! use knife_llm::sse::SseDecoder;
//!
//! let mut decoder = SseDecoder::new(knife_llm::sse::DEFAULT_MAX_EVENT_BYTES);
//! let mut events = decoder.push(b"event: ping\ndata: {\"a\":").unwrap();
//! events.extend(decoder.push(b"1}\r\n\r\n").unwrap());
//! assert_eq!(events.len(), 1);
//! assert_eq!(events[0].event, "ping");
//! assert_eq!(events[0].data, "{\"a\":1}");
//! decoder.finish().unwrap();
//! ```

use std::collections::VecDeque;
use std::pin::Pin;

use bytes::Bytes;
use futures::{Stream, StreamExt};

use crate::error::{LlmError, SseError};

/// Default cap on one event's buffered size: 8 MiB (8 × 1024 × 1024 bytes).
///
/// Counted as the bytes of the event's accumulated `data` and `event` values plus
/// the line currently being read. Large enough for any real LLM chunk (a whole
/// tool-call argument string fits easily), small enough that a server that never
/// sends a line break cannot exhaust memory.
pub const DEFAULT_MAX_EVENT_BYTES: usize = 8 * 1024 * 1024;

/// The UTF-8 byte order mark; one is stripped from the start of a stream.
const BOM: [u8; 3] = [0xEF, 0xBB, 0xBF];

/// One dispatched Server-Sent Event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` field value, or `"message"` when the event had no `event:` line.
    pub event: String,
    /// All `data:` values of the event joined with `"\n"` (one leading space of
    /// each value removed). Never contains the terminating line break.
    pub data: String,
    /// The last event id seen on the stream (`id:` fields persist across events,
    /// per spec); `None` when no non-empty `id:` has been seen.
    pub id: Option<String>,
}

/// Incremental SSE decoder. Feed bytes with [`SseDecoder::push`], then call
/// [`SseDecoder::finish`] at EOF to learn whether the stream ended cleanly.
///
/// Rules (WHATWG): one leading UTF-8 BOM is stripped; lines end in CRLF, LF or
/// CR; lines starting with `:` are comments; `field:value` with one optional
/// space after the colon; a line without a colon is a field with an empty
/// value; unknown fields and `retry:` are ignored; a blank line dispatches the
/// event unless its data buffer is empty. Invalid UTF-8 inside a line is
/// replaced with U+FFFD.
#[derive(Debug)]
pub struct SseDecoder {
    /// Cap in bytes, see [`DEFAULT_MAX_EVENT_BYTES`].
    max_event_bytes: usize,
    /// Raw bytes of the line being read (no terminator yet).
    line: Vec<u8>,
    /// How many BOM bytes matched at the start of the stream so far.
    bom_matched: usize,
    /// True once the start of the stream has been checked for a BOM.
    bom_done: bool,
    /// The previous byte was a CR: a following LF belongs to the same line break.
    pending_cr: bool,
    /// `event:` value of the current event ("" = not set).
    event_type: String,
    /// Data buffer of the current event: each `data:` value followed by "\n".
    data: String,
    /// Last event id buffer (persists across events).
    last_event_id: Option<String>,
    /// A field line was seen since the last blank line.
    in_event: bool,
    /// Sticky failure: once set, every later call reports it.
    failed: Option<SseError>,
}

impl SseDecoder {
    /// A decoder that rejects events larger than `max_event_bytes` bytes
    /// (use [`DEFAULT_MAX_EVENT_BYTES`] unless you have a reason not to).
    pub fn new(max_event_bytes: usize) -> Self {
        Self {
            max_event_bytes,
            line: Vec::new(),
            bom_matched: 0,
            bom_done: false,
            pending_cr: false,
            event_type: String::new(),
            data: String::new(),
            last_event_id: None,
            in_event: false,
            failed: None,
        }
    }

    /// Feeds the next chunk of the body and returns the events it completed, in order.
    ///
    /// Errors: [`SseError::EventTooLarge`] when the current event exceeds the cap;
    /// the decoder is then dead and every later call returns the same error.
    /// Events completed earlier in the same chunk are dropped in that case; use
    /// [`SseDecoder::push_into`] to keep them.
    pub fn push(&mut self, bytes: &[u8]) -> Result<Vec<SseEvent>, SseError> {
        let mut out = Vec::new();
        self.push_into(bytes, &mut out)?;
        Ok(out)
    }

    /// Like [`SseDecoder::push`], but appends completed events to `out`, so the
    /// events dispatched before an error in the same chunk are kept.
    pub fn push_into(&mut self, bytes: &[u8], out: &mut Vec<SseEvent>) -> Result<(), SseError> {
        if let Some(err) = &self.failed {
            return Err(err.clone());
        }
        let result = self.push_inner(bytes, out);
        if let Err(err) = &result {
            self.failed = Some(err.clone());
        }
        result
    }

    /// Declares EOF.
    ///
    /// Errors: [`SseError::EndedEarly`] when EOF arrived inside an event (a field
    /// line was seen after the last blank line, or the final line has no line
    /// break); the partial event is discarded, never dispatched. A sticky
    /// [`SseError::EventTooLarge`] is reported again.
    pub fn finish(self) -> Result<(), SseError> {
        if let Some(err) = self.failed {
            return Err(err);
        }
        let partial_bom = !self.bom_done && self.bom_matched > 0;
        if self.in_event || !self.line.is_empty() || partial_bom {
            return Err(SseError::EndedEarly);
        }
        Ok(())
    }

    fn push_inner(&mut self, bytes: &[u8], out: &mut Vec<SseEvent>) -> Result<(), SseError> {
        let mut rest = self.strip_bom(bytes);
        while !rest.is_empty() {
            if self.pending_cr {
                self.pending_cr = false;
                if rest[0] == b'\n' {
                    rest = &rest[1..];
                    continue;
                }
            }
            match rest.iter().position(|&b| b == b'\n' || b == b'\r') {
                None => {
                    self.line.extend_from_slice(rest);
                    self.check_size()?;
                    break;
                }
                Some(end) => {
                    self.line.extend_from_slice(&rest[..end]);
                    self.check_size()?;
                    self.pending_cr = rest[end] == b'\r';
                    rest = &rest[end + 1..];
                    // Take the buffer to process it, then hand the allocation back.
                    let mut line = std::mem::take(&mut self.line);
                    let result = self.process_line(&line, out);
                    line.clear();
                    self.line = line;
                    result?;
                }
            }
        }
        Ok(())
    }

    /// Consumes a leading BOM (possibly split across chunks) and returns the rest.
    fn strip_bom<'a>(&mut self, mut bytes: &'a [u8]) -> &'a [u8] {
        while !self.bom_done {
            let Some(&byte) = bytes.first() else {
                return bytes;
            };
            if byte == BOM[self.bom_matched] {
                self.bom_matched += 1;
                bytes = &bytes[1..];
                if self.bom_matched == BOM.len() {
                    self.bom_done = true;
                }
            } else {
                // Not a BOM after all: the bytes matched so far are line content
                // (none of them is a line break).
                self.line.extend_from_slice(&BOM[..self.bom_matched]);
                self.bom_done = true;
            }
        }
        bytes
    }

    fn check_size(&self) -> Result<(), SseError> {
        let size = self.line.len() + self.data.len() + self.event_type.len();
        if size > self.max_event_bytes {
            return Err(SseError::EventTooLarge {
                limit: self.max_event_bytes,
            });
        }
        Ok(())
    }

    fn process_line(&mut self, line: &[u8], out: &mut Vec<SseEvent>) -> Result<(), SseError> {
        if line.is_empty() {
            self.dispatch(out);
            return Ok(());
        }
        if line[0] == b':' {
            return Ok(()); // comment
        }
        self.in_event = true;
        let (field, value) = match line.iter().position(|&b| b == b':') {
            Some(colon) => {
                let value = &line[colon + 1..];
                let value = value.strip_prefix(b" ").unwrap_or(value);
                (&line[..colon], value)
            }
            None => (line, &[][..]),
        };
        match field {
            b"event" => self.event_type = String::from_utf8_lossy(value).into_owned(),
            b"data" => {
                self.data.push_str(&String::from_utf8_lossy(value));
                self.data.push('\n');
                self.check_size()?;
            }
            // Per spec an id containing NUL is ignored; an empty id resets it.
            b"id" if !value.contains(&0) => {
                self.last_event_id = if value.is_empty() {
                    None
                } else {
                    Some(String::from_utf8_lossy(value).into_owned())
                };
            }
            // `retry:` (reconnection time) means nothing to a one-shot request,
            // and unknown fields are ignored by spec.
            _ => {}
        }
        Ok(())
    }

    fn dispatch(&mut self, out: &mut Vec<SseEvent>) {
        self.in_event = false;
        let event_type = std::mem::take(&mut self.event_type);
        let mut data = std::mem::take(&mut self.data);
        if data.is_empty() {
            return;
        }
        data.pop(); // the "\n" appended after the last data value
        out.push(SseEvent {
            event: if event_type.is_empty() {
                "message".to_owned()
            } else {
                event_type
            },
            data,
            id: self.last_event_id.clone(),
        });
    }
}

/// Decodes a byte stream (e.g. `reqwest::Response::bytes_stream()`) into SSE
/// events with the [`DEFAULT_MAX_EVENT_BYTES`] cap. See [`decode_stream_with_limit`].
pub fn decode_stream<S, E>(bytes: S) -> impl Stream<Item = Result<SseEvent, LlmError>> + Send
where
    S: Stream<Item = Result<Bytes, E>> + Send + 'static,
    E: std::error::Error + 'static,
{
    decode_stream_with_limit(bytes, DEFAULT_MAX_EVENT_BYTES)
}

/// Decodes a byte stream into SSE events, capping each event at `max_event_bytes` bytes.
///
/// Output: every dispatched event in order, then at most one `Err`, after which
/// the stream ends. Errors: a byte-stream error becomes [`SseError::ConnectionLost`] inside [`LlmError::Stream`]
/// (message with its source chain); [`SseError::EventTooLarge`] and, at EOF
/// inside an event, [`SseError::EndedEarly`] become [`LlmError::Stream`].
pub fn decode_stream_with_limit<S, E>(
    bytes: S,
    max_event_bytes: usize,
) -> impl Stream<Item = Result<SseEvent, LlmError>> + Send
where
    S: Stream<Item = Result<Bytes, E>> + Send + 'static,
    E: std::error::Error + 'static,
{
    struct State<S> {
        inner: Pin<Box<S>>,
        decoder: Option<SseDecoder>,
        queue: VecDeque<SseEvent>,
        error: Option<LlmError>,
    }
    let state = State {
        inner: Box::pin(bytes),
        decoder: Some(SseDecoder::new(max_event_bytes)),
        queue: VecDeque::new(),
        error: None,
    };
    futures::stream::unfold(state, |mut st| async move {
        loop {
            if let Some(event) = st.queue.pop_front() {
                return Some((Ok(event), st));
            }
            if let Some(err) = st.error.take() {
                // `decoder` is already None here, so the next poll ends the stream.
                return Some((Err(err), st));
            }
            let decoder = st.decoder.as_mut()?;
            match st.inner.next().await {
                Some(Ok(chunk)) => {
                    let mut out = Vec::new();
                    let result = decoder.push_into(&chunk, &mut out);
                    st.queue.extend(out);
                    if let Err(err) = result {
                        st.decoder = None;
                        st.error = Some(LlmError::Stream(err));
                    }
                }
                Some(Err(err)) => {
                    st.decoder = None;
                    st.error = Some(body_error(&err));
                }
                None => {
                    if let Some(Err(err)) = st.decoder.take().map(SseDecoder::finish) {
                        st.error = Some(LlmError::Stream(err));
                    }
                }
            }
        }
    })
}

/// Maps a body read error: an [`IdleTimeout`](crate::http::IdleTimeout) anywhere in
/// its source chain is [`LlmError::Timeout`]; anything else means the response had
/// started, so it is a broken stream ([`SseError::ConnectionLost`]), not an
/// unreachable endpoint.
fn body_error(err: &(dyn std::error::Error + 'static)) -> LlmError {
    let mut cause = Some(err);
    while let Some(e) = cause {
        if let Some(timeout) = e.downcast_ref::<crate::http::IdleTimeout>() {
            return LlmError::Timeout {
                after: timeout.after,
            };
        }
        cause = e.source();
    }
    LlmError::Stream(SseError::ConnectionLost(crate::http::error_chain(err)))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn decode(input: &[u8]) -> (Vec<SseEvent>, Result<(), SseError>) {
        let mut d = SseDecoder::new(DEFAULT_MAX_EVENT_BYTES);
        let events = d.push(input).unwrap();
        (events, d.finish())
    }

    fn ev(event: &str, data: &str) -> SseEvent {
        SseEvent {
            event: event.into(),
            data: data.into(),
            id: None,
        }
    }

    #[test]
    fn all_three_line_endings_and_mixed() {
        let (events, end) = decode(b"data: a\r\n\r\ndata: b\n\ndata: c\r\rdata: d\r\n\n");
        assert_eq!(
            events,
            vec![
                ev("message", "a"),
                ev("message", "b"),
                ev("message", "c"),
                ev("message", "d")
            ]
        );
        assert_eq!(end, Ok(()));
    }

    #[test]
    fn crlf_split_across_chunks_is_one_line_break() {
        let mut d = SseDecoder::new(100);
        assert!(d.push(b"data: a\r").unwrap().is_empty());
        // The LF completes the CRLF of the data line; only the next CR is the blank line.
        assert!(d.push(b"\n").unwrap().is_empty());
        assert_eq!(d.push(b"\r").unwrap(), vec![ev("message", "a")]);
        assert!(d.push(b"\n").unwrap().is_empty());
        assert_eq!(d.finish(), Ok(()));
    }

    #[test]
    fn data_lines_join_with_lf_and_space_is_optional() {
        let (events, _) = decode(b"data:x\ndata:  y\ndata\n\n");
        assert_eq!(events, vec![ev("message", "x\n y\n")]);
    }

    #[test]
    fn comments_retry_unknown_fields_ignored_and_empty_data_not_dispatched() {
        let (events, end) =
            decode(b": hi\nretry: 10\nfoo: bar\nnocolon\n\nevent: x\n\nevent: y\ndata: 1\n\n");
        assert_eq!(events, vec![ev("y", "1")]);
        assert_eq!(end, Ok(()));
    }

    #[test]
    fn event_type_resets_after_dispatch_and_id_persists() {
        let (events, _) = decode(b"event: a\nid: 7\ndata: 1\n\ndata: 2\n\nid:\ndata: 3\n\n");
        assert_eq!(events[0].event, "a");
        assert_eq!(events[0].id.as_deref(), Some("7"));
        assert_eq!(events[1].event, "message");
        assert_eq!(events[1].id.as_deref(), Some("7"));
        assert_eq!(events[2].id, None);
    }

    #[test]
    fn bom_stripped_once_even_when_split() {
        let mut d = SseDecoder::new(100);
        assert!(d.push(&[0xEF]).unwrap().is_empty());
        assert!(d.push(&[0xBB, 0xBF]).unwrap().is_empty());
        assert_eq!(d.push(b"data: a\n\n").unwrap(), vec![ev("message", "a")]);
        // A second BOM is content: the field name becomes "\u{feff}data" and is ignored.
        let (events, _) = decode(b"\xEF\xBB\xBF\xEF\xBB\xBFdata: a\n\n");
        assert!(events.is_empty());
    }

    #[test]
    fn eof_inside_event_is_ended_early() {
        assert_eq!(decode(b"data: a\n").1, Err(SseError::EndedEarly));
        assert_eq!(
            decode(b"data: a\n\ndata: partial").1,
            Err(SseError::EndedEarly)
        );
        assert_eq!(decode(b"event: x\n").1, Err(SseError::EndedEarly));
        assert_eq!(decode(b"data: a\n\n: comment\n").1, Ok(()));
        assert_eq!(decode(b"").1, Ok(()));
        assert_eq!(decode(b"data: a\r").1, Err(SseError::EndedEarly));
    }

    #[test]
    fn oversized_event_is_rejected_and_sticky() {
        let mut d = SseDecoder::new(16);
        let mut out = Vec::new();
        let err = d.push_into(b"data: ok\n\ndata: 0123456789abcdef", &mut out);
        assert_eq!(err, Err(SseError::EventTooLarge { limit: 16 }));
        assert_eq!(out, vec![ev("message", "ok")]);
        assert_eq!(d.push(b"\n\n"), Err(SseError::EventTooLarge { limit: 16 }));
        assert_eq!(d.finish(), Err(SseError::EventTooLarge { limit: 16 }));
        // Many small data lines add up too.
        let mut d = SseDecoder::new(16);
        let err = d.push(b"data: 12345\ndata: 12345\ndata: 12345\n");
        assert_eq!(err, Err(SseError::EventTooLarge { limit: 16 }));
    }

    #[test]
    fn multibyte_utf8_split_across_chunks() {
        let input = "data: héllo 🚀\n\n".as_bytes();
        let mut d = SseDecoder::new(100);
        let mut events = Vec::new();
        for b in input {
            events.extend(d.push(std::slice::from_ref(b)).unwrap());
        }
        assert_eq!(events, vec![ev("message", "héllo 🚀")]);
    }

    #[tokio::test]
    async fn decode_stream_yields_events_then_ended_early() {
        let chunks: Vec<Result<Bytes, std::io::Error>> = vec![
            Ok(Bytes::from_static(b"data: a\n")),
            Ok(Bytes::from_static(b"\ndata: b")),
        ];
        let items: Vec<_> = decode_stream(futures::stream::iter(chunks)).collect().await;
        assert_eq!(items.len(), 2);
        assert_eq!(items[0], Ok(ev("message", "a")));
        assert_eq!(items[1], Err(LlmError::Stream(SseError::EndedEarly)));
    }

    #[tokio::test]
    async fn decode_stream_maps_body_errors_to_transport() {
        let chunks: Vec<Result<Bytes, std::io::Error>> = vec![
            Ok(Bytes::from_static(b"data: a\n\n")),
            Err(std::io::Error::other("connection reset")),
            Ok(Bytes::from_static(b"data: never\n\n")),
        ];
        let items: Vec<_> = decode_stream(futures::stream::iter(chunks)).collect().await;
        assert_eq!(items.len(), 2);
        assert!(
            matches!(&items[1], Err(LlmError::Stream(SseError::ConnectionLost(m))) if m.contains("connection reset"))
        );
    }
}
