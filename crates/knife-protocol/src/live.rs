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

/// A live delta as a subscriber receives it on the WebSocket (`{"type":"delta", …}`)
/// and SSE (`event: delta`) (LIVE-01, LIVE-03: slim on the wire).
///
/// The first delta of an item on a subscription, and the first after a `reset` of
/// it, *introduces* the item: it carries `item_id`, `thread_id`, `run_id` (when the
/// item belongs to a run), `ordinal` and `ref`, a small number the server allocates
/// for the item, unique on the connection (a WebSocket connection's subscriptions
/// share one numbering; an SSE stream has its own). Every later delta of that item
/// names only `ref`, `field`, `offset` and `text`; the client takes the rest from the
/// introduction ([`DeltaItems`] does it). So a small delta costs its text plus ~60
/// bytes, not the ~265 of the whole header. A reintroduction after a reset keeps the
/// item's `ref` (docs/2026-12-01-live-deltas.md, 2026-12-02).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct DeltaMessage {
    /// Present in an item's introduction only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thread_id: Option<ThreadId>,
    /// Present in an item's introduction only (and only for an item of a run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<RunId>,
    /// The turn item the text belongs to; present in an item's introduction only
    /// (later deltas name it by `ref`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub item_id: Option<TurnItemId>,
    /// The item's transcript position; present in an item's introduction only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ordinal: Option<u64>,
    /// The item's short reference on this connection (from its introduction); in
    /// every delta.
    #[serde(rename = "ref")]
    pub item_ref: u64,
    /// Which text field of the item grows (answer text, reasoning, tool input or output).
    pub field: DeltaField,
    /// Where `text` starts in the field, in UTF-8 bytes.
    pub offset: u64,
    /// The new text (UTF-8), continuing the field at `offset`.
    pub text: String,
}

impl DeltaMessage {
    /// `delta` as its item's introduction (every field), naming it `item_ref` from now on.
    pub fn introducing(delta: &ItemDelta, item_ref: u64) -> Self {
        Self {
            thread_id: Some(delta.thread_id.clone()),
            run_id: delta.run_id.clone(),
            item_id: Some(delta.item_id.clone()),
            ordinal: Some(delta.ordinal),
            ..Self::continuing(delta, item_ref)
        }
    }

    /// `delta` continuing an item the subscriber was introduced to as `item_ref`.
    pub fn continuing(delta: &ItemDelta, item_ref: u64) -> Self {
        Self {
            thread_id: None,
            run_id: None,
            item_id: None,
            ordinal: None,
            item_ref,
            field: delta.field,
            offset: delta.offset,
            text: delta.text.clone(),
        }
    }

    /// Whether this message introduces its item (carries its id, thread and ordinal).
    pub fn introduces(&self) -> bool {
        self.item_id.is_some()
    }

    /// The byte offset right after this delta.
    pub fn end(&self) -> u64 {
        self.offset + self.text.len() as u64
    }
}

/// A delta names an item reference no earlier delta of the connection introduced.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "delta for item ref {0} arrived before the delta introducing the item (id, thread, run, \
     ordinal); resubscribe with the last durable sequence to get it again"
)]
pub struct UnknownDeltaItem(pub u64);

/// What an introduction told about an item.
#[derive(Clone, Debug)]
struct Introduced {
    item_id: TurnItemId,
    thread_id: ThreadId,
    run_id: Option<RunId>,
    ordinal: u64,
}

/// A client's record of the items its subscriptions introduced, to read each
/// [`DeltaMessage`] as a whole [`ItemDelta`]. One per connection (or per SSE stream);
/// start a new one (or [`DeltaItems::clear`]) when reconnecting.
#[derive(Clone, Debug, Default)]
pub struct DeltaItems {
    known: std::collections::HashMap<u64, Introduced>,
}

