// The peer suite (docs/2026-11-29-peer-suite.md): the same lifecycle against each real external agent
// runtime — Codex app-server, Claude (claude-agent-acp), Gemini CLI, opencode —
// run by the real `knife serve` with the peer as a provider instance, and the
// mock LLM (in this process) on loopback behind the peer.
//
// `scripts/install-peers.sh`, then `cargo test -p knife --test e2e_peers`
// (`KNIFE_PEERS=1` / `codex` / a comma list requires those peers). Each peer's tests are
// gated on `knife_peer_<name>` (set when the peer is installed or KNIFE_PEERS selects it,
// see knife-prereqs): otherwise they are ignored, never passed; selected but missing,
// they fail. `scripts/test` installs codex, so its part runs there.
//
// Steps, one test each per peer (see `peer_suite!`): a turn with streamed text;
// a command needing approval answered through knife's HTTP API; a command changing
// files → the run's diff lists them → revert restores them; an MCP tool call
// that reaches knife's `/mcp` with that thread's bearer; interrupt; idle release
// with the process gone; server SIGKILL mid-turn → restart → no orphan, the
// thread resumed through the peer's own resume.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod peers;

use knife_protocol::*;
use knife_testkit::mock_llm::{Script, ScriptResponse};
use peers::*;

/// A turn whose answer streams: several partial texts are recorded before the final one.
async fn streamed_text(spec: &'static PeerSpec) {
    let answer = "Streaming through knife: one two three four five six seven eight";
    let script = Script::new(vec![ScriptResponse {
        stream_deltas_ms: Some(40),
        ..ScriptResponse::text(answer)
    }]);
    let rig = Rig::start(spec, script, "").await;
    let thread = rig.thread().await;
    let run = rig.send(&thread, "Say something, slowly.").await;
    let (p, _) = rig.finish(&thread, &run, false).await;
    let r = p.runs.iter().find(|r| r.id.as_str() == run).unwrap();
    assert_eq!(r.status, RunStatus::Completed, "{r:?}");
    assert_eq!(last_assistant_text(&p).as_deref(), Some(answer));
    // Streamed: the assistant item's durable text grew in steps before the final one (a
    // whole first snapshot, then appended chunks, LIVE-03).
    let mut items: std::collections::HashMap<TurnItemId, TurnItem> = Default::default();
    let mut partials: Vec<String> = Vec::new();
    for e in rig.events(&thread).await {
        let item = match e.event.body {
            EventBody::TurnItemUpdated(item) => {
                let id = item.id.clone();
                items.insert(id.clone(), item);
                items.get(&id)
            }
            EventBody::TurnItemAppended(chunk) => {
                let grew = items
                    .get_mut(&chunk.item_id)
                    .is_some_and(|item| chunk.apply_to(item).unwrap_or(false));
                if grew {
                    items.get(&chunk.item_id)
                } else {
                    None
                }
            }
            _ => None,
        };
        if let Some(TurnItem {
            kind:
                TurnItemKind::AssistantMessage {
                    text,
                    streaming: true,
                },
            ..
        }) = item
            && !text.is_empty()
            && text != answer
            && partials.last() != Some(text)
        {
            partials.push(text.clone());
        }
    }
    assert!(
        partials.len() >= 2 && partials.iter().all(|t| answer.starts_with(t.as_str())),
        "expected streamed partial texts of {answer:?}, got {partials:?}"
    );
    // The model saw the user's message.
    let requests = rig.turn_requests();
    assert!(
        requests
            .iter()
            .any(|b| b.to_string().contains("Say something, slowly.")),
        "no model request carried the prompt"
    );
}

/// `knife run --provider peer "…"` (the CLI against the running server) streams the
/// peer's answer to stdout and exits 0 (the "done when" for codex).
async fn cli_run(spec: &'static PeerSpec) {
    let answer = "Answered through knife run: alpha beta gamma";
    let script = Script::new(vec![ScriptResponse::text(answer)]);
    let mut rig = Rig::start(spec, script, "").await;
    let project = rig.server.project_dir();
    let out = common::run_cli(
        &project,
        &[
            "run",
            "--server",
            &rig.server.proc.url(),
            "--project",
            project.to_str().unwrap(),
            "--provider",
            "peer",
            "Answer through the CLI.",
        ],
    )
    .await;
    assert!(out.status.success(), "knife run failed: {}", out.stderr);
    assert!(
        out.stdout.contains(answer),
        "stdout lacks the peer's answer: {}",
        out.stdout
    );
    // Stopping the server (SIGTERM) closes the peer: no process of its group is left.
    let groups = rig.peer_groups();
    assert!(!groups.is_empty(), "the peer process was not found");
    rig.server.proc.terminate().await;
    rig.wait_groups_gone("after knife serve stopped", &groups)
        .await;
}

