#![allow(clippy::unwrap_used, clippy::expect_used)]
use std::sync::Arc;

use knife_runtime::SystemClock;
use serde_json::json;

use super::*;

fn turn() -> AcpTurn {
    let run_id = RunId::from("run:t:2");
    AcpTurn::new(
        Arc::new(SystemClock),
        TurnIdentity {
            thread_id: ThreadId::from("t"),
            provider_turn_id: ProviderTurnId::for_run(&run_id, 1),
            run_id,
            run_ordinal: 2,
            provider_session_id: ProviderSessionId::from("ps"),
            provider_thread_id: Some(ProviderThreadId::native("acp", "sess-1")),
            attempt: 1,
            provider_instance_id: ProviderInstanceId::from("acp"),
            model: None,
        },
    )
}

fn update(v: serde_json::Value) -> SessionUpdate {
    serde_json::from_value(v).unwrap()
}

fn items(events: &[AdapterEvent]) -> Vec<TurnItem> {
    events
        .iter()
        .filter_map(|e| match e {
            AdapterEvent::TurnItemUpdated(i) => Some(i.clone()),
            _ => None,
        })
        .collect()
}

fn text_of(item: &TurnItem) -> &str {
    match &item.kind {
        TurnItemKind::AssistantMessage { text, .. } | TurnItemKind::Reasoning { text, .. } => text,
        other => panic!("not a text item: {other:?}"),
    }
}

#[test]
fn chunks_stream_into_one_item_until_a_tool_call_breaks_them() {
    let mut t = turn();
    let mut events = t.start();
    events.extend(t.apply(update(
        json!({"sessionUpdate": "agent_thought_chunk", "content": {"type": "text", "text": "hm"}}),
    )));
    for part in ["", "Hel", "lo"] {
        events.extend(
            t.apply(update(json!({"sessionUpdate": "agent_message_chunk",
            "content": {"type": "text", "text": part}}))),
        );
    }
    events.extend(t.apply(update(
        json!({"sessionUpdate": "tool_call", "toolCallId": "c1",
        "title": "List files", "kind": "execute", "status": "in_progress",
        "rawInput": {"command": "ls"}}),
    )));
    events.extend(t.apply(update(
        json!({"sessionUpdate": "tool_call_update", "toolCallId": "c1",
        "status": "completed",
        "content": [{"type": "content", "content": {"type": "text", "text": "a.txt"}}]}),
    )));
    events.extend(t.apply(update(
        json!({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "done"}}),
    )));
    events.extend(t.apply(update(json!({"sessionUpdate": "plan", "entries": []}))));
    events.extend(t.apply(update(
        json!({"sessionUpdate": "user_message_chunk", "content": {"type": "text", "text": "hi"}}),
    )));
    events.extend(t.finish(TurnEnd::Completed));

    // Last snapshot of every item, in order of first appearance.
    let mut last: Vec<TurnItem> = Vec::new();
    for item in items(&events) {
        match last.iter_mut().find(|i| i.id == item.id) {
            Some(slot) => *slot = item,
            None => last.push(item),
        }
    }
    assert_eq!(last.len(), 4, "{last:#?}");
    assert!(matches!(
        last[0].kind,
        TurnItemKind::Reasoning {
            streaming: false,
            ..
        }
    ));
    assert_eq!(text_of(&last[0]), "hm");
    assert_eq!(text_of(&last[1]), "Hello");
    assert_eq!(last[1].status, TurnItemStatus::Completed);
    assert_eq!(
        last[2].kind,
        TurnItemKind::ToolCall {
            call_id: "c1".into(),
            tool: "execute".into(),
            input: json!({"command": "ls"}),
            output: Some("a.txt".into()),
            error: None,
        }
    );
    assert_eq!(last[2].status, TurnItemStatus::Completed);
    assert_eq!(text_of(&last[3]), "done");
    // Ids and ordinals are deterministic per provider turn.
    assert_eq!(last[0].id.as_str(), "item:provider-turn:run:t:2:1:1");
    assert_eq!(last[3].ordinal, 2_000_004);
    assert!(last.iter().all(|i| i.completed_at.is_some()));
    assert!(matches!(
        events.last(),
        Some(AdapterEvent::TurnTerminal {
            outcome: TurnOutcome::Completed,
            ..
        })
    ));
    assert!(t.finish(TurnEnd::Completed).is_empty(), "finish is once");
}

