//! The ingestor: maps adapter events to domain events (1:1, except `TurnTerminal`,
//! which the execution service turns into the run's terminal write).

use knife_protocol::*;

/// The domain event body for `event`, or `None` for `TurnTerminal` (handled by execution).
pub fn to_domain(event: &AdapterEvent) -> Option<EventBody> {
    Some(match event {
        AdapterEvent::ProviderSessionUpdated(s) => EventBody::ProviderSessionUpdated(s.clone()),
        AdapterEvent::ProviderThreadUpdated(t) => EventBody::ProviderThreadUpdated(t.clone()),
        AdapterEvent::ProviderTurnUpdated(t) => EventBody::ProviderTurnUpdated(t.clone()),
        AdapterEvent::ModelCallRecorded(c) => EventBody::ModelCallRecorded(c.clone()),
        AdapterEvent::NodeUpdated(n) => EventBody::NodeUpdated(n.clone()),
        AdapterEvent::TurnItemUpdated(i) => EventBody::TurnItemUpdated(i.clone()),
        AdapterEvent::TurnItemAppended(c) => EventBody::TurnItemAppended(c.clone()),
        AdapterEvent::RuntimeRequestUpdated(r) => EventBody::RuntimeRequestUpdated(r.clone()),
        AdapterEvent::AgentStatusChanged {
            thread_id,
            run_id,
            status,
        } => EventBody::ThreadStatusChanged {
            thread_id: thread_id.clone(),
            run_id: run_id.clone(),
            status: status.clone(),
        },
        AdapterEvent::AgentErrorRaised {
            thread_id,
            run_id,
            error,
        } => EventBody::ThreadErrorRaised {
            thread_id: thread_id.clone(),
            run_id: run_id.clone(),
            error: error.clone(),
        },
        // Live only (LIVE-01): the pump hands them to the hub, never to the log.
        AdapterEvent::TurnTerminal { .. }
        | AdapterEvent::TurnItemDelta(_)
        | AdapterEvent::TurnItemReset(_) => return None,
    })
}

/// Appends `body` to `batch` as an event of `thread`, coalescing with the previous
/// entry when both describe the same turn item: a later whole snapshot replaces what
/// came before it, a chunk continuing the previous chunk (or snapshot) of the item is
/// folded into it (LIVE-03). This bounds the write rate of fast token streams without
/// delaying the first delta, and never makes the log larger than the chunks alone.
pub fn push_coalesced(
    batch: &mut Vec<DomainEvent>,
    thread: &ThreadId,
    at: Timestamp,
    body: EventBody,
) {
    if let Some(last) = batch.last_mut()
        && let Some(merged) = coalesce(&last.body, &body)
    {
        last.body = merged;
        last.occurred_at = at;
        return;
    }
    // Session-level events name no thread themselves; file them under the thread
    // whose turn produced them so the thread's stream shows them.
    batch.push(DomainEvent::new(at, body).with_thread(thread));
}