/// A command that needs approval: a runtime request appears, is answered
/// `allow_once` through `POST /api/threads/{id}/requests/{rid}`, and the command runs.
async fn command_approval(spec: &'static PeerSpec) {
    let file = "approved-by-knife.txt";
    let script = Script::new(vec![
        ScriptResponse {
            tool_calls: vec![(spec.shell_call)(&format!("touch {file}"))],
            ..ScriptResponse::default()
        },
        ScriptResponse::text("The file is there."),
    ]);
    let rig = Rig::start(spec, script, "").await;
    let thread = rig.thread().await;
    let run = rig.send(&thread, "Create the file.").await;
    let request = rig
        .wait_for("an approval request", &thread, |p| {
            pending(p).into_iter().next()
        })
        .await;
    assert_eq!(
        request.run_id.as_ref().map(RunId::as_str),
        Some(run.as_str())
    );
    assert!(
        matches!(request.response_capability, ResponseCapability::Live { .. }),
        "{request:?}"
    );
    assert!(
        request.prompt.as_deref().unwrap_or_default().contains(file)
            || request.kind == RuntimeRequestKind::Command,
        "the request should be about the command: {request:?}"
    );
    assert!(
        !rig.server.project_dir().join(file).exists(),
        "the command ran before it was approved"
    );
    let answered = rig.answer(&thread, request.id.as_str(), "allow_once").await;
    assert_eq!(answered["status"], "resolved", "{answered}");
    let (p, more) = rig.finish(&thread, &run, false).await;
    assert!(more.is_empty());
    let r = p.runs.iter().find(|r| r.id.as_str() == run).unwrap();
    assert_eq!(r.status, RunStatus::Completed, "{r:?}");
    assert!(
        rig.server.project_dir().join(file).exists(),
        "the approved command did not run in the project folder"
    );
    assert_eq!(
        last_assistant_text(&p).as_deref(),
        Some("The file is there.")
    );
    let resolved = p
        .runtime_requests
        .iter()
        .find(|r| r.id == request.id)
        .unwrap();
    assert_eq!(resolved.status, RuntimeRequestStatus::Resolved);
}

/// A command the peer runs changes files (CHG-02/03/04): the run's change set and
/// `GET …/runs/{n}/diff` list them, `POST …/runs/{n}/revert` puts them back on disk
/// (knife's checkpoints see what an external agent changed, whatever its driver).
async fn command_diff_revert(spec: &'static PeerSpec) {
    let command = "printf 'after\\n' > notes.txt && printf 'new\\n' > made-by-peer.txt";
    let script = Script::new(vec![
        ScriptResponse {
            tool_calls: vec![(spec.shell_call)(command)],
            ..ScriptResponse::default()
        },
        ScriptResponse::text("Changed the files."),
    ]);
    let rig = Rig::start(spec, script, "").await;
    let dir = rig.server.project_dir();
    std::fs::write(dir.join("notes.txt"), "before\n").unwrap();
    let thread = rig.thread().await;
    let run = rig.send(&thread, "Change the files.").await;
    let (p, _) = rig.finish(&thread, &run, true).await;
    let r = p.runs.iter().find(|r| r.id.as_str() == run).unwrap();
    assert_eq!(r.status, RunStatus::Completed, "{r:?}");
    assert_eq!(
        std::fs::read_to_string(dir.join("notes.txt")).unwrap(),
        "after\n"
    );
    let changes = r.changes.clone().expect("the run has a change set");
    let kind = |path: &str| {
        changes
            .files
            .iter()
            .find(|f| f.path == path)
            .map(|f| (f.kind, f.added, f.removed))
    };
    assert_eq!(
        kind("notes.txt"),
        Some((FileChangeKind::Modified, 1, 1)),
        "{changes:?}"
    );
    assert_eq!(
        kind("made-by-peer.txt"),
        Some((FileChangeKind::Added, 1, 0)),
        "{changes:?}"
    );

    let api = &rig.server.api;
    let (status, diff) = api
        .get(&format!("/api/threads/{thread}/runs/{}/diff", r.ordinal))
        .await;
    assert_eq!(status, reqwest::StatusCode::OK, "{diff}");
    let text = diff["diff"].as_str().unwrap();
    assert!(
        text.contains("+++ b/made-by-peer.txt")
            && text.contains("-before")
            && text.contains("+after"),
        "{text}"
    );

    let (status, revert) = api
        .post(
            &format!("/api/threads/{thread}/runs/{}/revert", r.ordinal),
            &serde_json::json!({}),
        )
        .await;
    assert_eq!(status, reqwest::StatusCode::OK, "{revert}");
    assert_eq!(revert["status"], "applied", "{revert}");
    assert_eq!(
        std::fs::read_to_string(dir.join("notes.txt")).unwrap(),
        "before\n"
    );
    assert!(
        !dir.join("made-by-peer.txt").exists(),
        "the file the peer made is still there"
    );
}

