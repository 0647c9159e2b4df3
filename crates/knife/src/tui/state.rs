//! What the interactive terminal shows of one thread (SPEC UX-02): its transcript items
//! kept from the projection, the durable events and the live deltas, in transcript order.

use std::collections::HashMap;

use knife_protocol::*;

/// One transcript entry: a turn item with its live text merged in.
#[derive(Clone, Debug)]
pub struct Entry {
    pub id: TurnItemId,
    pub ordinal: u64,
    pub run: Option<RunId>,
    pub status: TurnItemStatus,
    pub kind: TurnItemKind,
}

/// The open thread as the terminal shows it.
#[derive(Debug, Default)]
pub struct ThreadView {
    pub thread: Option<Thread>,
    pub runs: Vec<Run>,
    entries: Vec<Entry>,
    index: HashMap<TurnItemId, usize>,
    /// Runtime requests by id (pending ones are answered inline).
    pub requests: Vec<RuntimeRequest>,
    /// The sequence of the last durable event applied.
    pub after: u64,
    /// What the agent is doing (busy, retrying …).
    pub agent: Option<AgentStatus>,
}

impl ThreadView {
    /// A view of `p` (a `GET /api/threads/{id}` answer).
    pub fn from_projection(p: ThreadProjection) -> Self {
        let mut view = ThreadView {
            agent: p.thread.agent_status.clone(),
            thread: Some(p.thread),
            runs: p.runs,
            requests: p.runtime_requests,
            after: p.latest_sequence,
            ..Default::default()
        };
        for item in p.turn_items {
            view.upsert(item);
        }
        view
    }

    /// The entries in transcript order.
    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    /// The run in progress, if any.
    pub fn active_run(&self) -> Option<&Run> {
        self.runs.iter().rev().find(|r| !r.status.is_terminal())
    }

    /// The last run.
    pub fn last_run(&self) -> Option<&Run> {
        self.runs.iter().max_by_key(|r| r.ordinal)
    }

    /// The first request waiting for an answer.
    pub fn pending_request(&self) -> Option<&RuntimeRequest> {
        self.requests
            .iter()
            .find(|r| r.status == RuntimeRequestStatus::Pending)
    }

    /// Applies one durable event of the thread.
    pub fn apply(&mut self, event: &StoredEvent) {
        self.after = self.after.max(event.sequence);
        match &event.event.body {
            EventBody::TurnItemUpdated(item) => self.upsert(item.clone()),
            // Appended durable text continues the item like a delta (LIVE-03).
            EventBody::TurnItemAppended(chunk) => self.delta(&chunk.as_delta()),
            EventBody::RunCreated(run) | EventBody::RunUpdated(run) => {
                match self.runs.iter_mut().find(|r| r.id == run.id) {
                    Some(r) => *r = run.clone(),
                    None => self.runs.push(run.clone()),
                }
                self.runs.sort_by_key(|r| r.ordinal);
            }
            EventBody::RuntimeRequestUpdated(r) => {
                match self.requests.iter_mut().find(|x| x.id == r.id) {
                    Some(x) => *x = r.clone(),
                    None => self.requests.push(r.clone()),
                }
            }
            EventBody::ThreadCreated(t) | EventBody::ThreadUpdated(t) => {
                self.agent = t.agent_status.clone();
                self.thread = Some(t.clone());
            }
            EventBody::ThreadStatusChanged { status, .. } => self.agent = Some(status.clone()),
            _ => {}
        }
    }

