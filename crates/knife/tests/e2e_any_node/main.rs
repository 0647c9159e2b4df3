// Process tests of SPEC.md SCALE-06 with two `knife serve` nodes on one PostgreSQL database:
// a message, a steer, an interrupt and an approval answer sent to node B reach node A's run
// (commands.rs); each node lists and closes every node's sessions (sessions.rs). Here: the
// two nodes and the helpers both share.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod commands;
#[path = "../common/mod.rs"]
mod common;
mod sessions;

use std::time::Duration;

use common::*;
use knife_protocol::*;
use knife_store::StreamFilter;
use knife_store_postgres::testing::cluster;
use reqwest::StatusCode;
use serde_json::{Value, json};

/// Lease length of the test nodes (the default 10 s would do; shorter keeps a failed
/// test's leftovers brief).
const LEASE_MS: u64 = 3000;

fn node_config(mock: &str, url: &str, node: &str) -> String {
    format!(
        "{}\n[store]\nurl = \"{url}\"\nnode_id = \"{node}\"\nlease_ms = {LEASE_MS}\n",
        config_toml(mock)
    )
}

/// Node A and node B on a fresh database of the test cluster, one project (A's folder).
struct Nodes {
    _mock: MockLlm,
    a: Server,
    b: Server,
    project: String,
    /// The database URL over the cluster's socket, for reading the log directly.
    url: String,
}

async fn two_nodes(script: &str) -> Nodes {
    let mock = MockLlm::script(script, &[]).await;
    let cluster = cluster().await;
    let db = cluster.fresh_database().await;
    let tcp = cluster.tcp_url(&db);
    let a = Server::start_with_config(&node_config(&mock.base_url(), &tcp, "node-a")).await;
    let b = Server::start_with_config(&node_config(&mock.base_url(), &tcp, "node-b")).await;
    let project = a.api.create_project(&a.project_dir()).await;
    Nodes {
        _mock: mock,
        a,
        b,
        project,
        url: cluster.url(&db),
    }
}

impl Nodes {
    async fn stop(mut self) {
        assert!(self.a.proc.terminate().await.success());
        assert!(self.b.proc.terminate().await.success());
    }

    /// The node holding `thread`'s lease now.
    async fn lease_node(&self, thread: &str) -> String {
        let store = knife_store_postgres::open(&self.url).await.unwrap();
        store
            .get_lease(&ThreadId::from(thread))
            .await
            .unwrap()
            .unwrap()
            .node
    }
}

/// Waits (asking `api`) until `thread`'s assistant text of the slow answer streams.
async fn wait_streaming(api: &Api, thread: &str) {
    poll_until("the slow answer to stream", RUN_TIMEOUT, || async {
        let p = api.projection(thread).await;
        p.turn_items
            .iter()
            .any(|i| {
                matches!(&i.kind, TurnItemKind::AssistantMessage { text, .. } if text.contains("slow"))
            })
            .then_some(())
    })
    .await;
}

/// Longest wait for a takeover after a node was paused: its lease runs out (3 s), and a
/// node paused inside an append holds every node's appends until the database drops its
/// session (5 s), on a loaded machine.
const TAKEOVER_TIMEOUT: Duration = Duration::from_secs(45);

/// Waits until `thread` has `runs` runs and none active.
async fn wait_settled(api: &Api, thread: &str, runs: usize) -> ThreadProjection {
    wait_settled_within(api, thread, runs, RUN_TIMEOUT).await
}

/// [`wait_settled`] for up to `timeout`.
async fn wait_settled_within(
    api: &Api,
    thread: &str,
    runs: usize,
    timeout: Duration,
) -> ThreadProjection {
    poll_until("the thread's runs to end", timeout, || async {
        let p = api.projection(thread).await;
        (p.runs.len() == runs
            && p.thread.active_run_id.is_none()
            && p.runs.iter().all(|r| r.status.is_terminal()))
        .then_some(p)
    })
    .await
}

/// `POST /api/threads/{thread}/messages` with `body`.
async fn message(api: &Api, thread: &str, body: Value) -> (StatusCode, Value) {
    api.post(&format!("/api/threads/{thread}/messages"), &body)
        .await
}

/// A message answer without what differs between two messages (entry id, time, text).
fn shape(answer: &Value) -> Value {
    let mut a = answer.clone();
    if let Some(q) = a.get_mut("queued").and_then(Value::as_object_mut) {
        q.remove("id");
        q.remove("queued_at");
        q.remove("text");
    }
    if let Some(o) = a.as_object_mut() {
        o.remove("position");
    }
    a
}

/// The user-message text of `run`.
fn user_text(p: &ThreadProjection, run: &RunId) -> String {
    p.turn_items
        .iter()
        .find_map(|i| match &i.kind {
            TurnItemKind::UserMessage { text, .. } if i.run_id.as_ref() == Some(run) => {
                Some(text.clone())
            }
            _ => None,
        })
        .unwrap_or_default()
}
