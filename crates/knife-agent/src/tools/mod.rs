//! The built-in agent's tools: the [`Tool`] trait, the [`ToolSet`] registry, the
//! [`ToolContext`] (project root confinement) and the [`ToolError`]s the model sees.
//!
//! Tools are read-only and confined to the project root: every requested path is
//! resolved against the root and canonicalized (symlinks resolved), and anything
//! that lands outside the canonical root is refused with a [`ToolError`] the model
//! reads as the tool's result. Walks use the `ignore` crate (so `.gitignore` is
//! respected); blocking filesystem work runs on tokio's blocking pool.

mod glob;
mod grep;
mod list;
mod path;
mod read;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use knife_llm::ToolSpec;
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

pub use glob::GlobTool;
pub use grep::GrepTool;
pub use list::ListTool;
pub use read::ReadTool;

/// A failure of one tool call. Its `Display` text is sent to the model as the
/// tool's result, so every message says what went wrong and what to do instead.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ToolError {
    /// The arguments object did not match the tool's JSON schema.
    #[error("invalid arguments for tool {tool}: {message}; check the tool's parameter schema")]
    InvalidArguments { tool: String, message: String },
    /// The requested path resolves (after following symlinks) outside the project root.
    #[error("path {path} is outside the project root {root}; use a path inside the project")]
    OutsideRoot { path: String, root: String },
    /// Nothing exists at the requested path.
    #[error("path {path} does not exist in the project; use list or glob to find the right path")]
    NotFound { path: String },
    /// A file was expected but the path is a directory.
    #[error("path {path} is a directory; use list to see its entries")]
    IsDirectory { path: String },
    /// A directory was expected but the path is a file.
    #[error("path {path} is not a directory; use read to see a file")]
    NotADirectory { path: String },
    /// The path is neither a regular file nor a directory (a FIFO, socket or
    /// device): reading it could block or never end, so it is not opened.
    #[error(
        "path {path} is not a regular file (a FIFO, socket or device); only regular files can be read or searched"
    )]
    NotAFile { path: String },
    /// The file looks binary (it contains NUL bytes) and is not shown.
    #[error("path {path} looks like a binary file; read only shows text files")]
    Binary { path: String },
    /// A glob or regex pattern could not be compiled.
    #[error("invalid pattern {pattern:?}: {message}")]
    InvalidPattern { pattern: String, message: String },
    /// An I/O error other than "not found".
    #[error("could not access {path}: {message}")]
    Io { path: String, message: String },
    /// The model named a tool that does not exist.
    #[error("unknown tool {name}; available tools: {available}")]
    UnknownTool { name: String, available: String },
    /// The call was cancelled (the turn was interrupted).
    #[error("Tool execution aborted")]
    Aborted,
    /// The tool's worker task failed (panicked); a bug in knife.
    #[error("the tool failed internally: {0}")]
    Internal(String),
}

/// What a tool call may touch: the canonical project root, plus the turn's
/// cancellation token (long walks stop early when it fires). Cheap to clone.
#[derive(Clone, Debug)]
pub struct ToolContext {
    root: Arc<PathBuf>,
    cancel: CancellationToken,
}

impl ToolContext {
    /// A context confined to `root`, which is canonicalized here (symlinks resolved).
    ///
    /// Errors: [`ToolError::NotFound`] / [`ToolError::Io`] when `root` cannot be
    /// canonicalized, [`ToolError::NotADirectory`] when it is not a directory.
    pub fn new(root: impl AsRef<Path>) -> Result<Self, ToolError> {
        let root = root.as_ref();
        let display = root.display().to_string();
        let canonical = std::fs::canonicalize(root).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => ToolError::NotFound {
                path: display.clone(),
            },
            _ => ToolError::Io {
                path: display.clone(),
                message: e.to_string(),
            },
        })?;
        if !canonical.is_dir() {
            return Err(ToolError::NotADirectory { path: display });
        }
        Ok(Self {
            root: Arc::new(canonical),
            cancel: CancellationToken::new(),
        })
    }

    /// The same root with `cancel` as cancellation token (one per turn).
    pub fn with_cancel(&self, cancel: CancellationToken) -> Self {
        Self {
            root: Arc::clone(&self.root),
            cancel,
        }
    }

    /// The canonical project root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// True once the turn that owns this context was cancelled.
    pub fn is_cancelled(&self) -> bool {
        self.cancel.is_cancelled()
    }
}