/// An MCP tool call reaches knife's `/mcp` with the calling thread's bearer:
/// knife records `mcp.tool_called` on that thread (the credential's thread).
async fn mcp_tool_call(spec: &'static PeerSpec) {
    let script = Script::new(vec![
        ScriptResponse::mcp_tool_call(MCP_SERVER, "thread_status", "{}"),
        ScriptResponse::text("knife answered."),
    ]);
    let rig = Rig::start(spec, script, "").await;
    let other = rig.thread().await; // a second thread: the call must not land there
    let thread = rig.thread().await;
    let run = rig.send(&thread, "Ask knife for your status.").await;
    let (p, _) = rig.finish(&thread, &run, true).await;
    let r = p.runs.iter().find(|r| r.id.as_str() == run).unwrap();
    assert_eq!(r.status, RunStatus::Completed, "{r:?}");
    let calls: Vec<McpToolCall> = rig
        .events(&thread)
        .await
        .into_iter()
        .filter_map(|e| match e.event.body {
            EventBody::McpToolCalled(c) => Some(c),
            _ => None,
        })
        .collect();
    assert_eq!(
        calls.len(),
        1,
        "{calls:?}; model requests: {:#?}",
        rig.turn_requests()
            .iter()
            .map(tool_names)
            .collect::<Vec<_>>()
    );
    assert_eq!(calls[0].thread_id.as_str(), thread);
    assert_eq!(calls[0].tool, "thread_status");
    assert!(calls[0].ok, "{calls:?}");
    assert!(
        rig.events(&other)
            .await
            .iter()
            .all(|e| !matches!(e.event.body, EventBody::McpToolCalled(_))),
        "the MCP call was attributed to another thread"
    );
    // The tool's answer went back to the model (it names the thread's status).
    let last = rig.turn_requests().pop().unwrap().to_string();
    assert!(
        last.contains(&thread),
        "the tool result did not reach the model: {last}"
    );
    assert_eq!(last_assistant_text(&p).as_deref(), Some("knife answered."));
}

/// Interrupt mid-stream: the run ends `interrupted`, and the session takes the next message.
async fn interrupt(spec: &'static PeerSpec) {
    let script = Script::new(vec![
        ScriptResponse {
            stream_deltas_ms: Some(150),
            ..ScriptResponse::text(slow_words(60))
        },
        ScriptResponse::text("After the interrupt."),
        ScriptResponse::text("And once more."),
    ]);
    let rig = Rig::start(spec, script, "").await;
    let thread = rig.thread().await;
    let run = rig.send(&thread, "Talk for a long time.").await;
    rig.wait_for("streamed text", &thread, |p| {
        has_assistant_text(p).then_some(())
    })
    .await;
    let (status, body) = rig
        .server
        .api
        .post(
            &format!("/api/threads/{thread}/interrupt"),
            &serde_json::json!({}),
        )
        .await;
    assert!(status.is_success(), "{status} {body}");
    let (p, _) = rig.finish(&thread, &run, false).await;
    let r = p.runs.iter().find(|r| r.id.as_str() == run).unwrap();
    assert_eq!(r.status, RunStatus::Interrupted, "{r:?}");
    let groups = rig.peer_groups();
    let run_text = |p: &ThreadProjection, run: &str| -> Option<String> {
        p.turn_items
            .iter()
            .filter(|i| i.run_id.as_ref().map(RunId::as_str) == Some(run))
            .find_map(|i| match &i.kind {
                TurnItemKind::AssistantMessage { text, .. } if !text.is_empty() => {
                    Some(text.clone())
                }
                _ => None,
            })
    };
    let next = rig.send(&thread, "Go on.").await;
    let (p, _) = rig.finish(&thread, &next, false).await;
    let r = p.runs.iter().find(|r| r.id.as_str() == next).unwrap();
    assert_eq!(r.status, RunStatus::Completed, "{r:?}");
    if spec.lags_after_cancel {
        // The peer's quirk (see PeerSpec::lags_after_cancel): this turn is empty,
        // the next one carries its answer.
        assert_eq!(run_text(&p, &next), None, "{:#?}", p.turn_items);
        let third = rig.send(&thread, "Still there?").await;
        let (p, _) = rig.finish(&thread, &third, false).await;
        assert!(
            run_text(&p, &third)
                .unwrap_or_default()
                .starts_with("After the interrupt."),
            "{:#?}",
            p.turn_items
        );
    } else {
        assert_eq!(
            run_text(&p, &next).as_deref(),
            Some("After the interrupt."),
            "{:#?}",
            p.turn_items
        );
    }
    // The same peer process served the turns after the interrupt.
    assert_eq!(
        rig.peer_groups(),
        groups,
        "the interrupt restarted the peer"
    );
}