/// `next` folded into `prev` when both describe one item and the result says what
/// both say; `None` keeps them apart.
fn coalesce(prev: &EventBody, next: &EventBody) -> Option<EventBody> {
    match (prev, next) {
        (EventBody::TurnItemUpdated(p), EventBody::TurnItemUpdated(n)) if p.id == n.id => {
            Some(next.clone())
        }
        (EventBody::TurnItemAppended(p), EventBody::TurnItemUpdated(n)) if p.item_id == n.id => {
            Some(next.clone())
        }
        (EventBody::TurnItemUpdated(p), EventBody::TurnItemAppended(c)) if p.id == c.item_id => {
            let mut item = p.clone();
            c.apply_to(&mut item).ok()?;
            Some(EventBody::TurnItemUpdated(item))
        }
        (EventBody::TurnItemAppended(p), EventBody::TurnItemAppended(c))
            if p.item_id == c.item_id && p.field == c.field && p.end() == c.offset =>
        {
            let mut chunk = p.clone();
            chunk.text.push_str(&c.text);
            chunk.updated_at = c.updated_at;
            Some(EventBody::TurnItemAppended(chunk))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn item(id: &str, text: &str) -> EventBody {
        let now = chrono::Utc::now();
        EventBody::TurnItemUpdated(TurnItem {
            id: TurnItemId::from(id),
            thread_id: ThreadId::from("t"),
            run_id: None,
            provider_turn_id: None,
            ordinal: 1,
            status: TurnItemStatus::Running,
            started_at: None,
            completed_at: None,
            updated_at: now,
            kind: TurnItemKind::AssistantMessage {
                text: text.into(),
                streaming: true,
            },
        })
    }

    #[test]
    fn proc_06_agent_status_and_errors_become_thread_events() {
        let t = ThreadId::from("t");
        let status = to_domain(&AdapterEvent::AgentStatusChanged {
            thread_id: t.clone(),
            run_id: None,
            status: AgentStatus::Busy,
        })
        .unwrap();
        assert_eq!(status.event_type(), "thread.status");
        let error = to_domain(&AdapterEvent::AgentErrorRaised {
            thread_id: t.clone(),
            run_id: None,
            error: AgentError {
                name: "MessageAbortedError".into(),
                message: "aborted".into(),
            },
        })
        .unwrap();
        assert_eq!(error.event_type(), "thread.error");
        let event = DomainEvent::new(chrono::Utc::now(), error);
        assert_eq!(event.thread_id, Some(t));
    }

    #[test]
    fn consecutive_snapshots_of_one_item_coalesce_to_the_last() {
        let t = ThreadId::from("t");
        let now = chrono::Utc::now();
        let mut batch = Vec::new();
        push_coalesced(&mut batch, &t, now, item("a", "h"));
        push_coalesced(&mut batch, &t, now, item("a", "he"));
        push_coalesced(&mut batch, &t, now, item("b", "x"));
        push_coalesced(&mut batch, &t, now, item("a", "hel"));
        assert_eq!(batch.len(), 3);
        match &batch[0].body {
            EventBody::TurnItemUpdated(i) => {
                assert_eq!(
                    i.kind,
                    TurnItemKind::AssistantMessage {
                        text: "he".into(),
                        streaming: true
                    }
                )
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    fn chunk(id: &str, offset: u64, text: &str) -> EventBody {
        EventBody::TurnItemAppended(TurnItemAppend {
            thread_id: ThreadId::from("t"),
            run_id: None,
            item_id: TurnItemId::from(id),
            ordinal: 1,
            field: DeltaField::Text,
            offset,
            text: text.into(),
            updated_at: chrono::Utc::now(),
        })
    }

    #[test]
    fn live_03_chunks_coalesce_with_the_previous_state_of_their_item_only() {
        let t = ThreadId::from("t");
        let now = chrono::Utc::now();
        let mut batch = Vec::new();
        // A chunk after a snapshot of its item folds into the snapshot.
        push_coalesced(&mut batch, &t, now, item("a", "h"));
        push_coalesced(&mut batch, &t, now, chunk("a", 1, "é"));
        // Contiguous chunks merge; another item's or a gapped chunk does not.
        push_coalesced(&mut batch, &t, now, chunk("b", 4, "x"));
        push_coalesced(&mut batch, &t, now, chunk("b", 5, "yz"));
        push_coalesced(&mut batch, &t, now, chunk("b", 9, "late"));
        // A later whole snapshot replaces the chunk before it.
        push_coalesced(&mut batch, &t, now, chunk("a", 3, "!"));
        push_coalesced(&mut batch, &t, now, item("a", "hé!?"));
        let bodies: Vec<&EventBody> = batch.iter().map(|e| &e.body).collect();
        assert_eq!(bodies.len(), 4, "{bodies:?}");
        assert!(matches!(bodies[0], EventBody::TurnItemUpdated(i)
            if i.kind == TurnItemKind::AssistantMessage { text: "hé".into(), streaming: true }));
        match bodies[1] {
            EventBody::TurnItemAppended(c) => assert_eq!((c.offset, c.text.as_str()), (4, "xyz")),
            other => panic!("unexpected {other:?}"),
        }
        assert!(matches!(bodies[2], EventBody::TurnItemAppended(c) if c.offset == 9));
        assert!(matches!(bodies[3], EventBody::TurnItemUpdated(i)
            if i.kind == TurnItemKind::AssistantMessage { text: "hé!?".into(), streaming: true }));
    }
}
