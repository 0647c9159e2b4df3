// SCALE-06 sessions across nodes: every node lists every node's sessions, and a close
// sent to another node's session is carried out there (or answered 409 when that node
// is dead).

use super::*;

/// One quick answer per thread.
const TWO_ANSWERS: &str = r#"
[[response]]
text = "answer on node A"

[[response]]
text = "answer on node B"
"#;

/// SCALE-06: `GET /api/sessions` on either node lists the sessions of every node, each
/// naming the node holding it: a thread run on A and one run on B give two sessions,
/// and A and B list the same two, their own as local (`remote: false`) and the other's
/// as `remote` from the store. `knife sessions list` shows the node. Closing the other
/// node's session at B is carried out by A (a `session.command` in the log, A's
/// `session.command_applied`) with the one-node answer: 200 `closed`, then 404 for a
/// second close; B's own is closed by B; neither node lists either afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(knife_has_postgres),
    ignore = "needs PostgreSQL (Debian package postgresql, or KNIFE_PG_BIN)"
)]
async fn scale_06_each_node_lists_every_node_s_sessions_and_closes_them_on_their_node() {
    let nodes = two_nodes(TWO_ANSWERS).await;
    let (a, b) = (&nodes.a.api, &nodes.b.api);
    let on_a = a.create_thread(&nodes.project).await;
    a.post_message(&on_a, "hello A").await;
    wait_settled(a, &on_a, 1).await;
    let on_b = b.create_thread(&nodes.project).await;
    b.post_message(&on_b, "hello B").await;
    wait_settled(b, &on_b, 1).await;

    // (session id, node, remote) of the session of `thread` as `api` lists it.
    let session_of = |list: &Value, thread: &str| -> (String, String, bool) {
        let s = list
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["threads"].as_array().unwrap().contains(&json!(thread)))
            .unwrap_or_else(|| panic!("no session of {thread} listed: {list}"));
        (
            s["provider_session_id"].as_str().unwrap().to_owned(),
            s["node"].as_str().unwrap().to_owned(),
            s["remote"].as_bool().unwrap(),
        )
    };
    let (s, from_a) = a.get("/api/sessions").await;
    assert_eq!(s, StatusCode::OK, "{from_a}");
    let (s, from_b) = b.get("/api/sessions").await;
    assert_eq!(s, StatusCode::OK, "{from_b}");
    let (a_session, node, remote) = session_of(&from_a, &on_a);
    assert_eq!((node.as_str(), remote), ("node-a", false), "{from_a}");
    let (b_session, node, remote) = session_of(&from_a, &on_b);
    assert_eq!((node.as_str(), remote), ("node-b", true), "{from_a}");
    assert_ne!(a_session, b_session);
    assert_eq!(
        session_of(&from_b, &on_a),
        (a_session.clone(), "node-a".into(), true),
        "{from_b}"
    );
    assert_eq!(
        session_of(&from_b, &on_b),
        (b_session.clone(), "node-b".into(), false),
        "{from_b}"
    );
    let ids = |list: &Value| {
        let mut ids: Vec<String> = list
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["provider_session_id"].as_str().unwrap().to_owned())
            .collect();
        ids.sort();
        ids
    };
    assert_eq!(
        ids(&from_a),
        ids(&from_b),
        "both nodes list the same sessions"
    );

    let url = nodes.b.proc.url();
    let listed = run_cli(nodes.b.path(), &["sessions", "list", "--server", &url]).await;
    assert!(listed.status.success(), "{}", listed.stderr);
    assert!(
        listed.stdout.contains("  node     node-a (another node"),
        "{}",
        listed.stdout
    );
    assert!(
        listed.stdout.contains("  node     node-b\n"),
        "{}",
        listed.stdout
    );

    let close = |id: &str| format!("/api/sessions/{}/close", urlencoding(id));
    let (s, closed) = b.post(&close(&a_session), &json!({})).await;
    assert_eq!(s, StatusCode::OK, "{closed}");
    assert_eq!(
        (
            closed["provider_session_id"].as_str(),
            closed["closed"].as_bool()
        ),
        (Some(a_session.as_str()), Some(true)),
        "{closed}"
    );
    let (s, again) = b.post(&close(&a_session), &json!({})).await;
    assert_eq!(s, StatusCode::NOT_FOUND, "{again}");
    let (s, closed) = b.post(&close(&b_session), &json!({})).await;
    assert_eq!(s, StatusCode::OK, "{closed}");
    for api in [a, b] {
        let (_, list) = api.get("/api/sessions").await;
        assert!(!ids(&list).contains(&b_session), "{list}");
        assert!(!ids(&list).contains(&a_session), "{list}");
    }
    // Through the log: B's command, A's answer; A's release record says stopped.
    let store = knife_store_postgres::open(&nodes.url).await.unwrap();
    let commands = store
        .read_events(&StreamFilter::after(0), 100_000)
        .await
        .unwrap()
        .into_iter()
        .filter_map(|e| match e.event.body {
            EventBody::SessionCommanded(c) => Some(format!("{} -> {}", c.from_node, c.node)),
            EventBody::SessionCommandApplied(a) => Some(format!("{} {:?}", a.node, a.outcome)),
            _ => None,
        })
        .collect::<Vec<_>>();
    assert_eq!(
        commands,
        ["node-b -> node-a", "node-a Closed"],
        "the first close went through the log, the second found the session stopped"
    );
    let record = store
        .get_provider_session(&ProviderSessionId::from(a_session.as_str()))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(record.status, SessionStatus::Stopped);
    nodes.stop().await;
}

