// Contract cases of one project per root folder: the fold refuses a second project on
// a root and rebuild folds unique-root logs unchanged.

use super::StoreFactory;
use super::fixtures::*;
use crate::StoreError;
use knife_protocol::*;

fn project_on(id: &str, root: &str) -> Project {
    Project {
        root: root.to_owned(),
        ..project(id, 1)
    }
}

fn created(p: Project) -> DomainEvent {
    DomainEvent::new(ts(1), EventBody::ProjectCreated(p))
}

pub async fn second_project_on_a_root_is_refused_and_nothing_of_its_batch_is_written(
    factory: &dyn StoreFactory,
) {
    let (_dir, store) = temp_store(factory).await;
    store
        .write(vec![created(project_on("p1", "/work/a"))])
        .await
        .unwrap();
    let before = store.latest_sequence(None).await.unwrap();

    let err = store
        .write(vec![
            created(project_on("p2", "/work/b")),
            created(project_on("p3", "/work/a")),
        ])
        .await
        .unwrap_err();
    match &err {
        StoreError::ProjectRootTaken { root, project_id } => {
            assert_eq!(root, "/work/a");
            assert_eq!(project_id.as_str(), "p1");
        }
        other => panic!("expected ProjectRootTaken, got {other}"),
    }
    assert!(err.to_string().contains("GET /api/projects"), "{err}");
    assert_eq!(store.latest_sequence(None).await.unwrap(), before);
    assert_eq!(store.list_projects().await.unwrap().len(), 1);

    // The holder itself may be updated (same id, same root).
    store
        .write(vec![DomainEvent::new(
            ts(2),
            EventBody::ProjectUpdated(project_on("p1", "/work/a")),
        )])
        .await
        .unwrap();
    let found = store.project_by_root("/work/a").await.unwrap().unwrap();
    assert_eq!(found.id.as_str(), "p1");
    assert!(store.project_by_root("/work/b").await.unwrap().is_none());
}

pub async fn rebuild_of_a_unique_root_log_keeps_every_project_and_its_root(
    factory: &dyn StoreFactory,
) {
    let (_dir, store) = temp_store(factory).await;
    for (id, root) in [("p1", "/r/1"), ("p2", "/r/2"), ("p3", "/r/3")] {
        store
            .write(vec![created(project_on(id, root))])
            .await
            .unwrap();
    }
    let before = store.list_projects().await.unwrap();
    let stats = store.rebuild().await.unwrap();
    assert_eq!(stats.events, 3);
    assert_eq!(store.list_projects().await.unwrap(), before);
    assert_eq!(
        store
            .project_by_root("/r/2")
            .await
            .unwrap()
            .unwrap()
            .id
            .as_str(),
        "p2"
    );
    // The constraint still holds after the rebuild.
    let err = store
        .write(vec![created(project_on("p4", "/r/3"))])
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::ProjectRootTaken { .. }), "{err}");
}
