// The `/mcp` endpoint of the real `knife serve` driven by a real MCP client: the
// official Python SDK (`mcp`, installed pinned by .ci/run). SPEC.md MCP-02, MCP-03,
// MCP-07, MCP-12 end to end.
//
// The client runs under the Python `knife_prereqs::python_mcp` finds (`$KNIFE_TEST_PYTHON`,
// else scripts/test's venv, else `python3`). Gated on `knife_has_python_mcp`: where no
// Python can import `mcp` the test is ignored (with the reason), never passed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use common::*;
use futures::StreamExt;
use knife_protocol::*;
use reqwest::StatusCode;
use serde_json::Value;

/// The Python that can `import mcp`; panics saying how to install it.
fn python() -> PathBuf {
    static PYTHON: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    PYTHON
        .get_or_init(|| knife_prereqs::python_mcp().unwrap_or_else(|missing| panic!("{missing}")))
        .clone()
}

/// Runs tests/mcp/client.py; returns its JSON output.
async fn client(endpoint: &str, auth: &str, mode: &str, target: Option<&str>) -> Value {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp/client.py");
    let mut cmd = tokio::process::Command::new(python());
    cmd.arg(script).args([endpoint, auth, mode]);
    if let Some(t) = target {
        cmd.arg(t);
    }
    cmd.stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let out = tokio::time::timeout(Duration::from_secs(60), cmd.output())
        .await
        .expect("the Python MCP client did not finish within 60 s")
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "python client failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("bad client output ({e}):\n{stdout}\n{stderr}"))
}

