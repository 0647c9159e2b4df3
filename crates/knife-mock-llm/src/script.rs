// The mock LLM's script: what each request gets back, in order.
// Owns the TOML/JSON script format, its validation and its error messages.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Deserializer, Serialize};

/// An ordered list of scripted responses: request N (1-based) gets `responses[N-1]`.
///
/// When every response was served, the next request gets HTTP 500 with a JSON
/// error body saying the script is exhausted, unless `repeat_last` is true
/// (then the last response is served again, forever).
///
/// Build one in Rust with [`Script::new`] and the [`ScriptResponse`]
/// constructors, or load the file format of the [module docs](super) with
/// [`Script::load`], [`Script::from_toml_str`] or [`Script::from_json_str`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Script {
    /// The responses, served one per request in this order.
    #[serde(rename = "response", alias = "responses", default)]
    pub responses: Vec<ScriptResponse>,
    /// Serve the last response again once the script is exhausted (default false).
    #[serde(default)]
    pub repeat_last: bool,
    /// When set, a model request that declares no tools (an agent's side request:
    /// a session title, a summary) is answered with this text and does not use
    /// up a scripted response. Real agents (opencode) send such requests next to
    /// their main turn, in no fixed order. Default: unset (every request counts).
    #[serde(default)]
    pub no_tools_text: Option<String>,
}

/// One scripted response. Exactly one *kind* must be chosen by its fields:
///
/// | kind | fields |
/// | --- | --- |
/// | stream | `text`, `reasoning`, `tool_calls` (any combination), with `deltas`, `usage`, `finish_reason`, `cut` |
/// | HTTP body | `status` and/or `body` (e.g. an error: `status = 500`) |
/// | raw SSE | `raw` (bytes sent as they are), optional `cut` |
/// | SSE file | `sse_file` (relative to the script file), optional `cut` |
/// | bench | `bench_deltas = K` (see [`mod@super::bench`]) |
///
/// `headers` and `stream_deltas_ms` apply to every kind.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptResponse {
    /// Assistant text, streamed as `delta.content` pieces.
    pub text: Option<String>,
    /// Number of pieces to split `text` into (by characters); default: one piece per word.
    pub deltas: Option<usize>,
    /// Reasoning text, streamed as `delta.reasoning_content` pieces (by word) before the text.
    pub reasoning: Option<String>,
    /// Tool calls, streamed after the text; `finish_reason` becomes `tool_calls`.
    #[serde(default)]
    pub tool_calls: Vec<ToolCallSpec>,
    /// Token usage reported in the final usage chunk; default: about 4 characters per token.
    pub usage: Option<UsageSpec>,
    /// Overrides the finish reason (`stop`, or `tool_calls` when there are tool calls).
    pub finish_reason: Option<String>,
    /// Close the connection mid-event with no `[DONE]` (stream, raw and SSE-file kinds).
    #[serde(default)]
    pub cut: bool,
    /// HTTP status of a body response (default 200 when only `body` is given).
    pub status: Option<u16>,
    /// Body of a non-streaming response, sent as it is (`application/json`).
    pub body: Option<String>,
    /// Extra response headers, for every kind (e.g. `retry-after-ms`).
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// Raw SSE bytes, sent as they are (adversarial streams).
    pub raw: Option<String>,
    /// A `.sse` file whose bytes are sent as they are; relative paths resolve
    /// against the script file's folder (or the current directory for in-memory scripts).
    pub sse_file: Option<PathBuf>,
    /// Bench stream: this many text deltas, each a write-time marker, no delay.
    pub bench_deltas: Option<usize>,
    /// Delay between HTTP chunks of this response in ms; overrides the server's `chunk_delay`.
    pub stream_deltas_ms: Option<u64>,
}

/// One scripted tool call.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolCallSpec {
    /// Call id; default `call_N` with N counting every generated call of the server from 1.
    pub id: Option<String>,
    /// Function name.
    pub name: String,
    /// Arguments JSON text exactly as streamed (a TOML/JSON table is serialised to JSON text).
    #[serde(default = "empty_object", deserialize_with = "string_or_json")]
    pub arguments: String,
    /// Makes this a call of tool `name` on the MCP server of this name: the
    /// mock finds the name the agent gave that tool in the request's tool list
    /// (`mcp__<server>__<tool>` for Claude, a `mcp__<server>` namespace for
    /// codex, `<server>_<tool>` for opencode, ...) and calls it by that name.
    #[serde(default)]
    pub mcp_server: Option<String>,
    /// OpenAI Responses only: the `namespace` of the `function_call` item (set
    /// by `mcp_server` resolution; may be scripted directly).
    #[serde(default)]
    pub namespace: Option<String>,
}

/// Token counts of the usage chunk.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UsageSpec {
    /// `usage.prompt_tokens`.
    pub prompt_tokens: u64,
    /// `usage.completion_tokens`.
    pub completion_tokens: u64,
}

