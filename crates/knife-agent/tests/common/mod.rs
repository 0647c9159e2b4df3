//! Shared support for the built-in agent's tests: a scripted fake `LlmClient` that
//! records requests, a session harness on a temp project, and event helpers.
#![allow(clippy::unwrap_used, clippy::expect_used, dead_code, unused_imports)]

use std::collections::{BTreeMap, VecDeque};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use futures::stream::BoxStream;
use knife_agent::tools::{Tool, ToolContext, ToolError, ToolSet};
use knife_agent::{BuiltinAgentAdapter, BuiltinAgentConfig};
use knife_llm::*;
use knife_protocol::*;
use knife_runtime::{
    AdapterError, InterruptReason, OpenSessionInput, OpenSessionOptions, ProviderAdapter,
    SessionRuntime, StartTurnInput,
};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::time::Instant;

// ---------------------------------------------------------------- fake LLM

pub enum Script {
    /// Events yielded one after another (after `delay` each, when set).
    Events(Vec<Result<LlmEvent, LlmError>>),
    /// Events the test sends itself, when it wants.
    Gate(mpsc::UnboundedReceiver<Result<LlmEvent, LlmError>>),
}

/// Scripted `LlmClient`: one script per call, every request recorded.
pub struct FakeLlm {
    scripts: Mutex<VecDeque<Script>>,
    requests: Mutex<Vec<LlmRequest>>,
    delay: Option<Duration>,
}

impl FakeLlm {
    pub fn new(scripts: Vec<Vec<Result<LlmEvent, LlmError>>>) -> Arc<Self> {
        Self::with(scripts.into_iter().map(Script::Events).collect(), None)
    }

    pub fn with(scripts: Vec<Script>, delay: Option<Duration>) -> Arc<Self> {
        Arc::new(Self {
            scripts: Mutex::new(scripts.into()),
            requests: Mutex::new(Vec::new()),
            delay,
        })
    }

    pub fn requests(&self) -> Vec<LlmRequest> {
        self.requests.lock().unwrap().clone()
    }
}

#[async_trait::async_trait]
impl LlmClient for FakeLlm {
    async fn stream(&self, request: LlmRequest) -> Result<LlmStream, LlmError> {
        self.requests.lock().unwrap().push(request);
        let script = self.scripts.lock().unwrap().pop_front();
        match script {
            None => Err(LlmError::Transport("no scripted response left".into())),
            Some(Script::Events(events)) => {
                // An HTTP error is reported by `stream` itself, as the real clients do.
                if let Some(Err(e @ LlmError::Http { .. })) = events.first() {
                    return Err(e.clone());
                }
                let delay = self.delay;
                Ok(futures::stream::iter(events)
                    .then(move |e| async move {
                        if let Some(d) = delay {
                            tokio::time::sleep(d).await;
                        }
                        e
                    })
                    .boxed())
            }
            Some(Script::Gate(mut rx)) => {
                Ok(futures::stream::poll_fn(move |cx| rx.poll_recv(cx)).boxed())
            }
        }
    }
}

pub fn text_step(parts: &[&str]) -> Vec<Result<LlmEvent, LlmError>> {
    let id = "text-0".to_owned();
    let mut events = vec![Ok(LlmEvent::TextStart { id: id.clone() })];
    for p in parts {
        events.push(Ok(LlmEvent::TextDelta {
            id: id.clone(),
            text: (*p).to_owned(),
        }));
    }
    events.push(Ok(LlmEvent::TextEnd { id }));
    events.push(Ok(finish(FinishReason::Stop, 10, 5)));
    events
}

pub fn tool_step(call_id: &str, name: &str, arguments: &str) -> Vec<Result<LlmEvent, LlmError>> {
    vec![
        Ok(LlmEvent::ToolInputStart {
            id: call_id.into(),
            name: name.into(),
        }),
        Ok(LlmEvent::ToolInputDelta {
            id: call_id.into(),
            delta: arguments.into(),
        }),
        Ok(LlmEvent::ToolInputEnd { id: call_id.into() }),
        Ok(LlmEvent::ToolCall {
            id: call_id.into(),
            name: name.into(),
            arguments: arguments.into(),
        }),
        Ok(finish(FinishReason::ToolCalls, 20, 7)),
    ]
}

