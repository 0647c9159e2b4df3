// The real external agent runtimes ("peers") the opt-in peer suite drives, and
// the Codex app-server JSON schema check. Owns where an installed peer is found
// (`scripts/install-peers.sh`) and the small JSON Schema subset used to check
// serde types against `codex app-server generate-json-schema`.

//! Real peers for tests: where `scripts/install-peers.sh` put them, and the
//! Codex app-server protocol schema generated at test time.
//!
//! * [`Peer`] / [`Peer::bin`]: the binary of an installed peer, from
//!   `KNIFE_PEER_<NAME>_BIN` (e.g. `KNIFE_PEER_CODEX_BIN`), else
//!   `<peers dir>/<name>/node_modules/.bin/<program>` where the peers dir is
//!   `KNIFE_PEERS_DIR` or `~/.cache/knife-peers` (the script's default).
//! * [`CodexSchema::generate`] runs `codex app-server generate-json-schema
//!   --out <temp dir>` (offline, well under a second) and
//!   [`CodexSchema::check`] validates a JSON value (e.g. a serialised serde
//!   type of the codex driver) against one of its files, e.g.
//!   `v2/TurnStartParams.json` or `ServerRequest.json`. The schema is never
//!   committed: it comes from the installed binary each time.
//!
//! ```no_run
//! # fn demo() -> Result<(), knife_testkit::peers::PeerError> {
//! use knife_testkit::peers::CodexSchema;
//! let Some(schema) = CodexSchema::from_installed_codex()? else {
//!     eprintln!("codex is not installed: run scripts/install-peers.sh --only codex");
//!     return Ok(());
//! };
//! let params = serde_json::json!({"threadId": "t", "input": [{"type": "text", "text": "hi"}]});
//! schema.check("v2/TurnStartParams.json", &params)?;
//! # Ok(()) }
//! ```

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

/// One of the pinned peers of `scripts/install-peers.sh`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Peer {
    /// `@openai/codex` 0.169.0 (`codex app-server`).
    Codex,
    /// `@zed-industries/claude-agent-acp` 0.23.1 (ACP over stdio).
    ClaudeAgentAcp,
    /// `@google/gemini-cli` 0.61.0 (`gemini --acp`).
    Gemini,
    /// `opencode-ai` 1.18.33 (`opencode acp`).
    Opencode,
}

impl Peer {
    /// Every peer, in the install script's order.
    pub const ALL: [Peer; 4] = [
        Peer::Codex,
        Peer::ClaudeAgentAcp,
        Peer::Gemini,
        Peer::Opencode,
    ];

    /// The install script's name (`codex`, `claude-agent-acp`, `gemini`, `opencode`).
    pub fn name(self) -> &'static str {
        match self {
            Peer::Codex => "codex",
            Peer::ClaudeAgentAcp => "claude-agent-acp",
            Peer::Gemini => "gemini",
            Peer::Opencode => "opencode",
        }
    }

    /// The program name under `node_modules/.bin`.
    pub fn program(self) -> &'static str {
        match self {
            Peer::Codex => "codex",
            Peer::ClaudeAgentAcp => "claude-agent-acp",
            Peer::Gemini => "gemini",
            Peer::Opencode => "opencode",
        }
    }

    /// The env var that overrides the binary path (`KNIFE_PEER_CLAUDE_AGENT_ACP_BIN`, ...).
    pub fn bin_env(self) -> String {
        knife_prereqs::peer_bin_env(self.name())
    }

    /// The installed binary: the [`Peer::bin_env`] variable when set (it must
    /// name an existing file), else the install script's location; `None`
    /// when the peer is not installed (found by [`knife_prereqs::peer_bin`]).
    pub fn bin(self) -> Option<PathBuf> {
        knife_prereqs::peer_bin(self.name()).ok()
    }
}

