//! Text windows of the one recorder: assistant text and reasoning items, their live
//! deltas (at once, LIVE-01) and their throttled durable state (PROC-12): a whole
//! snapshot first, then appended chunks, then the settled snapshot (LIVE-03).

use knife_protocol::*;
use tokio::time::Instant;

use super::{TurnRecorder, live};

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
    /// out at once (LIVE-01); the snapshot when the window allows (leading edge, or
    /// `flush_bytes` unsent), else the item is marked dirty for [`Self::flush_due`].
    pub fn text_delta(&mut self, key: &str, kind: TextKind, delta: &str) {
        if self.finished || delta.is_empty() {
            return;
        }
        let idx = self.text_item(key, kind);
        let interval = self.style.flush_interval;
        let flush_bytes = self.style.flush_bytes;
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
        let live = live::delta(&state.item, field, offset, delta);
        state.unsent += delta.len();
        state.dirty = true;
        let due = state
            .last_emit
            .is_none_or(|last| last.elapsed() >= interval)
            || state.unsent >= flush_bytes;
        self.send(live);
        if due {
            self.emit_window(idx);
        }
    }

    /// Writes the durable state of open item `idx` for its window (LIVE-03): the text
    /// (or tool output) appended since its last durable state as one
    /// `TurnItemAppended` chunk, or the whole snapshot when the item has no durable
    /// state to continue yet.
    pub(super) fn emit_window(&mut self, idx: usize) {
        let now = self.clock.now();
        let Some(state) = self.items.get_mut(idx) else {
            return;
        };
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

    /// When the driver must call [`Self::flush_due`] next, if some text is unsent.
    pub fn next_flush_deadline(&self) -> Option<Instant> {
        self.items
            .iter()
            .filter(|s| s.dirty && s.open)
            .filter_map(|s| s.last_emit.map(|last| last + self.style.flush_interval))
            .min()
    }

    /// Emits every text item whose unsent text has waited the window.
    pub fn flush_due(&mut self) {
        let interval = self.style.flush_interval;
        let due: Vec<usize> = (0..self.items.len())
            .filter(|&i| {
                let s = &self.items[i];
                s.dirty && s.open && s.last_emit.is_none_or(|last| last.elapsed() >= interval)
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