pub fn finish(reason: FinishReason, input: u64, output: u64) -> LlmEvent {
    LlmEvent::StepFinish {
        reason,
        raw_reason: None,
        usage: Some(Usage {
            input_tokens: input,
            output_tokens: output,
            total_tokens: input + output,
            ..Usage::default()
        }),
        response_id: None,
        model: None,
    }
}

// ---------------------------------------------------------------- harness

pub type Events = BoxStream<'static, Result<AdapterEvent, AdapterError>>;

pub struct Harness {
    pub session: Arc<dyn SessionRuntime>,
    pub events: Events,
    pub _project: tempfile::TempDir,
}

pub async fn open(
    llm: Arc<FakeLlm>,
    tweak: impl FnOnce(&mut BuiltinAgentConfig),
    tools: Option<ToolSet>,
) -> Harness {
    let project = tempfile::tempdir().unwrap();
    std::fs::create_dir(project.path().join("src")).unwrap();
    std::fs::write(
        project.path().join("src/main.rs"),
        "fn main() {\n    println!(\"hello\");\n}\n",
    )
    .unwrap();
    let mut config = BuiltinAgentConfig::new(ProviderInstanceId::from("local"), "test-model", llm);
    // Loop tests run mutating tools without anyone to ask: `ask` is allowed at once
    // unless a test sets its own policy (tests/approvals.rs asks for real).
    config.tool_policy = Arc::new(knife_agent::ToolPolicy {
        approvals: Some(Arc::new(knife_agent::permissions::AllowAll)),
        ..knife_agent::ToolPolicy::default()
    });
    tweak(&mut config);
    let mut adapter = BuiltinAgentAdapter::new(config);
    if let Some(tools) = tools {
        adapter = adapter.with_tools(tools);
    }
    assert_eq!(adapter.driver(), "builtin");
    assert!(!adapter.capabilities().shared_sessions && adapter.capabilities().steer);
    let session = adapter
        .open(open_input(project.path()), OpenSessionOptions::default())
        .await
        .unwrap();
    let events = session.take_events().unwrap();
    assert!(session.take_events().is_none());
    Harness {
        session,
        events,
        _project: project,
    }
}

pub fn open_input(cwd: &Path) -> OpenSessionInput {
    OpenSessionInput {
        provider_session_id: ProviderSessionId::from("psession_1"),
        provider_instance_id: ProviderInstanceId::from("local"),
        thread_id: ThreadId::from("thread_1"),
        cwd: cwd.to_path_buf(),
        project_root: None,
        model: None,
        native_thread_id: None,
    }
}

pub fn turn(ordinal: u32, text: &str, history: Vec<TurnItem>) -> StartTurnInput {
    let thread_id = ThreadId::from("thread_1");
    let run_id = RunId::for_thread(&thread_id, ordinal);
    StartTurnInput {
        provider_turn_id: ProviderTurnId::for_run(&run_id, 1),
        thread_id,
        run_id,
        run_ordinal: ordinal,
        attempt: 1,
        text: text.into(),
        history,
        model: None,
        cwd: None,
        budget: None,
    }
}

/// Every event up to and including the turn's `TurnTerminal`.
pub async fn collect_turn(events: &mut Events) -> Vec<AdapterEvent> {
    let mut out = Vec::new();
    loop {
        let event = events
            .next()
            .await
            .expect("stream ended before TurnTerminal")
            .unwrap();
        let terminal = matches!(event, AdapterEvent::TurnTerminal { .. });
        out.push(event);
        if terminal {
            return out;
        }
    }
}

/// The durable states of turn items in `events`: whole snapshots, and appended chunks
/// folded into the item's previous state (LIVE-03).
pub fn snapshots(events: &[AdapterEvent]) -> Vec<TurnItem> {
    knife_runtime::recording::durable_states(events)
}

/// The last snapshot of each item, by ordinal.
pub fn final_items(events: &[AdapterEvent]) -> Vec<TurnItem> {
    let mut by_ordinal = BTreeMap::new();
    for item in snapshots(events) {
        by_ordinal.insert(item.ordinal, item);
    }
    by_ordinal.into_values().collect()
}

pub fn outcome(events: &[AdapterEvent]) -> (TurnOutcome, Option<TokenUsage>) {
    match events.last() {
        Some(AdapterEvent::TurnTerminal { outcome, usage, .. }) => (outcome.clone(), usage.clone()),
        other => panic!("last event is not TurnTerminal: {other:?}"),
    }
}

