//! The one turn recorder (LIVE-05): every driver (built-in agent, codex, ACP) turns
//! what its runtime reports into knife's adapter events through [`TurnRecorder`].
//!
//! A turn emits, in order: the provider turn `running` and the agent status `busy`
//! ([`TurnRecorder::start`]); transcript items as they appear and change (ids
//! `item:<provider turn>:<n>`, ordinals `run_ordinal * 1_000_000 + n`, n from 1 — the
//! run's user message, written by execution, is n = 0); approvals as a runtime request
//! (`live` on this session) with an `approval_request` node and an `item:<request id>`
//! approval item ([`approvals`]); finally ([`TurnRecorder::finish`]) every open item
//! settled, pending approvals cancelled, the provider turn's final state, status `idle`
//! and one `TurnTerminal`. A recorder dropped unfinished finishes itself as
//! interrupted (`aborted`), so no item is ever left pending.
//!
//! Text windows ([`text`]): each text, reasoning and tool-input delta goes out at once
//! as a live [`AdapterEvent::TurnItemDelta`] (LIVE-01, [`live`]); the durable state
//! of the item follows its persistence window: written at once when the item's last
//! durable state is at least one window old or [`RecorderStyle::flush_bytes`] arrived
//! since, otherwise the driver calls [`TurnRecorder::flush_due`] by
//! [`TurnRecorder::next_flush_deadline`]. An item's first window is
//! [`RecorderStyle::flush_interval`]; each window written for the same open item
//! doubles it, up to [`RecorderStyle::max_flush_interval`] (250 ms, PROC-12's bound),
//! so a short answer is durable within 50 ms and a long paced stream writes about four
//! chunks a second instead of twenty (LIVE-03). What a window writes (LIVE-03): the item's
//! first durable state is a whole snapshot (`TurnItemUpdated`), each later window
//! only the text appended since ([`AdapterEvent::TurnItemAppended`], with its
//! offset), and settling writes the whole final snapshot again, so a turn costs
//! O(text) and a settled item is one self-contained event
//! (docs/2026-12-01-live-chunks.md). This recorder is the only place that decides it.
//!
//! Items are addressed by the driver's key (a runtime's item id) or by index (the
//! order of creation); drivers keep only what is their own (the built-in agent's
//! discard-on-retry and compaction items use [`TurnRecorder::update`] /
//! [`TurnRecorder::truncate`]).

use std::collections::HashMap;
use std::time::Duration;

use knife_protocol::*;
use tokio::time::Instant;

use crate::SharedClock;

pub mod approvals;
mod finish;
pub mod live;
mod sink;
pub mod text;
pub mod tools;

pub use approvals::ApprovalAsk;
pub use live::{DurableStates, append, delta, durable_states, reset, text_field};
pub use sink::{EventReceiver, EventSink, RecordSink};
pub use text::TextKind;
pub use tools::ToolState;

/// First persistence window of streaming text (50 ms): a text item's first durable
/// state is written at most this long after its text changed
/// ([`TurnRecorder::flush_due`] must run by then when deltas pause); each later window
/// of the same item is twice the one before, up to [`MAX_FLUSH_INTERVAL`].
pub const FLUSH_INTERVAL: Duration = Duration::from_millis(50);
/// Longest persistence window of streaming text (250 ms, PROC-12: text is persisted
/// at least every 250 ms or 4 KiB, so a crash mid-stream loses at most that).
pub const MAX_FLUSH_INTERVAL: Duration = Duration::from_millis(250);
/// Unsent streaming text (bytes) that forces a snapshot at once.
pub const FLUSH_BYTES: usize = 4096;
/// Label of a user message a running turn took as a steer (TURN-01).
pub const STEER_DESCRIPTION: &str = "Sent during the run";
/// Error of a tool item still open when the turn is interrupted (PROC-08).
pub const TOOL_ABORTED: &str = "Tool execution aborted";

