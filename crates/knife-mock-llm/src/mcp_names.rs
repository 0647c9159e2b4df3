// MCP tool-call naming for the mock LLM: which name (and namespace) a scripted
// `mcp_server` call gets, found in the tool list of the request it answers.
// Owns the per-agent naming conventions (codex, Claude, opencode, Gemini CLI).

use serde_json::Value;

use super::formats::ApiFormat;
use super::script::{ScriptResponse, ToolCallSpec};

/// One tool the request declares: its namespace (OpenAI Responses `namespace`
/// tools only) and its name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Declared {
    pub namespace: Option<String>,
    pub name: String,
}

/// Every tool the request declares, in order, for the request's format:
/// Chat Completions `tools[].function.name`, Anthropic `tools[].name`,
/// Responses `tools[].name` (and the `tools[]` inside a `namespace` tool),
/// Gemini `tools[].functionDeclarations[].name`.
pub(crate) fn declared_tools(format: ApiFormat, request: Option<&Value>) -> Vec<Declared> {
    let Some(tools) = request
        .and_then(|r| r.get("tools"))
        .and_then(Value::as_array)
    else {
        return Vec::new();
    };
    let name_of = |v: &Value, key: &str| v.get(key).and_then(Value::as_str).map(str::to_owned);
    let mut out = Vec::new();
    for tool in tools {
        match format {
            ApiFormat::ChatCompletions => {
                if let Some(name) = tool.get("function").and_then(|f| name_of(f, "name")) {
                    out.push(Declared {
                        namespace: None,
                        name,
                    });
                }
            }
            ApiFormat::AnthropicMessages => {
                if let Some(name) = name_of(tool, "name") {
                    out.push(Declared {
                        namespace: None,
                        name,
                    });
                }
            }
            ApiFormat::Responses => {
                let inner = tool.get("tools").and_then(Value::as_array);
                match (tool.get("type").and_then(Value::as_str), inner) {
                    (Some("namespace"), Some(inner)) => {
                        let namespace = name_of(tool, "name");
                        out.extend(inner.iter().filter_map(|t| {
                            name_of(t, "name").map(|name| Declared {
                                namespace: namespace.clone(),
                                name,
                            })
                        }));
                    }
                    _ => {
                        if let Some(name) = name_of(tool, "name") {
                            out.push(Declared {
                                namespace: None,
                                name,
                            });
                        }
                    }
                }
            }
            ApiFormat::Gemini => {
                let decls = tool.get("functionDeclarations").and_then(Value::as_array);
                out.extend(decls.into_iter().flatten().filter_map(|d| {
                    name_of(d, "name").map(|name| Declared {
                        namespace: None,
                        name,
                    })
                }));
            }
        }
    }
    out
}

/// Whether the request declares at least one tool (an agent's main turn) or
/// none (a side request such as title generation).
pub(crate) fn declares_tools(request: Option<&Value>) -> bool {
    request
        .and_then(|r| r.get("tools"))
        .and_then(Value::as_array)
        .is_some_and(|t| !t.is_empty())
}

/// The name (and namespace) of tool `tool` of MCP server `server` among the
/// declared tools. Tried in order: the agents' conventions
/// (`mcp__<server>__<tool>` Claude, namespace `mcp__<server>` + `<tool>` codex,
/// `<server>_<tool>` opencode, `mcp_<server>_<tool>`, `<server>__<tool>`), then
/// any declared name that mentions the server and ends with the tool, then the
/// bare tool name. When nothing matches: the format's convention (namespace
/// `mcp__<server>` for Responses, `mcp__<server>__<tool>` for Anthropic,
/// `<server>_<tool>` for Chat Completions, the bare tool for Gemini).
pub(crate) fn resolve(
    format: ApiFormat,
    declared: &[Declared],
    server: &str,
    tool: &str,
) -> Declared {
    let ns = format!("mcp__{server}");
    if let Some(d) = declared
        .iter()
        .find(|d| d.namespace.as_deref() == Some(ns.as_str()) && d.name == tool)
    {
        return d.clone();
    }
    let conventions = [
        format!("mcp__{server}__{tool}"),
        format!("{server}_{tool}"),
        format!("mcp_{server}_{tool}"),
        format!("{server}__{tool}"),
    ];
    let plain = |d: &&Declared| d.namespace.is_none();
    for candidate in &conventions {
        if let Some(d) = declared.iter().filter(plain).find(|d| &d.name == candidate) {
            return d.clone();
        }
    }
    let mentions = |d: &&Declared| {
        let whole = format!("{}{}", d.namespace.as_deref().unwrap_or(""), d.name);
        whole.contains(server) && d.name.ends_with(tool)
    };
    if let Some(d) = declared.iter().find(mentions) {
        return d.clone();
    }
    if let Some(d) = declared.iter().find(|d| d.name == tool) {
        return d.clone();
    }
    match format {
        ApiFormat::Responses => Declared {
            namespace: Some(ns),
            name: tool.to_owned(),
        },
        ApiFormat::AnthropicMessages => Declared {
            namespace: None,
            name: format!("mcp__{server}__{tool}"),
        },
        ApiFormat::ChatCompletions => Declared {
            namespace: None,
            name: format!("{server}_{tool}"),
        },
        ApiFormat::Gemini => Declared {
            namespace: None,
            name: tool.to_owned(),
        },
    }
}