#[test]
fn a_new_message_id_starts_a_new_item() {
    let mut t = turn();
    let a = t.apply(update(
        json!({"sessionUpdate": "agent_message_chunk", "messageId": "m1",
        "content": {"type": "text", "text": "one"}}),
    ));
    let b = t.apply(update(
        json!({"sessionUpdate": "agent_message_chunk", "messageId": "m2",
        "content": {"type": "text", "text": "two"}}),
    ));
    let (a, b) = (items(&a), items(&b));
    assert_eq!(
        b.len(),
        2,
        "the first message is completed, the second starts"
    );
    assert_eq!(b[0].id, a[0].id);
    assert_eq!(b[0].status, TurnItemStatus::Completed);
    assert_ne!(b[1].id, a[0].id);
}

#[test]
fn permission_round_trip_emits_request_node_and_items_then_resolves() {
    let mut t = turn();
    t.apply(update(
        json!({"sessionUpdate": "tool_call", "toolCallId": "c9",
        "title": "rm -rf build", "kind": "execute", "rawInput": {"command": "rm -rf build"}}),
    ));
    let ask: RequestPermissionRequest = serde_json::from_value(json!({
        "sessionId": "sess-1",
        "toolCall": {"toolCallId": "c9", "title": "rm -rf build", "kind": "execute"},
        "options": [{"optionId": "yes", "name": "Allow", "kind": "allow_once"},
                    {"optionId": "no", "name": "Reject", "kind": "reject_once"}]
    }))
    .unwrap();
    let id = RuntimeRequestId::from("request_1");
    let events = t.permission_requested(&id, &ask);
    let request = events
        .iter()
        .find_map(|e| match e {
            AdapterEvent::RuntimeRequestUpdated(r) => Some(r.clone()),
            _ => None,
        })
        .unwrap();
    assert_eq!(request.kind, RuntimeRequestKind::Command);
    assert_eq!(request.status, RuntimeRequestStatus::Pending);
    assert_eq!(
        request.response_capability,
        ResponseCapability::Live {
            provider_session_id: ProviderSessionId::from("ps")
        }
    );
    assert_eq!(request.prompt.as_deref(), Some("execute: rm -rf build"));
    // Reads well after "asked by "; no protocol names or option ids.
    assert_eq!(
        request.tool_approval.as_ref().unwrap().rule,
        "the agent (choices: Allow, Reject)"
    );
    let its = items(&events);
    assert_eq!(its[0].id.as_str(), "item:request_1");
    assert_eq!(its[0].status, TurnItemStatus::Waiting);
    assert_eq!(
        its[1].status,
        TurnItemStatus::Waiting,
        "the tool item waits"
    );
    assert!(t.is_waiting_on(&id));

    let answer = RequestAnswer {
        decision: ApprovalDecision::Deny,
        message: Some("not now".into()),
    };
    let events = t.permission_settled(&id, Some(&answer));
    assert!(!t.is_waiting_on(&id));
    let resolved = events
        .iter()
        .find_map(|e| match e {
            AdapterEvent::RuntimeRequestUpdated(r) => Some(r.clone()),
            _ => None,
        })
        .unwrap();
    assert_eq!(resolved.status, RuntimeRequestStatus::Resolved);
    assert_eq!(resolved.decision, Some(ApprovalDecision::Deny));
    assert_eq!(
        resolved.tool_approval.unwrap().message.as_deref(),
        Some("not now")
    );
    assert!(t.permission_settled(&id, Some(&answer)).is_empty());
}

