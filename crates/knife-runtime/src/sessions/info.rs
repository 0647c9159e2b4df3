//! A read-only view of the live sessions (for `/api/sessions` and `knife sessions`).

use knife_protocol::*;
use tokio::time::Instant;

use super::SessionManager;

/// One live provider session as operators see it.
#[derive(Clone, Debug, PartialEq)]
pub struct LiveSessionInfo {
    pub provider_session_id: ProviderSessionId,
    /// Driver kind (`builtin`, `codex`, …).
    pub driver: String,
    pub provider_instance_id: ProviderInstanceId,
    /// Attached threads, sorted.
    pub threads: Vec<ThreadId>,
    /// Provider turns running now, sorted.
    pub busy_turns: Vec<ProviderTurnId>,
    /// When the idle release is due if nothing happens (a pin may defer it); `None`
    /// while a turn runs.
    pub idle_deadline: Option<Timestamp>,
    /// Since when pending background work defers the idle release; `None` unless pinned.
    pub pinned_since: Option<Timestamp>,
}

impl SessionManager {
    /// The live sessions, sorted by id. No side effects.
    pub fn describe(&self) -> Vec<LiveSessionInfo> {
        let now = Instant::now();
        let wall = self.inner.clock.now();
        // Instants are monotonic; wall-clock times are derived from "now" on both clocks.
        let to_wall = |at: Instant| -> Timestamp {
            let delta = |d: std::time::Duration| {
                chrono::Duration::from_std(d).unwrap_or(chrono::Duration::MAX)
            };
            if at >= now {
                wall + delta(at - now)
            } else {
                wall - delta(now - at)
            }
        };
        let idle_timeout = self.inner.options.idle_timeout;
        let mut out: Vec<_> = self
            .inner
            .snapshot()
            .into_iter()
            .map(|entry| {
                let st = entry.state();
                let mut threads: Vec<_> = st.attached.iter().cloned().collect();
                threads.sort();
                let mut busy_turns: Vec<_> = st.busy.keys().cloned().collect();
                busy_turns.sort();
                LiveSessionInfo {
                    provider_session_id: entry.id.clone(),
                    driver: entry.driver.clone(),
                    provider_instance_id: entry.instance.clone(),
                    threads,
                    busy_turns,
                    idle_deadline: if st.is_busy() {
                        None
                    } else {
                        st.idle_since.map(|since| to_wall(since + idle_timeout))
                    },
                    pinned_since: st.pinned_since.map(to_wall),
                }
            })
            .collect();
        out.sort_by(|a, b| a.provider_session_id.cmp(&b.provider_session_id));
        out
    }
}