/// Identity of the turn being recorded.
#[derive(Clone, Debug)]
pub struct TurnIds {
    /// The app thread of the turn.
    pub thread_id: ThreadId,
    /// The run the turn executes.
    pub run_id: RunId,
    /// The run's ordinal (1-based); item ordinals derive from it.
    pub run_ordinal: u32,
    /// The provider turn being recorded.
    pub provider_turn_id: ProviderTurnId,
    /// The session the turn runs on.
    pub provider_session_id: ProviderSessionId,
    /// 1-based attempt of the run.
    pub attempt: u32,
    /// The native conversation the turn runs in.
    pub provider_thread_id: Option<ProviderThreadId>,
    /// The provider instance the turn runs on (named by its usage records, TURN-06).
    pub provider_instance_id: ProviderInstanceId,
    /// The model the turn runs on, when the driver knows it (`None` = the instance's
    /// default); the model of its usage records unless a call names its own.
    pub model: Option<String>,
}

/// Per-driver differences of recording, for [`TurnRecorder::start_with`]; the
/// default is the codex driver's.
#[derive(Clone, Debug)]
pub struct RecorderStyle {
    /// First persistence window of a streaming item ([`FLUSH_INTERVAL`], 50 ms); each
    /// window written for the same open item doubles it, up to
    /// [`Self::max_flush_interval`]. Zero emits every delta.
    pub flush_interval: Duration,
    /// Longest persistence window a streaming item grows to ([`MAX_FLUSH_INTERVAL`],
    /// 250 ms); never below [`Self::flush_interval`] (a longer first window stays).
    pub max_flush_interval: Duration,
    /// Unsent streaming text (bytes) that forces a snapshot ([`FLUSH_BYTES`]; min 1).
    pub flush_bytes: usize,
    /// Status of a guarded tool item once its approval is answered (`running` when the
    /// runtime runs it at once, `pending` when it reports the run itself); `None`
    /// leaves it to the driver (the built-in agent marks it running when it runs it).
    pub tool_after_approval: Option<TurnItemStatus>,
    /// Error of a tool item still open when the turn completes.
    pub unfinished_tool_error: &'static str,
}

impl Default for RecorderStyle {
    fn default() -> Self {
        Self {
            flush_interval: FLUSH_INTERVAL,
            max_flush_interval: MAX_FLUSH_INTERVAL,
            flush_bytes: FLUSH_BYTES,
            tool_after_approval: Some(TurnItemStatus::Running),
            unfinished_tool_error: "the turn ended before this tool call finished",
        }
    }
}

/// One transcript item of the turn and its recording state.
pub(crate) struct ItemState {
    pub(crate) item: TurnItem,
    /// Still changing (text streaming, tool not finished).
    pub(crate) open: bool,
    /// When its last snapshot was emitted (tokio time).
    pub(crate) last_emit: Option<Instant>,
    /// Text bytes added since the last snapshot.
    pub(crate) unsent: usize,
    /// Text added since the last snapshot.
    pub(crate) dirty: bool,
    /// The item's current persistence window; `None` until its first window is
    /// written (the first is [`RecorderStyle::flush_interval`], see [`text`]).
    pub(crate) window: Option<Duration>,
    /// Bytes of the item's text at its last durable state, when that state is a
    /// whole snapshot of the open item followed only by appended text: the next
    /// window then writes just the text after it (`turn-item.appended`, LIVE-03).
    pub(crate) durable_len: Option<usize>,
    /// Tool call arguments streamed so far (tool items only).
    pub(crate) raw_input: String,
    /// The complete tool input arrived (tool items only).
    pub(crate) input_complete: bool,
}