/// Idle release: after `idle_timeout_secs` the session is released and the
/// peer's whole process group is gone.
async fn idle_release(spec: &'static PeerSpec) {
    let script = Script::new(vec![ScriptResponse::text("Done.")]);
    let rig = Rig::start(spec, script, "idle_timeout_secs = 2").await;
    let thread = rig.thread().await;
    let run = rig.send(&thread, "Hello.").await;
    let (p, _) = rig.finish(&thread, &run, false).await;
    assert_eq!(last_assistant_text(&p).as_deref(), Some("Done."));
    let groups = rig.peer_groups();
    assert!(
        !groups.is_empty(),
        "no peer process under knife after a turn"
    );
    rig.wait_for("the session release", &thread, |p| {
        p.provider_sessions
            .iter()
            .all(|s| s.status == SessionStatus::Stopped)
            .then_some(())
    })
    .await;
    rig.wait_groups_gone("after the idle release", &groups)
        .await;
    let (status, body) = rig.server.api.get("/api/sessions").await;
    assert!(status.is_success());
    assert_eq!(body.as_array().map(Vec::len), Some(0), "{body}");
}

/// `knife serve` SIGKILLed mid-turn: the restart kills the peer left behind
/// (no orphan) and resumes the thread through the peer's own resume — the
/// model request after the restart still carries the earlier turn. (The kill
/// hits the second turn: Gemini CLI cannot reload a session whose first turn
/// never finished, "No previous sessions found for this project".)
async fn crash_restart_resume(spec: &'static PeerSpec) {
    let script = Script::new(vec![
        ScriptResponse::text("Noted."),
        ScriptResponse {
            stream_deltas_ms: Some(150),
            ..ScriptResponse::text(slow_words(80))
        },
        ScriptResponse::text("Resumed after restart."),
    ]);
    let mut rig = Rig::start(spec, script, "").await;
    let thread = rig.thread().await;
    let first = rig.send(&thread, "Remember the word pelican.").await;
    let (p, _) = rig.finish(&thread, &first, false).await;
    assert_eq!(last_assistant_text(&p).as_deref(), Some("Noted."));
    rig.send(&thread, "Now talk for a long time.").await;
    // Well into the answer, mid-turn.
    rig.wait_for("streamed text", &thread, |p| {
        last_assistant_text(p)
            .is_some_and(|t| t.contains("w6"))
            .then_some(())
    })
    .await;
    let groups = rig.peer_groups();
    assert!(!groups.is_empty(), "no peer process under knife mid-turn");
    rig.server.proc.kill_hard().await;
    rig.server.respawn().await;
    rig.wait_groups_gone("after the restart (orphaned peer)", &groups)
        .await;
    let p = rig
        .wait_for("the resumed turn", &thread, |p| {
            (p.thread.active_run_id.is_none()
                && last_assistant_text(p).as_deref() == Some("Resumed after restart."))
            .then(|| p.clone())
        })
        .await;
    assert!(
        p.turn_items.iter().any(|i| matches!(
            &i.kind,
            TurnItemKind::UserMessage {
                origin: MessageOrigin::System,
                ..
            }
        )),
        "no continuation message after the restart: {:#?}",
        p.turn_items
    );
    let new_groups = rig.peer_groups();
    assert!(
        new_groups.iter().all(|g| !groups.contains(g)),
        "the old peer group is still knife's child"
    );
    // The peer resumed its own thread/session: the continuation's model request
    // carries the history, including the first prompt.
    let last = rig.turn_requests().pop().unwrap().to_string();
    if spec.reloads_after_mid_turn_kill {
        assert!(
            last.contains("pelican"),
            "the request after the restart lost the history (not a native resume): {last}"
        );
    } else {
        // The peer's limit (see PeerSpec::reloads_after_mid_turn_kill): knife
        // tried the native reload, fell back to a new session, and the thread
        // still went on. Fails here once the peer learns to reload.
        assert!(
            !last.contains("pelican"),
            "the peer reloaded its session after all: set reloads_after_mid_turn_kill"
        );
        assert!(
            rig.server
                .proc
                .stderr()
                .contains("could not reopen the thread's session"),
            "knife did not report the failed reload"
        );
    }
}