    /// Applies a live delta: text continuing an item's field at `offset` (LIVE-01). A
    /// delta for an item not seen yet makes a streaming placeholder at its ordinal.
    pub fn delta(&mut self, d: &ItemDelta) {
        if !self.index.contains_key(&d.item_id) {
            let kind = match d.field {
                DeltaField::Text => TurnItemKind::AssistantMessage {
                    text: String::new(),
                    streaming: true,
                },
                DeltaField::Reasoning => TurnItemKind::Reasoning {
                    text: String::new(),
                    streaming: true,
                },
                _ => return,
            };
            self.insert(Entry {
                id: d.item_id.clone(),
                ordinal: d.ordinal,
                run: d.run_id.clone(),
                status: TurnItemStatus::Running,
                kind,
            });
        }
        let Some(&at) = self.index.get(&d.item_id) else {
            return;
        };
        let Some(entry) = self.entries.get_mut(at) else {
            return;
        };
        let text = match (&mut entry.kind, d.field) {
            (TurnItemKind::AssistantMessage { text, .. }, DeltaField::Text)
            | (TurnItemKind::Reasoning { text, .. }, DeltaField::Reasoning) => text,
            (TurnItemKind::ToolCall { output, .. }, DeltaField::Output) => {
                output.get_or_insert_with(String::new)
            }
            _ => return,
        };
        let offset = d.offset as usize;
        if offset > text.len() || d.end() as usize <= text.len() || !text.is_char_boundary(offset) {
            return;
        }
        text.truncate(offset);
        text.push_str(&d.text);
    }

    /// A discarded attempt: the item's live text is void.
    pub fn reset(&mut self, r: &ItemReset) {
        if let Some(&at) = self.index.get(&r.item_id)
            && let Some(entry) = self.entries.get_mut(at)
        {
            match &mut entry.kind {
                TurnItemKind::AssistantMessage { text, .. }
                | TurnItemKind::Reasoning { text, .. } => text.clear(),
                _ => {}
            }
        }
    }

    /// A durable item: replaces what is shown, except that live text already longer
    /// than the durable snapshot is kept (deltas run ahead of the log).
    fn upsert(&mut self, item: TurnItem) {
        let entry = Entry {
            id: item.id.clone(),
            ordinal: item.ordinal,
            run: item.run_id.clone(),
            status: item.status,
            kind: item.kind,
        };
        let Some(&at) = self.index.get(&entry.id) else {
            self.insert(entry);
            return;
        };
        let Some(old) = self.entries.get_mut(at) else {
            return;
        };
        let mut entry = entry;
        match (&old.kind, &mut entry.kind) {
            (
                TurnItemKind::AssistantMessage { text: live, .. },
                TurnItemKind::AssistantMessage { text, .. },
            )
            | (TurnItemKind::Reasoning { text: live, .. }, TurnItemKind::Reasoning { text, .. })
                if live.len() > text.len() && live.starts_with(text.as_str()) =>
            {
                *text = live.clone();
            }
            // A running tool's output streamed live ahead of its snapshot (LIVE-02).
            (
                TurnItemKind::ToolCall {
                    output: Some(live), ..
                },
                TurnItemKind::ToolCall { output, .. },
            ) if matches!(
                entry.status,
                TurnItemStatus::Pending | TurnItemStatus::Running | TurnItemStatus::Waiting
            ) && live.len() > output.as_deref().map_or(0, str::len)
                && live.starts_with(output.as_deref().unwrap_or("")) =>
            {
                *output = Some(live.clone());
            }
            _ => {}
        }
        *old = entry;
    }

