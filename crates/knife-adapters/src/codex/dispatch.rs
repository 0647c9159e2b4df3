//! Codex → knife: notifications become turn items and turn ends; server→client
//! requests become runtime requests (or are declined when knife cannot answer them).
//!
//! | codex | knife |
//! |---|---|
//! | `turn/started` | remembers codex's turn id |
//! | `item/started` / `item/completed` `agentMessage` | assistant message item (text streams with `item/agentMessage/delta`; the completed text wins) |
//! | `reasoning` + `item/reasoning/textDelta` / `summaryTextDelta` | reasoning item |
//! | `commandExecution` | tool item `command` (`{command, cwd}` → aggregated output; `failed` / `declined` → error) |
//! | `item/commandExecution/outputDelta` | more `output` of that tool item while it runs (live deltas, durable per window; the completed item's aggregated output wins) |
//! | `fileChange` | tool item `file_change` (`{changes}`) |
//! | `mcpToolCall` | tool item `mcp__<server>__<tool>` (arguments → result text or error) |
//! | `webSearch`, `dynamicToolCall`, `imageView`, `imageGeneration`, `collabAgentToolCall` | tool item named after the type |
//! | `userMessage`, other items | ignored (execution records the user's message) |
//! | `thread/tokenUsage/updated` | a model call record (growth since the last report); turn usage = thread total − total when the turn started, published at once |
//! | `error` (`willRetry`) | agent status `retry`; without retry: the turn's error |
//! | `turn/completed` | `completed` / `interrupted` (the interrupt's reason, else `aborted`) / `failed` (`runtime`, codex's message) |
//! | `serverRequest/resolved` for a request still pending | request `cancelled` |
//! | `item/commandExecution/requestApproval` | runtime request `command` |
//! | `item/fileChange/requestApproval` | runtime request `file_change` |
//! | `mcpServer/elicitation/request` with `_meta.codex_approval_kind = mcp_tool_call` | runtime request `command` for tool `mcp__<server>__<tool>` |
//! | other elicitations | answered `decline` |
//! | other server requests | answered with JSON-RPC error -32601 |

use knife_protocol::*;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::session::{ApprovalShape, Inner, PendingRequest, State, lock};
use super::wire::{self, ThreadItem, method};
use crate::jsonrpc::{Incoming, METHOD_NOT_FOUND};
use knife_runtime::recording::{ApprovalAsk, TextKind};

/// Item types mapped to a generic tool item named after the type.
const GENERIC_TOOL_ITEMS: &[&str] = &[
    "webSearch",
    "dynamicToolCall",
    "imageView",
    "imageGeneration",
    "collabAgentToolCall",
];

impl Inner {
    /// Handles one message from codex (synchronous; never awaits).
    pub(super) fn handle(&self, message: Incoming) {
        match message {
            Incoming::Notification { method, params } => self.notification(&method, params),
            Incoming::Request { id, method, params } => self.request(id, &method, params),
        }
    }

    fn parse<T: DeserializeOwned>(&self, method: &str, params: Value) -> Option<T> {
        match serde_json::from_value(params.clone()) {
            Ok(value) => Some(value),
            Err(e) => {
                let reason = format!("unexpected params of {method}: {e}");
                self.rpc.stats().record_malformed(
                    self.rpc.child().label(),
                    &reason,
                    &params.to_string(),
                );
                None
            }
        }
    }

