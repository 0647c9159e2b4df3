//! The `/mcp` endpoint over loopback HTTP (SPEC.md MCP-12): bearer checks, tools by
//! capability, tool calls recorded as events. JSON-RPC is spoken by hand over reqwest
//! (the Python SDK test in crates/knife/tests/e2e_mcp.rs covers a real client).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use knife_protocol::*;
use knife_runtime::mcp::{CredentialRegistry, CredentialRequest, FixedAccess, McpSessionConfig};
use knife_runtime::*;
use knife_server::AppState;
use knife_server::mcp::McpState;
use knife_store::{Store, StreamFilter};
use reqwest::StatusCode;
use serde_json::{Value, json};

struct Server {
    dir: tempfile::TempDir,
    store: Store,
    registry: Arc<CredentialRegistry>,
    base: String,
    http: reqwest::Client,
    _task: tokio::task::JoinHandle<()>,
}

async fn serve() -> Server {
    let dir = tempfile::tempdir().unwrap();
    let store = support::open_store(dir.path()).await;
    // A fake provider instance, so threads can be created and runs started.
    let mut adapters: HashMap<ProviderInstanceId, Arc<dyn ProviderAdapter>> = HashMap::new();
    adapters.insert(
        ProviderInstanceId::from("fake"),
        Arc::new(knife_testkit::sessions::FakeAdapter::new(Default::default())),
    );
    let registry = CredentialRegistry::new(None);
    let state = AppState {
        mcp: Some(McpState {
            registry: Arc::clone(&registry),
            access: Arc::new(FixedAccess::default()),
            debug_tokens: true,
            worktrees_dir: dir.path().join("data/worktrees"),
        }),
        ..support::app_state(&store, adapters)
    };
    let (listener, addr) = support::loopback().await;
    registry.set_endpoint(knife_runtime::mcp::endpoint_for(addr));
    let task = support::serve_on(listener, state);
    Server {
        dir,
        store,
        registry,
        base: format!("http://{addr}"),
        http: reqwest::Client::new(),
        _task: task,
    }
}

impl Server {
    async fn thread(&self, folder: &str) -> Thread {
        let title = Some(format!("thread in {folder}"));
        support::project_thread(&self.store, &self.dir.path().join(folder), title).await
    }

    fn token(&self, thread: &Thread, caps: &[McpCapability]) -> McpSessionConfig {
        self.registry
            .issue_for(CredentialRequest {
                thread_id: thread.id.clone(),
                provider_instance_id: thread.provider_instance_id.clone(),
                provider_session_id: None,
                capabilities: caps.iter().copied().collect(),
            })
            .unwrap()
    }

    /// One JSON-RPC POST to `/mcp` with `auth` as the Authorization header.
    async fn post(
        &self,
        auth: Option<&str>,
        session: Option<&str>,
        body: Value,
    ) -> reqwest::Response {
        let mut request = self
            .http
            .post(format!("{}/mcp", self.base))
            .header("accept", "application/json, text/event-stream")
            .json(&body);
        if let Some(auth) = auth {
            request = request.header("authorization", auth);
        }
        if let Some(session) = session {
            request = request.header("mcp-session-id", session);
        }
        request.send().await.unwrap()
    }
}

/// The JSON-RPC message in an SSE or JSON answer.
async fn message(resp: reqwest::Response) -> Value {
    assert_eq!(resp.status(), StatusCode::OK);
    let text = resp.text().await.unwrap();
    if let Ok(v) = serde_json::from_str::<Value>(&text) {
        return v;
    }
    text.lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
        .find(|v| v.get("id").is_some())
        .unwrap_or_else(|| panic!("no JSON-RPC answer in {text}"))
}

/// An initialized MCP session for `auth`: its session id.
async fn initialize(s: &Server, auth: &str) -> String {
    let resp = s
        .post(
            Some(auth),
            None,
            json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-06-18", "capabilities": {},
                "clientInfo": {"name": "knife-test", "version": "0"}}}),
        )
        .await;
    let session = resp
        .headers()
        .get("mcp-session-id")
        .map(|v| v.to_str().unwrap().to_owned())
        .expect("a session id");
    let init = message(resp).await;
    assert_eq!(init["result"]["serverInfo"]["name"], "knife", "{init}");
    let resp = s
        .post(
            Some(auth),
            Some(&session),
            json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        )
        .await;
    assert!(resp.status().is_success(), "{}", resp.status());
    session
}