async fn start_server(dir: &Path, config: &str) -> Proc {
    std::fs::write(dir.join("knife.toml"), config).unwrap();
    let mut cmd = knife_command(dir);
    cmd.arg("serve")
        .arg("--config")
        .arg(dir.join("knife.toml"))
        .args(["--listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir.join("data"))
        .env("KNIFE_DEBUG_MCP_TOKENS", "1");
    Proc::spawn("knife serve", cmd).await
}

fn folder(dir: &Path, name: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::create_dir_all(&p).unwrap();
    std::fs::canonicalize(p).unwrap()
}

/// Waits on the caller's event stream for its `mcp.tool_called` of `tool`.
async fn tool_call_event(api: &Api, base: &str, thread: &str, tool: &str) -> McpToolCall {
    let _ = api;
    let resp = reqwest::Client::new()
        .get(format!("{base}/api/threads/{thread}/events?after=0"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let mut sse = Box::pin(knife_llm::sse::decode_stream(resp.bytes_stream()));
    let found = async {
        while let Some(item) = sse.next().await {
            let item = item.unwrap();
            if item.event == "delta" || item.event == "reset" {
                continue; // live text, not an event
            }
            let event: StoredEvent = serde_json::from_str(&item.data).unwrap();
            if let EventBody::McpToolCalled(call) = event.event.body
                && call.tool == tool
            {
                return call;
            }
        }
        panic!("the event stream ended without mcp.tool_called of {tool}");
    };
    tokio::time::timeout(RUN_TIMEOUT, found)
        .await
        .unwrap_or_else(|_| panic!("no mcp.tool_called of {tool} within {RUN_TIMEOUT:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(knife_has_python_mcp),
    ignore = "needs the Python MCP SDK (mcp==2.3.0): run scripts/test"
)]
async fn e2e_mcp_python_sdk_client_against_knife_serve() {
    let mock = MockLlm::script("[[response]]\ntext = \"Done.\"\n", &[]).await;
    let dir = tempfile::tempdir().unwrap();
    let main = folder(dir.path(), "main");
    let closed = folder(dir.path(), "closed");
    let config = format!(
        "{}\n[[projects]]\nroot = \"{}\"\nagent_browser_access = false\n",
        config_toml(&mock.base_url()),
        closed.display()
    );
    let proc = start_server(dir.path(), &config).await;
    let base = proc.url();
    let api = Api::new(&base);

    let project = api.create_project(&main).await;
    let caller = api.create_thread(&project).await;
    let target = api.create_thread(&project).await;
    let other_project = api.create_project(&closed).await;
    let closed_thread = api.create_thread(&other_project).await;

    let (status, config) = api
        .post(
            &format!("/api/threads/{caller}/mcp-token"),
            &serde_json::json!({}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{config}");
    let endpoint = config["endpoint"].as_str().unwrap().to_owned();
    assert_eq!(endpoint, format!("{base}/mcp"));
    let auth = config["authorizationHeader"].as_str().unwrap().to_owned();
    assert_eq!(config["browserToolsAvailable"], true);

    let out = client(&endpoint, &auth, "full", Some(&target)).await;
    assert_eq!(out["ok"], true, "{out}");
    let tools: Vec<&str> = out["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    assert_eq!(
        tools,
        vec![
            "thread_create",
            "thread_read",
            "thread_send_message",
            "thread_status",
            "threads_list",
            "threads_search",
            "worktree_create",
            "worktree_list"
        ],
        "exactly the tools of the capabilities"
    );
    let mut listed: Vec<&str> = out["threads_list"]["threads"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_str().unwrap())
        .collect();
    listed.sort();
    let mut expected = vec![caller.as_str(), target.as_str()];
    expected.sort();
    assert_eq!(listed, expected, "the caller's project only");
    assert_eq!(out["thread_status"]["id"], caller.as_str());

    // thread_send_message started the target's run, attributed to the caller.
    let run = out["send"]["run_id"].as_str().unwrap().to_owned();
    let (_, finished) = api.follow_run(&target, &run, 0).await;
    assert_eq!(finished.status, RunStatus::Completed);
    let call = tool_call_event(&api, &base, &caller, "thread_send_message").await;
    assert!(call.ok);
    assert_eq!(call.thread_id.as_str(), caller);
    assert_eq!(
        call.target_thread_id
            .as_ref()
            .map(knife_protocol::ThreadId::as_str),
        Some(target.as_str())
    );

    // The session that ran the target's turn holds a credential of its own (the
    // manager minted it before the adapter opened); closing the session revokes it.
    let target_json = api.thread_json(&target).await;
    assert_eq!(target_json["mcp"]["active"], true, "{}", target_json["mcp"]);
    let (_, sessions) = api.get("/api/sessions").await;
    let session = sessions
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["threads"].as_array().unwrap().iter().any(|t| t == target.as_str()))
        .unwrap_or_else(|| panic!("no live session of the target: {sessions}"))["provider_session_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let (status, body) = api
        .post(
            &format!("/api/sessions/{session}/close"),
            &serde_json::json!({}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(api.thread_json(&target).await["mcp"]["active"], false);

    // The projection and `knife threads show` show the credential, never the token.
    let shown = run_cli(dir.path(), &["threads", "show", &caller, "--server", &base]).await;
    assert!(shown.status.success(), "{}", shown.stderr);
    assert!(
        shown
            .stdout
            .contains("mcp      active (preview, orchestration, worktree, pull-requests)"),
        "{}",
        shown.stdout
    );
    let token = auth.strip_prefix("Bearer ").unwrap();
    assert!(!shown.stdout.contains(token));

    // Revoked (as a terminal detach does): the same client gets 401.
    let resp = reqwest::Client::new()
        .delete(format!("{base}/api/threads/{caller}/mcp-token"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let out = client(&endpoint, &auth, "probe", None).await;
    assert_eq!(out["ok"], false, "{out}");
    assert_eq!(
        out["http_statuses"],
        serde_json::json!([401]),
        "the client's first request got 401: {out}"
    );

    // A project with browser access off: no `preview` in the capability set.
    let (_, closed_config) = api
        .post(
            &format!("/api/threads/{closed_thread}/mcp-token"),
            &serde_json::json!({}),
        )
        .await;
    assert_eq!(closed_config["browserToolsAvailable"], false);
    let caps: Vec<&str> = closed_config["capabilities"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap())
        .collect();
    assert_eq!(caps, vec!["orchestration", "worktree", "pull-requests"]);
    let closed_auth = closed_config["authorizationHeader"].as_str().unwrap();
    let out = client(&endpoint, closed_auth, "probe", None).await;
    assert_eq!(out["ok"], true, "{out}");
    let thread = api.thread_json(&closed_thread).await;
    assert_eq!(
        thread["mcp"]["capabilities"],
        serde_json::json!(["orchestration", "worktree", "pull-requests"])
    );
}
