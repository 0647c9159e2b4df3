//! Contract cases of full-text search (SPEC.md TURN-08): settled items and titles are
//! found, ranked, with snippets and ids; streaming items are not; query syntax is
//! never an error; a project filter, a cancelled item, a tombstone and a rebuild.

use knife_protocol::*;

use super::StoreFactory;
use super::fixtures::*;
use crate::SearchQuery;

fn query(text: &str, project: Option<&str>) -> SearchQuery {
    SearchQuery {
        text: text.into(),
        project: project.map(ProjectId::from),
        limit: 20,
    }
}

fn user_item(thread: &str, run: u32, n: u64, text: &str) -> TurnItem {
    let mut item = turn_item(thread, run, n, text);
    item.kind = TurnItemKind::UserMessage {
        text: text.into(),
        origin: MessageOrigin::User,
        description: None,
    };
    item
}

pub async fn turn_08_search_finds_settled_items_and_titles_ranked_with_snippets(
    factory: &dyn StoreFactory,
) {
    let (_guard, store) = temp_store(factory).await;
    let mut t1 = thread("t1", "p1", 1);
    t1.title = "Retry logic of the client".into();
    let t2 = thread("t2", "p2", 2);
    let mut streaming = turn_item("t1", 1, 2, "the backoff doubles after each retry");
    streaming.status = TurnItemStatus::Running;
    store
        .write(vec![
            ev(EventBody::ProjectCreated(project("p1", 1))),
            ev(EventBody::ProjectCreated(project("p2", 1))),
            ev(EventBody::ThreadCreated(t1.clone())),
            ev(EventBody::ThreadCreated(t2)),
            ev(EventBody::TurnItemUpdated(user_item(
                "t1",
                1,
                0,
                "where is the retry policy configured?",
            ))),
            ev(EventBody::TurnItemUpdated(streaming.clone())),
            ev(EventBody::TurnItemUpdated(turn_item(
                "t2",
                1,
                1,
                "unrelated words about caching",
            ))),
        ])
        .await
        .unwrap();

    let hits = store.search(&query("retry", None)).await.unwrap();
    let kinds: Vec<_> = hits
        .iter()
        .map(|h| (h.thread_id.as_str(), h.kind))
        .collect();
    assert_eq!(
        hits.len(),
        2,
        "the streaming item is not indexed yet: {kinds:?}"
    );
    assert!(kinds.contains(&("t1", SearchKind::Title)));
    assert!(kinds.contains(&("t1", SearchKind::UserMessage)));
    let user = hits
        .iter()
        .find(|h| h.kind == SearchKind::UserMessage)
        .unwrap();
    assert_eq!(
        user.item_id
            .as_ref()
            .map(knife_protocol::TurnItemId::as_str),
        Some("item:run:t1:1:0")
    );
    assert_eq!(
        user.run_id.as_ref().map(knife_protocol::RunId::as_str),
        Some("run:t1:1")
    );
    assert_eq!(user.project_id.as_str(), "p1");
    assert_eq!(user.thread_title, "Retry logic of the client");
    assert!(
        user.snippet.to_lowercase().contains("[retry]"),
        "{}",
        user.snippet
    );
    assert!(hits.windows(2).all(|w| w[0].score >= w[1].score), "ranked");

    // Settled: now indexed, in the transaction of its event.
    streaming.status = TurnItemStatus::Completed;
    if let TurnItemKind::AssistantMessage { streaming: s, .. } = &mut streaming.kind {
        *s = false;
    }
    store
        .write(vec![ev(EventBody::TurnItemUpdated(streaming.clone()))])
        .await
        .unwrap();
    let both = store.search(&query("backoff retry", None)).await.unwrap();
    assert_eq!(both.len(), 1, "every word must match: {both:?}");
    assert_eq!(both[0].kind, SearchKind::AssistantMessage);

    // Project filter; words in other projects stay out.
    assert!(
        store
            .search(&query("caching", Some("p1")))
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        store
            .search(&query("caching", Some("p2")))
            .await
            .unwrap()
            .len(),
        1
    );
    // Query syntax never reaches the engine as syntax.
    for raw in [
        "\"retry",
        "retry OR (",
        "NEAR(",
        "*",
        "-retry",
        "title:retry",
        "",
    ] {
        store
            .search(&query(raw, None))
            .await
            .unwrap_or_else(|e| panic!("{raw:?}: {e}"));
    }

    // A rebuild gives the same hits.
    let before = store.search(&query("retry", None)).await.unwrap();
    store.rebuild().await.unwrap();
    let after = store.search(&query("retry", None)).await.unwrap();
    let ids = |h: &[SearchHit]| {
        let mut v: Vec<_> = h.iter().map(|h| (h.item_id.clone(), h.kind)).collect();
        v.sort_by(|a, b| format!("{a:?}").cmp(&format!("{b:?}")));
        v
    };
    assert_eq!(ids(&before), ids(&after));

    // A cancelled item leaves the index; a deleted thread takes its documents along.
    streaming.status = TurnItemStatus::Cancelled;
    store
        .write(vec![ev(EventBody::TurnItemUpdated(streaming))])
        .await
        .unwrap();
    assert!(
        store
            .search(&query("backoff", None))
            .await
            .unwrap()
            .is_empty()
    );
    store
        .write(vec![ev(EventBody::ThreadDeleted {
            thread_id: ThreadId::from("t1"),
            deleted_at: ts(9),
        })])
        .await
        .unwrap();
    assert!(
        store
            .search(&query("retry", None))
            .await
            .unwrap()
            .is_empty()
    );
}

pub async fn turn_08_a_project_filter_finds_old_matches_behind_many_newer_ones(
    factory: &dyn StoreFactory,
) {
    let (_guard, store) = temp_store(factory).await;
    let mut events = vec![
        ev(EventBody::ProjectCreated(project("p1", 1))),
        ev(EventBody::ProjectCreated(project("p2", 1))),
        ev(EventBody::ThreadCreated(thread("old", "p1", 1))),
        ev(EventBody::ThreadCreated(thread("busy", "p2", 1))),
        ev(EventBody::TurnItemUpdated(turn_item(
            "old",
            1,
            1,
            "the first zeppelin",
        ))),
    ];
    // More newer matches in another project than a backend may rank at once.
    for n in 0..2100 {
        events.push(ev(EventBody::TurnItemUpdated(turn_item(
            "busy",
            1,
            n + 1,
            "another zeppelin",
        ))));
    }
    store.write(events).await.unwrap();
    let hits = store.search(&query("zeppelin", Some("p1"))).await.unwrap();
    assert_eq!(hits.len(), 1, "{hits:?}");
    assert_eq!(hits[0].thread_id.as_str(), "old");
    assert_eq!(
        store.search(&query("zeppelin", None)).await.unwrap().len(),
        20,
        "the limit"
    );
}