async fn list_tools(s: &Server, auth: &str, session: &str) -> Vec<String> {
    let v = message(
        s.post(
            Some(auth),
            Some(session),
            json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}),
        )
        .await,
    )
    .await;
    v["result"]["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("{v}"))
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect()
}

async fn call(s: &Server, auth: &str, session: &str, tool: &str, args: Value) -> Value {
    message(
        s.post(
            Some(auth),
            Some(session),
            json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                   "params": {"name": tool, "arguments": args}}),
        )
        .await,
    )
    .await
}

fn assert_401(status: StatusCode, what: &str) {
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{what}");
}

#[tokio::test]
async fn mcp_12_missing_unknown_or_revoked_bearer_tokens_get_401() {
    let s = serve().await;
    let t = s.thread("p").await;
    let ping = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"});

    let resp = s.post(None, None, ping.clone()).await;
    assert_401(resp.status(), "missing");
    assert_eq!(resp.headers()["cache-control"], "no-store");
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["error"], "invalid_mcp_credential");
    assert_401(
        s.post(Some("Bearer knife_mcp_unknown"), None, ping.clone())
            .await
            .status(),
        "unknown",
    );
    assert_401(
        s.post(Some("Basic abc"), None, ping.clone()).await.status(),
        "not bearer",
    );

    let config = s.token(&t, &[McpCapability::Orchestration]);
    let auth = config.authorization_header.clone();
    let session = initialize(&s, &auth).await;
    assert!(!list_tools(&s, &auth, &session).await.is_empty());

    s.registry.revoke(&config.credential_id);
    let resp = s
        .post(
            Some(&auth),
            Some(&session),
            json!({"jsonrpc": "2.0", "id": 9, "method": "tools/list"}),
        )
        .await;
    assert_401(resp.status(), "revoked mid-session");
}

#[tokio::test]
async fn mcp_12_only_the_tools_the_capabilities_allow_are_listed_and_callable() {
    let s = serve().await;
    let t = s.thread("p").await;
    let orchestration = [
        "threads_list",
        "threads_search",
        "thread_read",
        "thread_create",
        "thread_send_message",
        "thread_status",
    ];
    let cases: Vec<(Vec<McpCapability>, Vec<&str>)> = vec![
        (vec![McpCapability::Orchestration], orchestration.to_vec()),
        (
            vec![McpCapability::Worktree],
            vec!["worktree_list", "worktree_create"],
        ),
        (
            vec![
                McpCapability::Preview,
                McpCapability::Device,
                McpCapability::PullRequests,
            ],
            vec![],
        ),
    ];
    for (caps, expected) in cases {
        let auth = s.token(&t, &caps).authorization_header;
        let session = initialize(&s, &auth).await;
        let listed: BTreeSet<String> = list_tools(&s, &auth, &session).await.into_iter().collect();
        let expected: BTreeSet<String> = expected.iter().map(|n| (*n).to_owned()).collect();
        assert_eq!(listed, expected, "caps {caps:?}");
    }

    // A worktree-only credential cannot call an orchestration tool.
    let auth = s.token(&t, &[McpCapability::Worktree]).authorization_header;
    let session = initialize(&s, &auth).await;
    let v = call(&s, &auth, &session, "thread_status", json!({})).await;
    assert!(v.get("error").is_some(), "{v}");
}

