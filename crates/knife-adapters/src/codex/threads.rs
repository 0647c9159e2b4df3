// Loading codex threads into a session: `thread/start` or `thread/resume` with the
// thread's workspace and MCP credential, once per app thread and session (MGR-09/12).

use std::path::Path;

use knife_protocol::*;
use knife_runtime::AdapterError;
use serde_json::{Value, json};

use super::DRIVER;
use super::session::{Inner, failure_text, lock};
use super::wire::{self, method};
use crate::jsonrpc::RpcError;

impl Inner {
    /// The MCP server entry for `thread`'s config override, when knife has a
    /// credential for it and knows its `/mcp` address.
    fn mcp_override(&self, thread: &ThreadId) -> Option<Value> {
        let config = self
            .config
            .mcp_slots
            .as_ref()
            .and_then(|slots| slots.get(thread))
            .filter(|c| &c.thread_id == thread)
            .or_else(|| self.first_mcp.clone().filter(|c| &c.thread_id == thread))?;
        let url = config.endpoint.clone()?;
        Some(json!({
            "mcp_servers": {
                self.config.mcp_server_name.clone(): {
                    "url": url,
                    "http_headers": {"Authorization": config.authorization_header},
                }
            }
        }))
    }

    /// Loads `thread` (resume `native` when given, else start a new codex thread) in
    /// `cwd` (default: the session's) unless it is loaded already; returns its codex
    /// thread id.
    pub(super) async fn ensure_thread(
        &self,
        thread: &ThreadId,
        native: Option<String>,
        cwd: Option<&Path>,
    ) -> Result<String, AdapterError> {
        let _serial = self.thread_lock.lock().await;
        // One codex thread per app thread and session: once loaded (resumed, or started
        // because codex no longer knew the old one), later hints change nothing.
        if let Some(loaded) = lock(&self.state).threads.get(thread)
            && let Some(id) = &loaded.native_id
        {
            return Ok(id.clone());
        }
        let mut params = wire::ThreadParams {
            thread_id: None,
            cwd: cwd.unwrap_or(&self.cwd).display().to_string(),
            approval_policy: self.config.approval_policy.clone(),
            sandbox: self.config.sandbox.clone(),
            model: self.model.clone(),
            config: self.mcp_override(thread),
            exclude_turns: None,
        };
        let mut started = None;
        if let Some(native) = native {
            params.thread_id = Some(native.clone());
            params.exclude_turns = Some(true);
            match self
                .rpc
                .call::<_, wire::ThreadResponse>(method::THREAD_RESUME, &params)
                .await
            {
                Ok(resp) => started = Some(resp.thread.id),
                Err(RpcError::Remote { message, .. }) if message.contains("no rollout found") => {
                    tracing::warn!(
                        %thread, native = %native,
                        "codex has no record of this thread (its CODEX_HOME changed?); starting a new codex thread, which does not know the earlier turns"
                    );
                    params.thread_id = None;
                    params.exclude_turns = None;
                }
                Err(e) => {
                    return Err(AdapterError::Refused {
                        operation: method::THREAD_RESUME,
                        reason: failure_text(self.rpc.child(), &e, "resuming the codex thread")
                            .await,
                    });
                }
            }
        }
        let id = match started {
            Some(id) => id,
            None => match self
                .rpc
                .call::<_, wire::ThreadResponse>(method::THREAD_START, &params)
                .await
            {
                Ok(resp) => resp.thread.id,
                Err(e) => {
                    return Err(AdapterError::Refused {
                        operation: method::THREAD_START,
                        reason: failure_text(self.rpc.child(), &e, "starting a codex thread").await,
                    });
                }
            },
        };
        let now = self.config.clock.now();
        let record = ProviderThread {
            id: ProviderThreadId::native(DRIVER, &id),
            driver: DRIVER.to_owned(),
            provider_instance_id: self.config.provider_instance_id.clone(),
            provider_session_id: Some(self.provider_session_id.clone()),
            app_thread_id: Some(thread.clone()),
            native_id: Some(id.clone()),
            status: ProviderThreadStatus::Idle,
            last_run_ordinal: None,
            pending_background_tasks: Vec::new(),
            created_at: now,
            updated_at: now,
        };
        {
            let mut st = lock(&self.state);
            if let Some(old) = st.threads.insert(thread.clone(), record.clone())
                && let Some(old_native) = old.native_id
            {
                st.natives.remove(&old_native);
            }
            st.natives.insert(id.clone(), thread.clone());
        }
        self.sink.send(AdapterEvent::ProviderThreadUpdated(record));
        Ok(id)
    }
}
