// The HTTP body of a mock LLM stream: split into pieces, delayed, gated, cut.
// Owns the unit queue that becomes one HTTP chunk per piece (and the cut abort).

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::Stream;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::bench::{now_unix_micros, write_time_marker};
use super::chunks::{ChunkCtx, event};
use super::gate::Gate;

/// One unit of a response body, before splitting.
#[derive(Debug, Clone)]
pub(crate) enum Unit {
    /// Bytes known in advance (an SSE event, a raw body, a whole `.sse` file).
    Bytes(Bytes),
    /// A bench text delta whose marker is rendered at write time.
    BenchDelta(Arc<ChunkCtx>),
}

/// How the body is written.
#[derive(Debug, Clone)]
pub(crate) struct BodyPlan {
    /// The units, in order.
    pub units: VecDeque<Unit>,
    /// Write each unit in pieces of this many bytes (each its own HTTP chunk).
    pub split: Option<usize>,
    /// Sleep before every HTTP chunk but the first.
    pub delay: Duration,
    /// Abort the connection after the last unit (no clean end of the body).
    pub cut: bool,
}

struct State {
    plan: BodyPlan,
    gate: Gate,
    cancel: CancellationToken,
    first: bool,
    done: bool,
}

/// The error that aborts a cut (or cancelled) stream; hyper then drops the connection.
fn abort(reason: &str) -> std::io::Error {
    std::io::Error::other(format!("mock-llm: {reason}"))
}

/// Splits `bytes` into pieces of `split` bytes (the last may be shorter).
fn pieces(bytes: Bytes, split: Option<usize>) -> Vec<Bytes> {
    match split {
        Some(n) if n > 0 && bytes.len() > n => (0..bytes.len())
            .step_by(n)
            .map(|start| bytes.slice(start..(start + n).min(bytes.len())))
            .collect(),
        _ if bytes.is_empty() => Vec::new(),
        _ => vec![bytes],
    }
}

impl State {
    /// Drops leading empty units so a wait is never spent on nothing.
    fn skip_empty(&mut self) {
        while matches!(self.plan.units.front(), Some(Unit::Bytes(b)) if b.is_empty()) {
            self.plan.units.pop_front();
        }
    }

    /// Takes the next piece, rendering a bench delta now (its write time) and
    /// putting the rest of a split unit back at the front.
    fn take_piece(&mut self) -> Option<Bytes> {
        let unit = self.plan.units.pop_front()?;
        let bytes = match unit {
            Unit::Bytes(b) => b,
            Unit::BenchDelta(ctx) => event(&ctx.chunk(
                json!({ "content": write_time_marker(now_unix_micros()) }),
                None,
            )),
        };
        let mut split = pieces(bytes, self.plan.split).into_iter();
        let first = split.next();
        for rest in split.rev() {
            self.plan.units.push_front(Unit::Bytes(rest));
        }
        first
    }
}

/// The body stream: one `Ok(piece)` per HTTP chunk; an `Err` at the end aborts
/// the connection (cut) or when the server shuts down mid-stream.
pub(crate) fn body_stream(
    plan: BodyPlan,
    gate: Gate,
    cancel: CancellationToken,
) -> impl Stream<Item = Result<Bytes, std::io::Error>> + Send + 'static {
    let state = State {
        plan,
        gate,
        cancel,
        first: true,
        done: false,
    };
    futures::stream::unfold(state, |mut st| async move {
        if st.done {
            return None;
        }
        st.skip_empty();
        if st.plan.units.is_empty() {
            st.done = true;
            if !st.plan.cut {
                return None;
            }
            // Give hyper a pending poll so it flushes what was written before the
            // abort: an error returned right away would drop the buffered bytes.
            tokio::time::sleep(Duration::from_millis(20)).await;
            return Some((Err(abort("cut: connection closed mid-event")), st));
        }
        let delay = if st.first {
            Duration::ZERO
        } else {
            st.plan.delay
        };
        let gate = st.gate.clone();
        let wait = async move {
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            gate.pass().await;
        };
        tokio::select! {
            () = st.cancel.cancelled() => {
                st.done = true;
                return Some((Err(abort("server shut down mid-stream")), st));
            }
            () = wait => {}
        }
        st.first = false;
        let piece = st.take_piece()?;
        st.gate.mark_sent();
        Some((Ok(piece), st))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_cover_the_bytes() {
        let b = Bytes::from_static(b"abcdefg");
        let p = pieces(b.clone(), Some(3));
        assert_eq!(p, vec![&b"abc"[..], &b"def"[..], &b"g"[..]]);
        assert_eq!(pieces(b.clone(), None), vec![b.clone()]);
        assert_eq!(pieces(b.clone(), Some(100)), vec![b]);
        assert!(pieces(Bytes::new(), Some(2)).is_empty());
    }
}