#[test]
fn finishing_interrupted_cancels_the_approval_and_fails_open_tools() {
    let mut t = turn();
    let ask: RequestPermissionRequest = serde_json::from_value(json!({
        "sessionId": "sess-1",
        "toolCall": {"toolCallId": "c2", "title": "edit a.rs", "kind": "edit"},
        "options": [{"optionId": "ok", "name": "Allow", "kind": "allow_once"}]
    }))
    .unwrap();
    let id = RuntimeRequestId::from("request_2");
    let asked = t.permission_requested(&id, &ask);
    assert!(asked.iter().any(|e| matches!(e,
        AdapterEvent::RuntimeRequestUpdated(r) if r.kind == RuntimeRequestKind::FileChange)));
    // Text streamed while the approval waits (a parallel message) is cut by the stop.
    t.apply(update(
        json!({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "x"}}),
    ));
    let events = t.finish(TurnEnd::Interrupted("user".into()));
    assert!(events.iter().any(|e| matches!(e,
        AdapterEvent::RuntimeRequestUpdated(r) if r.status == RuntimeRequestStatus::Cancelled)));
    assert!(events.iter().any(|e| matches!(e,
        AdapterEvent::AgentErrorRaised { error, .. } if error.name == MESSAGE_ABORTED)));
    let its = items(&events);
    let tool = its
        .iter()
        .rev()
        .find(|i| matches!(i.kind, TurnItemKind::ToolCall { .. }))
        .unwrap();
    assert_eq!(tool.status, TurnItemStatus::Failed);
    assert!(
        matches!(&tool.kind, TurnItemKind::ToolCall { error: Some(e), .. } if e == "Tool execution aborted")
    );
    let text = its
        .iter()
        .find(|i| matches!(i.kind, TurnItemKind::AssistantMessage { .. }))
        .unwrap();
    assert_eq!(text.status, TurnItemStatus::Interrupted);
    assert!(matches!(
        events.last(),
        Some(AdapterEvent::TurnTerminal { outcome: TurnOutcome::Interrupted { reason }, .. }) if reason == "user"
    ));
}

#[test]
fn options_are_chosen_by_kind_not_by_id() {
    let options: Vec<PermissionOption> = serde_json::from_value(json!([
        {"optionId": "allow_always", "name": "Always Allow", "kind": "allow_always"},
        {"optionId": "allow", "name": "Allow", "kind": "allow_once"},
        {"optionId": "reject", "name": "Reject", "kind": "reject_once"}
    ]))
    .unwrap();
    let pick = |d| match choose_option(&options, d) {
        Some(PermissionOutcome::Selected { option_id }) => option_id,
        other => panic!("{other:?}"),
    };
    assert_eq!(pick(ApprovalDecision::AllowOnce), "allow");
    assert_eq!(pick(ApprovalDecision::AllowAlways), "allow_always");
    assert_eq!(pick(ApprovalDecision::Deny), "reject");

    let only_always: Vec<PermissionOption> = serde_json::from_value(json!([
        {"optionId": "a", "name": "Always", "kind": "allow_always"},
        {"optionId": "r", "name": "Never", "kind": "reject_always"}
    ]))
    .unwrap();
    assert_eq!(
        choose_option(&only_always, ApprovalDecision::AllowOnce),
        Some(PermissionOutcome::Selected {
            option_id: "a".into()
        })
    );
    assert_eq!(
        choose_option(&only_always, ApprovalDecision::Deny),
        Some(PermissionOutcome::Selected {
            option_id: "r".into()
        })
    );
    let no_reject: Vec<PermissionOption> =
        serde_json::from_value(json!([{"optionId": "a", "name": "Allow", "kind": "allow_once"}]))
            .unwrap();
    assert_eq!(
        choose_option(&no_reject, ApprovalDecision::Deny),
        Some(PermissionOutcome::Cancelled)
    );
    assert_eq!(choose_option(&[], ApprovalDecision::AllowOnce), None);
}

