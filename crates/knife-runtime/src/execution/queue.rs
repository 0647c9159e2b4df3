//! The rules of a thread's message queue (TURN-01/02) as pure functions over the
//! thread entity: pausing, settling the steers of an ended run, picking what starts next.

use knife_protocol::*;

/// Note of a steer whose run ended before it was delivered (TURN-01).
pub(crate) const STEER_NOT_DELIVERED: &str =
    "the run ended before this steer was delivered; it was queued instead";

/// Pauses `thread`'s queue for `reason` when plain messages wait in it (TURN-02);
/// an empty queue stays unpaused, so the next message queued later is not stuck.
pub(crate) fn pause_if_waiting(thread: &mut Thread, reason: QueuePauseReason, now: Timestamp) {
    let waiting = thread
        .queue
        .entries
        .iter()
        .any(|e| e.steer_run_id.is_none());
    if waiting && thread.queue.paused.is_none() {
        thread.queue.paused = Some(QueuePause {
            reason,
            paused_at: now,
        });
    }
}

/// Settles the steers of `run`, which ended (TURN-01): a steer whose delivery
/// item is in `delivered` leaves the queue (delivered once); any other becomes a
/// plain queued message in its place, with [`STEER_NOT_DELIVERED`] as its note.
pub(crate) fn settle_steers(thread: &mut Thread, run: &RunId, delivered: &[TurnItemId]) {
    thread.queue.entries.retain_mut(|e| {
        if e.steer_run_id.as_ref() != Some(run) {
            return true;
        }
        if delivered.contains(&TurnItemId::steer_of(run, &e.id)) {
            return false;
        }
        e.steer_run_id = None;
        e.note = Some(STEER_NOT_DELIVERED.to_owned());
        true
    });
}

/// The entry id of a steer delivery item id (`item:<run>:steer:<entry>`), if it is one.
pub(crate) fn steer_entry_of(item: &TurnItemId, run: &RunId) -> Option<QueuedMessageId> {
    let prefix = format!("item:{run}:steer:");
    item.as_str()
        .strip_prefix(&prefix)
        .map(QueuedMessageId::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(id: &str, steer: Option<&RunId>) -> QueuedMessage {
        QueuedMessage {
            id: QueuedMessageId::from(id),
            text: id.into(),
            model: None,
            queued_at: chrono::Utc::now(),
            steer_run_id: steer.cloned(),
            note: None,
        }
    }

    #[test]
    fn turn_01_steers_of_an_ended_run_are_dropped_when_delivered_else_queued() {
        let run = RunId::from("run:t:1");
        let mut t = test_thread();
        t.queue.entries = vec![
            entry("a", None),
            entry("s1", Some(&run)),
            entry("s2", Some(&run)),
        ];
        let delivered = vec![TurnItemId::steer_of(&run, &QueuedMessageId::from("s1"))];
        settle_steers(&mut t, &run, &delivered);
        let ids: Vec<_> = t.queue.entries.iter().map(|e| e.id.as_str()).collect();
        assert_eq!(ids, ["a", "s2"]);
        assert_eq!(t.queue.entries[1].steer_run_id, None);
        assert_eq!(
            t.queue.entries[1].note.as_deref(),
            Some(STEER_NOT_DELIVERED)
        );
        assert_eq!(
            steer_entry_of(&delivered[0], &run),
            Some(QueuedMessageId::from("s1"))
        );
        assert_eq!(steer_entry_of(&TurnItemId::from("item:x:1"), &run), None);
    }

    #[test]
    fn turn_02_a_pause_needs_waiting_messages() {
        let now = chrono::Utc::now();
        let mut t = test_thread();
        pause_if_waiting(&mut t, QueuePauseReason::UserInterrupt, now);
        assert_eq!(t.queue.paused, None, "an empty queue is not paused");
        t.queue.entries.push(entry("a", None));
        pause_if_waiting(&mut t, QueuePauseReason::UserInterrupt, now);
        assert_eq!(
            t.queue.paused.as_ref().map(|p| p.reason),
            Some(QueuePauseReason::UserInterrupt)
        );
        assert_eq!(
            t.queue.next_to_start(),
            None,
            "a paused queue starts nothing"
        );
    }

    fn test_thread() -> Thread {
        let now = chrono::Utc::now();
        Thread {
            id: ThreadId::from("t"),
            project_id: ProjectId::from("p"),
            title: "t".into(),
            provider_instance_id: ProviderInstanceId::from("fake"),
            model: None,
            status: ThreadStatus::Idle,
            active_run_id: None,
            run_count: 0,
            last_error: None,
            created_at: now,
            updated_at: now,
            agent_status: None,
            claimed_at: None,
            resume_attempts: 0,
            parent_thread_id: None,
            archived_at: None,
            untitled: false,
            forked_from: None,
            worktree: None,
            queue: MessageQueue::default(),
            budget_raise: None,
        }
    }
}
