//! The live delta and reset events of a transcript item (LIVE-01), built one way
//! for every driver by the one recorder (LIVE-05).
//!
//! A recorder calls [`delta`] with the item as it is *before* appending `text`
//! (the offset is the field's current length) and emits it right away, ahead of
//! the throttled snapshot; [`reset`] after the snapshot that voids a discarded attempt.

use knife_protocol::{AdapterEvent, DeltaField, ItemDelta, ItemReset, TurnItem, TurnItemKind};

/// The growing text field of `item`'s kind that live deltas extend, if any
/// (assistant text, reasoning; tool input and output are named by the caller).
pub fn text_field(kind: &TurnItemKind) -> Option<DeltaField> {
    match kind {
        TurnItemKind::AssistantMessage { .. } => Some(DeltaField::Text),
        TurnItemKind::Reasoning { .. } => Some(DeltaField::Reasoning),
        _ => None,
    }
}

/// The live delta adding `text` at byte `offset` of `item`'s `field`.
pub fn delta(item: &TurnItem, field: DeltaField, offset: usize, text: &str) -> AdapterEvent {
    AdapterEvent::TurnItemDelta(ItemDelta {
        thread_id: item.thread_id.clone(),
        run_id: item.run_id.clone(),
        item_id: item.id.clone(),
        ordinal: item.ordinal,
        field,
        offset: offset as u64,
        text: text.to_owned(),
    })
}

/// The live reset of `item` (its attempt was discarded).
pub fn reset(item: &TurnItem) -> AdapterEvent {
    AdapterEvent::TurnItemReset(ItemReset {
        thread_id: item.thread_id.clone(),
        item_id: item.id.clone(),
    })
}