#[test]
fn stop_reasons_map_to_outcomes() {
    assert_eq!(
        TurnEnd::from_stop_reason(StopReason::EndTurn, None),
        TurnEnd::Completed
    );
    assert_eq!(
        TurnEnd::from_stop_reason(StopReason::EndTurn, Some("user")),
        TurnEnd::Interrupted("user".into())
    );
    assert_eq!(
        TurnEnd::from_stop_reason(StopReason::Cancelled, None),
        TurnEnd::Interrupted("agent".into())
    );
    assert!(matches!(
        TurnEnd::from_stop_reason(StopReason::MaxTokens, None),
        TurnEnd::Failed(e) if e.code.as_deref() == Some("max_tokens")
    ));
}

#[test]
fn an_update_for_an_unknown_call_creates_it_and_failed_keeps_the_error() {
    let mut t = turn();
    let events = t.apply(update(
        json!({"sessionUpdate": "tool_call_update", "toolCallId": "z",
        "title": "fetch", "kind": "fetch", "status": "failed", "rawOutput": {"error": "404"}}),
    ));
    let last = items(&events).pop().unwrap();
    assert_eq!(last.status, TurnItemStatus::Failed);
    assert!(matches!(&last.kind,
        TurnItemKind::ToolCall { tool, error: Some(e), .. } if tool == "fetch" && e.contains("404")));
}