fn empty_object() -> String {
    "{}".to_owned()
}

fn string_or_json<'de, D: Deserializer<'de>>(de: D) -> Result<String, D::Error> {
    match serde_json::Value::deserialize(de)? {
        serde_json::Value::String(s) => Ok(s),
        other => Ok(other.to_string()),
    }
}

/// The kind a [`ScriptResponse`] resolved to (see its table).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Stream,
    Body,
    Raw,
    SseFile,
    Bench,
}

/// A script that could not be read, parsed or validated.
#[derive(Debug, thiserror::Error)]
pub enum ScriptError {
    /// The script file could not be read.
    #[error("cannot read mock-llm script {path}: {source}")]
    Read {
        /// The script file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// TOML syntax or a field of the wrong type/name; the message has the line and field.
    #[error("invalid mock-llm script {origin} (TOML): {message}")]
    Toml {
        /// The file path, or `<string>`.
        origin: String,
        /// The parser's message, with line, column and field.
        message: String,
    },
    /// JSON syntax or a field of the wrong type/name; the message has the line and column.
    #[error("invalid mock-llm script {origin} (JSON): {message}")]
    Json {
        /// The file path, or `<string>`.
        origin: String,
        /// The parser's message, with line and column.
        message: String,
    },
    /// A response whose fields do not make sense together.
    #[error("invalid mock-llm script {origin}: [[response]] #{index} (field `{field}`): {message}")]
    Invalid {
        /// The file path, or `<string>`.
        origin: String,
        /// 1-based index of the response in the script.
        index: usize,
        /// The field at fault.
        field: &'static str,
        /// What is wrong and how to fix it.
        message: String,
    },
}

impl ScriptResponse {
    /// A text answer streamed one word per delta.
    pub fn text(text: impl Into<String>) -> Self {
        Self {
            text: Some(text.into()),
            ..Self::default()
        }
    }

    /// One tool call (id generated) with `arguments` as JSON text.
    pub fn tool_call(name: impl Into<String>, arguments: impl Into<String>) -> Self {
        Self {
            tool_calls: vec![ToolCallSpec {
                id: None,
                name: name.into(),
                arguments: arguments.into(),
                ..ToolCallSpec::default()
            }],
            ..Self::default()
        }
    }

    /// A call of `tool` on the MCP server `server` (see [`ToolCallSpec::mcp_server`]).
    pub fn mcp_tool_call(
        server: impl Into<String>,
        tool: impl Into<String>,
        arguments: impl Into<String>,
    ) -> Self {
        Self {
            tool_calls: vec![ToolCallSpec {
                name: tool.into(),
                arguments: arguments.into(),
                mcp_server: Some(server.into()),
                ..ToolCallSpec::default()
            }],
            ..Self::default()
        }
    }

    /// A non-streaming response with this status and body (e.g. an error).
    pub fn http(status: u16, body: impl Into<String>) -> Self {
        Self {
            status: Some(status),
            body: Some(body.into()),
            ..Self::default()
        }
    }

    /// Raw SSE bytes sent as they are.
    pub fn raw(raw: impl Into<String>) -> Self {
        Self {
            raw: Some(raw.into()),
            ..Self::default()
        }
    }

    /// A bench stream of `deltas` write-time markers.
    pub fn bench(deltas: usize) -> Self {
        Self {
            bench_deltas: Some(deltas),
            ..Self::default()
        }
    }

    /// Adds a response header.
    #[must_use]
    pub fn with_header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.insert(name.into(), value.into());
        self
    }

    /// Sets `cut`: close the connection mid-event, no `[DONE]`.
    #[must_use]
    pub fn cut(mut self) -> Self {
        self.cut = true;
        self
    }