/// One tool the model can call.
#[async_trait::async_trait]
pub trait Tool: Send + Sync + 'static {
    /// The tool's name as the model calls it (`read`, `list`, …).
    fn name(&self) -> &'static str;
    /// Name, description and JSON-schema parameters sent to the model.
    fn spec(&self) -> ToolSpec;
    /// Runs the tool with the model's arguments object.
    ///
    /// Returns the text the model sees. Errors: a [`ToolError`], whose message the
    /// model sees instead; a tool error never fails the turn.
    async fn execute(&self, args: Value, ctx: &ToolContext) -> Result<String, ToolError>;
}

/// The tools of the built-in agent, by name.
#[derive(Clone)]
pub struct ToolSet {
    tools: BTreeMap<&'static str, Arc<dyn Tool>>,
}

impl std::fmt::Debug for ToolSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolSet")
            .field("tools", &self.tools.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl Default for ToolSet {
    fn default() -> Self {
        Self::read_only()
    }
}

impl ToolSet {
    /// The read-only tools: `read`, `list`, `glob`, `grep`.
    pub fn read_only() -> Self {
        let mut set = Self {
            tools: BTreeMap::new(),
        };
        set.insert(Arc::new(ReadTool));
        set.insert(Arc::new(ListTool));
        set.insert(Arc::new(GlobTool));
        set.insert(Arc::new(GrepTool));
        set
    }

    /// Adds (or replaces) a tool under its name.
    pub fn insert(&mut self, tool: Arc<dyn Tool>) {
        self.tools.insert(tool.name(), tool);
    }

    /// Tool names, sorted.
    pub fn names(&self) -> Vec<&'static str> {
        self.tools.keys().copied().collect()
    }

    /// Specs of every tool, sorted by name (sent with each model request).
    pub fn specs(&self) -> Vec<ToolSpec> {
        self.tools.values().map(|t| t.spec()).collect()
    }

    /// Runs tool `name`. Errors: [`ToolError::UnknownTool`] plus the tool's own errors.
    pub async fn execute(
        &self,
        name: &str,
        args: Value,
        ctx: &ToolContext,
    ) -> Result<String, ToolError> {
        match self.tools.get(name) {
            Some(tool) => tool.execute(args, ctx).await,
            None => Err(ToolError::UnknownTool {
                name: name.to_owned(),
                available: self.names().join(", "),
            }),
        }
    }
}

/// Parses the arguments object of tool `tool` into `T`.
pub(crate) fn parse_args<T: DeserializeOwned>(tool: &str, args: Value) -> Result<T, ToolError> {
    // Some models send `null` or nothing for tools whose parameters are all optional.
    let args = if args.is_null() {
        Value::Object(Default::default())
    } else {
        args
    };
    serde_json::from_value(args).map_err(|e| ToolError::InvalidArguments {
        tool: tool.to_owned(),
        message: e.to_string(),
    })
}

/// Runs blocking filesystem work on tokio's blocking pool.
///
/// The work is not interruptible once started; walkers poll
/// [`ToolContext::is_cancelled`] so an interrupted turn does not keep them busy.
pub(crate) async fn blocking<T, F>(f: F) -> Result<T, ToolError>
where
    F: FnOnce() -> Result<T, ToolError> + Send + 'static,
    T: Send + 'static,
{
    match tokio::task::spawn_blocking(f).await {
        Ok(result) => result,
        Err(e) if e.is_cancelled() => Err(ToolError::Aborted),
        Err(e) => Err(ToolError::Internal(e.to_string())),
    }
}

/// An `ignore` walker over `start` that respects `.gitignore` / `.ignore` files
/// (even outside a git repository), shows hidden files but skips `.git`, never
/// follows symlinks (so a walk cannot leave the root) and sorts by file name.
pub(crate) fn walker(start: &Path, max_depth: Option<usize>) -> ignore::Walk {
    let mut builder = ignore::WalkBuilder::new(start);
    builder
        .hidden(false)
        .require_git(false)
        .follow_links(false)
        .max_depth(max_depth)
        .sort_by_file_name(|a, b| a.cmp(b))
        .filter_entry(|entry| entry.file_name() != ".git");
    builder.build()
}

/// Truncates `text` to at most `max_chars` characters, marking the cut.
pub(crate) fn truncate_chars(text: &str, max_chars: usize) -> String {
    match text.char_indices().nth(max_chars) {
        Some((byte, _)) => format!("{}… (line truncated)", &text[..byte]),
        None => text.to_owned(),
    }
}
