//! The built-in agent's tools: the [`Tool`] trait, the [`ToolSet`] registry, the
//! [`ToolContext`] (project root confinement, policy) and the [`ToolError`]s the model sees.
//!
//! Read-only tools: `read`, `list`, `glob`, `grep`. Mutating tools (marked by
//! [`Tool::mutating`], so permissions default them to `ask`): `write`, `edit`, `bash`.
//!
//! File tools are confined to the project root: every requested path is resolved
//! against the root, and anything that lands outside it is refused with a
//! [`ToolError`] the model reads as the tool's result. `read`, `write`, `edit` and
//! `grep` open files by walking from a directory fd of the root (`openat2` with
//! `RESOLVE_BENEATH`, else an `O_NOFOLLOW` walk; see `beneath`), so a link swapped
//! between the check and the use cannot make them leave the root, and the
//! permission rules are checked again against the file actually opened (SEC-03). Walks use the `ignore` crate (so `.gitignore` is respected);
//! blocking filesystem work runs on tokio's blocking pool. `bash` runs in the root
//! in its own process group (see [`bash`]).
//!
//! Before a call runs, the agent loop asks [`ToolSet::permission`]: the context's
//! [`PermissionRules`](crate::permissions::PermissionRules) decide allow / ask / deny;
//! an `ask` is put to the user as a runtime request (`crate::approvals`) unless the
//! policy has an automatic [`ApprovalGate`](crate::permissions::ApprovalGate).

pub mod bash;
mod beneath;
pub mod diff;
mod edit;
mod glob;
mod grep;
mod list;
mod path;
mod policy;
mod process;
mod read;
mod write;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use knife_llm::ToolSpec;
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::permissions::{ApprovalRequest, ApprovalVerdict, DecisionSource, PermissionAction};

pub use bash::BashTool;
pub use edit::EditTool;
pub use glob::GlobTool;
pub use grep::GrepTool;
pub use list::ListTool;
pub use policy::{KNIFE_ENV_PREFIX, ToolPolicy};
pub use read::ReadTool;
pub use write::WriteTool;

