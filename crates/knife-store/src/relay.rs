// Live messages between nodes (issue 17 item 2): the not-durable deltas and resets of
// one node's streaming items, handed to the other nodes on the same database.

//! The store contract's [`LiveRelay`]: a node's live hub hands every delta and reset it
//! broadcasts to [`LiveRelay::relay_live`]; each other node's hub reads them from
//! [`LiveRelay::relayed_live`] and serves them to its own subscribers. Best effort and
//! bounded: a message dropped on the way costs a subscriber latency only (the durable
//! snapshots still carry the text, and a hub heals a gap from them). A single-node
//! backend (SQLite) keeps the defaults: nothing to relay, nothing to read.

use knife_protocol::{ItemDelta, ItemReset};
use std::sync::Arc;
use tokio::sync::broadcast;

/// One live message as it travels between nodes: exactly what the sending node's hub
/// broadcast to its own subscribers (`knife_runtime::live::LiveMessage`).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum RelayedLive {
    /// More text of an item; `generation` counts the item's resets on the sending node.
    Delta {
        /// The delta (LIVE-01).
        delta: ItemDelta,
        /// The item's generation on the sending node.
        generation: u32,
    },
    /// The item's live text is void from `generation` on; deliver it after the
    /// durable events up to `after_sequence` (LIVE-02).
    Reset {
        /// The reset.
        reset: ItemReset,
        /// The item's new generation on the sending node.
        generation: u32,
        /// The last durable sequence of the thread written before the reset.
        after_sequence: u64,
    },
}

/// Relaying live messages to the other nodes of the database (issue 17 item 2).
pub trait LiveRelay: Send + Sync {
    /// Hands `message` to every other node, after the messages relayed before it (the
    /// order is kept per sending node). Never blocks; may drop a message under load or
    /// when the database is unreachable. Default: no other nodes, nothing to do.
    fn relay_live(&self, message: RelayedLive) {
        let _ = message;
    }

    /// The messages the other nodes relay from now on, in each sender's order (never
    /// this node's own). `None` (the default) when the backend has no other nodes.
    fn relayed_live(&self) -> Option<broadcast::Receiver<Arc<RelayedLive>>> {
        None
    }
}