/// Where `scripts/install-peers.sh` installs: `KNIFE_PEERS_DIR`, else
/// `$HOME/.cache/knife-peers` (`/root/.cache/knife-peers` without `HOME`).
pub fn peers_dir() -> PathBuf {
    knife_prereqs::peers_dir()
}

/// A peer that could not be run, or a schema check that failed.
#[derive(Debug, thiserror::Error)]
pub enum PeerError {
    /// The program could not be started or a temp dir not made.
    #[error("cannot run {what}: {source}")]
    Io {
        /// What was attempted.
        what: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The program ran and failed.
    #[error("{what} failed ({status}): {stderr}")]
    Failed {
        /// The command.
        what: String,
        /// Its exit status.
        status: String,
        /// Its stderr (trimmed).
        stderr: String,
    },
    /// A schema file is missing or is not JSON.
    #[error("codex schema file {file}: {message}")]
    SchemaFile {
        /// The file, relative to the schema dir.
        file: String,
        /// What is wrong.
        message: String,
    },
    /// The value does not match the schema; one line per mismatch, each with a JSON path.
    #[error("value does not match codex schema {file}:\n{}", problems.join("\n"))]
    Mismatch {
        /// The schema file checked against.
        file: String,
        /// `$.path: what is wrong`, one per problem.
        problems: Vec<String>,
    },
}

/// The Codex app-server protocol schema, generated into a temp dir (removed on drop).
#[derive(Debug)]
pub struct CodexSchema {
    dir: tempfile::TempDir,
}

impl CodexSchema {
    /// Runs `<codex> app-server generate-json-schema --out <temp dir>`.
    ///
    /// Errors: [`PeerError::Io`] when it cannot start, [`PeerError::Failed`]
    /// when it exits non-zero.
    pub fn generate(codex: &Path) -> Result<Self, PeerError> {
        let io = |what: &str| {
            let what = what.to_owned();
            move |source| PeerError::Io { what, source }
        };
        let dir = tempfile::Builder::new()
            .prefix("codex-schema-")
            .tempdir()
            .map_err(io("a temp dir for the codex schema"))?;
        let what = format!(
            "{} app-server generate-json-schema --out {}",
            codex.display(),
            dir.path().display()
        );
        let output = Command::new(codex)
            .args(["app-server", "generate-json-schema", "--out"])
            .arg(dir.path())
            .output()
            .map_err(io(&what))?;
        if !output.status.success() {
            return Err(PeerError::Failed {
                what,
                status: output.status.to_string(),
                stderr: String::from_utf8_lossy(&output.stderr).trim().to_owned(),
            });
        }
        Ok(Self { dir })
    }

    /// [`CodexSchema::generate`] with the installed codex ([`Peer::Codex`]);
    /// `Ok(None)` when codex is not installed.
    pub fn from_installed_codex() -> Result<Option<Self>, PeerError> {
        Peer::Codex
            .bin()
            .map(|bin| Self::generate(&bin))
            .transpose()
    }

    /// The folder holding the schema files (`ClientRequest.json`,
    /// `ServerRequest.json`, `ServerNotification.json`, `v2/*.json`, ...).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// One schema file, parsed (`file` relative to [`CodexSchema::dir`]).
    pub fn load(&self, file: &str) -> Result<Value, PeerError> {
        let path = self.dir.path().join(file);
        let text = std::fs::read_to_string(&path).map_err(|e| PeerError::SchemaFile {
            file: file.to_owned(),
            message: e.to_string(),
        })?;
        serde_json::from_str(&text).map_err(|e| PeerError::SchemaFile {
            file: file.to_owned(),
            message: e.to_string(),
        })
    }