/// Records one provider turn; see the module docs.
pub struct TurnRecorder {
    sink: Box<dyn RecordSink>,
    clock: SharedClock,
    ids: TurnIds,
    style: RecorderStyle,
    turn: ProviderTurn,
    items: Vec<ItemState>,
    by_key: HashMap<String, usize>,
    approvals: HashMap<RuntimeRequestId, approvals::PendingApproval>,
    /// The agent status last published (PROC-06).
    status: Option<AgentStatus>,
    finished: bool,
    /// Model calls recorded so far ([`TurnRecorder::model_call`]).
    model_calls: u32,
    /// Runs once, right before the terminal event (frees a session's turn slot).
    on_finish: Option<Box<dyn FnOnce() + Send>>,
}

impl std::fmt::Debug for TurnRecorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TurnRecorder")
            .field("ids", &self.ids)
            .field("items", &self.items.len())
            .field("finished", &self.finished)
            .finish_non_exhaustive()
    }
}

impl TurnRecorder {
    /// Starts recording with the default [`RecorderStyle`]: emits the provider turn
    /// `running` and the status `busy`.
    pub fn start(sink: impl RecordSink + 'static, clock: SharedClock, ids: TurnIds) -> Self {
        Self::start_with(sink, clock, ids, RecorderStyle::default())
    }

    /// [`TurnRecorder::start`] with a driver's own [`RecorderStyle`].
    pub fn start_with(
        sink: impl RecordSink + 'static,
        clock: SharedClock,
        ids: TurnIds,
        style: RecorderStyle,
    ) -> Self {
        let now = clock.now();
        let turn = ProviderTurn {
            id: ids.provider_turn_id.clone(),
            thread_id: ids.thread_id.clone(),
            run_id: ids.run_id.clone(),
            provider_thread_id: ids.provider_thread_id.clone(),
            provider_session_id: ids.provider_session_id.clone(),
            node_id: NodeId::root_of(&ids.run_id),
            ordinal: ids.attempt,
            status: ProviderTurnStatus::Running,
            started_at: now,
            completed_at: None,
            usage: None,
            error: None,
            native_turn_id: None,
        };
        let style = RecorderStyle {
            flush_bytes: style.flush_bytes.max(1),
            max_flush_interval: style.max_flush_interval.max(style.flush_interval),
            ..style
        };
        let mut recorder = Self {
            sink: Box::new(sink),
            clock,
            ids,
            style,
            turn,
            items: Vec::new(),
            by_key: HashMap::new(),
            approvals: HashMap::new(),
            status: None,
            finished: false,
            model_calls: 0,
            on_finish: None,
        };
        recorder.publish_turn();
        recorder.set_status(AgentStatus::Busy);
        recorder
    }

    /// Runs `hook` once, right before the terminal event (e.g. to free the session's
    /// turn slot so a caller reacting to the terminal can start the next turn).
    pub fn on_finish(&mut self, hook: Box<dyn FnOnce() + Send>) {
        self.on_finish = Some(hook);
    }

    /// Emits `event` into the session's stream.
    pub fn send(&self, event: AdapterEvent) {
        self.sink.send(event);
    }

    /// The turn's identity.
    pub fn ids(&self) -> &TurnIds {
        &self.ids
    }

    /// Wall-clock now, from the turn's clock.
    pub fn now(&self) -> Timestamp {
        self.clock.now()
    }

    /// True once [`TurnRecorder::finish`] ran.
    pub fn is_finished(&self) -> bool {
        self.finished
    }

    /// Publishes the agent status (PROC-06) when it differs from the last one.
    pub fn set_status(&mut self, status: AgentStatus) {
        if self.status.as_ref() == Some(&status) {
            return;
        }
        self.status = Some(status.clone());
        self.send(AdapterEvent::AgentStatusChanged {
            thread_id: self.ids.thread_id.clone(),
            run_id: Some(self.ids.run_id.clone()),
            status,
        });
    }

    /// Publishes a retry status (the runtime retries a model call).
    pub fn retrying(&mut self, attempt: u32, message: String) {
        if self.finished {
            return;
        }
        let next = self.clock.now();
        self.set_status(AgentStatus::Retry {
            attempt,
            message,
            next,
            max_attempts: None,
        });
    }

