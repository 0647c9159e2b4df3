//! Tool-call items of the one recorder: opened, their input streamed (live deltas,
//! LIVE-01) and completed, run, settled with output or error.

use knife_protocol::*;
use serde_json::Value;

use super::{TurnRecorder, live};

/// The changeable fields of a tool item, for [`TurnRecorder::tool_state`] /
/// [`TurnRecorder::set_tool_state`] (a runtime that reports calls field by field).
#[derive(Clone, Debug, PartialEq)]
pub struct ToolState {
    /// The tool's name.
    pub tool: String,
    /// The call's arguments (JSON, or a string while still streaming).
    pub input: Value,
    /// What the tool returned, once it did.
    pub output: Option<String>,
    /// Why the tool failed, when it did.
    pub error: Option<String>,
    /// `completed` / `failed` settle the item.
    pub status: TurnItemStatus,
}

impl TurnRecorder {
    /// Creates tool item `key` for call `call_id` of `tool` (not emitted yet) unless
    /// it exists; returns its index.
    pub fn open_tool(
        &mut self,
        key: &str,
        call_id: &str,
        tool: &str,
        input: Value,
        status: TurnItemStatus,
    ) -> usize {
        if let Some(idx) = self.index_of(key) {
            return idx;
        }
        self.open_item(
            Some(key),
            TurnItemKind::ToolCall {
                call_id: call_id.to_owned(),
                tool: tool.to_owned(),
                input,
                output: None,
                error: None,
            },
            status,
        )
    }

    /// Whether some tool item of the turn already uses call id `call_id`.
    pub fn call_id_taken(&self, call_id: &str) -> bool {
        self.items.iter().any(|s| {
            matches!(&s.item.kind, TurnItemKind::ToolCall { call_id: used, .. } if used == call_id)
        })
    }

    /// Opens tool item `key` (running, emitted) for call `call_id` of `tool` with `input`.
    pub fn tool_started(&mut self, key: &str, call_id: &str, tool: &str, input: Value) {
        if self.finished || self.has_item(key) {
            return;
        }
        let idx = self.open_tool(key, call_id, tool, input, TurnItemStatus::Running);
        self.emit(idx);
    }

    /// More argument text of tool item `idx` as the model streams it: kept, and sent
    /// live (field `input`, LIVE-01) until the complete input arrives; the durable
    /// item shows the input once complete ([`Self::tool_input_complete`]).
    pub fn tool_input_delta(&mut self, idx: usize, delta: &str) {
        let Some(state) = self.items.get_mut(idx) else {
            return;
        };
        let offset = state.raw_input.len();
        state.raw_input.push_str(delta);
        if !state.input_complete && !delta.is_empty() {
            let live = live::delta(&state.item, DeltaField::Input, offset, delta);
            self.send(live);
        }
    }

    /// More output of running tool item `idx` as the tool produces it (e.g. `bash`
    /// stdout/stderr, LIVE-02): sent live at once (field `output`) and written in
    /// persistence windows like streaming text (a chunk per window, LIVE-03). The
    /// settled item carries the tool's whole result ([`Self::settle_tool_at`]).
    pub fn tool_output_delta(&mut self, idx: usize, delta: &str) {
        if self.finished || delta.is_empty() {
            return;
        }
        let Some(state) = self.items.get_mut(idx) else {
            return;
        };
        if !state.open {
            return;
        }
        let TurnItemKind::ToolCall { output, .. } = &mut state.item.kind else {
            return;
        };
        let text = output.get_or_insert_with(String::new);
        let offset = text.len();
        text.push_str(delta);
        // The item's growing window, as for streaming text (LIVE-03).
        self.grew(idx, DeltaField::Output, offset, delta);
    }

    /// The complete call of tool item `idx`: sets its tool name and input and emits it
    /// (status unchanged).
    pub fn tool_input_complete(&mut self, idx: usize, name: &str, input: Value) {
        if let Some(state) = self.items.get_mut(idx) {
            state.input_complete = true;
            if let TurnItemKind::ToolCall {
                tool, input: slot, ..
            } = &mut state.item.kind
            {
                name.clone_into(tool);
                *slot = input;
            }
        }
        self.emit(idx);
    }

    /// Whether tool item `idx` received its complete input (a tool item opened with
    /// its input counts as complete only after [`Self::tool_input_complete`]).
    pub fn tool_input_is_complete(&self, idx: usize) -> bool {
        self.items.get(idx).is_some_and(|s| s.input_complete)
    }

    /// Sets the status of open item `idx` (e.g. the tool starts running) and emits it.
    pub fn set_item_status(&mut self, idx: usize, status: TurnItemStatus) {
        if let Some(state) = self.items.get_mut(idx) {
            state.item.status = status;
        }
        self.emit(idx);
    }