/// A failure of one tool call. Its `Display` text is sent to the model as the
/// tool's result, so every message says what went wrong and what to do instead.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ToolError {
    /// The arguments object did not match the tool's JSON schema.
    #[error("invalid arguments for tool {tool}: {message}; check the tool's parameter schema")]
    InvalidArguments {
        /// The tool called.
        tool: String,
        /// What did not match (serde's message: field, expected type).
        message: String,
    },
    /// The requested path resolves (after following symlinks) outside the project root.
    #[error("path {path} is outside the project root {root}; use a path inside the project")]
    OutsideRoot {
        /// The path as the model gave it.
        path: String,
        /// The project root it must stay in.
        root: String,
    },
    /// Nothing exists at the requested path.
    #[error("path {path} does not exist in the project; use list or glob to find the right path")]
    NotFound {
        /// The path as the model gave it.
        path: String,
    },
    /// A file was expected but the path is a directory.
    #[error("path {path} is a directory; use list to see its entries")]
    IsDirectory {
        /// The path as the model gave it.
        path: String,
    },
    /// A directory was expected but the path is a file.
    #[error("path {path} is not a directory; use read to see a file")]
    NotADirectory {
        /// The path as the model gave it.
        path: String,
    },
    /// The path is neither a regular file nor a directory (a FIFO, socket or
    /// device): reading it could block or never end, so it is not opened.
    #[error(
        "path {path} is not a regular file (a FIFO, socket or device); only regular files can be read or searched"
    )]
    NotAFile {
        /// The path as the model gave it.
        path: String,
    },
    /// The file looks binary (it contains NUL bytes) and is not shown.
    #[error("path {path} looks like a binary file; read only shows text files")]
    Binary {
        /// The path as the model gave it.
        path: String,
    },
    /// A glob or regex pattern could not be compiled.
    #[error("invalid pattern {pattern:?}: {message}")]
    InvalidPattern {
        /// The pattern as given.
        pattern: String,
        /// The compiler's message.
        message: String,
    },
    /// An I/O error other than "not found".
    #[error("could not access {path}: {message}")]
    Io {
        /// The path being accessed.
        path: String,
        /// The OS error.
        message: String,
    },
    /// The model named a tool that does not exist.
    #[error("unknown tool {name}; available tools: {available}")]
    UnknownTool {
        /// The name the model used.
        name: String,
        /// The tool names it may use, comma-separated.
        available: String,
    },
    /// The call was cancelled (the turn was interrupted).
    #[error("Tool execution aborted")]
    Aborted,
    /// A `deny` permission rule (or a default) forbids this call; it did not run.
    #[error(
        "permission denied: {tool} on {subject:?} is not allowed in this project ({rule}); \
         do not retry it — choose another approach or ask the user to allow it"
    )]
    PermissionDenied {
        /// The tool called.
        tool: String,
        /// The call's subject the rules matched (root-relative path or command).
        subject: String,
        /// Which rule denied it, e.g. `rule 2`.
        rule: String,
    },
    /// The user (through the approval gate) refused this call; it did not run.
    #[error(
        "the user denied this {tool} call{}; do not retry it unchanged — ask the user how to proceed",
        .message.as_deref().map(|m| format!(": {m}")).unwrap_or_default()
    )]
    Rejected {
        /// The tool called.
        tool: String,
        /// The user's words with the denial, if any.
        message: Option<String>,
    },
    /// `edit`: `old_string` does not occur in the file.
    #[error(
        "old_string was not found in {path}; read the file and copy the exact text to replace, \
         including whitespace and indentation"
    )]
    StringNotFound {
        /// The file edited.
        path: String,
    },
    /// `edit`: `old_string` occurs more than once and `replace_all` is not set.
    #[error(
        "old_string occurs {count} times in {path}; include more surrounding lines to make it \
         unique, or set replace_all to true to replace every occurrence"
    )]
    AmbiguousMatch {
        /// The file edited.
        path: String,
        /// How many times `old_string` occurs.
        count: usize,
    },
    /// `edit`: `old_string` and `new_string` are the same, or `old_string` is empty.
    #[error("{0}")]
    InvalidEdit(String),
    /// `edit`: the file is not UTF-8 text.
    #[error(
        "{path} is not UTF-8 text; edit only changes text files (use write to replace it whole)"
    )]
    NotText {
        /// The file edited.
        path: String,
    },
    /// `write`: the path is a symlink whose target does not exist.
    #[error("{path} is a symlink to a missing file ({target}); write to the target path instead")]
    DanglingSymlink {
        /// The path written.
        path: String,
        /// Where the symlink points.
        target: String,
    },
    /// `bash`: the command ran past its timeout; its process group was killed.
    #[error(
        "the command timed out after {timeout_ms} ms and was killed (with every process it \
         started); pass a larger timeout_ms (at most {max_ms}) or run something shorter.\n{output}"
    )]
    CommandTimedOut {
        /// The timeout the command had, ms.
        timeout_ms: u64,
        /// The largest `timeout_ms` a call may ask for, ms.
        max_ms: u64,
        /// What the command printed before it was killed (capped).
        output: String,
    },
    /// `bash`: the shell could not be started.
    #[error("could not start the command: {0}")]
    Spawn(String),
    /// The tool's worker task failed (panicked); a bug in knife.
    #[error("the tool failed internally: {0}")]
    Internal(String),
}

/// What a tool call may touch: the canonical project root, the turn's
/// cancellation token (long walks and commands stop when it fires) and the
/// [`ToolPolicy`] (permissions, approvals, environment, process hooks). Cheap to clone.
#[derive(Clone, Debug)]
pub struct ToolContext {
    root: Arc<PathBuf>,
    cancel: CancellationToken,
    policy: Arc<ToolPolicy>,
    /// The thread the calls work for (recorded with the process groups they start).
    thread: Option<knife_protocol::ThreadId>,
    /// The permission subject this call was checked (and maybe approved) for; the
    /// file actually opened is checked against it (SEC-03, `check_opened`).
    checked_subject: Option<Arc<str>>,
    /// Where a call streams its output as it runs ([`Self::emit_output`]), if anyone
    /// listens (the agent loop records it as live deltas, LIVE-02).
    output: Option<tokio::sync::mpsc::UnboundedSender<String>>,
}