    fn notification(&self, method: &str, params: Value) {
        match method {
            method::TURN_STARTED => {
                if let Some(n) = self.parse::<wire::TurnNotification>(method, params) {
                    let mut st = lock(&self.state);
                    if let Some(turn) = st.turns.get_mut(&n.thread_id)
                        && turn.native_turn.is_none()
                    {
                        turn.native_turn = Some(n.turn.id.clone());
                        turn.recorder.set_native_turn_id(&n.turn.id);
                        // knife asked to interrupt before codex named the turn, and the
                        // `turn/start` call that would have sent it was dropped (the run
                        // was cancelled while codex accepted the turn): send it now.
                        if turn.interrupt.is_some() {
                            let rpc = self.rpc.clone();
                            let params = wire::TurnInterruptParams {
                                thread_id: n.thread_id.clone(),
                                turn_id: n.turn.id,
                            };
                            tokio::spawn(async move {
                                if let Err(e) =
                                    rpc.call::<_, Value>(method::TURN_INTERRUPT, &params).await
                                {
                                    tracing::warn!(error = %e, "codex refused or did not answer turn/interrupt");
                                }
                            });
                        }
                    }
                }
            }
            method::TURN_COMPLETED => {
                if let Some(n) = self.parse::<wire::TurnNotification>(method, params) {
                    self.turn_completed(n);
                }
            }
            method::ITEM_STARTED | method::ITEM_COMPLETED => {
                if let Some(n) = self.parse::<wire::ItemNotification>(method, params) {
                    self.item(n, method == method::ITEM_COMPLETED);
                }
            }
            method::AGENT_MESSAGE_DELTA
            | method::REASONING_TEXT_DELTA
            | method::REASONING_SUMMARY_DELTA => {
                if let Some(d) = self.parse::<wire::DeltaNotification>(method, params) {
                    let kind = if method == method::AGENT_MESSAGE_DELTA {
                        TextKind::Assistant
                    } else {
                        TextKind::Reasoning
                    };
                    let mut st = lock(&self.state);
                    if let Some(turn) = current_turn(&mut st, &d.thread_id, &d.turn_id) {
                        turn.recorder.text_delta(&d.item_id, kind, &d.delta);
                    }
                }
            }
            method::COMMAND_OUTPUT_DELTA => {
                if let Some(d) = self.parse::<wire::DeltaNotification>(method, params) {
                    let mut st = lock(&self.state);
                    if let Some(turn) = current_turn(&mut st, &d.thread_id, &d.turn_id)
                        && let Some(idx) = turn.recorder.index_of(&d.item_id)
                    {
                        // LIVE-02: the command's output as it runs (an item not
                        // started yet has no tool item to grow; its completion
                        // carries the whole output).
                        turn.recorder.tool_output_delta(idx, &d.delta);
                    }
                }
            }
            method::TOKEN_USAGE_UPDATED => {
                if let Some(u) = self.parse::<wire::TokenUsageNotification>(method, params) {
                    let mut st = lock(&self.state);
                    st.usage_totals
                        .insert(u.thread_id.clone(), u.token_usage.total);
                    if let Some(turn) = current_turn(&mut st, &u.thread_id, &u.turn_id) {
                        // TURN-06: what the total grew by since the last report is one
                        // model call (a repeated report, e.g. after a rate-limit
                        // update, grows it by nothing and records nothing).
                        let call = usage_since(&turn.last_total, &u.token_usage.total);
                        if call != TokenUsage::default() {
                            turn.last_total = u.token_usage.total;
                            turn.recorder.model_call(call, None);
                        }
                        let usage = usage_since(&turn.baseline, &u.token_usage.total);
                        turn.recorder.set_usage(usage);
                        // Each usage report goes out at once: execution checks the
                        // budgets at it (TURN-07).
                        turn.recorder.publish_turn();
                    }
                }
            }
            method::ERROR => {
                if let Some(e) = self.parse::<wire::ErrorNotification>(method, params) {
                    let mut st = lock(&self.state);
                    if let Some(turn) = current_turn(&mut st, &e.thread_id, &e.turn_id) {
                        if e.will_retry {
                            turn.retries += 1;
                            let attempt = turn.retries;
                            turn.recorder.retrying(attempt, e.error.message);
                        } else {
                            turn.recorder.set_error(AgentError {
                                name: "APIError".into(),
                                message: e.error.message,
                            });
                        }
                    }
                }
            }
            method::SERVER_REQUEST_RESOLVED => {
                if let Some(r) = self.parse::<wire::ServerRequestResolved>(method, params) {
                    let mut st = lock(&self.state);
                    let withdrawn: Vec<RuntimeRequestId> = st
                        .requests
                        .iter()
                        .filter(|(_, p)| p.rpc_id == r.request_id && p.native_thread == r.thread_id)
                        .map(|(id, _)| id.clone())
                        .collect();
                    for id in withdrawn {
                        st.requests.remove(&id);
                        if let Some(turn) = st.turns.get_mut(&r.thread_id) {
                            turn.recorder.approval_cancelled(&id);
                        }
                    }
                }
            }
            // Status, rate limits, MCP startup, warnings …: nothing to record.
            _ => {}
        }
    }

