//! Text windows of the one recorder: assistant text and reasoning items, their live
//! deltas (at once, LIVE-01) and their throttled durable state (PROC-12): a whole
//! snapshot first, then appended chunks, then the settled snapshot (LIVE-03).
//!
//! The persistence window grows (LIVE-03, 2026-12-02): an item's first window is
//! [`RecorderStyle::flush_interval`] (50 ms), each window written for the same open
//! item doubles it up to [`RecorderStyle::max_flush_interval`] (250 ms, PROC-12), and
//! [`RecorderStyle::flush_bytes`] unsent (4 KiB) still forces a write at once. Why: a
//! chunk's envelope is ~575 bytes on a subscriber's wire, so a paced stream writing
//! twenty a second broke the 300 bytes per delta of LIVE-03's cap; at 250 ms it writes
//! four (docs/2026-12-01-live-chunks.md).

use std::time::Duration;

use knife_protocol::*;
use tokio::time::Instant;

use super::{ItemState, RecorderStyle, TurnRecorder, live};

impl ItemState {
    /// The item's current persistence window: the style's first window until one
    /// was written, then twice the last one, at most the style's longest.
    pub(crate) fn window(&self, style: &RecorderStyle) -> Duration {
        self.window.unwrap_or(style.flush_interval)
    }

    /// When the item's current window ends (its last durable state + the window),
    /// if it has a durable state yet.
    pub(crate) fn window_end(&self, style: &RecorderStyle) -> Option<Instant> {
        self.last_emit.map(|last| last + self.window(style))
    }

    /// Whether the item's durable state is due now: its window has passed since its
    /// last durable state (or it has none yet: the leading edge), or `flush_bytes`
    /// arrived since.
    pub(crate) fn window_due(&self, style: &RecorderStyle) -> bool {
        self.window_end(style)
            .is_none_or(|end| Instant::now() >= end)
            || self.unsent >= style.flush_bytes
    }

    /// A window of the item is being written: the next one is twice as long (the
    /// first written makes the next one the style's first window), at most the
    /// style's longest.
    pub(crate) fn grow_window(&mut self, style: &RecorderStyle) {
        self.window = Some(match self.window {
            None => style.flush_interval,
            Some(window) => window.saturating_mul(2).min(style.max_flush_interval),
        });
    }
}

/// The field whose text grows in windows, and its text: an assistant message's
/// `text`, a reasoning's `reasoning`, a tool call's `output` (empty before any).
pub(crate) fn growing(kind: &TurnItemKind) -> Option<(DeltaField, &str)> {
    match kind {
        TurnItemKind::AssistantMessage { text, .. } => Some((DeltaField::Text, text)),
        TurnItemKind::Reasoning { text, .. } => Some((DeltaField::Reasoning, text)),
        TurnItemKind::ToolCall { output, .. } => {
            Some((DeltaField::Output, output.as_deref().unwrap_or("")))
        }
        _ => None,
    }
}

/// Text items.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TextKind {
    /// An `assistant_message` item (field `text`).
    Assistant,
    /// A `reasoning` item (field `reasoning`).
    Reasoning,
}

impl TurnRecorder {
    fn text_item(&mut self, key: &str, kind: TextKind) -> usize {
        if let Some(idx) = self.index_of(key) {
            return idx;
        }
        let item = match kind {
            TextKind::Assistant => TurnItemKind::AssistantMessage {
                text: String::new(),
                streaming: true,
            },
            TextKind::Reasoning => TurnItemKind::Reasoning {
                text: String::new(),
                streaming: true,
            },
        };
        self.open_item(Some(key), item, TurnItemStatus::Running)
    }

    /// Opens text item `key` (emitted, empty, streaming) unless it exists.
    pub fn text_started(&mut self, key: &str, kind: TextKind) {
        if self.finished || self.has_item(key) {
            return;
        }
        let idx = self.text_item(key, kind);
        self.emit(idx);
    }

    /// Appends `delta` to text item `key` (created on first use): the live delta goes
    /// out at once (LIVE-01); the durable state when the item's window allows (leading
    /// edge, or `flush_bytes` unsent), else the item is marked dirty for
    /// [`Self::flush_due`].
    pub fn text_delta(&mut self, key: &str, kind: TextKind, delta: &str) {
        if self.finished || delta.is_empty() {
            return;
        }
        let idx = self.text_item(key, kind);
        let Some(state) = self.items.get_mut(idx) else {
            return;
        };
        if !state.open {
            return;
        }
        let Some(field) = live::text_field(&state.item.kind) else {
            return;
        };
        let offset = match &mut state.item.kind {
            TurnItemKind::AssistantMessage { text, .. } | TurnItemKind::Reasoning { text, .. } => {
                let offset = text.len();
                text.push_str(delta);
                offset
            }
            _ => return,
        };
        self.grew(idx, field, offset, delta);
    }

