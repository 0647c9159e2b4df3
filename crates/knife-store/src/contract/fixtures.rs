// Fixtures of the contract suite: entity builders with fixed timestamps and helpers
// that open a fresh store through the backend's factory.

use super::{ContractOptions, StoreFactory, StoreGuard};
use crate::Store;
use knife_protocol::*;

/// A fixed timestamp `secs` seconds after 2025-01-01T00:00:00Z.
pub fn ts(secs: i64) -> Timestamp {
    chrono::DateTime::from_timestamp(1_735_689_600 + secs, 0).unwrap()
}

/// A fresh, empty store from `factory`; keep the guard alive while using the store.
pub async fn temp_store(factory: &dyn StoreFactory) -> (StoreGuard, Store) {
    temp_store_with(factory, ContractOptions::default()).await
}

/// [`temp_store`] with explicit [`ContractOptions`].
pub async fn temp_store_with(
    factory: &dyn StoreFactory,
    options: ContractOptions,
) -> (StoreGuard, Store) {
    factory.open(options).await
}

pub fn project(id: &str, at: i64) -> Project {
    Project {
        id: ProjectId::from(id),
        name: format!("project {id}"),
        root: format!("/tmp/{id}"),
        created_at: ts(0),
        updated_at: ts(at),
    }
}

pub fn thread(id: &str, project: &str, at: i64) -> Thread {
    Thread {
        id: ThreadId::from(id),
        project_id: ProjectId::from(project),
        title: format!("thread {id} @{at}"),
        provider_instance_id: ProviderInstanceId::from("openai"),
        model: None,
        status: ThreadStatus::Idle,
        active_run_id: None,
        run_count: 0,
        last_error: None,
        created_at: ts(0),
        updated_at: ts(at),
        agent_status: None,
        claimed_at: None,
        resume_attempts: 0,
        parent_thread_id: None,
        worktree: None,
        archived_at: None,
        untitled: false,
        forked_from: None,
        queue: Default::default(),
        budget_raise: None,
    }
}

pub fn run(thread: &str, ordinal: u32, status: RunStatus) -> Run {
    let thread_id = ThreadId::from(thread);
    let id = RunId::for_thread(&thread_id, ordinal);
    Run {
        user_message_id: TurnItemId::user_message_of(&id),
        id,
        thread_id,
        ordinal,
        provider_instance_id: ProviderInstanceId::from("openai"),
        model: None,
        status,
        requested_at: ts(1),
        started_at: None,
        completed_at: None,
        error: None,
        usage: None,
        checkpoints: Default::default(),
        changes: None,
    }
}

pub fn node(thread: &str, run_ordinal: u32, n: u32, status: NodeStatus) -> Node {
    let run_id = RunId::for_thread(&ThreadId::from(thread), run_ordinal);
    let root = NodeId::root_of(&run_id);
    Node {
        id: if n == 0 {
            root.clone()
        } else {
            NodeId::from(format!("{root}:{n}"))
        },
        thread_id: ThreadId::from(thread),
        run_id: Some(run_id),
        parent_node_id: None,
        root_node_id: root,
        kind: NodeKind::ToolCall,
        status,
        provider_turn_id: None,
        runtime_request_id: None,
        started_at: None,
        completed_at: None,
    }
}

pub fn session(id: &str, status: SessionStatus) -> ProviderSession {
    ProviderSession {
        id: ProviderSessionId::from(id),
        driver: "builtin".into(),
        provider_instance_id: ProviderInstanceId::from("openai"),
        status,
        cwd: "/tmp".into(),
        model: None,
        capabilities: ProviderCapabilities::default(),
        created_at: ts(0),
        updated_at: ts(1),
        last_error: None,
    }
}

pub fn provider_thread(id: &str, thread: &str, last_run: Option<u32>) -> ProviderThread {
    ProviderThread {
        id: ProviderThreadId::from(id),
        driver: "builtin".into(),
        provider_instance_id: ProviderInstanceId::from("openai"),
        provider_session_id: Some(ProviderSessionId::from("s0")),
        app_thread_id: Some(ThreadId::from(thread)),
        native_id: None,
        status: ProviderThreadStatus::Idle,
        last_run_ordinal: last_run,
        pending_background_tasks: Vec::new(),
        created_at: ts(0),
        updated_at: ts(1),
    }
}

pub fn provider_turn(
    thread: &str,
    run_ordinal: u32,
    attempt: u32,
    status: ProviderTurnStatus,
) -> ProviderTurn {
    let run_id = RunId::for_thread(&ThreadId::from(thread), run_ordinal);
    ProviderTurn {
        id: ProviderTurnId::for_run(&run_id, attempt),
        thread_id: ThreadId::from(thread),
        node_id: NodeId::root_of(&run_id),
        run_id,
        provider_thread_id: None,
        provider_session_id: ProviderSessionId::from("s0"),
        ordinal: attempt,
        status,
        started_at: ts(2),
        completed_at: None,
        usage: None,
        error: None,
        native_turn_id: None,
    }
}

pub fn runtime_request(id: &str, thread: &str, status: RuntimeRequestStatus) -> RuntimeRequest {
    RuntimeRequest {
        id: RuntimeRequestId::from(id),
        thread_id: ThreadId::from(thread),
        run_id: None,
        node_id: NodeId::from("node_x"),
        provider_turn_id: None,
        kind: RuntimeRequestKind::Command,
        status,
        response_capability: ResponseCapability::NotResumable {
            reason: "test".into(),
        },
        prompt: Some("ls".into()),
        created_at: ts(3),
        resolved_at: None,
        decision: None,
        tool_approval: None,
    }
}

pub fn turn_item(thread: &str, run_ordinal: u32, n: u64, text: &str) -> TurnItem {
    let run_id = RunId::for_thread(&ThreadId::from(thread), run_ordinal);
    TurnItem {
        id: TurnItemId::from(format!("item:{run_id}:{n}")),
        thread_id: ThreadId::from(thread),
        run_id: Some(run_id),
        provider_turn_id: None,
        ordinal: TurnItem::ordinal_in_run(run_ordinal, n),
        status: TurnItemStatus::Completed,
        started_at: None,
        completed_at: None,
        updated_at: ts(4),
        kind: TurnItemKind::AssistantMessage {
            text: text.into(),
            streaming: false,
        },
    }
}

/// An event stamped at `ts(1)` with its scope from the payload.
pub fn ev(body: EventBody) -> DomainEvent {
    DomainEvent::new(ts(1), body)
}

/// An event with an explicit envelope thread (needed for session attach/detach).
pub fn ev_on(thread: &str, body: EventBody) -> DomainEvent {
    let mut e = DomainEvent::new(ts(1), body);
    e.thread_id = Some(ThreadId::from(thread));
    e
}
