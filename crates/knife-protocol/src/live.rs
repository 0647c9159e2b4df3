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
    /// The item's thread.
    pub thread_id: ThreadId,
    /// The item's run; `None` for an item outside any run.
    pub run_id: Option<RunId>,
    /// The streaming item (same id as its durable `turn-item.updated` snapshots).
    pub item_id: TurnItemId,
    /// The item's transcript position ([`TurnItem::ordinal`]), so a client can place
    /// an item it has no durable event of yet.
    pub ordinal: u64,
    /// Which text field of the item grows.
    pub field: DeltaField,
    /// Where `text` starts in the field, in UTF-8 bytes.
    pub offset: u64,
    /// The new text (UTF-8), continuing the field at `offset`.
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
    /// The item's thread.
    pub thread_id: ThreadId,
    /// The item whose live text is void.
    pub item_id: TurnItemId,
}

/// Durable appended text of one streaming item (LIVE-03): the event
/// `turn-item.appended`. `text` continues the item's `field` at byte `offset` of its
/// previous durable state (the last `turn-item.updated` snapshot plus the chunks
/// after it), so a streaming answer costs O(text) in the log instead of one whole
/// snapshot per persistence window. The item's other fields are unchanged, except
/// `updated_at`. The one recorder writes the item's first state and its settled state
/// as whole snapshots; chunks come only between them (docs/2026-12-01-live-chunks.md).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TurnItemAppend {
    /// The item's thread.
    pub thread_id: ThreadId,
    /// The item's run; `None` for an item outside any run.
    pub run_id: Option<RunId>,
    /// The streaming item.
    pub item_id: TurnItemId,
    /// The item's transcript position ([`TurnItem::ordinal`]).
    pub ordinal: u64,
    /// Which text field of the item grows.
    pub field: DeltaField,
    /// Where `text` starts in the field, in UTF-8 bytes (never inside a character).
    pub offset: u64,
    /// The appended text (UTF-8).
    pub text: String,
    /// The item's new `updated_at`.
    pub updated_at: crate::Timestamp,
}

/// Why a [`TurnItemAppend`] does not continue an item (the fold skips such a chunk).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AppendError {
    /// The item has no growing text `field` (another kind, or a parsed tool input).
    #[error("item {item} has no growing {field:?} text to append to; the chunk is skipped")]
    NoSuchField {
        /// The chunk's item.
        item: TurnItemId,
        /// The field the chunk names.
        field: DeltaField,
    },
    /// The chunk starts past the field's end (a chunk is missing before it).
    #[error(
        "chunk of item {item} starts at byte {offset} but its {field:?} text has {len} bytes; \
         the chunk is skipped (rebuild from a log that has the missing chunk)"
    )]
    Gap {
        /// The chunk's item.
        item: TurnItemId,
        /// The field the chunk names.
        field: DeltaField,
        /// Where the chunk starts, in UTF-8 bytes.
        offset: u64,
        /// The field's length so far, in UTF-8 bytes.
        len: u64,
    },
    /// The chunk starts inside a character of the field's text.
    #[error("chunk of item {item} starts inside a UTF-8 character (byte {offset}); skipped")]
    NotCharBoundary {
        /// The chunk's item.
        item: TurnItemId,
        /// Where the chunk starts, in UTF-8 bytes.
        offset: u64,
    },
}

impl TurnItemAppend {
    /// The byte offset right after this chunk.
    pub fn end(&self) -> u64 {
        self.offset + self.text.len() as u64
    }

    /// The same text as a live delta (clients that print text as it comes).
    pub fn as_delta(&self) -> ItemDelta {
        ItemDelta {
            thread_id: self.thread_id.clone(),
            run_id: self.run_id.clone(),
            item_id: self.item_id.clone(),
            ordinal: self.ordinal,
            field: self.field,
            offset: self.offset,
            text: self.text.clone(),
        }
    }

    /// Folds this chunk into `item` (its previous durable state): the field becomes
    /// its first `offset` bytes followed by `text`, and `updated_at` is the chunk's.
    /// A chunk ending at or before the field's end changes nothing (already folded:
    /// returns `Ok(false)`). Errors: [`AppendError`] (the item is left unchanged).
    pub fn apply_to(&self, item: &mut TurnItem) -> Result<bool, AppendError> {
        let field = self.field;
        let target: &mut String = match (field, &mut item.kind) {
            (DeltaField::Text, TurnItemKind::AssistantMessage { text, .. })
            | (DeltaField::Reasoning, TurnItemKind::Reasoning { text, .. }) => text,
            (
                DeltaField::Input,
                TurnItemKind::ToolCall {
                    input: Value::String(s),
                    ..
                },
            ) => s,
            (DeltaField::Output, TurnItemKind::ToolCall { output, .. })
                if output.is_some() || self.offset == 0 =>
            {
                output.get_or_insert_with(String::new)
            }
            (DeltaField::Output, TurnItemKind::ToolCall { .. }) => {
                return Err(AppendError::Gap {
                    item: item.id.clone(),
                    field,
                    offset: self.offset,
                    len: 0,
                });
            }
            _ => {
                return Err(AppendError::NoSuchField {
                    item: item.id.clone(),
                    field,
                });
            }
        };
        let len = target.len() as u64;
        if self.offset > len {
            return Err(AppendError::Gap {
                item: item.id.clone(),
                field,
                offset: self.offset,
                len,
            });
        }
        if self.end() <= len {
            return Ok(false);
        }
        let at = usize::try_from(self.offset).unwrap_or(usize::MAX);
        if !target.is_char_boundary(at) {
            return Err(AppendError::NotCharBoundary {
                item: item.id.clone(),
                offset: self.offset,
            });
        }
        target.truncate(at);
        target.push_str(&self.text);
        item.updated_at = self.updated_at;
        Ok(true)
    }
}
