//! Live deltas (LIVE-01, LIVE-02): the not-durable messages that carry streaming
//! text to subscribers before its persistence window closes. Self-contained and
//! serializable, so a node can forward them to another (SCALE) as they are.
//!
//! Contract (docs/2026-12-01-live-deltas.md): durable events carry an item's state
//! up to an offset; deltas continue from there. Offsets count UTF-8 bytes of the
//! field's text; a delta never starts or ends inside a character.

use crate::entities::{TurnItem, TurnItemKind};
use crate::ids::*;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Which growing text of an item a delta extends.
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum DeltaField {
    /// The text of an `assistant_message` item.
    Text,
    /// The text of a `reasoning` item.
    Reasoning,
    /// The raw arguments of a `tool_call` item as the model streams them (the
    /// durable item holds them as a string until the call is complete).
    Input,
    /// The output of a `tool_call` item as the tool produces it (e.g. `bash`
    /// stdout/stderr, codex command output).
    Output,
}

impl DeltaField {
    /// The field's current text in a durable item, `None` when `item` has no such
    /// growing text (another kind, or a tool input already parsed as JSON: complete).
    pub fn durable_text(self, item: &TurnItem) -> Option<&str> {
        match (self, &item.kind) {
            (DeltaField::Text, TurnItemKind::AssistantMessage { text, .. })
            | (DeltaField::Reasoning, TurnItemKind::Reasoning { text, .. }) => Some(text),
            (
                DeltaField::Input,
                TurnItemKind::ToolCall {
                    input: Value::String(s),
                    ..
                },
            ) => Some(s),
            (DeltaField::Output, TurnItemKind::ToolCall { output, .. }) => {
                Some(output.as_deref().unwrap_or(""))
            }
            _ => None,
        }
    }
}

/// More text of one item's field: `text` continues the field at byte `offset`.
/// Not durable, no store sequence (LIVE-01).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ItemDelta {
    pub thread_id: ThreadId,
    pub run_id: Option<RunId>,
    pub item_id: TurnItemId,
    /// The item's transcript position ([`TurnItem::ordinal`]), so a client can place
    /// an item it has no durable event of yet.
    pub ordinal: u64,
    pub field: DeltaField,
    /// Where `text` starts in the field, in UTF-8 bytes.
    pub offset: u64,
    pub text: String,
}

impl ItemDelta {
    /// The byte offset right after this delta.
    pub fn end(&self) -> u64 {
        self.offset + self.text.len() as u64
    }
}

/// The live text of an item is void (a discarded attempt, PROC-02 / PROC-03): the
/// client drops what deltas gave it for `item_id`; later deltas start again at 0.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ItemReset {
    pub thread_id: ThreadId,
    pub item_id: TurnItemId,
}