pub fn assert_nothing_pending(events: &[AdapterEvent]) {
    assert_eq!(
        events
            .iter()
            .filter(|e| matches!(e, AdapterEvent::TurnTerminal { .. }))
            .count(),
        1
    );
    for item in final_items(events) {
        assert!(
            !matches!(
                item.status,
                TurnItemStatus::Pending | TurnItemStatus::Running
            ),
            "item left in flight: {item:?}"
        );
        if let TurnItemKind::AssistantMessage { streaming, .. }
        | TurnItemKind::Reasoning { streaming, .. } = item.kind
        {
            assert!(!streaming, "item still streaming: {item:?}");
        }
    }
}

pub fn text_of(item: &TurnItem) -> &str {
    match &item.kind {
        TurnItemKind::AssistantMessage { text, .. } | TurnItemKind::Reasoning { text, .. } => text,
        other => panic!("not a text item: {other:?}"),
    }
}

pub fn assert_replayable(messages: &[ChatMessage]) {
    let mut call_ids = Vec::new();
    let mut result_ids = Vec::new();
    for m in messages {
        match m {
            ChatMessage::Assistant { tool_calls, .. } => {
                for c in tool_calls {
                    assert!(!c.name.is_empty(), "empty tool name: {c:?}");
                    let args: Value = serde_json::from_str(&c.arguments)
                        .unwrap_or_else(|e| panic!("arguments of {c:?} are not JSON: {e}"));
                    assert!(args.is_object(), "arguments of {c:?} are not an object");
                    call_ids.push(c.id.clone());
                }
            }
            ChatMessage::Tool { call_id, .. } => result_ids.push(call_id.clone()),
            _ => {}
        }
    }
    assert_eq!(call_ids, result_ids);
}

pub fn item(run: u32, n: u64, status: TurnItemStatus, kind: TurnItemKind) -> TurnItem {
    let run_id = RunId::for_thread(&ThreadId::from("thread_1"), run);
    let now = chrono::Utc::now();
    TurnItem {
        id: TurnItemId::from(format!("item:{run_id}:{n}")),
        thread_id: ThreadId::from("thread_1"),
        run_id: Some(run_id),
        provider_turn_id: None,
        ordinal: TurnItem::ordinal_in_run(run, n),
        status,
        started_at: Some(now),
        completed_at: Some(now),
        updated_at: now,
        kind,
    }
}

pub fn user_item(run: u32, text: &str) -> TurnItem {
    item(
        run,
        0,
        TurnItemStatus::Completed,
        TurnItemKind::UserMessage {
            text: text.into(),
            origin: MessageOrigin::User,
            description: None,
        },
    )
}

pub fn assistant_item(run: u32, n: u64, text: &str) -> TurnItem {
    item(
        run,
        n,
        TurnItemStatus::Completed,
        TurnItemKind::AssistantMessage {
            text: text.into(),
            streaming: false,
        },
    )
}

pub fn tool_item(
    run: u32,
    n: u64,
    id: &str,
    output: Option<&str>,
    error: Option<&str>,
) -> TurnItem {
    item(
        run,
        n,
        if output.is_some() {
            TurnItemStatus::Completed
        } else {
            TurnItemStatus::Failed
        },
        TurnItemKind::ToolCall {
            call_id: id.into(),
            tool: "read".into(),
            input: json!({"path": "a"}),
            output: output.map(Into::into),
            error: error.map(Into::into),
        },
    )
}

pub fn raw_tool_item(n: u64, id: &str, tool: &str, input: Value, error: Option<&str>) -> TurnItem {
    item(
        1,
        n,
        if error.is_some() {
            TurnItemStatus::Failed
        } else {
            TurnItemStatus::Interrupted
        },
        TurnItemKind::ToolCall {
            call_id: id.into(),
            tool: tool.into(),
            input,
            output: None,
            error: error.map(Into::into),
        },
    )
}

/// The contents of the `Tool` messages of a request, in order.
pub fn tool_results(request: &LlmRequest) -> Vec<String> {
    request
        .messages
        .iter()
        .filter_map(|m| match m {
            ChatMessage::Tool { content, .. } => Some(content.clone()),
            _ => None,
        })
        .collect()
}
