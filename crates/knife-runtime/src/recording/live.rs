//! The live delta and reset events of a transcript item (LIVE-01), built one way
//! for every driver by the one recorder (LIVE-05).
//!
//! A recorder calls [`delta`] with the item as it is *before* appending `text`
//! (the offset is the field's current length) and emits it right away, ahead of
//! the throttled durable state; [`reset`] after the snapshot that voids a discarded
//! attempt; [`append`] is the durable chunk a text window writes (LIVE-03).

use knife_protocol::{
    AdapterEvent, DeltaField, ItemDelta, ItemReset, Timestamp, TurnItem, TurnItemAppend,
    TurnItemKind,
};

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

/// The durable chunk of `item`'s `field`: `text` appended at byte `offset` of its
/// previous durable state, stamped `at` (LIVE-03).
pub fn append(
    item: &TurnItem,
    field: DeltaField,
    offset: usize,
    text: &str,
    at: Timestamp,
) -> AdapterEvent {
    AdapterEvent::TurnItemAppended(TurnItemAppend {
        thread_id: item.thread_id.clone(),
        run_id: item.run_id.clone(),
        item_id: item.id.clone(),
        ordinal: item.ordinal,
        field,
        offset: offset as u64,
        text: text.to_owned(),
        updated_at: at,
    })
}

/// The durable states of transcript items that `events` describe, in order: each
/// whole snapshot as it is, each appended chunk folded into the item's previous state
/// (what a client folding the durable events sees after each one; LIVE-03). A chunk
/// of an item with no earlier snapshot in `events` is left out.
pub fn durable_states(events: &[AdapterEvent]) -> Vec<TurnItem> {
    DurableStates::default().fold(events)
}

/// [`durable_states`] across several slices of one stream (a chunk continues a
/// snapshot of an earlier slice).
#[derive(Debug, Default)]
pub struct DurableStates {
    last: std::collections::HashMap<knife_protocol::TurnItemId, TurnItem>,
}

impl DurableStates {
    /// The durable states `events` describe, after those folded before.
    pub fn fold(&mut self, events: &[AdapterEvent]) -> Vec<TurnItem> {
        let mut out = Vec::new();
        for event in events {
            match event {
                AdapterEvent::TurnItemUpdated(item) => {
                    self.last.insert(item.id.clone(), item.clone());
                    out.push(item.clone());
                }
                AdapterEvent::TurnItemAppended(chunk) => {
                    if let Some(item) = self.last.get_mut(&chunk.item_id)
                        && chunk.apply_to(item).is_ok()
                    {
                        out.push(item.clone());
                    }
                }
                _ => {}
            }
        }
        out
    }
}