#[tokio::test]
async fn tool_calls_act_for_the_calling_thread_and_are_recorded() {
    let s = serve().await;
    let t = s.thread("p").await;
    let other_project = s.thread("q").await;
    let auth = s
        .token(&t, &[McpCapability::Orchestration])
        .authorization_header;
    let session = initialize(&s, &auth).await;

    let v = call(&s, &auth, &session, "thread_status", json!({})).await;
    let text = v["result"]["content"][0]["text"].as_str().unwrap();
    let status: Value = serde_json::from_str(text).unwrap();
    assert_eq!(status["id"], t.id.to_string());
    assert_eq!(v["result"]["isError"], false);

    let v = call(&s, &auth, &session, "threads_list", json!({})).await;
    let text = v["result"]["content"][0]["text"].as_str().unwrap();
    let list: Value = serde_json::from_str(text).unwrap();
    let ids: Vec<&str> = list["threads"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, vec![t.id.as_str()], "only the caller's project");

    let v = call(
        &s,
        &auth,
        &session,
        "thread_status",
        json!({"thread_id": other_project.id}),
    )
    .await;
    assert_eq!(v["result"]["isError"], true, "{v}");

    let events = s
        .store
        .read_events(
            &StreamFilter {
                thread_id: Some(t.id.clone()),
                after: 0,
                event_type: Some("mcp.tool_called".into()),
            },
            100,
        )
        .await
        .unwrap();
    let calls: Vec<McpToolCall> = events
        .into_iter()
        .map(|e| match e.event.body {
            EventBody::McpToolCalled(c) => c,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(calls.len(), 3);
    assert_eq!(calls[0].tool, "thread_status");
    assert!(calls[0].ok);
    assert_eq!(calls[0].target_thread_id.as_ref(), Some(&t.id));
    assert!(!calls[2].ok);
    assert!(calls[2].error.as_ref().unwrap().contains("another project"));
}

#[tokio::test]
async fn random_and_near_miss_bearer_strings_all_get_401() {
    let s = serve().await;
    let t = s.thread("p").await;
    let other = s.thread("q").await;
    let real = s.token(&t, &[McpCapability::Orchestration]);
    let revoked = s.token(&t, &[McpCapability::Orchestration]);
    s.registry.revoke(&revoked.credential_id);
    let others = s.token(&other, &[McpCapability::Orchestration]);
    let token = real.token().to_owned();

    let mut candidates: Vec<String> = Vec::new();
    // One character off the real token, at every position.
    for (i, c) in token.char_indices() {
        let swapped = if c == 'A' { 'B' } else { 'A' };
        let mut t = token.clone();
        t.replace_range(i..i + c.len_utf8(), &swapped.to_string());
        candidates.push(t);
    }
    candidates.push(token[..token.len() - 1].to_owned());
    candidates.push(format!("{token}x"));
    candidates.push(revoked.token().to_owned());
    // Another thread's token with its prefix swapped.
    let suffix = others.token().strip_prefix("knife_mcp_").unwrap();
    candidates.push(format!("KNIFE_MCP_{suffix}"));
    candidates.push(format!("knife_mcx_{suffix}"));
    candidates.push(suffix.to_owned());
    // Random strings (deterministic xorshift) of varied length and alphabet.
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    while candidates.len() < 1000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let len = (x % 80) as usize;
        let alphabet = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.~+/=";
        let mut y = x;
        let mut s = String::from(if x.is_multiple_of(3) {
            "knife_mcp_"
        } else {
            ""
        });
        for _ in 0..len {
            y = y
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            s.push(alphabet[(y >> 33) as usize % alphabet.len()] as char);
        }
        candidates.push(s);
    }
    assert_eq!(candidates.len(), 1000);
    let ping = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"});
    for c in &candidates {
        assert!(s.registry.resolve(c).is_none());
        let status = s
            .post(Some(&format!("Bearer {c}")), None, ping.clone())
            .await
            .status();
        assert_401(status, c);
    }
    // The real token still works.
    initialize(&s, &real.authorization_header).await;
}

#[tokio::test]
async fn thread_projection_shows_the_credential_state_never_the_token() {
    let s = serve().await;
    let t = s.thread("p").await;
    let url = format!("{}/api/threads/{}", s.base, t.id);
    let v: Value = s.http.get(&url).send().await.unwrap().json().await.unwrap();
    assert_eq!(v["mcp"]["active"], false);

    let minted: Value = s
        .http
        .post(format!("{}/api/threads/{}/mcp-token", s.base, t.id))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let header = minted["authorizationHeader"].as_str().unwrap().to_owned();
    assert!(header.starts_with("Bearer knife_mcp_"));
    assert!(minted["endpoint"].as_str().unwrap().ends_with("/mcp"));

    let text = s.http.get(&url).send().await.unwrap().text().await.unwrap();
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["mcp"]["active"], true);
    assert_eq!(
        v["mcp"]["capabilities"],
        json!(["preview", "orchestration", "worktree", "pull-requests"])
    );
    let token = header.strip_prefix("Bearer ").unwrap();
    assert!(!text.contains(token), "the token never appears");
}