#[test]
fn an_empty_opening_chunk_makes_no_item() {
    let mut t = turn();
    let empty = t.apply(update(
        json!({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": ""}}),
    ));
    assert!(items(&empty).is_empty());
    let text = t.apply(update(
        json!({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "Hi"}}),
    ));
    assert_eq!(
        items(&text)[0].id.as_str(),
        "item:provider-turn:run:t:2:1:1"
    );
}

#[test]
fn claude_tool_names_from_meta_name_the_tool_item() {
    let mut t = turn();
    // As captured from claude-agent-acp 0.23.1.
    t.apply(update(
        json!({"sessionUpdate": "tool_call", "toolCallId": "toolu_bash_1",
        "_meta": {"claudeCode": {"toolName": "Bash"}}, "rawInput": {}, "status": "pending",
        "title": "Terminal", "kind": "execute", "content": []}),
    ));
    t.apply(update(
        json!({"sessionUpdate": "tool_call_update", "toolCallId": "toolu_bash_1",
        "rawInput": {"command": "touch x", "description": "touch"}, "title": "touch x",
        "kind": "execute"}),
    ));
    let events = t.apply(update(json!({"sessionUpdate": "tool_call_update",
        "toolCallId": "toolu_bash_1", "_meta": {"claudeCode": {"toolName": "Bash"}},
        "status": "completed", "rawOutput": "(Bash completed with no output)"})));
    let item = items(&events).pop().unwrap();
    assert_eq!(
        item.kind,
        TurnItemKind::ToolCall {
            call_id: "toolu_bash_1".into(),
            tool: "Bash".into(),
            input: json!({"command": "touch x", "description": "touch"}),
            output: Some("(Bash completed with no output)".into()),
            error: None,
        }
    );
}

#[tokio::test(start_paused = true)]
async fn acp_chunks_go_live_at_once_durable_per_window_and_an_answered_tool_waits_for_the_agent() {
    let mut t = turn();
    t.start();
    // Every chunk is a live delta at once; its durable state follows the recorder's
    // persistence window (LIVE-03): the first at once, the rest when the window ends.
    let mut events = Vec::new();
    for part in ["a", "b", "c"] {
        events.extend(t.apply(update(
            json!({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": part}}),
        )));
    }
    let deltas: Vec<(u64, &str)> = events
        .iter()
        .filter_map(|e| match e {
            AdapterEvent::TurnItemDelta(d) => Some((d.offset, d.text.as_str())),
            _ => None,
        })
        .collect();
    assert_eq!(deltas, [(0, "a"), (1, "b"), (2, "c")]);
    let mut seen = knife_runtime::recording::DurableStates::default();
    let texts: Vec<String> = seen
        .fold(&events)
        .iter()
        .map(|i| text_of(i).to_owned())
        .collect();
    assert_eq!(texts, ["a"]);
    let deadline = t
        .next_flush_deadline()
        .expect("unwritten text has a deadline");
    tokio::time::sleep_until(deadline).await;
    let flushed = t.flush_due();
    let texts: Vec<String> = seen
        .fold(&flushed)
        .iter()
        .map(|i| text_of(i).to_owned())
        .collect();
    assert_eq!(texts, ["abc"], "{flushed:?}");
    assert_eq!(t.next_flush_deadline(), None);

    t.apply(update(
        json!({"sessionUpdate": "tool_call", "toolCallId": "c3", "title": "ls", "kind": "execute"}),
    ));
    let ask: RequestPermissionRequest = serde_json::from_value(json!({
        "sessionId": "sess-1",
        "toolCall": {"toolCallId": "c3", "title": "ls", "kind": "execute"},
        "options": [{"optionId": "ok", "name": "Allow", "kind": "allow_once"}]
    }))
    .unwrap();
    let id = RuntimeRequestId::from("request_3");
    t.permission_requested(&id, &ask);
    let answer = RequestAnswer {
        decision: ApprovalDecision::AllowOnce,
        message: None,
    };
    let settled = items(&t.permission_settled(&id, Some(&answer)));
    let tool = settled
        .iter()
        .find(|i| matches!(i.kind, TurnItemKind::ToolCall { .. }))
        .unwrap();
    assert_eq!(
        tool.status,
        TurnItemStatus::Pending,
        "until the agent reports it"
    );

    let end = items(&t.finish(TurnEnd::Completed));
    let tool = end
        .iter()
        .find(|i| matches!(i.kind, TurnItemKind::ToolCall { .. }))
        .unwrap();
    assert_eq!(tool.status, TurnItemStatus::Failed);
    assert!(
        matches!(&tool.kind, TurnItemKind::ToolCall { error: Some(e), .. }
        if e == "the turn ended before the agent reported this tool call finished")
    );
    assert!(end.iter().all(|i| i.status != TurnItemStatus::Running));
}

/// LIVE-02 for ACP: `tool_call_update`s of a running call whose content grows (an
/// agent streaming a command's output) stream the new text as `output` deltas (durable
/// per window), not a whole snapshot each; the completed content settles it.
#[test]
fn live_02_a_running_tool_calls_growing_content_streams_as_output_deltas() {
    let mut t = turn();
    t.start();
    let content =
        |text: &str| json!([{"type": "content", "content": {"type": "text", "text": text}}]);
    t.apply(update(
        json!({"sessionUpdate": "tool_call", "toolCallId": "c1",
        "title": "Build", "kind": "execute", "status": "in_progress",
        "rawInput": {"command": "make"}}),
    ));
    let mut events = Vec::new();
    for text in ["one\n", "one\ntwo\n"] {
        events.extend(t.apply(update(json!({"sessionUpdate": "tool_call_update",
            "toolCallId": "c1", "status": "in_progress", "content": content(text)}))));
    }
    let deltas: Vec<(DeltaField, u64, String)> = events
        .iter()
        .filter_map(|e| match e {
            AdapterEvent::TurnItemDelta(d) => Some((d.field, d.offset, d.text.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(
        deltas,
        [
            (DeltaField::Output, 0, "one\n".to_owned()),
            (DeltaField::Output, 4, "two\n".to_owned())
        ]
    );
    assert!(items(&events).is_empty(), "{events:?}");
    let chunks = events
        .iter()
        .filter(|e| matches!(e, AdapterEvent::TurnItemAppended(_)))
        .count();
    // Durable by the item's window (the session loop's flush timer calls `flush_due`),
    // not per update: both updates fall in the window the tool's snapshot opened.
    assert_eq!(chunks, 0, "a chunk per update: {events:?}");
    let done = t.apply(update(json!({"sessionUpdate": "tool_call_update",
        "toolCallId": "c1", "status": "completed", "content": content("one\ntwo\nok")})));
    let settled = items(&done);
    assert!(
        matches!(&settled[..], [i] if i.status == TurnItemStatus::Completed
            && matches!(&i.kind, TurnItemKind::ToolCall { output: Some(o), .. } if o == "one\ntwo\nok")),
        "{done:?}"
    );
}
