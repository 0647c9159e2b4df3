// Contract case of Maintenance::import_events (SPEC.md SCALE-09): events keep their
// sequences (gaps included), rebuild folds them into the source's projections.

use super::StoreFactory;
use super::fixtures::*;
use crate::{StoreError, StreamFilter};
use knife_protocol::*;

/// A source log with a purged thread (a sequence gap), imported page by page into a
/// fresh store and rebuilt: the same events with the same sequences, the same
/// projections; later writes continue above the last sequence; an event at or below
/// the head is refused and writes nothing.
pub async fn scale_09_imported_events_keep_their_sequences_and_rebuild_to_the_same_projections(
    factory: &dyn StoreFactory,
) {
    let (_a, source) = temp_store(factory).await;
    source
        .write(vec![
            ev(EventBody::ProjectCreated(project("p", 1))),
            ev(EventBody::ThreadCreated(thread("gone", "p", 1))),
            ev_on(
                "gone",
                EventBody::RunCreated(run("gone", 1, RunStatus::Completed)),
            ),
        ])
        .await
        .unwrap();
    source
        .write(vec![
            ev(EventBody::ThreadCreated(thread("kept", "p", 2))),
            ev_on(
                "kept",
                EventBody::RunCreated(run("kept", 1, RunStatus::Running)),
            ),
            ev_on(
                "kept",
                EventBody::TurnItemUpdated(turn_item("kept", 1, 0, "hello")),
            ),
            ev(EventBody::ThreadDeleted {
                thread_id: ThreadId::from("gone"),
                deleted_at: ts(3),
            }),
        ])
        .await
        .unwrap();
    source.purge_deleted_threads().await.unwrap();
    let log = source
        .read_events(&StreamFilter::after(0), 1000)
        .await
        .unwrap();
    let sequences: Vec<u64> = log.iter().map(|e| e.sequence).collect();
    assert_eq!(sequences, [1, 4, 5, 6], "the purge left a gap");

    let (_b, copy) = temp_store(factory).await;
    for page in log.chunks(2) {
        copy.import_events(page.to_vec()).await.unwrap();
    }
    copy.rebuild().await.unwrap();
    assert_eq!(
        copy.read_events(&StreamFilter::after(0), 1000)
            .await
            .unwrap(),
        log
    );
    assert_eq!(
        copy.dump_projections().await.unwrap(),
        source.dump_projections().await.unwrap()
    );
    assert_eq!(copy.latest_sequence(None).await.unwrap(), 6);

    // Out of order: refused, nothing written.
    match copy.import_events(vec![log[1].clone()]).await {
        Err(StoreError::ImportOrder { sequence, head }) => assert_eq!((sequence, head), (4, 6)),
        other => panic!("expected ImportOrder, got {other:?}"),
    }
    // Ordinary writes continue above the imported head.
    let next = copy
        .write(vec![ev(EventBody::ThreadCreated(thread("new", "p", 9)))])
        .await
        .unwrap();
    assert_eq!(next[0].sequence, 7);
}
