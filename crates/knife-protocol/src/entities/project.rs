//! The project entity: a named workspace root on disk that threads run inside.
//! Upserted whole by `project.created` / `project.updated` events.

use crate::Timestamp;
use crate::ids::*;
use serde::{Deserialize, Serialize};

/// A named workspace root on disk. Threads run inside it; tools may not leave it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Project {
    /// Project id, `project_<uuid v7>`, as returned by `POST /api/projects`.
    pub id: ProjectId,
    /// Display name; defaults to the root folder's last path component.
    pub name: String,
    /// Absolute, canonical path of the workspace root.
    pub root: String,
    /// When the project was first registered.
    pub created_at: Timestamp,
    /// When the project row last changed.
    pub updated_at: Timestamp,
}
