//! The ingestor: maps adapter events to domain events (1:1, except `TurnTerminal`,
//! which the execution service turns into the run's terminal write).

use knife_protocol::*;

/// The domain event body for `event`, or `None` for `TurnTerminal` (handled by execution).
pub fn to_domain(event: &AdapterEvent) -> Option<EventBody> {
    Some(match event {
        AdapterEvent::ProviderSessionUpdated(s) => EventBody::ProviderSessionUpdated(s.clone()),
        AdapterEvent::ProviderThreadUpdated(t) => EventBody::ProviderThreadUpdated(t.clone()),
        AdapterEvent::ProviderTurnUpdated(t) => EventBody::ProviderTurnUpdated(t.clone()),
        AdapterEvent::NodeUpdated(n) => EventBody::NodeUpdated(n.clone()),
        AdapterEvent::TurnItemUpdated(i) => EventBody::TurnItemUpdated(i.clone()),
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
/// entry when both are snapshots of the same turn item (the later snapshot is the
/// whole entity, so the earlier one carries nothing the log needs). This bounds the
/// write rate of fast token streams without delaying the first delta.
pub fn push_coalesced(
    batch: &mut Vec<DomainEvent>,
    thread: &ThreadId,
    at: Timestamp,
    body: EventBody,
) {
    if let (Some(last), EventBody::TurnItemUpdated(item)) = (batch.last_mut(), &body)
        && let EventBody::TurnItemUpdated(prev) = &last.body
        && prev.id == item.id
    {
        last.body = body;
        last.occurred_at = at;
        return;
    }
    // Session-level events name no thread themselves; file them under the thread
    // whose turn produced them so the thread's stream shows them.
    batch.push(DomainEvent::new(at, body).with_thread(thread));
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
}