impl ToolContext {
    /// A context confined to `root`, which is canonicalized here (symlinks
    /// resolved), with the default [`ToolPolicy`].
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
            policy: Arc::new(ToolPolicy::default()),
            thread: None,
            checked_subject: None,
            output: None,
        })
    }

    /// The same context with `cancel` as cancellation token (one per turn).
    pub fn with_cancel(&self, cancel: CancellationToken) -> Self {
        Self {
            cancel,
            ..self.clone()
        }
    }

    /// The same context with another policy.
    pub fn with_policy(&self, policy: Arc<ToolPolicy>) -> Self {
        Self {
            policy,
            ..self.clone()
        }
    }

    /// The same context working for `thread` (process groups are recorded with it).
    pub fn with_thread(&self, thread: knife_protocol::ThreadId) -> Self {
        Self {
            thread: Some(thread),
            ..self.clone()
        }
    }

    /// The same context for one call whose permission was checked for `subject`
    /// (what [`ToolSet::permission`] evaluated and an approval, if any, was given
    /// for). A file tool that ends up opening another file (a link swapped since)
    /// then needs that file to be allowed outright (SEC-03).
    pub fn with_checked_subject(&self, subject: impl Into<Arc<str>>) -> Self {
        Self {
            checked_subject: Some(subject.into()),
            ..self.clone()
        }
    }

    /// The same context for one call whose output, as it runs, goes to `output` (in
    /// the order produced; the call's result is still what it returns).
    pub fn with_output(&self, output: tokio::sync::mpsc::UnboundedSender<String>) -> Self {
        Self {
            output: Some(output),
            ..self.clone()
        }
    }

    /// Hands `text` (more of the running call's output, whole UTF-8 characters) to
    /// the listener set by [`Self::with_output`]; nothing when none listens.
    pub fn emit_output(&self, text: &str) {
        if let Some(output) = &self.output
            && !text.is_empty()
        {
            let _ = output.send(text.to_owned());
        }
    }

    /// The subject set by [`Self::with_checked_subject`], if any.
    pub fn checked_subject(&self) -> Option<&str> {
        self.checked_subject.as_deref()
    }

    /// The thread the calls work for, if set ([`Self::with_thread`]).
    pub fn thread(&self) -> Option<&knife_protocol::ThreadId> {
        self.thread.as_ref()
    }

    /// The canonical project root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The policy of this context.
    pub fn policy(&self) -> &ToolPolicy {
        &self.policy
    }

    /// True once the turn that owns this context was cancelled.
    pub fn is_cancelled(&self) -> bool {
        self.cancel.is_cancelled()
    }

    /// Completes when the turn that owns this context is cancelled.
    pub async fn cancelled(&self) {
        self.cancel.cancelled().await
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

    /// Whether the tool changes the project or runs programs (`write`, `edit`,
    /// `bash`). Permissions default mutating tools to `ask`, the others to `allow`.
    fn mutating(&self) -> bool {
        false
    }

    /// The call's subject for permission rules: its primary argument. The default
    /// is the `path` argument (`.` when absent) as a root-relative path
    /// ([`ToolContext::subject_path`]); `bash` overrides it with the command.
    fn permission_subject(&self, args: &Value, ctx: &ToolContext) -> String {
        let path = args.get("path").and_then(Value::as_str).unwrap_or(".");
        ctx.subject_path(path)
    }

    /// Checked before any permission rule: a call the tool would refuse for leaving
    /// the project root is refused at once ([`ToolError::OutsideRoot`]), so nobody
    /// is asked to approve it. The default checks the `path` argument; other
    /// errors (missing file, …) are left to [`Self::execute`].
    fn confinement(&self, args: &Value, ctx: &ToolContext) -> Result<(), ToolError> {
        match args.get("path").and_then(Value::as_str) {
            Some(path) => match ctx.resolve_for_write(path) {
                Err(e @ ToolError::OutsideRoot { .. }) => Err(e),
                _ => Ok(()),
            },
            None => Ok(()),
        }
    }
}

