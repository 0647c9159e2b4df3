// Contract cases of appended text (LIVE-03): `turn-item.appended` chunks fold into the
// item like the equivalent whole snapshots, and logs of whole snapshots still rebuild.

use std::collections::BTreeMap;

use super::StoreFactory;
use super::fixtures::*;
use crate::Store;
use knife_protocol::*;
use proptest::prelude::*;

/// A log written before LIVE-03 (checked in): only whole `turn-item.updated` snapshots,
/// one per persistence window of each streaming item, as the recorder wrote them (a
/// reasoning and an answer settled, a discarded attempt and its retry under the same
/// id, and a thread whose log ends mid-stream). Threads `t1`, `t2` of project `p1`.
pub const OLD_LOG: &str = include_str!("data/live-03-old-log.jsonl");

/// The events of [`OLD_LOG`].
pub fn old_log() -> Vec<DomainEvent> {
    OLD_LOG
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

async fn setup(store: &Store) {
    store
        .write(vec![
            ev(EventBody::ProjectCreated(project("p1", 0))),
            ev(EventBody::ThreadCreated(thread("t1", "p1", 0))),
            ev(EventBody::ThreadCreated(thread("t2", "p1", 0))),
        ])
        .await
        .unwrap();
}

async fn items_of(store: &Store, thread: &str) -> BTreeMap<TurnItemId, TurnItem> {
    store
        .thread_projection(&ThreadId::from(thread))
        .await
        .unwrap()
        .unwrap()
        .turn_items
        .into_iter()
        .map(|i| (i.id.clone(), i))
        .collect()
}

fn text(item: &TurnItem) -> &str {
    match &item.kind {
        TurnItemKind::AssistantMessage { text, .. } | TurnItemKind::Reasoning { text, .. } => text,
        other => panic!("not a text item: {other:?}"),
    }
}

/// Migration case: the old log folds, incrementally and by `rebuild`, to what the old
/// rule gives (each item is its last snapshot), and a new-shape tail continues an
/// item the old version left streaming.
pub async fn live_03_a_log_of_whole_snapshots_from_before_chunks_rebuilds_to_the_same_projections(
    factory: &dyn StoreFactory,
) {
    let (_g, store) = temp_store(factory).await;
    setup(&store).await;
    let events = old_log();
    assert_eq!(events.len(), 30);
    assert!(events.iter().all(|e| e.event_type() == "turn-item.updated"));
    for batch in events.chunks(4) {
        store.write(batch.to_vec()).await.unwrap();
    }
    // The old fold rule: last write wins, per item.
    let mut expected: BTreeMap<String, BTreeMap<TurnItemId, TurnItem>> = BTreeMap::new();
    for e in &events {
        let EventBody::TurnItemUpdated(i) = &e.body else {
            unreachable!()
        };
        expected
            .entry(i.thread_id.as_str().to_owned())
            .or_default()
            .insert(i.id.clone(), i.clone());
    }
    let incremental = store.dump_projections().await.unwrap();
    for t in ["t1", "t2"] {
        assert_eq!(
            items_of(&store, t).await,
            expected[t],
            "incremental fold of {t}"
        );
    }
    store.rebuild().await.unwrap();
    assert_eq!(store.dump_projections().await.unwrap(), incremental);
    for t in ["t1", "t2"] {
        assert_eq!(items_of(&store, t).await, expected[t], "rebuild of {t}");
    }
    let t1 = items_of(&store, "t1").await;
    let answer = &t1[&TurnItemId::from("item:provider-turn:run:t1:1:1:2")];
    assert!(text(answer).starts_with("Héllo wörld 🦀 — crash-safe sessions\n"));
    assert_eq!(answer.status, TurnItemStatus::Completed);
    let retry = &t1[&TurnItemId::from("item:provider-turn:run:t1:2:1:1")];
    assert_eq!(text(retry), "second try");

    // The new version continues t2's streaming item with chunks, then settles it.
    let t2 = items_of(&store, "t2").await;
    let (id, streaming) = t2
        .iter()
        .next()
        .map(|(k, v)| (k.clone(), v.clone()))
        .unwrap();
    let old_text = text(&streaming).to_owned();
    let chunk = TurnItemAppend {
        thread_id: ThreadId::from("t2"),
        run_id: streaming.run_id.clone(),
        item_id: id.clone(),
        ordinal: streaming.ordinal,
        field: DeltaField::Text,
        offset: old_text.len() as u64,
        text: "résumé ✓".into(),
        updated_at: ts(900),
    };
    store
        .write(vec![ev(EventBody::TurnItemAppended(chunk))])
        .await
        .unwrap();
    let after = items_of(&store, "t2").await;
    assert_eq!(text(&after[&id]), format!("{old_text}résumé ✓"));
    assert_eq!(after[&id].updated_at, ts(900));
    let incremental = store.dump_projections().await.unwrap();
    store.rebuild().await.unwrap();
    assert_eq!(store.dump_projections().await.unwrap(), incremental);
}

fn chunk(item: &TurnItem, offset: usize, text: &str, at: i64) -> DomainEvent {
    ev(EventBody::TurnItemAppended(TurnItemAppend {
        thread_id: item.thread_id.clone(),
        run_id: item.run_id.clone(),
        item_id: item.id.clone(),
        ordinal: item.ordinal,
        field: DeltaField::Text,
        offset: offset as u64,
        text: text.into(),
        updated_at: ts(at),
    }))
}

/// Chunks extend the row; a replayed chunk, a chunk with a gap and a chunk of an
/// unknown item change nothing, and the log keeps them as written.
pub async fn live_03_chunks_extend_the_item_and_a_replayed_or_gapped_chunk_changes_nothing(
    factory: &dyn StoreFactory,
) {
    let (_g, store) = temp_store(factory).await;
    setup(&store).await;
    let mut item = turn_item("t1", 1, 1, "Hé");
    item.status = TurnItemStatus::Running;
    item.kind = TurnItemKind::AssistantMessage {
        text: "Hé".into(),
        streaming: true,
    };
    store
        .write(vec![
            ev(EventBody::TurnItemUpdated(item.clone())),
            chunk(&item, 3, "llo", 5),
        ])
        .await
        .unwrap();
    store.write(vec![chunk(&item, 6, " 🦀", 6)]).await.unwrap();
    let rows = || async { items_of(&store, "t1").await };
    assert_eq!(text(&rows().await[&item.id]), "Héllo 🦀");
    let settled_dump = store.dump_projections().await.unwrap();
    // Replayed (already folded), a gap, inside a character, an unknown item.
    let mut stranger = item.clone();
    stranger.id = TurnItemId::from("item:none");
    store
        .write(vec![
            chunk(&item, 3, "llo", 7),
            chunk(&item, 40, "late", 8),
            chunk(&item, 2, "xxxxxxxxxxxxxxxx", 9),
            chunk(&stranger, 0, "who", 10),
        ])
        .await
        .unwrap();
    assert_eq!(text(&rows().await[&item.id]), "Héllo 🦀");
    assert_eq!(store.dump_projections().await.unwrap(), settled_dump);
    // The log holds every chunk as written, and rebuild folds it the same way.
    let appended = store
        .read_events(
            &crate::StreamFilter {
                thread_id: Some(ThreadId::from("t1")),
                after: 0,
                event_type: Some("turn-item.appended".into()),
            },
            100,
        )
        .await
        .unwrap();
    assert_eq!(appended.len(), 6);
    store.rebuild().await.unwrap();
    assert_eq!(store.dump_projections().await.unwrap(), settled_dump);
    // An overlapping chunk rewrites from its offset (the recorder never sends one).
    store
        .write(vec![chunk(&item, 6, "!!!!!!", 11)])
        .await
        .unwrap();
    assert_eq!(text(&rows().await[&item.id]), "Héllo!!!!!!");
}

/// One streamed item of the property: its durable windows, whether it settles.
#[derive(Clone, Debug)]
pub struct Stream {
    /// Reasoning instead of an answer.
    pub reasoning: bool,
    /// Text of each window (the first may be empty: a part-start snapshot).
    pub windows: Vec<String>,
    pub settles: bool,
}

/// The property's input: a few streams, the interleaving of their windows, batching.
#[derive(Clone, Debug)]
pub struct Streams {
    pub streams: Vec<Stream>,
    /// Which stream writes its next event (indices modulo the stream count).
    pub order: Vec<usize>,
    /// Batch sizes (cycled).
    pub batches: Vec<usize>,
}

fn window() -> impl Strategy<Value = String> {
    proptest::collection::vec(
        prop_oneof![Just("a"), Just("é"), Just("🦀"), Just(" ")],
        1..6,
    )
    .prop_map(|parts| parts.concat())
}

/// The generator: 1..4 streams of 1..8 windows.
pub fn streams() -> impl Strategy<Value = Streams> {
    let stream = (
        any::<bool>(),
        any::<bool>(),
        proptest::collection::vec(window(), 1..8),
        any::<bool>(),
    )
        .prop_map(|(reasoning, empty_start, mut windows, settles)| {
            if empty_start {
                windows.insert(0, String::new());
            }
            Stream {
                reasoning,
                windows,
                settles,
            }
        });
    (
        proptest::collection::vec(stream, 1..4),
        proptest::collection::vec(0usize..4, 40),
        proptest::collection::vec(1usize..6, 1..4),
    )
        .prop_map(|(streams, order, batches)| Streams {
            streams,
            order,
            batches,
        })
}

/// The two logs of `input`: whole snapshots at every window (the old shape), and the
/// new shape (a whole first state, chunks, a whole settled state).
fn logs(input: &Streams) -> (Vec<DomainEvent>, Vec<DomainEvent>) {
    let mut next = vec![0usize; input.streams.len()];
    let total: usize = input
        .streams
        .iter()
        .map(|s| s.windows.len() + usize::from(s.settles))
        .sum();
    let mut order = input.order.iter().cycle();
    let (mut old, mut new) = (Vec::new(), Vec::new());
    let mut at = 10;
    while old.len() < total {
        let Some(&pick) = order.next() else { break };
        // The picked stream, or the next one with events left.
        let Some(s) = (0..input.streams.len())
            .map(|k| (pick + k) % input.streams.len())
            .find(|&s| {
                next[s] < input.streams[s].windows.len() + usize::from(input.streams[s].settles)
            })
        else {
            break;
        };
        let stream = &input.streams[s];
        let step = next[s];
        next[s] += 1;
        at += 1;
        let upto = step.min(stream.windows.len() - 1);
        let whole: String = stream.windows[..=upto].concat();
        let settle = step == stream.windows.len();
        let mut item = turn_item("t1", 1, s as u64 + 1, &whole);
        item.updated_at = ts(at);
        item.status = if settle {
            TurnItemStatus::Completed
        } else {
            TurnItemStatus::Running
        };
        item.kind = if stream.reasoning {
            TurnItemKind::Reasoning {
                text: whole.clone(),
                streaming: !settle,
            }
        } else {
            TurnItemKind::AssistantMessage {
                text: whole.clone(),
                streaming: !settle,
            }
        };
        old.push(ev(EventBody::TurnItemUpdated(item.clone())));
        if step == 0 || settle {
            new.push(ev(EventBody::TurnItemUpdated(item)));
        } else {
            let before = stream.windows[..step].concat().len();
            new.push(ev(EventBody::TurnItemAppended(TurnItemAppend {
                thread_id: item.thread_id.clone(),
                run_id: item.run_id.clone(),
                item_id: item.id.clone(),
                ordinal: item.ordinal,
                field: if stream.reasoning {
                    DeltaField::Reasoning
                } else {
                    DeltaField::Text
                },
                offset: before as u64,
                text: stream.windows[step].clone(),
                updated_at: ts(at),
            })));
        }
    }
    (old, new)
}

async fn write_batched(store: &Store, events: &[DomainEvent], sizes: &[usize]) {
    let mut rest = events;
    for size in sizes.iter().cycle() {
        if rest.is_empty() {
            break;
        }
        let (batch, tail) = rest.split_at((*size).min(rest.len()));
        store.write(batch.to_vec()).await.unwrap();
        rest = tail;
    }
}

/// A dump without what differs by design between a chunk log and its snapshot log
/// (LIVE-03): the chunk rows, the `turn_items` rows of items still streaming (compared
/// whole through the reads instead), every item row's `version` and `last_sequence`
/// (they count whole snapshots). `settled`: the ids of settled items.
fn comparable(
    mut dump: BTreeMap<String, Vec<serde_json::Value>>,
    settled: &[TurnItemId],
) -> BTreeMap<String, Vec<serde_json::Value>> {
    let is_settled = |row: &serde_json::Value, key: &str| {
        row[key]
            .as_str()
            .is_some_and(|id| settled.iter().any(|s| s.as_str() == id))
    };
    dump.remove("turn_item_chunks");
    if let Some(rows) = dump.get_mut("turn_items") {
        rows.retain(|r| is_settled(r, "id"));
        for row in rows.iter_mut() {
            if let Some(o) = row.as_object_mut() {
                o.remove("version");
                o.remove("last_sequence");
            }
        }
    }
    dump
}

/// One property case: folding the chunk log (incrementally, in random batches, and
/// by `rebuild`) gives exactly the items of folding the equivalent snapshots, read
/// whole mid-stream and settled, and the same projections otherwise.
pub async fn check(factory: &dyn StoreFactory, input: Streams) {
    let (old, new) = logs(&input);
    assert_eq!(old.len(), new.len());
    let (_g1, snapshots) = temp_store(factory).await;
    setup(&snapshots).await;
    write_batched(&snapshots, &old, &input.batches).await;
    let (_g2, chunks) = temp_store(factory).await;
    setup(&chunks).await;
    write_batched(&chunks, &new, &input.batches).await;
    let expected_items = items_of(&snapshots, "t1").await;
    assert_eq!(
        items_of(&chunks, "t1").await,
        expected_items,
        "chunk fold differs from snapshot fold"
    );
    for (id, item) in &expected_items {
        assert_eq!(chunks.get_turn_item(id).await.unwrap().as_ref(), Some(item));
    }
    let settled: Vec<TurnItemId> = expected_items
        .values()
        .filter(|i| i.status == TurnItemStatus::Completed)
        .map(|i| i.id.clone())
        .collect();
    let incremental = chunks.dump_projections().await.unwrap();
    assert_eq!(
        comparable(incremental.clone(), &settled),
        comparable(snapshots.dump_projections().await.unwrap(), &settled),
        "chunk fold differs from snapshot fold"
    );
    chunks.rebuild().await.unwrap();
    assert_eq!(chunks.dump_projections().await.unwrap(), incremental);
}

/// LIVE-03 (the WAL grows O(text)): a chunk that continues its item is one row of
/// `turn_item_chunks` holding only the chunk's text; the item's row stays as the last
/// whole snapshot wrote it (a streaming item has no search document
/// at all: only settled items are indexed), reads return the whole text, and the next
/// whole snapshot (settling) folds everything back into the row.
pub async fn live_03_a_chunk_is_one_row_of_its_own_and_never_rewrites_the_item_row(
    factory: &dyn StoreFactory,
) {
    let (_g, store) = temp_store(factory).await;
    setup(&store).await;
    let mut item = turn_item("t1", 1, 1, "Hé");
    item.status = TurnItemStatus::Running;
    item.kind = TurnItemKind::AssistantMessage {
        text: "Hé".into(),
        streaming: true,
    };
    store
        .write(vec![ev(EventBody::TurnItemUpdated(item.clone()))])
        .await
        .unwrap();
    store.write(vec![chunk(&item, 3, "llo", 5)]).await.unwrap();
    store
        .write(vec![chunk(&item, 6, " wörld 🦀", 6)])
        .await
        .unwrap();
    let dump = store.dump_projections().await.unwrap();
    let row = &dump["turn_items"][0];
    assert_eq!(row["version"], 1, "a chunk rewrote the item row: {row}");
    let stored: TurnItem = serde_json::from_value(row["payload_json"].clone()).unwrap();
    assert_eq!(text(&stored), "Hé", "a chunk rewrote the item row");
    let rows: Vec<(u64, u64, &str)> = dump["turn_item_chunks"]
        .iter()
        .map(|r| {
            (
                r["start_byte"].as_u64().unwrap(),
                r["end_byte"].as_u64().unwrap(),
                r["text"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(rows, vec![(3, 6, "llo"), (6, 18, " wörld 🦀")]);
    assert!(
        !dump["search_docs"]
            .iter()
            .any(|d| d["id"] == item.id.as_str()),
        "a streaming item has no search document"
    );
    // Reads mid-stream: the whole text and the last chunk's `updated_at`.
    let whole = store.get_turn_item(&item.id).await.unwrap().unwrap();
    assert_eq!(text(&whole), "Héllo wörld 🦀");
    assert_eq!(whole.updated_at, ts(6));
    assert_eq!(items_of(&store, "t1").await[&item.id], whole);
    store.rebuild().await.unwrap();
    assert_eq!(store.dump_projections().await.unwrap(), dump);
    // Settling writes the item whole: the chunks go, the row and document hold it all.
    let mut settled = whole.clone();
    settled.status = TurnItemStatus::Completed;
    settled.kind = TurnItemKind::AssistantMessage {
        text: "Héllo wörld 🦀".into(),
        streaming: false,
    };
    store
        .write(vec![ev(EventBody::TurnItemUpdated(settled.clone()))])
        .await
        .unwrap();
    let dump = store.dump_projections().await.unwrap();
    assert!(dump["turn_item_chunks"].is_empty());
    assert_eq!(dump["turn_items"][0]["version"], 2);
    assert_eq!(
        store.get_turn_item(&item.id).await.unwrap().unwrap(),
        settled
    );
    let hits = store
        .search(&crate::SearchQuery {
            text: "wörld".into(),
            project: None,
            limit: 10,
        })
        .await
        .unwrap();
    assert_eq!(hits.len(), 1, "the settled text is searchable");
    store.rebuild().await.unwrap();
    assert_eq!(store.dump_projections().await.unwrap(), dump);
}

/// Runs [`check`] on a fresh current-thread runtime (proptest cases are synchronous).
pub fn run_check(factory: &dyn StoreFactory, input: Streams) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(check(factory, input));
}
