//! A read-only view of the live sessions (for `/api/sessions` and `knife sessions`).

use knife_protocol::*;
use tokio::time::Instant;

use super::SessionManager;

/// One live provider session as operators see it (the wire type of `/api/sessions`).
pub use knife_protocol::LiveSession as LiveSessionInfo;

impl SessionManager {
    /// Ids of the configured provider instances, sorted.
    pub fn instances(&self) -> Vec<ProviderInstanceId> {
        let mut ids: Vec<_> = self.inner.adapters.keys().cloned().collect();
        ids.sort();
        ids
    }

    /// What the adapter of `instance` supports (shared sessions, steering, …);
    /// `None` when the instance is not configured.
    pub fn capabilities(&self, instance: &ProviderInstanceId) -> Option<ProviderCapabilities> {
        self.inner.adapters.get(instance).map(|a| a.capabilities())
    }

    /// How threads of `instance` fork (CHG-09); `None` when the instance is not configured.
    pub fn fork_support(&self, instance: &ProviderInstanceId) -> Option<crate::ForkSupport> {
        self.inner.adapters.get(instance).map(|a| a.fork_support())
    }

    /// The driver name of `instance`'s adapter (`builtin`, `codex`, `acp`, …).
    pub fn driver(&self, instance: &ProviderInstanceId) -> Option<String> {
        self.inner
            .adapters
            .get(instance)
            .map(|a| a.driver().to_owned())
    }

    /// The live sessions, sorted by id. No side effects.
    pub fn describe(&self) -> Vec<LiveSessionInfo> {
        let now = Instant::now();
        let wall = self.inner.clock.now();
        // Instants are monotonic; wall-clock times are derived from "now" on both clocks.
        // `None` when the time is not representable (a huge configured timeout).
        let to_wall = |at: Instant| -> Option<Timestamp> {
            let delta = |d: std::time::Duration| chrono::Duration::from_std(d).ok();
            if at >= now {
                wall.checked_add_signed(delta(at - now)?)
            } else {
                wall.checked_sub_signed(delta(now - at)?)
            }
        };
        let idle_timeout = self.inner.options.idle_timeout;
        let mut out: Vec<_> = self
            .inner
            .snapshot()
            .into_iter()
            .map(|entry| {
                // Read before the state lock (never hold both).
                let record = entry.record();
                let st = entry.state().view();
                LiveSessionInfo {
                    provider_session_id: entry.id.clone(),
                    driver: entry.driver.clone(),
                    provider_instance_id: entry.instance.clone(),
                    status: record.status,
                    model: record.model,
                    cwd: entry.cwd.display().to_string(),
                    capabilities: entry.capabilities.clone(),
                    mcp_threads: st.mcp_threads,
                    threads: st.threads,
                    busy_turns: st.busy_turns,
                    idle_deadline: st
                        .idle_since
                        .and_then(|since| since.checked_add(idle_timeout))
                        .and_then(to_wall),
                    pinned_since: st.pinned_since.and_then(to_wall),
                    // The manager does not know the node; the API fills it in.
                    node: None,
                    remote: false,
                }
            })
            .collect();
        out.sort_by(|a, b| a.provider_session_id.cmp(&b.provider_session_id));
        out
    }
}