    /// The growing field `field` of open item `idx` (streaming text, or a running
    /// tool's output) just grew by `delta` at `offset`: the live delta goes out at once
    /// (LIVE-01); the durable state when the item's window is due (leading edge, or
    /// `flush_bytes` unsent: [`Self::emit_window`]), else the item is marked dirty for
    /// [`Self::flush_due`].
    pub(super) fn grew(&mut self, idx: usize, field: DeltaField, offset: usize, delta: &str) {
        let Some(state) = self.items.get_mut(idx) else {
            return;
        };
        let live = live::delta(&state.item, field, offset, delta);
        state.unsent += delta.len();
        state.dirty = true;
        let due = state.window_due(&self.style);
        self.send(live);
        if due {
            self.emit_window(idx);
        }
    }

    /// Writes the durable state of open item `idx` for its window (LIVE-03): the text
    /// (or tool output) appended since its last durable state as one
    /// `TurnItemAppended` chunk, or the whole snapshot when the item has no durable
    /// state to continue yet. The item's next window is twice this one (up to the
    /// style's longest).
    pub(super) fn emit_window(&mut self, idx: usize) {
        let now = self.clock.now();
        let Some(state) = self.items.get_mut(idx) else {
            return;
        };
        state.grow_window(&self.style);
        let (Some(from), Some((field, text))) = (
            state.durable_len.filter(|_| state.open),
            growing(&state.item.kind),
        ) else {
            return self.emit(idx);
        };
        let Some(fresh) = text.get(from..) else {
            return self.emit(idx);
        };
        let chunk = (!fresh.is_empty()).then(|| live::append(&state.item, field, from, fresh, now));
        state.durable_len = Some(text.len());
        state.item.updated_at = now;
        state.last_emit = Some(Instant::now());
        state.unsent = 0;
        state.dirty = false;
        if let Some(chunk) = chunk {
            self.send(chunk);
        }
    }

    /// True when a text item has text not emitted yet (call [`Self::flush`] or
    /// [`Self::flush_due`] by [`Self::next_flush_deadline`]).
    pub fn is_dirty(&self) -> bool {
        self.items.iter().any(|s| s.dirty && s.open)
    }

    /// When the driver must call [`Self::flush_due`] next, if some text is unsent: the
    /// earliest end of a dirty item's current window.
    pub fn next_flush_deadline(&self) -> Option<Instant> {
        self.items
            .iter()
            .filter(|s| s.dirty && s.open)
            .filter_map(|s| s.window_end(&self.style))
            .min()
    }

    /// Emits every text item whose unsent text has waited its window.
    pub fn flush_due(&mut self) {
        let due: Vec<usize> = (0..self.items.len())
            .filter(|&i| {
                let s = &self.items[i];
                s.dirty && s.open && s.window_due(&self.style)
            })
            .collect();
        for idx in due {
            self.emit_window(idx);
        }
    }

    /// Emits every text item with unsent text.
    pub fn flush(&mut self) {
        let dirty: Vec<usize> = (0..self.items.len())
            .filter(|&i| self.items[i].dirty && self.items[i].open)
            .collect();
        for idx in dirty {
            self.emit_window(idx);
        }
    }

    /// Completes text item `key`, replacing its text with `full` when given (the
    /// runtime's final text wins over the concatenated deltas). Creates it if needed
    /// (a runtime that sends no deltas); an empty item that never was is skipped.
    pub fn text_done(&mut self, key: &str, kind: TextKind, full: Option<&str>) {
        if self.finished {
            return;
        }
        if !self.has_item(key) && full.is_none_or(str::is_empty) {
            return;
        }
        let idx = self.text_item(key, kind);
        self.settle_text(idx, full, TurnItemStatus::Completed);
    }

    /// Ends text item `key` (when open) with `status`, streaming off; unknown keys are
    /// ignored.
    pub fn text_ended(&mut self, key: &str, status: TurnItemStatus) {
        if let Some(idx) = self.index_of(key) {
            self.settle_text(idx, None, status);
        }
    }

    /// Settles item `idx` with `status` (text: streaming off, `full` replacing the
    /// text when given). Settled items are left alone.
    pub fn settle_text(&mut self, idx: usize, full: Option<&str>, status: TurnItemStatus) {
        self.update(idx, false, |item| {
            if let TurnItemKind::AssistantMessage { text, streaming }
            | TurnItemKind::Reasoning { text, streaming } = &mut item.kind
            {
                if let Some(full) = full {
                    full.clone_into(text);
                }
                *streaming = false;
            }
            item.status = status;
        });
    }
}