/// One module of eight tests per peer.
macro_rules! peer_suite {
    ($($name:ident => $spec:expr, $cfg:meta, $why:literal;)*) => {$(
        #[cfg_attr(not($cfg), allow(unused_imports))]
        mod $name {
            use super::*;

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            #[cfg_attr(not($cfg), ignore = $why)]
            async fn streamed_text() { super::streamed_text(&$spec).await }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            #[cfg_attr(not($cfg), ignore = $why)]
            async fn cli_run() { super::cli_run(&$spec).await }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            #[cfg_attr(not($cfg), ignore = $why)]
            async fn command_approval() { super::command_approval(&$spec).await }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            #[cfg_attr(not($cfg), ignore = $why)]
            async fn command_diff_revert() { super::command_diff_revert(&$spec).await }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            #[cfg_attr(not($cfg), ignore = $why)]
            async fn mcp_tool_call() { super::mcp_tool_call(&$spec).await }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            #[cfg_attr(not($cfg), ignore = $why)]
            async fn interrupt() { super::interrupt(&$spec).await }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            #[cfg_attr(not($cfg), ignore = $why)]
            async fn idle_release() { super::idle_release(&$spec).await }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            #[cfg_attr(not($cfg), ignore = $why)]
            async fn crash_restart_resume() { super::crash_restart_resume(&$spec).await }
        }
    )*};
}

peer_suite! {
    codex => CODEX, knife_peer_codex,
        "needs the codex peer: run scripts/test (or scripts/install-peers.sh --only codex)";
    claude_agent_acp => CLAUDE, knife_peer_claude_agent_acp,
        "needs the claude-agent-acp peer: scripts/install-peers.sh --only claude-agent-acp";
    gemini => GEMINI, knife_peer_gemini,
        "needs the gemini peer: scripts/install-peers.sh --only gemini";
    opencode => OPENCODE, knife_peer_opencode,
        "needs the opencode peer: scripts/install-peers.sh --only opencode";
}

/// LIVE-02 with the real codex (issue 14 item 1): a command printing a line every
/// 300 ms streams its output through `item/commandExecution/outputDelta`, which knife
/// records as it runs: the `command` item's output is durable per persistence window
/// (appended `output` chunks before it settles), and settles with every line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(knife_peer_codex),
    ignore = "needs the codex peer: run scripts/test (or scripts/install-peers.sh --only codex)"
)]
async fn live_02_codex_command_output_is_recorded_as_it_runs() {
    let spec = &CODEX;
    let command = "for i in 1 2 3 4; do echo line $i; sleep 0.3; done";
    let script = Script::new(vec![
        ScriptResponse {
            tool_calls: vec![(spec.shell_call)(command)],
            ..ScriptResponse::default()
        },
        ScriptResponse::text("Printed them."),
    ]);
    let rig = Rig::start(spec, script, "").await;
    let thread = rig.thread().await;
    let run = rig.send(&thread, "Print the lines.").await;
    let (p, _) = rig.finish(&thread, &run, true).await;
    let r = p.runs.iter().find(|r| r.id.as_str() == run).unwrap();
    assert_eq!(r.status, RunStatus::Completed, "{r:?}");
    let events = rig.events(&thread).await;
    let command_item = events
        .iter()
        .find_map(|e| match &e.event.body {
            EventBody::TurnItemUpdated(i)
                if matches!(&i.kind, TurnItemKind::ToolCall { tool, .. } if tool == "command") =>
            {
                Some(i.id.clone())
            }
            _ => None,
        })
        .expect("no command item");
    let chunks: Vec<&TurnItemAppend> = events
        .iter()
        .filter_map(|e| match &e.event.body {
            EventBody::TurnItemAppended(c)
                if c.item_id == command_item && c.field == DeltaField::Output =>
            {
                Some(c)
            }
            _ => None,
        })
        .collect();
    assert!(
        chunks.len() >= 2,
        "output chunks of the running command: {chunks:?}"
    );
    let settled = p
        .turn_items
        .iter()
        .find(|i| i.id == command_item)
        .expect("the command item");
    let TurnItemKind::ToolCall {
        output: Some(output),
        ..
    } = &settled.kind
    else {
        panic!("{settled:?}")
    };
    for i in 1..=4 {
        assert!(output.contains(&format!("line {i}")), "{output:?}");
    }
}