    fn turn_completed(&self, n: wire::TurnNotification) {
        let mut st = lock(&self.state);
        let Some(turn) = st
            .turns
            .get_mut(&n.thread_id)
            .filter(|t| t.native_turn.as_deref().is_none_or(|id| id == n.turn.id))
        else {
            return;
        };
        // TURN-02: a steer still unanswered may have been taken; its answer ends the
        // turn (codex/steer.rs), so the steer is recorded in this turn, once.
        if turn.steers_in_flight > 0 {
            turn.deferred_end = Some(n);
            return;
        }
        self.end_turn(&mut st, n);
    }

    /// Ends the running turn of `n.thread_id` as `n` says (`turn/completed`).
    pub(super) fn end_turn(&self, st: &mut State, n: wire::TurnNotification) {
        let Some(mut turn) = st.turns.remove(&n.thread_id) else {
            return;
        };
        // Approvals of this turn can no longer be answered.
        st.requests.retain(|_, p| p.native_thread != n.thread_id);
        let outcome = match n.turn.status.as_deref() {
            Some("interrupted") => TurnOutcome::Interrupted {
                reason: turn.interrupt.clone().unwrap_or_else(|| "aborted".into()),
            },
            Some("failed") => TurnOutcome::Failed {
                error: RunError::new(
                    "runtime",
                    n.turn
                        .error
                        .map(|e| e.message)
                        .unwrap_or_else(|| "codex reported the turn as failed".into()),
                ),
            },
            _ => TurnOutcome::Completed,
        };
        turn.recorder.finish(outcome);
        if let Some(thread) = st.natives.get(&n.thread_id).cloned() {
            self.thread_status(st, &thread, ProviderThreadStatus::Idle, None);
        }
    }

    fn item(&self, n: wire::ItemNotification, completed: bool) {
        let mut st = lock(&self.state);
        let Some(turn) = current_turn(&mut st, &n.thread_id, &n.turn_id) else {
            return;
        };
        let rec = &mut turn.recorder;
        let parsed = serde_json::from_value::<ThreadItem>(n.item.clone());
        match (parsed, completed) {
            (Ok(ThreadItem::UserMessage { .. }), _) => {}
            (Ok(ThreadItem::AgentMessage { id, .. }), false) => {
                rec.text_started(&id, TextKind::Assistant);
            }
            (Ok(ThreadItem::AgentMessage { id, text }), true) => {
                rec.text_done(&id, TextKind::Assistant, Some(&text));
            }
            (Ok(ThreadItem::Reasoning { .. }), false) => {}
            (
                Ok(ThreadItem::Reasoning {
                    id,
                    summary,
                    content,
                }),
                true,
            ) => {
                let parts = if summary.is_empty() { content } else { summary };
                let text = parts.join("\n");
                let full = (!text.is_empty()).then_some(text.as_str());
                rec.text_done(&id, TextKind::Reasoning, full);
            }
            (
                Ok(ThreadItem::CommandExecution {
                    id, command, cwd, ..
                }),
                false,
            ) => {
                rec.tool_started(&id, &id, "command", json!({"command": command, "cwd": cwd}));
            }
            (
                Ok(ThreadItem::CommandExecution {
                    id,
                    command,
                    cwd,
                    status,
                    aggregated_output,
                    exit_code,
                }),
                true,
            ) => {
                rec.tool_started(&id, &id, "command", json!({"command": command, "cwd": cwd}));
                let output = aggregated_output.unwrap_or_default();
                let error = match status.as_str() {
                    "declined" => Some("the user declined this command".to_owned()),
                    "failed" => Some(match exit_code {
                        Some(code) => format!("the command failed with exit code {code}\n{output}"),
                        None => format!("the command failed\n{output}"),
                    }),
                    _ => None,
                };
                rec.tool_finished(&id, Some(output), error);
            }
            (
                Ok(ThreadItem::FileChange {
                    id,
                    changes,
                    status,
                }),
                done,
            ) => {
                rec.tool_started(&id, &id, "file_change", json!({"changes": changes}));
                if done {
                    let error = match status.as_str() {
                        "declined" => Some("the user declined this file change".to_owned()),
                        "failed" => Some("the file change could not be applied".to_owned()),
                        _ => None,
                    };
                    rec.tool_finished(&id, Some(format!("file change {status}")), error);
                }
            }
            (
                Ok(ThreadItem::McpToolCall {
                    id,
                    server,
                    tool,
                    status,
                    arguments,
                    result,
                    error,
                }),
                done,
            ) => {
                rec.tool_started(&id, &id, &format!("mcp__{server}__{tool}"), arguments);
                if done {
                    let output = result.as_ref().map(mcp_result_text);
                    let error = error.map(|e| e.message).or_else(|| {
                        (status == "failed").then(|| "the MCP tool call failed".to_owned())
                    });
                    rec.tool_finished(&id, output, error);
                } else {
                    turn.last_mcp_item = Some((server, tool, id));
                }
            }
            (Err(_), done) => {
                let kind = n
                    .item
                    .get("type")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                let id = n.item.get("id").and_then(Value::as_str).unwrap_or_default();
                if GENERIC_TOOL_ITEMS.contains(&kind) && !id.is_empty() {
                    rec.tool_started(id, id, kind, n.item.clone());
                    if done {
                        let failed = n.item.get("status").and_then(Value::as_str) == Some("failed");
                        let error = failed.then(|| format!("{kind} failed"));
                        rec.tool_finished(id, Some(String::new()), error);
                    }
                }
            }
        }
    }