    /// Emits the provider turn as it is now.
    pub fn publish_turn(&self) {
        self.send(AdapterEvent::ProviderTurnUpdated(self.turn.clone()));
    }

    /// Records the runtime's own id of the turn (codex's turn id) on the provider turn
    /// and publishes it at once, so a fork after this run can name it (CHG-09).
    pub fn set_native_turn_id(&mut self, id: &str) {
        if self.finished || self.turn.native_turn_id.as_deref() == Some(id) {
            return;
        }
        self.turn.native_turn_id = Some(id.to_owned());
        self.publish_turn();
    }

    /// Records one finished model call of the turn and its usage (TURN-06): emits its
    /// [`ModelCall`] (`call:<provider turn>:<n>`, n from 1) on `model`, else the
    /// turn's model. Call it before the turn's usage report that includes the call
    /// ([`TurnRecorder::set_usage`] + [`TurnRecorder::publish_turn`]), so a budget
    /// check at that report finds the record stored. Ignored after the finish.
    pub fn model_call(&mut self, usage: TokenUsage, model: Option<&str>) {
        if self.finished {
            return;
        }
        self.model_calls += 1;
        let call = ModelCall {
            id: ModelCall::id_of(&self.ids.provider_turn_id, self.model_calls),
            thread_id: self.ids.thread_id.clone(),
            run_id: self.ids.run_id.clone(),
            provider_turn_id: Some(self.ids.provider_turn_id.clone()),
            provider_instance_id: self.ids.provider_instance_id.clone(),
            model: model.map(str::to_owned).or_else(|| self.ids.model.clone()),
            ordinal: self.model_calls,
            usage,
            at: self.clock.now(),
        };
        self.send(AdapterEvent::ModelCallRecorded(call));
    }

    /// A steer the turn took (TURN-01): a completed user-message item with the
    /// steer's own id (`TurnItemId::steer_of`), which tells execution it was
    /// delivered. Ignored after the finish.
    pub fn steer_delivered(&mut self, id: TurnItemId, text: &str) {
        if self.finished {
            return;
        }
        let idx = self.open_item(
            None,
            TurnItemKind::UserMessage {
                text: text.to_owned(),
                origin: MessageOrigin::User,
                description: Some(STEER_DESCRIPTION.to_owned()),
            },
            TurnItemStatus::Completed,
        );
        self.update(idx, false, |item| item.id = id);
    }

    /// Model calls recorded so far.
    pub fn model_calls(&self) -> u32 {
        self.model_calls
    }

    /// Sets the turn's token usage (emitted with the next turn state and the terminal).
    pub fn set_usage(&mut self, usage: TokenUsage) {
        self.turn.usage = Some(usage);
    }

    /// Records `error` on the provider turn and publishes it as an error event
    /// (PROC-04, PROC-09). The first error recorded wins.
    pub fn set_error(&mut self, error: AgentError) {
        if self.turn.error.is_some() || self.finished {
            return;
        }
        self.turn.error = Some(error.clone());
        self.send(AdapterEvent::AgentErrorRaised {
            thread_id: self.ids.thread_id.clone(),
            run_id: Some(self.ids.run_id.clone()),
            error,
        });
    }

    /// Creates item number `item_count() + 1` (open, not emitted yet), addressable
    /// by `key` when given; returns its index.
    pub fn open_item(
        &mut self,
        key: Option<&str>,
        kind: TurnItemKind,
        status: TurnItemStatus,
    ) -> usize {
        let n = self.items.len() as u64 + 1;
        let now = self.clock.now();
        let item = TurnItem {
            id: TurnItemId::of_turn(&self.ids.provider_turn_id, n as u32),
            thread_id: self.ids.thread_id.clone(),
            run_id: Some(self.ids.run_id.clone()),
            provider_turn_id: Some(self.ids.provider_turn_id.clone()),
            ordinal: TurnItem::ordinal_in_run(self.ids.run_ordinal, n),
            status,
            started_at: Some(now),
            completed_at: None,
            updated_at: now,
            kind,
        };
        self.items.push(ItemState {
            item,
            open: true,
            last_emit: None,
            unsent: 0,
            dirty: false,
            window: None,
            durable_len: None,
            raw_input: String::new(),
            input_complete: false,
        });
        let idx = self.items.len() - 1;
        if let Some(key) = key {
            self.by_key.insert(key.to_owned(), idx);
        }
        idx
    }