/// The permission rules' verdict on one call ([`ToolSet::permission`]).
#[derive(Clone, Debug, PartialEq)]
pub enum Permission {
    /// Run it.
    Allowed,
    /// Do not run it; the error is the call's result.
    Denied(ToolError),
    /// Ask the approval gate with this request first.
    Ask(ApprovalRequest),
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
        Self::standard()
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

    /// Every built-in tool: the read-only ones plus `write`, `edit` and `bash`.
    pub fn standard() -> Self {
        let mut set = Self::read_only();
        set.insert(Arc::new(WriteTool));
        set.insert(Arc::new(EditTool));
        set.insert(Arc::new(BashTool));
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

    /// Whether tool `name` is registered and mutating (see [`Tool::mutating`]).
    pub fn is_mutating(&self, name: &str) -> bool {
        self.tools.get(name).is_some_and(|t| t.mutating())
    }

    /// What the permission rules of `ctx` say about one call (no waiting):
    /// [`Permission::Allowed`], [`Permission::Denied`] (a `deny` rule, or a path
    /// outside the project root ([`Tool::confinement`]); the error is the call's
    /// result) or [`Permission::Ask`] with the request to put to
    /// the approval gate. An unknown tool is allowed (its [`Self::execute`]
    /// reports it).
    pub fn permission(
        &self,
        call_id: &str,
        name: &str,
        args: &Value,
        ctx: &ToolContext,
    ) -> Permission {
        self.permission_for(call_id, name, args, ctx).0
    }

    /// [`Self::permission`] and the subject it was decided for (`None` for an
    /// unknown tool or a call refused by confinement): what the agent loop passes
    /// to [`ToolContext::with_checked_subject`] so the tool checks the file it
    /// really opens against it (SEC-03).
    pub fn permission_for(
        &self,
        call_id: &str,
        name: &str,
        args: &Value,
        ctx: &ToolContext,
    ) -> (Permission, Option<String>) {
        let Some(tool) = self.tools.get(name) else {
            return (Permission::Allowed, None);
        };
        if let Err(e) = tool.confinement(args, ctx) {
            return (Permission::Denied(e), None);
        }
        let subject = tool.permission_subject(args, ctx);
        let verdict = self.verdict(call_id, name, tool.as_ref(), args, ctx, subject.clone());
        (verdict, Some(subject))
    }

    fn verdict(
        &self,
        call_id: &str,
        name: &str,
        tool: &dyn Tool,
        args: &Value,
        ctx: &ToolContext,
        subject: String,
    ) -> Permission {
        let decision = ctx
            .policy()
            .permissions
            .evaluate(name, &subject, tool.mutating());
        let mut rule = match decision.source {
            DecisionSource::Rule(i) => format!("permission rule {i}"),
            DecisionSource::Default => "the default rule".to_owned(),
        };
        let mut action = decision.action;
        // A `bash` allow rule covers one plain command: `*` would otherwise let
        // `cargo *` allow `cargo build; curl x | sh`.
        let allows_everything = match decision.source {
            DecisionSource::Rule(i) => ctx
                .policy()
                .permissions
                .rule(i)
                .is_some_and(|r| r.pattern.chars().all(|c| c == '*')),
            DecisionSource::Default => false,
        };
        if name == "bash"
            && action == PermissionAction::Allow
            && !allows_everything
            && crate::permissions::has_shell_control(&subject)
        {
            action = PermissionAction::Ask;
            rule.push_str(
                " (allows a plain command only; this one chains, pipes, redirects or \
                 substitutes)",
            );
        }
        match action {
            PermissionAction::Allow => Permission::Allowed,
            PermissionAction::Deny => Permission::Denied(ToolError::PermissionDenied {
                tool: name.to_owned(),
                subject,
                rule,
            }),
            PermissionAction::Ask => Permission::Ask(ApprovalRequest {
                call_id: call_id.to_owned(),
                tool: name.to_owned(),
                subject,
                input: args.clone(),
                rule,
                diff: None,
            }),
        }
    }

    /// The permission check of one call, run by the agent loop before the call
    /// is marked running: [`Self::permission`], and for an `ask` the context's
    /// automatic approval gate ([`ToolPolicy::approvals`]) is awaited. The built-in
    /// agent's loop does not use this: it calls [`Self::permission`] and, without an
    /// automatic gate, asks the user with a runtime request (`crate::approvals`).
    ///
    /// Errors: [`ToolError::PermissionDenied`] for a `deny` rule,
    /// [`ToolError::Rejected`] when the gate refuses, or when the policy has no
    /// automatic gate (nobody to ask outside the agent loop).
    pub async fn authorize(
        &self,
        call_id: &str,
        name: &str,
        args: &Value,
        ctx: &ToolContext,
    ) -> Result<(), ToolError> {
        match self.permission(call_id, name, args, ctx) {
            Permission::Allowed => Ok(()),
            Permission::Denied(e) => Err(e),
            Permission::Ask(request) => {
                let tool = request.tool.clone();
                let Some(gate) = ctx.policy().approvals.as_ref() else {
                    return Err(ToolError::Rejected {
                        tool,
                        message: Some(
                            "no approval gate answers here; approvals are asked by the \
                             agent loop"
                                .into(),
                        ),
                    });
                };
                match gate.request(request).await {
                    ApprovalVerdict::Allow => Ok(()),
                    ApprovalVerdict::Deny { message } => Err(ToolError::Rejected { tool, message }),
                }
            }
        }
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
///
/// The permission rules apply to every entry as they do to a call naming it:
/// an entry whose subject (root-relative path, symlinks resolved, as
/// [`ToolContext::subject_path`]) a rule for `tool` denies — or asks about, since
/// nobody can be asked per entry — is withheld (a withheld directory is not
/// entered), and counted in the returned [`Withheld`].
pub(crate) fn walker(
    ctx: &ToolContext,
    tool: &'static str,
    start: &Path,
    max_depth: Option<usize>,
) -> (ignore::Walk, Withheld) {
    let withheld = Withheld::default();
    let mut builder = ignore::WalkBuilder::new(start);
    builder
        .hidden(false)
        .require_git(false)
        .follow_links(false)
        .max_depth(max_depth)
        .sort_by_file_name(std::cmp::Ord::cmp);
    if ctx.policy().permissions.restricts(tool) {
        let ctx = ctx.clone();
        let count = withheld.clone();
        builder.filter_entry(move |entry| {
            if entry.file_name() == ".git" {
                return false;
            }
            if entry.depth() == 0 {
                return true;
            }
            let subject = ctx.subject_path(&entry.path().to_string_lossy());
            let action = ctx
                .policy()
                .permissions
                .evaluate(tool, &subject, false)
                .action;
            if action == PermissionAction::Allow {
                return true;
            }
            count.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            false
        });
    } else {
        builder.filter_entry(|entry| entry.file_name() != ".git");
    }
    (builder.build(), withheld)
}

/// How many entries a [`walker`] withheld because of permission rules.
#[derive(Clone, Debug, Default)]
pub(crate) struct Withheld(Arc<std::sync::atomic::AtomicUsize>);

impl Withheld {
    /// The output footer naming the withheld entries ("" when none).
    pub(crate) fn note(&self) -> String {
        match self.0.load(std::sync::atomic::Ordering::Relaxed) {
            0 => String::new(),
            n => format!(
                "\n({n} entr{} withheld by permission rules; they are not shown or searched)",
                if n == 1 { "y" } else { "ies" }
            ),
        }
    }
}

/// Truncates `text` to at most `max_chars` characters, marking the cut.
pub(crate) fn truncate_chars(text: &str, max_chars: usize) -> String {
    match text.char_indices().nth(max_chars) {
        Some((byte, _)) => format!("{}… (line truncated)", &text[..byte]),
        None => text.to_owned(),
    }
}