    /// Checks `value` against schema `file` (see [`check_schema`] for the subset).
    pub fn check(&self, file: &str, value: &Value) -> Result<(), PeerError> {
        let schema = self.load(file)?;
        let problems = check_schema(&schema, value);
        if problems.is_empty() {
            Ok(())
        } else {
            Err(PeerError::Mismatch {
                file: file.to_owned(),
                problems,
            })
        }
    }
}

/// Checks `value` against `root` (a draft-07 schema with local `definitions`),
/// returning one `$.path: problem` line per mismatch (empty when it matches).
///
/// The subset codex's generated schema uses: `$ref` to `#/definitions/...`,
/// `type` (one name or a list), `enum`, `const`, `properties`, `required`,
/// `additionalProperties: false` (unknown fields are errors), `items`,
/// `anyOf` / `oneOf` (any branch matching is enough; `oneOf` exclusivity is not
/// checked) and `allOf`. Other keywords (formats, bounds) are ignored.
pub fn check_schema(root: &Value, value: &Value) -> Vec<String> {
    let mut problems = Vec::new();
    check_at(root, root, value, "$", &mut problems, 0);
    problems
}

/// Depth cap for `$ref` chains (recursive definitions).
const MAX_DEPTH: usize = 64;

fn check_at(
    root: &Value,
    schema: &Value,
    value: &Value,
    path: &str,
    problems: &mut Vec<String>,
    depth: usize,
) {
    if depth > MAX_DEPTH {
        problems.push(format!("{path}: schema nesting deeper than {MAX_DEPTH}"));
        return;
    }
    let Some(schema) = schema.as_object() else {
        // `true` accepts everything, `false` nothing.
        if schema == &Value::Bool(false) {
            problems.push(format!("{path}: no value is allowed here"));
        }
        return;
    };
    if let Some(reference) = schema.get("$ref").and_then(Value::as_str) {
        match reference
            .strip_prefix("#/definitions/")
            .and_then(|name| root.get("definitions").and_then(|d| d.get(name)))
        {
            Some(target) => check_at(root, target, value, path, problems, depth + 1),
            None => problems.push(format!("{path}: unresolved $ref {reference}")),
        }
    }
    for key in ["anyOf", "oneOf"] {
        if let Some(branches) = schema.get(key).and_then(Value::as_array) {
            let mut best: Option<Vec<String>> = None;
            for branch in branches {
                let mut sub = Vec::new();
                check_at(root, branch, value, path, &mut sub, depth + 1);
                if sub.is_empty() {
                    best = None;
                    break;
                }
                if best.as_ref().is_none_or(|b| sub.len() < b.len()) {
                    best = Some(sub);
                }
            }
            if let Some(closest) = best {
                problems.push(format!(
                    "{path}: matches no branch of {key}; closest: {}",
                    closest.join("; ")
                ));
            }
        }
    }
    if let Some(all) = schema.get("allOf").and_then(Value::as_array) {
        for branch in all {
            check_at(root, branch, value, path, problems, depth + 1);
        }
    }
    if let Some(types) = schema.get("type") {
        let names: Vec<&str> = match types {
            Value::String(s) => vec![s.as_str()],
            Value::Array(a) => a.iter().filter_map(Value::as_str).collect(),
            _ => Vec::new(),
        };
        if !names.is_empty() && !names.iter().any(|t| has_type(value, t)) {
            problems.push(format!(
                "{path}: expected {}, got {}",
                names.join(" or "),
                type_name(value)
            ));
            return;
        }
    }
    if let Some(options) = schema.get("enum").and_then(Value::as_array)
        && !options.contains(value)
    {
        problems.push(format!("{path}: {value} is not one of {options:?}"));
    }
    if let Some(expected) = schema.get("const")
        && expected != value
    {
        problems.push(format!("{path}: expected {expected}, got {value}"));
    }
    if let Some(object) = value.as_object() {
        let properties = schema.get("properties").and_then(Value::as_object);
        if let Some(required) = schema.get("required").and_then(Value::as_array) {
            for name in required.iter().filter_map(Value::as_str) {
                if !object.contains_key(name) {
                    problems.push(format!("{path}: missing required field `{name}`"));
                }
            }
        }
        for (name, field) in object {
            let sub_path = format!("{path}.{name}");
            match properties.and_then(|p| p.get(name)) {
                Some(sub) => check_at(root, sub, field, &sub_path, problems, depth + 1),
                None => match schema.get("additionalProperties") {
                    Some(Value::Bool(false)) if properties.is_some() => {
                        problems.push(format!("{path}: unknown field `{name}`"));
                    }
                    Some(extra @ Value::Object(_)) => {
                        check_at(root, extra, field, &sub_path, problems, depth + 1);
                    }
                    _ => {}
                },
            }
        }
    }
    if let (Some(items), Some(array)) = (schema.get("items"), value.as_array()) {
        for (i, item) in array.iter().enumerate() {
            check_at(
                root,
                items,
                item,
                &format!("{path}[{i}]"),
                problems,
                depth + 1,
            );
        }
    }
}

fn has_type(value: &Value, name: &str) -> bool {
    match name {
        "null" => value.is_null(),
        "boolean" => value.is_boolean(),
        "object" => value.is_object(),
        "array" => value.is_array(),
        "string" => value.is_string(),
        "number" => value.is_number(),
        "integer" => value.is_i64() || value.is_u64(),
        _ => true,
    }
}

fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use serde_json::json;

