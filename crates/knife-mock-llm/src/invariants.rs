// Invariant checks on recorded chat requests, as a real provider would enforce them.
// Owns the tool-call pairing rules: every tool call answered, no orphan tool output.

use std::collections::BTreeSet;

use serde_json::Value;

use super::RecordedRequest;

impl RecordedRequest {
    /// What a real Chat Completions API would reject in this request's
    /// `messages`, one message per violation (empty when fine, or when this is
    /// not a chat request with a JSON body):
    ///
    /// * a `tool` message whose `tool_call_id` is not a call of an earlier
    ///   assistant message, or answers a call already answered (orphan output);
    /// * an assistant tool call with no `tool` message answering it before the
    ///   next non-tool message (unanswered call; calls of the last assistant
    ///   message must be answered too, since the request ends there).
    pub fn tool_call_violations(&self) -> Vec<String> {
        let Some(messages) = self
            .body
            .as_ref()
            .and_then(|b| b.get("messages"))
            .and_then(Value::as_array)
        else {
            return Vec::new();
        };
        let mut violations = Vec::new();
        // Calls of the latest assistant message not answered yet.
        let mut open: BTreeSet<String> = BTreeSet::new();
        let mut answered: BTreeSet<String> = BTreeSet::new();
        let mut known: BTreeSet<String> = BTreeSet::new();
        let close_open = |open: &mut BTreeSet<String>, at: usize, out: &mut Vec<String>| {
            for id in std::mem::take(open) {
                out.push(format!(
                    "tool call {id} is not answered by a tool message before message #{at}"
                ));
            }
        };
        for (i, message) in messages.iter().enumerate() {
            let role = message.get("role").and_then(Value::as_str).unwrap_or("");
            if role == "tool" {
                let id = message
                    .get("tool_call_id")
                    .and_then(Value::as_str)
                    .unwrap_or("");
                if !known.contains(id) {
                    violations.push(format!(
                        "message #{i}: tool output for unknown tool call `{id}`"
                    ));
                } else if !answered.insert(id.to_owned()) {
                    violations.push(format!("message #{i}: tool call `{id}` is answered twice"));
                }
                open.remove(id);
                continue;
            }
            close_open(&mut open, i, &mut violations);
            if role == "assistant" {
                let calls = message.get("tool_calls").and_then(Value::as_array);
                for call in calls.into_iter().flatten() {
                    let id = call.get("id").and_then(Value::as_str).unwrap_or("");
                    known.insert(id.to_owned());
                    open.insert(id.to_owned());
                }
            }
        }
        close_open(&mut open, messages.len(), &mut violations);
        violations
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn request(messages: Value) -> RecordedRequest {
        RecordedRequest {
            method: "POST".into(),
            path: "/v1/chat/completions".into(),
            headers: Default::default(),
            body: Some(json!({ "messages": messages })),
            body_text: String::new(),
        }
    }

    #[test]
    fn paired_calls_pass_and_orphans_fail() {
        let ok = request(json!([
            {"role": "user", "content": "hi"},
            {"role": "assistant", "tool_calls": [{"id": "call_1"}, {"id": "call_2"}]},
            {"role": "tool", "tool_call_id": "call_2", "content": "b"},
            {"role": "tool", "tool_call_id": "call_1", "content": "a"},
            {"role": "assistant", "content": "done"},
        ]));
        assert!(ok.tool_call_violations().is_empty());

        let bad = request(json!([
            {"role": "assistant", "tool_calls": [{"id": "call_1"}]},
            {"role": "user", "content": "?"},
            {"role": "tool", "tool_call_id": "call_9", "content": "x"},
            {"role": "assistant", "tool_calls": [{"id": "call_2"}]},
        ]));
        let v = bad.tool_call_violations();
        assert_eq!(v.len(), 3, "{v:?}");
        assert!(v[0].contains("call_1"));
        assert!(v[1].contains("call_9"));
        assert!(v[2].contains("call_2"));
    }
}