#[tokio::test]
async fn worktree_tools_create_and_list_git_worktrees_of_the_callers_project() {
    let s = serve().await;
    let t = s.thread("repo").await;
    let root = s.dir.path().join("repo");
    let git = |args: &[&str]| {
        let out = std::process::Command::new("git")
            .arg("-C")
            .arg(&root)
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {out:?}");
    };
    git(&["init", "-q", "-b", "main"]);
    git(&[
        "-c",
        "user.name=t",
        "-c",
        "user.email=t@t",
        "commit",
        "-q",
        "--allow-empty",
        "-m",
        "init",
    ]);
    let auth = s.token(&t, &[McpCapability::Worktree]).authorization_header;
    let session = initialize(&s, &auth).await;

    let v = call(
        &s,
        &auth,
        &session,
        "worktree_create",
        json!({"branch": "feature/x"}),
    )
    .await;
    assert_eq!(v["result"]["isError"], false, "{v}");
    let created: Value =
        serde_json::from_str(v["result"]["content"][0]["text"].as_str().unwrap()).unwrap();
    let path = created["path"].as_str().unwrap().to_owned();
    // Without `path`: under the data dir's worktree folder, per project (SEC-06).
    let expected = s
        .dir
        .path()
        .join("data/worktrees")
        .join(t.project_id.as_str());
    assert!(
        path.starts_with(
            std::fs::canonicalize(s.dir.path())
                .unwrap()
                .to_str()
                .unwrap()
        ) && path.ends_with(&format!("{}/feature-x", t.project_id)),
        "{path} under {}",
        expected.display()
    );
    assert!(std::path::Path::new(&path).is_dir());

    let v = call(&s, &auth, &session, "worktree_list", json!({})).await;
    let listed: Value =
        serde_json::from_str(v["result"]["content"][0]["text"].as_str().unwrap()).unwrap();
    let branches: Vec<&str> = listed["worktrees"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|w| w["branch"].as_str())
        .collect();
    assert_eq!(branches, vec!["main", "feature/x"]);

    let v = call(
        &s,
        &auth,
        &session,
        "worktree_create",
        json!({"branch": "bad..name"}),
    )
    .await;
    assert_eq!(v["result"]["isError"], true, "{v}");
}