/// SCALE-06, the no-answer case: a close sent to node B for a session of node A after A
/// died (SIGKILL) is written as a `session.command`, nobody answers it, and B says so
/// after `COMMAND_WAIT` with 409 `session_on_another_node` naming node A (not a hang, not
/// a false `closed`); the log holds the command and no answer. Once A is back with the
/// same node id (its old session died with it), a close of that session at B is 404.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(knife_has_postgres),
    ignore = "needs PostgreSQL (Debian package postgresql, or KNIFE_PG_BIN)"
)]
async fn scale_06_a_close_for_a_dead_node_s_session_is_409_after_the_wait_then_404_once_it_is_back()
{
    let mut nodes = two_nodes(TWO_ANSWERS).await;
    let on_a = nodes.a.api.create_thread(&nodes.project).await;
    nodes.a.api.post_message(&on_a, "hello A").await;
    wait_settled(&nodes.a.api, &on_a, 1).await;
    let (_, listed) = nodes.a.api.get("/api/sessions").await;
    let a_session = listed
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["threads"].as_array().unwrap().contains(&json!(on_a)))
        .and_then(|s| s["provider_session_id"].as_str())
        .unwrap_or_else(|| panic!("no session of {on_a} listed: {listed}"))
        .to_owned();
    assert!(!nodes.a.proc.kill_hard().await.success());

    let close = format!("/api/sessions/{}/close", urlencoding(&a_session));
    let asked = std::time::Instant::now();
    let (s, answer) = nodes.b.api.post(&close, &json!({})).await;
    let waited = asked.elapsed();
    assert_eq!(s, StatusCode::CONFLICT, "{answer}");
    assert_eq!(
        answer["error"]["code"], "session_on_another_node",
        "{answer}"
    );
    let message = answer["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("node-a") && message.contains("did not answer"),
        "{message}"
    );
    assert!(
        waited >= knife_runtime::COMMAND_WAIT,
        "answered after {waited:?}: B did not wait for A's answer"
    );
    let store = knife_store_postgres::open(&nodes.url).await.unwrap();
    let commands = || async {
        store
            .read_events(&StreamFilter::after(0), 100_000)
            .await
            .unwrap()
            .into_iter()
            .filter_map(|e| match e.event.body {
                EventBody::SessionCommanded(c) => Some(format!("{} -> {}", c.from_node, c.node)),
                EventBody::SessionCommandApplied(a) => Some(format!("{} {:?}", a.node, a.outcome)),
                _ => None,
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(
        commands().await,
        ["node-b -> node-a"],
        "a command, no answer"
    );

    // A is back (same node id, same data dir); the session died with the old process.
    nodes.a.respawn().await;
    let (s, gone) = nodes.b.api.post(&close, &json!({})).await;
    assert_eq!(s, StatusCode::NOT_FOUND, "{gone}");
    assert_eq!(gone["error"]["code"], "not_found", "{gone}");
    nodes.stop().await;
}

/// `id` as one URL path segment.
fn urlencoding(id: &str) -> String {
    id.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}