    fn request(&self, id: Value, method: &str, params: Value) {
        let ask = match method {
            method::COMMAND_APPROVAL => self
                .parse::<wire::CommandApprovalParams>(method, params)
                .map(|p| {
                    let subject = p.command.clone().unwrap_or_else(|| "(a command)".into());
                    let ask = ApprovalAsk {
                        kind: RuntimeRequestKind::Command,
                        call_id: p.item_id,
                        tool: "command".into(),
                        subject,
                        input: json!({"command": p.command, "cwd": p.cwd, "reason": p.reason}),
                        rule: "codex approval policy".into(),
                        diff: None,
                    };
                    (p.thread_id, ask, ApprovalShape::Decision)
                }),
            method::FILE_CHANGE_APPROVAL => self
                .parse::<wire::FileChangeApprovalParams>(method, params)
                .map(|p| {
                    // The paths come from the file-change item codex started just before.
                    let changes = {
                        let st = lock(&self.state);
                        st.turns
                            .get(&p.thread_id)
                            .and_then(|t| t.recorder.tool_input(&p.item_id))
                            .and_then(|input| input.get("changes").cloned())
                            .unwrap_or(Value::Null)
                    };
                    let paths: Vec<&str> = changes
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(|c| c.get("path").and_then(Value::as_str))
                        .collect();
                    let subject = if paths.is_empty() {
                        p.grant_root
                            .clone()
                            .or_else(|| p.reason.clone())
                            .unwrap_or_else(|| "file changes".into())
                    } else {
                        paths.join(", ")
                    };
                    let ask = ApprovalAsk {
                        kind: RuntimeRequestKind::FileChange,
                        call_id: p.item_id,
                        tool: "file_change".into(),
                        subject,
                        diff: super::diff::changes_diff(&changes),
                        input: json!({"reason": p.reason, "grantRoot": p.grant_root, "changes": changes}),
                        rule: "codex approval policy".into(),
                    };
                    (p.thread_id, ask, ApprovalShape::Decision)
                }),
            method::MCP_ELICITATION => {
                let Some(p) = self.parse::<wire::ElicitationParams>(method, params) else {
                    self.decline_elicitation(&id);
                    return;
                };
                let meta = p.meta.clone().unwrap_or(Value::Null);
                if meta.get("codex_approval_kind").and_then(Value::as_str) != Some("mcp_tool_call")
                {
                    tracing::warn!(server = %p.server_name, "codex asked for MCP input knife cannot give; declined");
                    self.decline_elicitation(&id);
                    return;
                }
                let tool_name = meta
                    .get("tool_name")
                    .and_then(Value::as_str)
                    .unwrap_or("tool")
                    .to_owned();
                let call_id = {
                    let st = lock(&self.state);
                    st.turns
                        .get(&p.thread_id)
                        .and_then(|t| t.last_mcp_item.clone())
                        .filter(|(server, tool, _)| *server == p.server_name && *tool == tool_name)
                        .map(|(_, _, item)| item)
                        .unwrap_or_default()
                };
                let tool = format!("mcp__{}__{tool_name}", p.server_name);
                let ask = ApprovalAsk {
                    kind: RuntimeRequestKind::Command,
                    call_id,
                    tool: tool.clone(),
                    subject: p.message.clone().unwrap_or(tool),
                    input: meta.get("tool_params").cloned().unwrap_or(Value::Null),
                    rule: "codex approval policy".into(),
                    diff: None,
                };
                Some((p.thread_id, ask, ApprovalShape::Elicitation))
            }
            other => {
                tracing::warn!(
                    method = other,
                    "codex sent a request knife does not handle; refused"
                );
                if let Err(e) = self.rpc.respond_error(
                    &id,
                    METHOD_NOT_FOUND,
                    &format!("knife does not handle {other}"),
                ) {
                    tracing::debug!(error = %e, "could not refuse a codex request");
                }
                return;
            }
        };
        let Some((native_thread, ask, shape)) = ask else {
            // Unreadable params (already counted): refuse rather than leave codex waiting.
            let _ = self.rpc.respond_error(
                &id,
                crate::jsonrpc::INVALID_PARAMS,
                "knife could not read these params",
            );
            return;
        };
        let mut st = lock(&self.state);
        let Some(turn) = st.turns.get_mut(&native_thread) else {
            drop(st);
            tracing::warn!(%method, "codex asked for an approval outside a running turn; declined");
            let answer = match shape {
                ApprovalShape::Decision => json!({"decision": "decline"}),
                ApprovalShape::Elicitation => json!({"action": "decline", "content": null}),
            };
            let _ = self.rpc.respond(&id, answer);
            return;
        };
        let request_id = RuntimeRequestId::new();
        turn.recorder.approval_requested(&request_id, ask);
        st.requests.insert(
            request_id,
            PendingRequest {
                rpc_id: id,
                native_thread,
                shape,
            },
        );
    }

