//! Commands that create projects and threads: validate input, then write the
//! `*.created` event through the store's single write path.

use std::path::Path;

use knife_protocol::*;
use knife_store::Store;

use crate::clock::Clock;
use crate::error::RuntimeError;

/// Creates a project rooted at `request.root` (must be an existing directory; stored
/// canonicalised, symlinks resolved). Errors: [`RuntimeError::Invalid`] naming the path.
pub async fn create_project(
    store: &Store,
    clock: &dyn Clock,
    request: CreateProjectRequest,
) -> Result<Project, RuntimeError> {
    let raw = request.root.trim();
    if raw.is_empty() {
        return Err(RuntimeError::Invalid(
            "`root` must be the path of an existing directory".into(),
        ));
    }
    let root = tokio::fs::canonicalize(Path::new(raw)).await.map_err(|e| {
        RuntimeError::Invalid(format!(
            "project root {raw} cannot be opened ({e}); create the folder or fix the path"
        ))
    })?;
    if !root.is_dir() {
        return Err(RuntimeError::Invalid(format!(
            "project root {} is not a directory; give the folder that holds the project",
            root.display()
        )));
    }
    let name = match request
        .name
        .map(|n| n.trim().to_owned())
        .filter(|n| !n.is_empty())
    {
        Some(n) => n,
        None => root
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "root".into()),
    };
    let now = clock.now();
    let project = Project {
        id: ProjectId::new(),
        name,
        root: root.display().to_string(),
        created_at: now,
        updated_at: now,
    };
    store
        .write(vec![DomainEvent::new(
            now,
            EventBody::ProjectCreated(project.clone()),
        )])
        .await?;
    Ok(project)
}

/// Creates an idle thread in an existing project. `provider_instance_id` defaults to
/// `default_instance`; it must be one of `known_instances`.
pub async fn create_thread(
    store: &Store,
    clock: &dyn Clock,
    request: CreateThreadRequest,
    default_instance: &ProviderInstanceId,
    known_instances: &[ProviderInstanceId],
) -> Result<Thread, RuntimeError> {
    if store.get_project(&request.project_id).await?.is_none() {
        return Err(RuntimeError::ProjectNotFound(request.project_id));
    }
    let instance = request
        .provider_instance_id
        .unwrap_or_else(|| default_instance.clone());
    if !known_instances.contains(&instance) {
        return Err(RuntimeError::ProviderInstanceNotFound {
            instance,
            known: known_instances
                .iter()
                .map(|i| i.to_string())
                .collect::<Vec<_>>()
                .join(", "),
        });
    }
    let now = clock.now();
    let thread = Thread {
        id: ThreadId::new(),
        project_id: request.project_id,
        title: request
            .title
            .map(|t| t.trim().to_owned())
            .filter(|t| !t.is_empty())
            .unwrap_or_else(|| "New thread".into()),
        provider_instance_id: instance,
        model: request.model.filter(|m| !m.trim().is_empty()),
        status: ThreadStatus::Idle,
        active_run_id: None,
        run_count: 0,
        last_error: None,
        created_at: now,
        updated_at: now,
    };
    store
        .write(vec![DomainEvent::new(
            now,
            EventBody::ThreadCreated(thread.clone()),
        )])
        .await?;
    Ok(thread)
}