    /// Resolves the response kind, or says which field is wrong.
    pub(crate) fn kind(&self) -> Result<Kind, (&'static str, String)> {
        let stream = self.text.is_some() || self.reasoning.is_some() || !self.tool_calls.is_empty();
        let mut kinds: Vec<(&'static str, Kind)> = Vec::new();
        if stream {
            let field = if self.text.is_some() {
                "text"
            } else if self.reasoning.is_some() {
                "reasoning"
            } else {
                "tool_calls"
            };
            kinds.push((field, Kind::Stream));
        }
        if self.status.is_some() || self.body.is_some() {
            kinds.push((
                if self.body.is_some() {
                    "body"
                } else {
                    "status"
                },
                Kind::Body,
            ));
        }
        if self.raw.is_some() {
            kinds.push(("raw", Kind::Raw));
        }
        if self.sse_file.is_some() {
            kinds.push(("sse_file", Kind::SseFile));
        }
        if self.bench_deltas.is_some() {
            kinds.push(("bench_deltas", Kind::Bench));
        }
        let (field, kind) = match kinds.as_slice() {
            [] => {
                return Err((
                    "text",
                    "nothing to send: set one of text, reasoning, tool_calls, status/body, raw, \
                     sse_file or bench_deltas"
                        .to_owned(),
                ));
            }
            [one] => *one,
            [(a, _), (b, _), ..] => {
                return Err((
                    b,
                    format!("`{a}` and `{b}` cannot be combined in one response; split them"),
                ));
            }
        };
        if self.deltas == Some(0) {
            return Err(("deltas", "must be at least 1".to_owned()));
        }
        if self.deltas.is_some() && self.text.is_none() {
            return Err(("deltas", "only applies to `text`".to_owned()));
        }
        if self.cut && matches!(kind, Kind::Body | Kind::Bench) {
            return Err((
                "cut",
                format!("`cut` does not apply to a `{field}` response"),
            ));
        }
        if let Some(status) = self.status
            && !(100..=999).contains(&status)
        {
            return Err(("status", format!("{status} is not an HTTP status code")));
        }
        if self.tool_calls.iter().any(|c| c.name.is_empty()) {
            return Err(("tool_calls", "every tool call needs a `name`".to_owned()));
        }
        Ok(kind)
    }
}

impl Script {
    /// A script serving `responses` in order (not repeating the last).
    pub fn new(responses: Vec<ScriptResponse>) -> Self {
        Self {
            responses,
            repeat_last: false,
            no_tools_text: None,
        }
    }

    /// Sets `repeat_last`.
    #[must_use]
    pub fn repeat_last(mut self, repeat: bool) -> Self {
        self.repeat_last = repeat;
        self
    }

    /// Sets `no_tools_text`: requests that declare no tools get this text and
    /// do not use up a scripted response.
    #[must_use]
    pub fn no_tools_text(mut self, text: impl Into<String>) -> Self {
        self.no_tools_text = Some(text.into());
        self
    }

    /// Parses the TOML script format; relative `sse_file` paths stay relative to the cwd.
    ///
    /// Errors: [`ScriptError::Toml`] (with line, column and field) or [`ScriptError::Invalid`].
    pub fn from_toml_str(text: &str) -> Result<Self, ScriptError> {
        Self::parse_toml(text, "<string>")
    }

    /// Parses the JSON form of the script format (`{"response": [...], "repeat_last": false}`).
    ///
    /// Errors: [`ScriptError::Json`] (with line and column) or [`ScriptError::Invalid`].
    pub fn from_json_str(text: &str) -> Result<Self, ScriptError> {
        Self::parse_json(text, "<string>")
    }

    /// Loads a script file: JSON when the extension is `.json`, TOML otherwise.
    /// Relative `sse_file` paths are resolved against the file's folder, and each
    /// must exist.
    pub fn load(path: &Path) -> Result<Self, ScriptError> {
        let text = std::fs::read_to_string(path).map_err(|source| ScriptError::Read {
            path: path.to_owned(),
            source,
        })?;
        let origin = path.display().to_string();
        let is_json = path
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("json"));
        let mut script = if is_json {
            Self::parse_json(&text, &origin)?
        } else {
            Self::parse_toml(&text, &origin)?
        };
        let base = path.parent().unwrap_or_else(|| Path::new("."));
        for (i, response) in script.responses.iter_mut().enumerate() {
            if let Some(file) = &response.sse_file {
                let resolved = if file.is_relative() {
                    base.join(file)
                } else {
                    file.clone()
                };
                if !resolved.is_file() {
                    return Err(ScriptError::Invalid {
                        origin,
                        index: i + 1,
                        field: "sse_file",
                        message: format!(
                            "{} does not exist (relative paths resolve against the script's folder)",
                            resolved.display()
                        ),
                    });
                }
                response.sse_file = Some(resolved);
            }
        }
        Ok(script)
    }

    fn parse_toml(text: &str, origin: &str) -> Result<Self, ScriptError> {
        let script: Self = toml::from_str(text).map_err(|e| ScriptError::Toml {
            origin: origin.to_owned(),
            message: e.to_string().trim_end().to_owned(),
        })?;
        script.validate(origin)
    }

    fn parse_json(text: &str, origin: &str) -> Result<Self, ScriptError> {
        let script: Self = serde_json::from_str(text).map_err(|e| ScriptError::Json {
            origin: origin.to_owned(),
            message: e.to_string(),
        })?;
        script.validate(origin)
    }

    /// Checks every response resolves to exactly one kind.
    pub fn validate_all(&self) -> Result<(), ScriptError> {
        self.clone().validate("<script>").map(|_| ())
    }

    fn validate(self, origin: &str) -> Result<Self, ScriptError> {
        for (i, response) in self.responses.iter().enumerate() {
            if let Err((field, message)) = response.kind() {
                return Err(ScriptError::Invalid {
                    origin: origin.to_owned(),
                    index: i + 1,
                    field,
                    message,
                });
            }
        }
        Ok(self)
    }
}