    fn decline_elicitation(&self, id: &Value) {
        if let Err(e) = self
            .rpc
            .respond(id, json!({"action": "decline", "content": null}))
        {
            tracing::debug!(error = %e, "could not decline a codex elicitation");
        }
    }
}

/// The running turn of codex thread `thread` when `turn` is it (or not yet named).
fn current_turn<'a>(
    st: &'a mut State,
    thread: &str,
    turn: &str,
) -> Option<&'a mut super::session::ActiveTurn> {
    st.turns
        .get_mut(thread)
        .filter(|t| t.native_turn.as_deref().is_none_or(|id| id == turn))
}

/// `total - baseline`, field by field (never below zero).
fn usage_since(baseline: &wire::TokenBreakdown, total: &wire::TokenBreakdown) -> TokenUsage {
    TokenUsage {
        input_tokens: total.input_tokens.saturating_sub(baseline.input_tokens),
        output_tokens: total.output_tokens.saturating_sub(baseline.output_tokens),
        reasoning_tokens: total
            .reasoning_output_tokens
            .saturating_sub(baseline.reasoning_output_tokens),
        cached_input_tokens: total
            .cached_input_tokens
            .saturating_sub(baseline.cached_input_tokens),
        total_tokens: total.total_tokens.saturating_sub(baseline.total_tokens),
    }
}

/// The text parts of an MCP tool result, joined by newlines (other parts as JSON).
fn mcp_result_text(result: &Value) -> String {
    let Some(content) = result.get("content").and_then(Value::as_array) else {
        return result.to_string();
    };
    content
        .iter()
        .map(|part| match part.get("text").and_then(Value::as_str) {
            Some(text) => text.to_owned(),
            None => part.to_string(),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn usage_is_the_difference_since_the_turn_started() {
        let before = wire::TokenBreakdown {
            total_tokens: 100,
            input_tokens: 90,
            cached_input_tokens: 0,
            output_tokens: 10,
            reasoning_output_tokens: 0,
        };
        let after = wire::TokenBreakdown {
            total_tokens: 160,
            input_tokens: 140,
            cached_input_tokens: 5,
            output_tokens: 20,
            reasoning_output_tokens: 2,
        };
        let usage = usage_since(&before, &after);
        assert_eq!(
            (
                usage.input_tokens,
                usage.output_tokens,
                usage.total_tokens,
                usage.cached_input_tokens
            ),
            (50, 10, 60, 5)
        );
        // A total that went down (new process, fresh count) never underflows.
        assert_eq!(usage_since(&after, &before).total_tokens, 0);
    }

    #[test]
    fn mcp_results_join_their_text_parts() {
        let result =
            json!({"content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]});
        assert_eq!(mcp_result_text(&result), "a\nb");
    }
}