impl DeltaItems {
    /// The whole delta `m` stands for; an introduction is remembered under its `ref`.
    /// Errors: [`UnknownDeltaItem`] for a slim delta whose `ref` was never introduced.
    pub fn resolve(&mut self, m: DeltaMessage) -> Result<ItemDelta, UnknownDeltaItem> {
        let intro = match (m.item_id, m.thread_id) {
            (Some(item_id), Some(thread_id)) => {
                let intro = Introduced {
                    item_id,
                    thread_id,
                    run_id: m.run_id,
                    ordinal: m.ordinal.unwrap_or(0),
                };
                self.known.insert(m.item_ref, intro.clone());
                intro
            }
            _ => self
                .known
                .get(&m.item_ref)
                .cloned()
                .ok_or(UnknownDeltaItem(m.item_ref))?,
        };
        Ok(ItemDelta {
            thread_id: intro.thread_id,
            run_id: intro.run_id,
            item_id: intro.item_id,
            ordinal: intro.ordinal,
            field: m.field,
            offset: m.offset,
            text: m.text,
        })
    }

    /// After a `reset` of `item`: its next delta introduces it again.
    pub fn forget(&mut self, item: &TurnItemId) {
        self.known.retain(|_, i| &i.item_id != item);
    }

    /// After a reconnect: every item is introduced again.
    pub fn clear(&mut self) {
        self.known.clear();
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn delta(item: &str, offset: u64, text: &str) -> ItemDelta {
        ItemDelta {
            thread_id: ThreadId::from("thread_a"),
            run_id: Some(RunId::from("run:thread_a:1")),
            item_id: TurnItemId::from(item),
            ordinal: 3,
            field: DeltaField::Text,
            offset,
            text: text.to_owned(),
        }
    }

    #[test]
    fn live_03_continuing_deltas_name_their_item_by_a_short_ref() {
        let first = delta("item:thread_a:7f3e9c1d-long-item-id", 0, "Hel");
        let next = delta("item:thread_a:7f3e9c1d-long-item-id", 3, "lo");
        let intro = serde_json::to_value(DeltaMessage::introducing(&first, 4)).unwrap();
        assert_eq!(intro["ref"], 4);
        assert_eq!(intro["item_id"], "item:thread_a:7f3e9c1d-long-item-id");
        assert_eq!(intro["thread_id"], "thread_a");
        assert_eq!(intro["ordinal"], 3);
        let slim = DeltaMessage::continuing(&next, 4);
        let wire = serde_json::to_string(&slim).unwrap();
        assert_eq!(wire, r#"{"ref":4,"field":"text","offset":3,"text":"lo"}"#);
        assert!(!slim.introduces());

        // The client reads both back as whole deltas, the slim one by its ref.
        let mut items = DeltaItems::default();
        let m: DeltaMessage = serde_json::from_value(intro).unwrap();
        assert!(m.introduces());
        assert_eq!(items.resolve(m).unwrap(), first);
        let m: DeltaMessage = serde_json::from_str(&wire).unwrap();
        assert_eq!(items.resolve(m).unwrap(), next);

        // Another item on the same connection has its own ref.
        let other = delta("item:thread_a:other", 0, "x");
        items.resolve(DeltaMessage::introducing(&other, 5)).unwrap();
        assert_eq!(
            items
                .resolve(DeltaMessage::continuing(&next, 4))
                .unwrap()
                .item_id,
            first.item_id
        );

        // After a reset the ref is unknown until the item is introduced again.
        items.forget(&first.item_id);
        let err = items
            .resolve(DeltaMessage::continuing(&next, 4))
            .unwrap_err();
        assert_eq!(err, UnknownDeltaItem(4));
        assert!(err.to_string().contains("resubscribe"), "{err}");
        assert_eq!(
            items
                .resolve(DeltaMessage::continuing(&other, 5))
                .unwrap()
                .item_id,
            other.item_id
        );
        items.clear();
        assert!(items.resolve(DeltaMessage::continuing(&other, 5)).is_err());
    }
}