/// CHG-07: a thread with its own worktree lists and creates worktrees from there:
/// `current` marks its worktree, and a new worktree without `base` starts from its
/// branch (not from the project's HEAD).
#[tokio::test]
async fn chg_07_worktree_tools_of_a_worktree_thread_work_from_its_worktree() {
    let s = serve().await;
    let mut t = s.thread("repo").await;
    let root = s.dir.path().join("repo");
    let git = |dir: &std::path::Path, args: &[&str]| {
        let out = std::process::Command::new("git")
            .arg("-C")
            .arg(dir)
            .args(["-c", "user.name=t", "-c", "user.email=t@t"])
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {out:?}");
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    };
    git(&root, &["init", "-q", "-b", "main"]);
    git(&root, &["commit", "-q", "--allow-empty", "-m", "init"]);
    // The thread's worktree (as knife makes it: under the data dir, branch knife/<id>).
    let wt_path = s
        .dir
        .path()
        .join("data/worktrees")
        .join(t.project_id.as_str())
        .join("t1");
    std::fs::create_dir_all(wt_path.parent().unwrap()).unwrap();
    git(
        &root,
        &[
            "worktree",
            "add",
            "-q",
            "-b",
            "knife/t1",
            wt_path.to_str().unwrap(),
        ],
    );
    git(
        &wt_path,
        &["commit", "-q", "--allow-empty", "-m", "work of the thread"],
    );
    let thread_head = git(&wt_path, &["rev-parse", "HEAD"]);
    t.worktree = Some(ThreadWorktree {
        path: std::fs::canonicalize(&wt_path)
            .unwrap()
            .display()
            .to_string(),
        branch: "knife/t1".into(),
        base_commit: git(&root, &["rev-parse", "HEAD"]),
    });
    s.store
        .write(vec![DomainEvent::new(
            t.updated_at,
            EventBody::ThreadUpdated(t.clone()),
        )])
        .await
        .unwrap();
    let auth = s.token(&t, &[McpCapability::Worktree]).authorization_header;
    let session = initialize(&s, &auth).await;
    let text = |v: &Value| -> Value {
        assert_eq!(v["result"]["isError"], false, "{v}");
        serde_json::from_str(v["result"]["content"][0]["text"].as_str().unwrap()).unwrap()
    };

    let listed = text(&call(&s, &auth, &session, "worktree_list", json!({})).await);
    let current: Vec<&str> = listed["worktrees"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|w| w["current"] == true)
        .filter_map(|w| w["branch"].as_str())
        .collect();
    assert_eq!(current, vec!["knife/t1"], "{listed}");

    let created = text(
        &call(
            &s,
            &auth,
            &session,
            "worktree_create",
            json!({"branch": "from-thread"}),
        )
        .await,
    );
    let new_path = std::path::PathBuf::from(created["path"].as_str().unwrap());
    assert_eq!(git(&new_path, &["rev-parse", "HEAD"]), thread_head);
}

#[tokio::test]
async fn thread_create_makes_a_child_of_the_caller_and_thread_read_returns_it() {
    let s = serve().await;
    let t = s.thread("p").await;
    let auth = s
        .token(&t, &[McpCapability::Orchestration])
        .authorization_header;
    let session = initialize(&s, &auth).await;

    let v = call(
        &s,
        &auth,
        &session,
        "thread_create",
        json!({"title": "helper"}),
    )
    .await;
    assert_eq!(v["result"]["isError"], false, "{v}");
    let created: Value =
        serde_json::from_str(v["result"]["content"][0]["text"].as_str().unwrap()).unwrap();
    let child = ThreadId::from(created["id"].as_str().unwrap());
    let row = s.store.get_thread(&child).await.unwrap().unwrap();
    assert_eq!(row.parent_thread_id.as_ref(), Some(&t.id));
    assert_eq!(row.project_id, t.project_id);
    assert_eq!(row.title, "helper");

    let v = call(
        &s,
        &auth,
        &session,
        "thread_read",
        json!({"thread_id": child}),
    )
    .await;
    let read: Value =
        serde_json::from_str(v["result"]["content"][0]["text"].as_str().unwrap()).unwrap();
    assert_eq!(read["id"], child.to_string());
    assert_eq!(read["messages"], json!([]));

    let v = call(&s, &auth, &session, "thread_read", json!({})).await;
    assert_eq!(v["result"]["isError"], true, "thread_id is required: {v}");
}