    /// Settles open tool item `idx` with `status`, `output` and `error`; an input that
    /// never completed is kept as the raw text streamed.
    pub fn settle_tool_at(
        &mut self,
        idx: usize,
        status: TurnItemStatus,
        out: Option<String>,
        err: Option<String>,
    ) {
        let Some(state) = self.items.get_mut(idx) else {
            return;
        };
        if !state.open {
            return;
        }
        let raw =
            (!state.input_complete && !state.raw_input.is_empty()).then(|| state.raw_input.clone());
        self.send_output_rest(idx, out.as_deref());
        self.update(idx, false, |item| {
            item.status = status;
            if let TurnItemKind::ToolCall {
                input,
                output,
                error,
                ..
            } = &mut item.kind
            {
                if let Some(raw) = raw {
                    *input = Value::String(raw);
                }
                *output = out;
                *error = err;
            }
        });
    }

    /// Settles tool item `key`: `completed` with `output`, or `failed` with `error`.
    /// Unknown keys are ignored.
    pub fn tool_finished(&mut self, key: &str, output: Option<String>, error: Option<String>) {
        let Some(mut state) = self.tool_state(key) else {
            return;
        };
        state.status = if error.is_some() {
            TurnItemStatus::Failed
        } else {
            TurnItemStatus::Completed
        };
        state.output = output;
        state.error = error;
        self.set_tool_state(key, state);
    }

    /// Opens tool item `key` for call `call_id` in `state` (settled at once when
    /// `completed` / `failed`) unless it exists.
    pub fn tool_opened(&mut self, key: &str, call_id: &str, state: ToolState) {
        if self.finished || self.has_item(key) {
            return;
        }
        let idx = self.open_tool(key, call_id, "", Value::Null, TurnItemStatus::Pending);
        self.put_tool_state(idx, state);
    }

    /// The fields of tool item `key` while it is open.
    pub fn tool_state(&self, key: &str) -> Option<ToolState> {
        let state = self.items.get(self.index_of(key)?)?;
        match (&state.item.kind, state.open) {
            (
                TurnItemKind::ToolCall {
                    tool,
                    input,
                    output,
                    error,
                    ..
                },
                true,
            ) => Some(ToolState {
                tool: tool.clone(),
                input: input.clone(),
                output: output.clone(),
                error: error.clone(),
                status: state.item.status,
            }),
            _ => None,
        }
    }

    /// Replaces the fields of open tool item `key` and emits it (settled when `state`
    /// is `completed` / `failed`). Unknown or settled items are ignored.
    pub fn set_tool_state(&mut self, key: &str, state: ToolState) {
        if self.finished {
            return;
        }
        if let Some(idx) = self.index_of(key)
            && self.is_open(idx)
        {
            self.put_tool_state(idx, state);
        }
    }

    fn put_tool_state(&mut self, idx: usize, state: ToolState) {
        let open = !matches!(
            state.status,
            TurnItemStatus::Completed | TurnItemStatus::Failed
        );
        if open && let Some(more) = self.output_growth(idx, &state) {
            // Only the output grew while the call runs (an ACP `tool_call_update` with
            // more content): streamed like `bash` output, live at once and durable per
            // window, not a whole snapshot per update.
            return self.tool_output_delta(idx, &more);
        }
        self.send_output_rest(idx, state.output.as_deref());
        self.update(idx, open, |item| {
            if let TurnItemKind::ToolCall {
                tool,
                input,
                output,
                error,
                ..
            } = &mut item.kind
            {
                *tool = state.tool;
                *input = state.input;
                *output = state.output;
                *error = state.error;
            }
            item.status = state.status;
        });
    }

    /// The text `state` adds to open tool item `idx`'s output, when that is all it
    /// changes (same tool, input, error and status; the output extends the current one).
    fn output_growth(&self, idx: usize, state: &ToolState) -> Option<String> {
        let item = self.items.get(idx).filter(|s| s.open)?;
        let TurnItemKind::ToolCall {
            tool,
            input,
            output,
            error,
            ..
        } = &item.item.kind
        else {
            return None;
        };
        if *tool != state.tool
            || *input != state.input
            || *error != state.error
            || item.item.status != state.status
        {
            return None;
        }
        let more = state
            .output
            .as_deref()?
            .strip_prefix(output.as_deref().unwrap_or(""))?;
        (!more.is_empty()).then(|| more.to_owned())
    }

    /// Before tool item `idx`'s output becomes `out` in a snapshot: when its output
    /// streamed live and `out` extends it, the rest goes live too, so a watcher's deltas
    /// add up to the item's output (LIVE-02). An `out` that does not extend it (the
    /// runtime's own aggregate, cut or rewritten) replaces it through the snapshot.
    fn send_output_rest(&self, idx: usize, out: Option<&str>) {
        let Some(state) = self.items.get(idx).filter(|s| s.open) else {
            return;
        };
        if let TurnItemKind::ToolCall {
            output: Some(streamed),
            ..
        } = &state.item.kind
            && !streamed.is_empty()
            && let Some(rest) = out
                .and_then(|out| out.strip_prefix(streamed.as_str()))
                .filter(|rest| !rest.is_empty())
        {
            self.send(live::delta(
                &state.item,
                DeltaField::Output,
                streamed.len(),
                rest,
            ));
        }
    }

    /// The input of tool item `key`, when it exists.
    pub fn tool_input(&self, key: &str) -> Option<&Value> {
        match &self.item(key)?.kind {
            TurnItemKind::ToolCall { input, .. } => Some(input),
            _ => None,
        }
    }
}
