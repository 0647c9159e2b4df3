// The create commands against a real SQLite store: one project per folder (sequential,
// other spellings of the folder, concurrent creates) and the wording of their errors.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use knife_protocol::*;
use knife_runtime::commands::create_project;
use knife_runtime::*;
use knife_store::Store;

async fn store() -> (tempfile::TempDir, Store, SharedClock) {
    let dir = tempfile::tempdir().unwrap();
    let store = knife_store_sqlite::open(dir.path().join("knife.db"))
        .await
        .unwrap();
    (dir, store, Arc::new(SystemClock))
}

fn request(root: &std::path::Path) -> CreateProjectRequest {
    CreateProjectRequest {
        root: root.display().to_string(),
        name: None,
    }
}

#[tokio::test]
async fn creating_a_project_twice_on_one_folder_returns_the_first() {
    let (dir, store, clock) = store().await;
    let root = dir.path().join("proj");
    std::fs::create_dir(&root).unwrap();

    let (first, created) = create_project(&store, clock.as_ref(), request(&root))
        .await
        .unwrap();
    assert!(created);
    let (again, created) = create_project(
        &store,
        clock.as_ref(),
        CreateProjectRequest {
            root: root.display().to_string(),
            name: Some("another name".into()),
        },
    )
    .await
    .unwrap();
    assert!(!created, "the folder is already a project");
    assert_eq!(again, first, "the stored project is returned unchanged");

    // Other spellings of the same folder: `.` components and a symlink.
    let dotted = root.join(".").join("..").join("proj");
    let (p, created) = create_project(&store, clock.as_ref(), request(&dotted))
        .await
        .unwrap();
    assert!(!created);
    assert_eq!(p.id, first.id);
    let link = dir.path().join("link");
    std::os::unix::fs::symlink(&root, &link).unwrap();
    let (p, created) = create_project(&store, clock.as_ref(), request(&link))
        .await
        .unwrap();
    assert!(!created);
    assert_eq!(p.id, first.id);

    // A different folder is a different project.
    let other = dir.path().join("other");
    std::fs::create_dir(&other).unwrap();
    let (p, created) = create_project(&store, clock.as_ref(), request(&other))
        .await
        .unwrap();
    assert!(created);
    assert_ne!(p.id, first.id);
    assert_eq!(store.list_projects().await.unwrap().len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_creates_of_one_folder_end_with_one_project() {
    let (dir, store, clock) = store().await;
    let root = dir.path().join("proj");
    std::fs::create_dir(&root).unwrap();

    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let (store, clock, root) = (store.clone(), clock.clone(), root.clone());
            tokio::spawn(
                async move { create_project(&store, clock.as_ref(), request(&root)).await },
            )
        })
        .collect();
    let mut results = Vec::new();
    for t in tasks {
        results.push(t.await.unwrap().unwrap());
    }
    let ids: std::collections::BTreeSet<_> = results.iter().map(|(p, _)| p.id.clone()).collect();
    assert_eq!(ids.len(), 1, "every caller got the same project: {ids:?}");
    assert_eq!(results.iter().filter(|(_, created)| *created).count(), 1);
    assert_eq!(store.list_projects().await.unwrap().len(), 1);
}

#[test]
fn not_found_errors_point_at_things_that_exist() {
    let project = RuntimeError::ProjectNotFound(ProjectId::from("project_x")).to_string();
    assert!(project.contains("GET /api/projects"), "{project}");
    assert!(!project.contains("`knife projects`"), "{project}");
    let thread = RuntimeError::ThreadNotFound(ThreadId::from("thread_x")).to_string();
    assert!(thread.contains("knife threads list"), "{thread}");
    assert!(thread.contains("GET /api/threads"), "{thread}");
}

#[tokio::test]
async fn a_child_thread_names_an_existing_parent_of_the_same_project() {
    use knife_runtime::commands::create_thread;
    let (dir, store, clock) = store().await;
    let instance = ProviderInstanceId::from("fake");
    let mut projects = Vec::new();
    for name in ["a", "b"] {
        let root = dir.path().join(name);
        std::fs::create_dir(&root).unwrap();
        projects.push(
            create_project(&store, clock.as_ref(), request(&root))
                .await
                .unwrap()
                .0,
        );
    }
    let thread = |project: &Project, parent: Option<ThreadId>| CreateThreadRequest {
        project_id: project.id.clone(),
        title: None,
        provider_instance_id: None,
        model: None,
        parent_thread_id: parent,
        worktree: None,
    };
    let known = std::slice::from_ref(&instance);
    let parent = create_thread(
        &store,
        clock.as_ref(),
        thread(&projects[0], None),
        &instance,
        known,
    )
    .await
    .unwrap();
    let child = create_thread(
        &store,
        clock.as_ref(),
        thread(&projects[0], Some(parent.id.clone())),
        &instance,
        known,
    )
    .await
    .unwrap();
    assert_eq!(child.parent_thread_id, Some(parent.id.clone()));
    assert_eq!(
        store
            .get_thread(&child.id)
            .await
            .unwrap()
            .unwrap()
            .parent_thread_id,
        Some(parent.id.clone())
    );
    let elsewhere = create_thread(
        &store,
        clock.as_ref(),
        thread(&projects[1], Some(parent.id.clone())),
        &instance,
        known,
    )
    .await
    .unwrap_err();
    assert!(matches!(elsewhere, RuntimeError::Invalid(_)), "{elsewhere}");
    let missing = create_thread(
        &store,
        clock.as_ref(),
        thread(&projects[0], Some(ThreadId::from("thread_nope"))),
        &instance,
        known,
    )
    .await
    .unwrap_err();
    assert!(
        matches!(missing, RuntimeError::ThreadNotFound(_)),
        "{missing}"
    );
}