#[tokio::test]
async fn sec_08_delete_of_an_unknown_mcp_session_answers_404() {
    let s = serve().await;
    let t = s.thread("p").await;
    let auth = s
        .token(&t, &[McpCapability::Orchestration])
        .authorization_header;
    let session = initialize(&s, &auth).await;
    let delete = |id: String| {
        s.http
            .delete(format!("{}/mcp", s.base))
            .header("authorization", &auth)
            .header("mcp-session-id", id)
            .header("mcp-protocol-version", "2025-06-18")
            .send()
    };
    let unknown = delete("no-such-session".into()).await.unwrap();
    assert_eq!(unknown.status(), StatusCode::NOT_FOUND);
    // POST and GET with the same unknown id agree.
    let post = s
        .post(
            Some(&auth),
            Some("no-such-session"),
            json!({"jsonrpc": "2.0", "id": 2, "method": "ping"}),
        )
        .await;
    assert_eq!(post.status(), StatusCode::NOT_FOUND);
    // A live session is closed (2xx), and a second DELETE of it is then unknown.
    let first = delete(session.clone()).await.unwrap();
    assert!(first.status().is_success(), "{}", first.status());
    let again = delete(session).await.unwrap();
    assert_eq!(again.status(), StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn sec_06_worktree_create_refuses_paths_outside_the_project_and_data_dir() {
    let s = serve().await;
    let t = s.thread("repo").await;
    let root = s.dir.path().join("repo");
    for args in [
        vec!["init", "-q", "-b", "main"],
        vec![
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "commit",
            "-q",
            "--allow-empty",
            "-m",
            "init",
        ],
    ] {
        let out = std::process::Command::new("git")
            .arg("-C")
            .arg(&root)
            .args(&args)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
    }
    let auth = s.token(&t, &[McpCapability::Worktree]).authorization_header;
    let session = initialize(&s, &auth).await;
    let outside = s.dir.path().join("elsewhere");
    for (i, path) in [
        outside.display().to_string(),
        "../escape".to_owned(),
        "sub/../../escape2".to_owned(),
        "/tmp".to_owned(),
    ]
    .into_iter()
    .enumerate()
    {
        let v = call(
            &s,
            &auth,
            &session,
            "worktree_create",
            json!({"branch": format!("b{i}"), "path": path}),
        )
        .await;
        assert_eq!(v["result"]["isError"], true, "{path}: {v}");
        let text = v["result"]["content"][0]["text"].as_str().unwrap();
        assert!(text.contains("outside the project"), "{text}");
    }
    assert!(!outside.exists() && !s.dir.path().join("escape").exists());
    // Inside the project is fine.
    let v = call(
        &s,
        &auth,
        &session,
        "worktree_create",
        json!({"branch": "inside", "path": "wt/inside"}),
    )
    .await;
    assert_eq!(v["result"]["isError"], false, "{v}");
    assert!(root.join("wt/inside").is_dir());
}

#[tokio::test]
async fn turn_08_threads_search_finds_settled_items_of_the_callers_project_only() {
    let s = serve().await;
    let t = s.thread("p").await;
    let other = s.thread("q").await;
    let now = chrono::Utc::now();
    let item = |thread: &Thread, text: &str| {
        let run = RunId::for_thread(&thread.id, 1);
        DomainEvent::new(
            now,
            EventBody::TurnItemUpdated(TurnItem {
                id: TurnItemId::from(format!("item:{run}:1")),
                thread_id: thread.id.clone(),
                run_id: Some(run),
                provider_turn_id: None,
                ordinal: TurnItem::ordinal_in_run(1, 1),
                status: TurnItemStatus::Completed,
                started_at: Some(now),
                completed_at: Some(now),
                updated_at: now,
                kind: TurnItemKind::AssistantMessage {
                    text: text.into(),
                    streaming: false,
                },
            }),
        )
    };
    s.store
        .write(vec![
            item(&t, "the zeppelin config lives in retry.toml"),
            item(&other, "a zeppelin in another project"),
        ])
        .await
        .unwrap();
    let auth = s
        .token(&t, &[McpCapability::Orchestration])
        .authorization_header;
    let session = initialize(&s, &auth).await;
    let v = call(
        &s,
        &auth,
        &session,
        "threads_search",
        json!({"query": "zeppelin"}),
    )
    .await;
    assert_eq!(v["result"]["isError"], false, "{v}");
    let text = v["result"]["content"][0]["text"].as_str().unwrap();
    let found: Value = serde_json::from_str(text).unwrap();
    let hits = found["hits"].as_array().unwrap();
    assert_eq!(hits.len(), 1, "only the caller's project: {found}");
    assert_eq!(hits[0]["thread_id"], t.id.as_str());
    assert!(
        hits[0]["snippet"].as_str().unwrap().contains("[zeppelin]"),
        "{found}"
    );
    let v = call(&s, &auth, &session, "threads_search", json!({})).await;
    assert_eq!(v["result"]["isError"], true, "a query is required: {v}");
}