    use super::*;

    fn schema() -> Value {
        json!({
            "type": "object",
            "required": ["threadId", "input"],
            "additionalProperties": false,
            "properties": {
                "threadId": {"type": "string"},
                "input": {"type": "array", "items": {"$ref": "#/definitions/UserInput"}},
                "approvalPolicy": {"anyOf": [{"$ref": "#/definitions/AskForApproval"}, {"type": "null"}]},
            },
            "definitions": {
                "UserInput": {"oneOf": [{
                    "type": "object", "required": ["type", "text"],
                    "properties": {"type": {"enum": ["text"], "type": "string"}, "text": {"type": "string"}},
                }]},
                "AskForApproval": {"enum": ["untrusted", "on-request", "never"], "type": "string"},
            },
        })
    }

    #[test]
    fn a_matching_value_has_no_problems() {
        let value = json!({"threadId": "t", "input": [{"type": "text", "text": "hi"}], "approvalPolicy": null});
        assert_eq!(check_schema(&schema(), &value), Vec::<String>::new());
        let value = json!({"threadId": "t", "input": [], "approvalPolicy": "never"});
        assert_eq!(check_schema(&schema(), &value), Vec::<String>::new());
    }

    #[test]
    fn each_mismatch_is_reported_with_its_path() {
        let value = json!({"threadId": 7, "input": [{"type": "image"}], "approvalPolicy": "sometimes", "extra": 1});
        let problems = check_schema(&schema(), &value);
        let text = problems.join("\n");
        assert!(
            text.contains("$.threadId: expected string, got integer"),
            "{text}"
        );
        assert!(
            text.contains("$.input[0]: matches no branch of oneOf"),
            "{text}"
        );
        assert!(text.contains("missing required field `text`"), "{text}");
        assert!(
            text.contains("$.approvalPolicy: matches no branch of anyOf"),
            "{text}"
        );
        assert!(text.contains("$: unknown field `extra`"), "{text}");
        let missing = check_schema(&schema(), &json!({}));
        assert_eq!(missing.len(), 2, "{missing:?}");
    }

    #[test]
    fn unresolved_refs_and_false_schemas_are_problems() {
        let root = json!({"properties": {"a": {"$ref": "#/definitions/Nope"}, "b": false}});
        let problems = check_schema(&root, &json!({"a": 1, "b": 2}));
        assert_eq!(problems.len(), 2, "{problems:?}");
    }

    #[test]
    fn peer_names_and_env_vars() {
        assert_eq!(
            Peer::ClaudeAgentAcp.bin_env(),
            "KNIFE_PEER_CLAUDE_AGENT_ACP_BIN"
        );
        assert_eq!(Peer::Codex.bin_env(), "KNIFE_PEER_CODEX_BIN");
        assert_eq!(Peer::ALL.map(Peer::name).len(), 4);
    }
}
