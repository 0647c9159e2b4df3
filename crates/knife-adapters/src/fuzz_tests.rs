//! SEC-09 fuzz targets (proptest, stable Rust) of what external runtimes send:
//! the stdio line splitter, the JSON-RPC classifier, the ACP turn mapper and the
//! codex wire types, fed arbitrary bytes and JSON shaped like the protocols' own
//! (their field names, nested). None may panic. Case count: `PROPTEST_CASES`
//! (default 256), the CI smoke.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use knife_protocol::*;
use knife_runtime::SystemClock;
use proptest::prelude::*;
use serde_json::{Map, Value, json};

/// Field names and values of the ACP and codex protocols, so random JSON reaches
/// past the first `match`.
const KEYS: &[&str] = &[
    "sessionUpdate",
    "content",
    "type",
    "text",
    "toolCallId",
    "title",
    "kind",
    "status",
    "rawInput",
    "rawOutput",
    "locations",
    "path",
    "messageId",
    "id",
    "method",
    "params",
    "result",
    "error",
    "code",
    "message",
    "data",
    "jsonrpc",
    "threadId",
    "turnId",
    "item",
    "delta",
    "itemId",
    "turn",
    "tokenUsage",
    "total",
    "last",
    "command",
    "cwd",
    "changes",
    "aggregatedOutput",
    "exitCode",
    "server",
    "tool",
    "arguments",
    "options",
    "optionId",
    "toolCall",
    "stopReason",
    "usage",
    "totalTokens",
    "inputTokens",
    "outputTokens",
];
const WORDS: &[&str] = &[
    "agent_message_chunk",
    "agent_thought_chunk",
    "user_message_chunk",
    "tool_call",
    "tool_call_update",
    "plan",
    "text",
    "image",
    "resource_link",
    "diff",
    "terminal",
    "pending",
    "in_progress",
    "completed",
    "failed",
    "execute",
    "edit",
    "read",
    "agentMessage",
    "reasoning",
    "commandExecution",
    "fileChange",
    "mcpToolCall",
    "inProgress",
    "declined",
    "end_turn",
    "cancelled",
    "2.0",
    "",
];

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<f64>().prop_map(|f| json!(f)),
        prop::sample::select(WORDS).prop_map(|s| json!(s)),
        ".{0,12}".prop_map(Value::String),
    ];
    leaf.prop_recursive(5, 64, 8, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec((prop::sample::select(KEYS), inner), 0..8).prop_map(|kv| {
                Value::Object(
                    kv.into_iter()
                        .map(|(k, v)| (k.to_owned(), v))
                        .collect::<Map<String, Value>>(),
                )
            }),
        ]
    })
}

fn acp_turn() -> crate::acp::mapping::AcpTurn {
    let run_id = RunId::from("run:t:1");
    crate::acp::mapping::AcpTurn::new(
        Arc::new(SystemClock),
        crate::acp::mapping::TurnIdentity {
            thread_id: ThreadId::from("t"),
            provider_turn_id: ProviderTurnId::for_run(&run_id, 1),
            run_id,
            run_ordinal: 1,
            provider_session_id: ProviderSessionId::from("ps"),
            provider_thread_id: Some(ProviderThreadId::native("acp", "sess-1")),
            attempt: 1,
            provider_instance_id: ProviderInstanceId::from("acp"),
            model: None,
        },
    )
}

proptest! {
    #[test]
    fn sec_09_jsonrpc_lines_of_arbitrary_bytes_never_panic(
        bytes in prop::collection::vec(
            prop_oneof![Just(b'\n'), Just(b'\r'), Just(b'{'), any::<u8>()], 0..768),
        cap in 1usize..512,
    ) {
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        rt.block_on(async {
            let reader = tokio::io::BufReader::with_capacity(7, bytes.as_slice());
            let mut lines = crate::process::lines::CappedLines::new(reader, cap);
            while let Some(line) = lines.next().await {
                if let Some(line) = line {
                    prop_assert!(line.len() <= cap);
                    let _ = crate::jsonrpc::classifies(&String::from_utf8_lossy(&line));
                }
            }
            Ok(())
        })?;
    }

    #[test]
    fn sec_09_jsonrpc_classify_never_panics_on_protocol_shaped_json(value in json_value()) {
        let _ = crate::jsonrpc::classifies(&value.to_string());
    }

    #[test]
    fn sec_09_acp_mapper_never_panics_on_arbitrary_updates(
        updates in prop::collection::vec(json_value(), 0..24),
        end in 0u8..3,
    ) {
        let mut turn = acp_turn();
        let _ = turn.start();
        for v in updates {
            // Most random objects are not updates; force the tag onto some.
            let v = match v {
                Value::Object(mut m) if !m.contains_key("sessionUpdate") => {
                    m.insert("sessionUpdate".into(), json!("tool_call_update"));
                    Value::Object(m)
                }
                other => other,
            };
            if let Ok(update) = serde_json::from_value::<crate::acp::types::SessionUpdate>(v.clone()) {
                let _ = turn.apply(update);
            }
            if let Ok(ask) = serde_json::from_value::<crate::acp::types::RequestPermissionRequest>(v) {
                let _ = turn.permission_requested(&RuntimeRequestId::from("r"), &ask);
            }
        }
        let _ = turn.finish(match end {
            0 => crate::acp::mapping::TurnEnd::Completed,
            1 => crate::acp::mapping::TurnEnd::Interrupted("user".into()),
            _ => crate::acp::mapping::TurnEnd::Failed(RunError::new("provider_error", "x")),
        });
    }

    #[test]
    fn sec_09_codex_wire_types_never_panic_on_protocol_shaped_json(value in json_value()) {
        use crate::codex::wire;
        let _ = serde_json::from_value::<wire::ItemNotification>(value.clone());
        let _ = serde_json::from_value::<wire::TurnNotification>(value.clone());
        let _ = serde_json::from_value::<wire::DeltaNotification>(value.clone());
        let _ = serde_json::from_value::<wire::TokenUsageNotification>(value.clone());
        let _ = serde_json::from_value::<wire::ErrorNotification>(value.clone());
        let _ = serde_json::from_value::<wire::CommandApprovalParams>(value.clone());
        let _ = serde_json::from_value::<wire::FileChangeApprovalParams>(value.clone());
        let _ = serde_json::from_value::<wire::ElicitationParams>(value);
    }
}