/// The response with every `mcp_server` call renamed for this request
/// (`namespace` set for Responses, dropped for the other formats, which have none).
pub(crate) fn resolve_response(
    format: ApiFormat,
    request: Option<&Value>,
    response: &ScriptResponse,
) -> ScriptResponse {
    if response.tool_calls.iter().all(|c| c.mcp_server.is_none()) {
        return response.clone();
    }
    let declared = declared_tools(format, request);
    let mut resolved = response.clone();
    resolved.tool_calls = response
        .tool_calls
        .iter()
        .map(|call| match &call.mcp_server {
            None => call.clone(),
            Some(server) => {
                let found = resolve(format, &declared, server, &call.name);
                ToolCallSpec {
                    name: found.name,
                    namespace: found.namespace,
                    mcp_server: None,
                    ..call.clone()
                }
            }
        })
        .collect();
    resolved
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use serde_json::json;

    use super::*;

    fn plain(name: &str) -> Declared {
        Declared {
            namespace: None,
            name: name.into(),
        }
    }

    #[test]
    fn codex_namespace_tools_are_found() {
        let request = json!({"tools": [
            {"type": "function", "name": "exec_command"},
            {"type": "namespace", "name": "mcp__knife", "tools": [{"type": "function", "name": "whoami"}]},
        ]});
        let declared = declared_tools(ApiFormat::Responses, Some(&request));
        assert_eq!(declared.len(), 2);
        let got = resolve(ApiFormat::Responses, &declared, "knife", "whoami");
        assert_eq!(got.namespace.as_deref(), Some("mcp__knife"));
        assert_eq!(got.name, "whoami");
    }

    #[test]
    fn each_agent_convention_is_found() {
        let declared = vec![
            plain("Bash"),
            plain("mcp__knife__whoami"),
            plain("knife_whoami"),
        ];
        assert_eq!(
            resolve(ApiFormat::AnthropicMessages, &declared, "knife", "whoami").name,
            "mcp__knife__whoami"
        );
        let opencode = vec![plain("bash"), plain("knife_whoami")];
        assert_eq!(
            resolve(ApiFormat::ChatCompletions, &opencode, "knife", "whoami").name,
            "knife_whoami"
        );
        let gemini = vec![plain("run_shell_command"), plain("whoami")];
        assert_eq!(
            resolve(ApiFormat::Gemini, &gemini, "knife", "whoami").name,
            "whoami"
        );
        let odd = vec![plain("srv-knife-tools.whoami")];
        assert_eq!(
            resolve(ApiFormat::ChatCompletions, &odd, "knife", "whoami").name,
            "srv-knife-tools.whoami"
        );
    }

    #[test]
    fn undeclared_tools_fall_back_to_the_format_convention() {
        let got = resolve(ApiFormat::Responses, &[], "knife", "whoami");
        assert_eq!(
            (got.namespace.as_deref(), got.name.as_str()),
            (Some("mcp__knife"), "whoami")
        );
        assert_eq!(
            resolve(ApiFormat::AnthropicMessages, &[], "knife", "whoami").name,
            "mcp__knife__whoami"
        );
        assert_eq!(
            resolve(ApiFormat::ChatCompletions, &[], "knife", "whoami").name,
            "knife_whoami"
        );
        assert_eq!(
            resolve(ApiFormat::Gemini, &[], "knife", "whoami").name,
            "whoami"
        );
    }

    #[test]
    fn side_requests_declare_no_tools() {
        assert!(!declares_tools(Some(&json!({"messages": []}))));
        assert!(!declares_tools(Some(&json!({"tools": []}))));
        assert!(declares_tools(Some(
            &json!({"tools": [{"functionDeclarations": []}]})
        )));
        assert!(!declares_tools(None));
    }
}