    fn insert(&mut self, entry: Entry) {
        let at = self.entries.partition_point(|e| e.ordinal <= entry.ordinal);
        self.entries.insert(at, entry);
        self.index = self
            .entries
            .iter()
            .enumerate()
            .map(|(i, e)| (e.id.clone(), i))
            .collect();
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn delta(item: &str, ordinal: u64, offset: u64, text: &str) -> ItemDelta {
        serde_json::from_value(serde_json::json!({
            "thread_id": "t", "run_id": "run:t:1", "item_id": item, "ordinal": ordinal,
            "field": "text", "offset": offset, "text": text,
        }))
        .unwrap()
    }

    #[test]
    fn ux_02_live_deltas_build_the_answer_in_transcript_order_once() {
        let mut view = ThreadView::default();
        view.delta(&delta("b", 1_000_002, 0, "Hel"));
        view.delta(&delta("b", 1_000_002, 3, "lo"));
        // A repeated or overlapping delta adds nothing twice.
        view.delta(&delta("b", 1_000_002, 3, "lo"));
        view.delta(&delta("b", 1_000_002, 4, "o!"));
        view.delta(&delta("a", 1_000_001, 0, "first"));
        let texts: Vec<String> = view
            .entries()
            .iter()
            .map(|e| match &e.kind {
                TurnItemKind::AssistantMessage { text, .. } => text.clone(),
                _ => String::new(),
            })
            .collect();
        assert_eq!(texts, ["first", "Hello!"]);
    }

    fn stored(sequence: u64, body: serde_json::Value) -> StoredEvent {
        serde_json::from_value(serde_json::json!({
            "sequence": sequence, "id": format!("event_{sequence}"), "thread_id": "t",
            "run_id": "run:t:1", "occurred_at": "2026-12-01T00:00:00Z",
            "type": body["type"], "payload": body["payload"],
        }))
        .unwrap()
    }

    #[test]
    fn live_03_appended_chunks_continue_the_durable_text_with_deltas_ahead() {
        let item = |text: &str, status: &str| {
            serde_json::json!({"type": "turn-item.updated", "payload": {
                "id": "b", "thread_id": "t", "run_id": "run:t:1", "provider_turn_id": null,
                "ordinal": 1_000_001, "status": status, "started_at": null,
                "completed_at": null, "updated_at": "2026-12-01T00:00:00Z",
                "type": "assistant_message", "text": text, "streaming": status == "running"}})
        };
        let chunk = |offset: u64, text: &str| {
            serde_json::json!({"type": "turn-item.appended", "payload": {
                "thread_id": "t", "run_id": "run:t:1", "item_id": "b", "ordinal": 1_000_001,
                "field": "text", "offset": offset, "text": text,
                "updated_at": "2026-12-01T00:00:01Z"}})
        };
        let mut view = ThreadView::default();
        view.apply(&stored(1, item("Hé", "running")));
        // A delta runs ahead of the chunk that later makes it durable.
        view.delta(&delta("b", 1_000_001, 3, "llo"));
        view.apply(&stored(2, chunk(3, "llo")));
        view.apply(&stored(3, chunk(6, " wörld")));
        let text = |view: &ThreadView| match &view.entries()[0].kind {
            TurnItemKind::AssistantMessage { text, .. } => text.clone(),
            other => panic!("{other:?}"),
        };
        assert_eq!(text(&view), "Héllo wörld");
        view.apply(&stored(4, item("Héllo wörld", "completed")));
        assert_eq!(text(&view), "Héllo wörld");
        assert_eq!(view.entries().len(), 1);
    }

    #[test]
    fn live_02_a_running_tools_streamed_output_survives_its_snapshots_until_it_settles() {
        let tool = |status: &str, output: Option<&str>| {
            serde_json::json!({"type": "turn-item.updated", "payload": {
                "id": "c", "thread_id": "t", "run_id": "run:t:1", "provider_turn_id": null,
                "ordinal": 1_000_001, "status": status, "started_at": null,
                "completed_at": null, "updated_at": "2026-12-01T00:00:00Z",
                "type": "tool_call", "call_id": "k", "tool": "bash",
                "input": {"command": "make"}, "output": output, "error": null}})
        };
        let output = |offset: u64, text: &str| {
            let mut d = delta("c", 1_000_001, offset, text);
            d.field = DeltaField::Output;
            d
        };
        let shown = |view: &ThreadView| match &view.entries()[0].kind {
            TurnItemKind::ToolCall { output, .. } => output.clone(),
            other => panic!("{other:?}"),
        };
        let mut view = ThreadView::default();
        view.apply(&stored(1, tool("running", None)));
        view.delta(&output(0, "out 1\n"));
        view.delta(&output(6, "out 2\n"));
        assert_eq!(shown(&view).as_deref(), Some("out 1\nout 2\n"));
        // A snapshot of the running call older than the live output keeps it.
        view.apply(&stored(2, tool("running", Some("out 1\n"))));
        assert_eq!(shown(&view).as_deref(), Some("out 1\nout 2\n"));
        let lines = crate::render::output_tail(shown(&view).as_deref().unwrap());
        assert_eq!(lines, ["out 1", "out 2"]);
        // Settled: the durable output is final.
        view.apply(&stored(
            3,
            tool("completed", Some("out 1\nout 2\n(exit code 0)")),
        ));
        assert_eq!(shown(&view).as_deref(), Some("out 1\nout 2\n(exit code 0)"));
    }
}
