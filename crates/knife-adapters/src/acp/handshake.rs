//! The handshake of an ACP session (see the `acp` module docs): `initialize`, then
//! `session/resume`, `session/load` or `session/new`, with knife's MCP server when the
//! agent takes MCP over HTTP.

use std::time::Duration;

use knife_protocol::*;
use knife_runtime::OpenSessionInput;
use knife_runtime::mcp::McpSessionConfig;
use serde_json::Value;

use super::MCP_SERVER_NAME;
use super::types::*;
use crate::jsonrpc::{RpcConnection, RpcError};

/// `initialize`, then resume / load / new; returns the ACP session id, how it was
/// opened (`resumed`, `loaded`, `new`) and the models it offers. Errors name the
/// failing step.
pub(super) async fn handshake(
    rpc: &RpcConnection,
    input: &OpenSessionInput,
    mcp: Option<&McpSessionConfig>,
    initialize_timeout: Duration,
) -> Result<(String, &'static str, Option<SessionModelState>), (&'static str, RpcError)> {
    let params = InitializeRequest {
        protocol_version: PROTOCOL_VERSION,
        client_capabilities: ClientCapabilities::default(),
        client_info: Some(Implementation {
            name: "knife".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            title: None,
        }),
    };
    let params = serde_json::to_value(&params).unwrap_or(Value::Null);
    let init = rpc
        .request_with_timeout(methods::INITIALIZE, params, initialize_timeout)
        .await
        .map_err(|e| ("initialize", e))?;
    let init: InitializeResponse = serde_json::from_value(init).map_err(|e| {
        (
            "initialize",
            RpcError::Decode {
                method: methods::INITIALIZE.into(),
                error: e.to_string(),
            },
        )
    })?;
    if init.protocol_version != PROTOCOL_VERSION {
        return Err((
            "initialize",
            RpcError::Decode {
                method: methods::INITIALIZE.into(),
                error: format!(
                    "the agent speaks ACP version {}, knife speaks version {PROTOCOL_VERSION}; \
                     install a version of the agent that supports ACP v1",
                    init.protocol_version
                ),
            },
        ));
    }
    let caps = &init.agent_capabilities;
    let mcp_servers = mcp_servers(caps, mcp, &input.thread_id);
    if let Some(native) = &input.native_thread_id {
        let request = LoadSessionRequest {
            session_id: native.clone(),
            cwd: input.cwd.clone(),
            mcp_servers: mcp_servers.clone(),
        };
        let attempt = if caps.session_capabilities.can_resume() {
            Some((methods::SESSION_RESUME, "resumed"))
        } else if caps.load_session {
            Some((methods::SESSION_LOAD, "loaded"))
        } else {
            None
        };
        match attempt {
            Some((method, how)) => {
                let params = serde_json::to_value(&request).unwrap_or(Value::Null);
                match rpc.request(method, params).await {
                    Ok(answer) => {
                        let models = serde_json::from_value::<LoadSessionResponse>(answer)
                            .ok()
                            .and_then(|r| r.models);
                        return Ok((native.clone(), how, models));
                    }
                    Err(e @ RpcError::Closed { .. }) => return Err(("session resume", e)),
                    Err(e) => tracing::warn!(
                        thread = %input.thread_id, acp_session = %native, error = %e,
                        "the ACP agent could not reopen the thread's session; starting a new one \
                         (the agent does not remember the conversation)"
                    ),
                }
            }
            None => tracing::warn!(
                thread = %input.thread_id, acp_session = %native,
                "the ACP agent supports neither session/resume nor session/load; starting a new \
                 session (the agent does not remember the conversation)"
            ),
        }
    }
    let created: NewSessionResponse = rpc
        .call(
            methods::SESSION_NEW,
            &NewSessionRequest {
                cwd: input.cwd.clone(),
                mcp_servers,
            },
        )
        .await
        .map_err(|e| ("session/new", e))?;
    Ok((created.session_id, "new", created.models))
}

/// knife's MCP server for the thread, when knife knows its address and the agent
/// takes MCP over HTTP.
fn mcp_servers(
    caps: &AgentCapabilities,
    mcp: Option<&McpSessionConfig>,
    thread: &ThreadId,
) -> Vec<McpServer> {
    let Some((config, url)) = mcp.and_then(|c| c.endpoint.clone().map(|url| (c, url))) else {
        return Vec::new();
    };
    if !caps.mcp_capabilities.http {
        tracing::warn!(
            %thread,
            "the ACP agent does not advertise MCP over HTTP; knife's MCP tools are not offered to it"
        );
        return Vec::new();
    }
    vec![McpServer::Http {
        name: MCP_SERVER_NAME.to_owned(),
        url,
        headers: vec![HttpHeader {
            name: "Authorization".to_owned(),
            value: config.authorization_header.clone(),
        }],
    }]
}