    /// Emits the whole snapshot of item `idx` (a settled item gets its
    /// `completed_at`). Streaming text windows emit appended chunks instead
    /// ([`text`]); any other change of an item goes through here.
    pub fn emit(&mut self, idx: usize) {
        let now = self.clock.now();
        let Some(state) = self.items.get_mut(idx) else {
            return;
        };
        state.item.updated_at = now;
        if !state.open && state.item.completed_at.is_none() {
            state.item.completed_at = Some(now);
        }
        state.last_emit = Some(Instant::now());
        state.unsent = 0;
        state.dirty = false;
        state.durable_len = if state.open {
            text::growing(&state.item.kind).map(|(_, text)| text.len())
        } else {
            None
        };
        let snapshot = state.item.clone();
        self.send(AdapterEvent::TurnItemUpdated(snapshot));
    }

    /// Changes item `idx` with `change`, settles it unless `open`, and emits it.
    /// Settled items are left alone (returns false).
    pub fn update(&mut self, idx: usize, open: bool, change: impl FnOnce(&mut TurnItem)) -> bool {
        let Some(state) = self.items.get_mut(idx) else {
            return false;
        };
        if !state.open {
            return false;
        }
        change(&mut state.item);
        state.open = open;
        self.emit(idx);
        true
    }

    /// Changes item `idx` with `change` whether or not it is settled, settles it and
    /// emits it (a driver voiding an item, e.g. a discarded attempt).
    pub fn revise(&mut self, idx: usize, change: impl FnOnce(&mut TurnItem)) {
        let Some(state) = self.items.get_mut(idx) else {
            return;
        };
        change(&mut state.item);
        state.open = false;
        self.emit(idx);
    }

    /// Sends the live reset of item `idx` (its attempt was discarded; LIVE-01). Call
    /// it after the snapshot that voids the attempt.
    pub fn reset_live(&self, idx: usize) {
        if let Some(state) = self.items.get(idx) {
            self.send(live::reset(&state.item));
        }
    }

    /// Forgets the items from index `mark` on (a discarded attempt): the next item
    /// created reuses number `mark + 1`, so a retry overwrites them.
    pub fn truncate(&mut self, mark: usize) {
        self.items.truncate(mark);
        self.by_key.retain(|_, idx| *idx < mark);
    }

    /// Forgets every key (the runtime's ids are scoped, e.g. per model step); the
    /// items stay and are still settled by [`TurnRecorder::finish`].
    pub fn forget_keys(&mut self) {
        self.by_key.clear();
    }

    /// The index of item `key`.
    pub fn index_of(&self, key: &str) -> Option<usize> {
        self.by_key.get(key).copied()
    }

    /// The snapshot of item `idx`.
    pub fn item_at(&self, idx: usize) -> Option<&TurnItem> {
        self.items.get(idx).map(|s| &s.item)
    }

    /// Whether item `idx` is still open.
    pub fn is_open(&self, idx: usize) -> bool {
        self.items.get(idx).is_some_and(|s| s.open)
    }

    /// The snapshot of item `key` (text or tool), settled or not.
    pub fn item(&self, key: &str) -> Option<&TurnItem> {
        self.item_at(self.index_of(key)?)
    }

    /// How many items the turn has (the latest one is number `item_count()`).
    pub fn item_count(&self) -> usize {
        self.items.len()
    }

    /// Whether item `key` exists.
    pub fn has_item(&self, key: &str) -> bool {
        self.by_key.contains_key(key)
    }
}

#[cfg(test)]
mod tests;
