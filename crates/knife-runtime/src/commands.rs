//! Commands that create projects and threads: validate input, then write the
//! `*.created` event through the store's single write path (one project per folder).

use std::path::Path;

use knife_protocol::*;
use knife_store::{Store, StoreError};

use crate::clock::Clock;
use crate::error::RuntimeError;

/// Registers the folder `request.root` as a project, or returns the project that
/// already has it: one project per folder.
///
/// `root` must be an existing directory; it is stored canonicalised (symlinks
/// resolved), and two spellings of one folder are the same project. Returns the
/// project and `true` when this call created it, `false` when the folder was already
/// a project (its stored name is kept; `request.name` is ignored then).
///
/// Concurrency: two creates of the same folder may both miss it on the first read;
/// the store refuses the second `project.created` ([`StoreError::ProjectRootTaken`],
/// UNIQUE index on the root), and the loser re-reads and returns the winner's project.
///
/// Refused (SEC-06, [`crate::bounds::refused_project_root`]): `/`, a home directory
/// itself, or a folder inside a system tree; over-long roots and names (SEC-08).
///
/// Errors: [`RuntimeError::Invalid`] naming the path; [`RuntimeError::Store`].
pub async fn create_project(
    store: &Store,
    clock: &dyn Clock,
    request: CreateProjectRequest,
) -> Result<(Project, bool), RuntimeError> {
    let raw = request.root.trim();
    if raw.is_empty() {
        return Err(RuntimeError::Invalid(
            "`root` must be the path of an existing directory".into(),
        ));
    }
    if let Some(m) = limits::over_bytes("root", raw, limits::PATH_MAX_BYTES) {
        return Err(RuntimeError::Invalid(m));
    }
    if let Some(m) = request
        .name
        .as_deref()
        .and_then(|n| limits::over_chars("name", n, limits::PROJECT_NAME_MAX_CHARS))
    {
        return Err(RuntimeError::Invalid(m));
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
    if let Some(why) = crate::bounds::refused_project_root(&root) {
        return Err(RuntimeError::Invalid(why));
    }
    let root_text = root.display().to_string();
    if let Some(existing) = store.project_by_root(&root_text).await? {
        return Ok((existing, false));
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
        root: root_text,
        created_at: now,
        updated_at: now,
    };
    let written = store
        .write(vec![DomainEvent::new(
            now,
            EventBody::ProjectCreated(project.clone()),
        )])
        .await;
    match written {
        Ok(_) => Ok((project, true)),
        // Lost the race to a concurrent create of the same folder: the winner's
        // project is committed (the store refused ours inside the same write lock).
        Err(StoreError::ProjectRootTaken { root, project_id }) => {
            match store.get_project(&project_id).await? {
                Some(winner) => Ok((winner, false)),
                // Unreachable while projects are never deleted; report the refusal.
                None => Err(StoreError::ProjectRootTaken { root, project_id }.into()),
            }
        }
        Err(e) => Err(e.into()),
    }
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
    if let Some(m) = request
        .model
        .as_deref()
        .and_then(|m| limits::over_chars("model", m, limits::MODEL_MAX_CHARS))
    {
        return Err(RuntimeError::Invalid(m));
    }
    if store.get_project(&request.project_id).await?.is_none() {
        return Err(RuntimeError::ProjectNotFound(request.project_id));
    }
    let instance = request
        .provider_instance_id
        .unwrap_or_else(|| default_instance.clone());
    if !known_instances.contains(&instance) {
        return Err(RuntimeError::ProviderInstanceNotFound {
            instance,
            known: if known_instances.is_empty() {
                "(none)".into()
            } else {
                known_instances
                    .iter()
                    .map(std::string::ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            },
        });
    }
    if let Some(parent) = &request.parent_thread_id {
        match store.get_thread(parent).await? {
            Some(p) if p.project_id == request.project_id => {}
            Some(_) => {
                return Err(RuntimeError::Invalid(format!(
                    "parent thread {parent} belongs to another project; pick a parent in project {}",
                    request.project_id
                )));
            }
            None => return Err(RuntimeError::ThreadNotFound(parent.clone())),
        }
    }
    let title = match request.title.as_deref().map(str::trim) {
        None | Some("") => None,
        Some(t) => Some(crate::lifecycle::check_title(t)?),
    };
    let now = clock.now();
    let thread = Thread {
        id: ThreadId::new(),
        project_id: request.project_id,
        untitled: title.is_none(),
        title: title.unwrap_or_else(|| UNTITLED_THREAD_TITLE.into()),
        provider_instance_id: instance,
        model: request.model.filter(|m| !m.trim().is_empty()),
        status: ThreadStatus::Idle,
        active_run_id: None,
        run_count: 0,
        last_error: None,
        created_at: now,
        updated_at: now,
        agent_status: None,
        claimed_at: None,
        resume_attempts: 0,
        parent_thread_id: request.parent_thread_id,
        worktree: None,
        queue: Default::default(),
        budget_raise: None,
        archived_at: None,
        forked_from: None,
    };
    store
        .write(vec![DomainEvent::new(
            now,
            EventBody::ThreadCreated(thread.clone()),
        )])
        .await?;
    Ok(thread)
}
