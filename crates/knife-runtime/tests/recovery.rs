//! Boot reconciliation on a real store: what a killed process left active is settled
//! once (runs interrupted, tools aborted, sessions stopped), and a second pass is a no-op.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use knife_protocol::*;
use knife_runtime::boot::recovery::reconcile_after_restart;
use knife_runtime::execution::terminal::TOOL_ABORTED;
use knife_runtime::{Clock, SystemClock};
use knife_store::StreamFilter;

fn item(
    thread: &ThreadId,
    run: &RunId,
    n: u64,
    status: TurnItemStatus,
    kind: TurnItemKind,
) -> TurnItem {
    let now = chrono::Utc::now();
    TurnItem {
        id: TurnItemId::from(format!("item:{run}:{n}")),
        thread_id: thread.clone(),
        run_id: Some(run.clone()),
        provider_turn_id: None,
        ordinal: TurnItem::ordinal_in_run(1, n),
        status,
        started_at: Some(now),
        completed_at: None,
        updated_at: now,
        kind,
    }
}

#[tokio::test]
async fn reconcile_settles_what_a_dead_process_left_active_exactly_once() {
    let dir = tempfile::tempdir().unwrap();
    let store = knife_store_sqlite::open(dir.path().join("knife.db"))
        .await
        .unwrap();
    let now = SystemClock.now();
    let thread_id = ThreadId::new();
    let run_id = RunId::for_thread(&thread_id, 1);
    let thread = Thread {
        id: thread_id.clone(),
        project_id: ProjectId::new(),
        title: "t".into(),
        provider_instance_id: ProviderInstanceId::from("openai"),
        model: None,
        status: ThreadStatus::Running,
        active_run_id: Some(run_id.clone()),
        run_count: 1,
        last_error: None,
        created_at: now,
        updated_at: now,
        // The dead process last said "busy" (PROC-06); reconciliation must not keep it.
        agent_status: Some(AgentStatus::Busy),
        claimed_at: None,
        resume_attempts: 0,
        parent_thread_id: None,
        worktree: None,
        queue: Default::default(),
        budget_raise: None,
        archived_at: None,
        untitled: false,
        forked_from: None,
    };
    let run = Run {
        id: run_id.clone(),
        thread_id: thread_id.clone(),
        ordinal: 1,
        provider_instance_id: thread.provider_instance_id.clone(),
        model: None,
        status: RunStatus::Running,
        user_message_id: TurnItemId::user_message_of(&run_id),
        requested_at: now,
        started_at: Some(now),
        completed_at: None,
        error: None,
        usage: None,
        checkpoints: Default::default(),
        changes: None,
    };
    let session = ProviderSession {
        id: ProviderSessionId::exclusive(&thread.provider_instance_id, &thread_id),
        driver: "builtin".into(),
        provider_instance_id: thread.provider_instance_id.clone(),
        status: SessionStatus::Running,
        cwd: "/tmp".into(),
        model: None,
        capabilities: ProviderCapabilities::default(),
        created_at: now,
        updated_at: now,
        last_error: None,
    };
    let tool = item(
        &thread_id,
        &run_id,
        1,
        TurnItemStatus::Running,
        TurnItemKind::ToolCall {
            call_id: "call_1".into(),
            tool: "grep".into(),
            input: serde_json::json!({"pattern": "x"}),
            output: None,
            error: None,
        },
    );
    let text = item(
        &thread_id,
        &run_id,
        2,
        TurnItemStatus::Running,
        TurnItemKind::AssistantMessage {
            text: "half an ans".into(),
            streaming: true,
        },
    );
    let done = item(
        &thread_id,
        &run_id,
        0,
        TurnItemStatus::Completed,
        TurnItemKind::UserMessage {
            text: "hi".into(),
            origin: MessageOrigin::User,
            description: None,
        },
    );
    store
        .write(vec![
            DomainEvent::new(now, EventBody::ThreadCreated(thread.clone())),
            DomainEvent::new(now, EventBody::RunCreated(run)),
            DomainEvent::new(now, EventBody::ProviderSessionAttached(session))
                .with_thread(&thread_id),
            DomainEvent::new(now, EventBody::TurnItemUpdated(done)),
            DomainEvent::new(now, EventBody::TurnItemUpdated(tool)),
            DomainEvent::new(now, EventBody::TurnItemUpdated(text)),
        ])
        .await
        .unwrap();

    let report = reconcile_after_restart(&store, &SystemClock).await.unwrap();
    assert_eq!(
        report.runs_interrupted,
        vec![(thread_id.clone(), run_id.clone())]
    );
    assert_eq!(report.sessions_stopped, 1);
    let p = store.thread_projection(&thread_id).await.unwrap().unwrap();
    assert_eq!(p.thread.status, ThreadStatus::Idle);
    assert_eq!(p.thread.active_run_id, None);
    assert_eq!(p.thread.agent_status, Some(AgentStatus::Idle));
    assert_eq!(p.runs[0].status, RunStatus::Interrupted);
    assert_eq!(p.runs[0].error.as_ref().unwrap().error_type, "interrupted");
    let by_n = |n: u64| {
        p.turn_items
            .iter()
            .find(|i| i.ordinal == TurnItem::ordinal_in_run(1, n))
            .unwrap()
    };
    assert_eq!(
        by_n(0).status,
        TurnItemStatus::Completed,
        "finished items are untouched"
    );
    assert_eq!(by_n(1).status, TurnItemStatus::Failed);
    assert!(
        matches!(&by_n(1).kind, TurnItemKind::ToolCall { error: Some(e), .. } if e == TOOL_ABORTED)
    );
    assert_eq!(by_n(2).status, TurnItemStatus::Interrupted);
    assert!(
        matches!(&by_n(2).kind, TurnItemKind::AssistantMessage { text, streaming: false } if text == "half an ans")
    );
    assert_eq!(p.provider_sessions[0].status, SessionStatus::Stopped);

    let before = store.latest_sequence(None).await.unwrap();
    let again = reconcile_after_restart(&store, &SystemClock).await.unwrap();
    assert!(again.runs_interrupted.is_empty());
    assert_eq!(again.sessions_stopped, 0);
    assert_eq!(
        store.latest_sequence(None).await.unwrap(),
        before,
        "a second pass writes nothing"
    );
    let all = store
        .read_events(
            &StreamFilter {
                thread_id: None,
                after: 0,
                event_type: None,
            },
            1000,
        )
        .await
        .unwrap();
    assert_eq!(
        all.len() as u64,
        before,
        "the event log keeps every event, nothing rewritten"
    );
}
