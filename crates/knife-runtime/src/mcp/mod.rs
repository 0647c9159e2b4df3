//! Per-thread MCP credentials: the registry of bearer tokens a provider session uses
//! to call knife's `/mcp` endpoint, the per-thread slot handing them to adapters, and
//! the access settings deciding their capabilities (SPEC.md MCP-01..05).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use std::collections::BTreeSet;

use knife_protocol::{
    McpCapability, McpCredentialInfo, ProviderInstanceId, ProviderSessionId, ThreadId,
};
use serde::Serialize;

mod access;

pub use access::*;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// Prefix of every raw MCP bearer token (`knife_mcp_<43 base64url chars>`), so a
/// leaked token is recognisable in logs and secret scanners.
pub const TOKEN_PREFIX: &str = "knife_mcp_";

/// Number of random OS bytes in a token (256 bits).
pub const TOKEN_BYTES: usize = 32;

/// Id of one issued credential (`mcpcred_<uuid v7>`); not the secret.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct CredentialId(pub String);

impl std::fmt::Display for CredentialId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// What an adapter needs to call `/mcp` for one thread (SPEC.md MCP-01). Serialized
/// camelCase: `threadId`, `providerInstanceId`, `providerSessionId`, `endpoint`,
/// `authorizationHeader`, `browserToolsAvailable`, `capabilities` (plus `credentialId`).
/// Its `Debug` output redacts the token, so logging a config does not leak it.
#[derive(Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct McpSessionConfig {
    /// Id of the credential (revocation handle; not the secret).
    pub credential_id: CredentialId,
    /// The thread the credential acts for.
    pub thread_id: ThreadId,
    /// The provider instance whose session uses it.
    pub provider_instance_id: ProviderInstanceId,
    /// The provider session it was minted (or last reused) for; `None` when issued
    /// outside a session (debug minting).
    pub provider_session_id: Option<ProviderSessionId>,
    /// `http://<host>:<port>/mcp`, when the server knows its address.
    pub endpoint: Option<String>,
    /// `Bearer <raw token>`.
    pub authorization_header: String,
    /// True when `capabilities` holds `preview` (MCP-02).
    pub browser_tools_available: bool,
    /// What the credential may do; decides the tools `/mcp` lists for it.
    pub capabilities: BTreeSet<McpCapability>,
}

impl std::fmt::Debug for McpSessionConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpSessionConfig")
            .field("credential_id", &self.credential_id)
            .field("thread_id", &self.thread_id)
            .field("provider_instance_id", &self.provider_instance_id)
            .field("provider_session_id", &self.provider_session_id)
            .field("endpoint", &self.endpoint)
            .field("authorization_header", &"Bearer <redacted>")
            .field("browser_tools_available", &self.browser_tools_available)
            .field("capabilities", &self.capabilities)
            .finish()
    }
}

impl McpSessionConfig {
    /// The raw token of the `Bearer` header.
    pub fn token(&self) -> &str {
        self.authorization_header
            .strip_prefix("Bearer ")
            .unwrap_or(&self.authorization_header)
    }
}

/// Whom a resolved token speaks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CredentialScope {
    /// The credential that matched.
    pub credential_id: CredentialId,
    /// The thread it acts for.
    pub thread_id: ThreadId,
    /// The provider instance it was issued to.
    pub provider_instance_id: ProviderInstanceId,
    /// Its capabilities.
    pub capabilities: BTreeSet<McpCapability>,
}

impl CredentialScope {
    /// True when the credential carries `capability`.
    pub fn allows(&self, capability: McpCapability) -> bool {
        self.capabilities.contains(&capability)
    }
}

/// What to mint a credential for ([`CredentialRegistry::issue_for`]).
#[derive(Clone, Debug)]
pub struct CredentialRequest {
    /// The thread it acts for.
    pub thread_id: ThreadId,
    /// The provider instance it is issued to.
    pub provider_instance_id: ProviderInstanceId,
    /// The provider session that will hold it, if any.
    pub provider_session_id: Option<ProviderSessionId>,
    /// Its capabilities (see [`capabilities_for`]).
    pub capabilities: BTreeSet<McpCapability>,
}

/// Failure to mint a token: the OS random source failed.
#[derive(Debug, thiserror::Error)]
#[error(
    "could not read random bytes from the operating system for an MCP credential: {0}; \
     check that /dev/urandom (or getrandom) is available to knife"
)]
pub struct CredentialIssueError(String);

/// How long a credential lives without a [`CredentialRegistry::touch`] of its thread
/// (24 h): bounds credentials whose session died without a release.
pub const DEFAULT_LIVENESS_WINDOW: std::time::Duration = std::time::Duration::from_secs(24 * 3600);

#[derive(Debug)]
struct Record {
    digest: [u8; 32],
    scope: CredentialScope,
    /// Issued or last touched (tokio time, so paused-time tests control it).
    last_alive: tokio::time::Instant,
}

#[derive(Debug, Default)]
struct RegistryState {
    /// Keyed by credential id; only the SHA-256 of the token is kept.
    records: HashMap<CredentialId, Record>,
    /// In-flight opens holding a credential they issued or reuse (MGR-16, MGR-17).
    reservations: HashMap<CredentialId, u32>,
    /// `http://<host>:<port>/mcp` once the server is bound.
    endpoint: Option<String>,
    /// [`DEFAULT_LIVENESS_WINDOW`] unless changed.
    liveness_window: Option<std::time::Duration>,
}

impl RegistryState {
    /// Drops records not touched within the liveness window (lazily, on access).
    fn prune(&mut self) {
        let window = self.liveness_window.unwrap_or(DEFAULT_LIVENESS_WINDOW);
        let now = tokio::time::Instant::now();
        self.records
            .retain(|_, r| now.saturating_duration_since(r.last_alive) <= window);
    }
}

/// The registry of MCP credentials (SPEC.md MCP-01..05, docs/2026-11-29-mcp.md). Tokens are 32 OS-random bytes,
/// base64url with [`TOKEN_PREFIX`]; only their SHA-256 digest is stored and
/// [`CredentialRegistry::resolve`] compares digests in constant time.
///
/// The registry lives in memory only: tokens do not survive a restart. That is on
/// purpose: the provider processes holding them do not survive one either (the restart
/// sweep stops them), and a token that outlived its process would be a live secret
/// nobody can use legitimately. A restarted server mints new credentials as sessions
/// open again.
#[derive(Debug, Default)]
pub struct CredentialRegistry {
    state: Mutex<RegistryState>,
}

impl CredentialRegistry {
    /// An empty registry whose configs name `endpoint` (`None`: not serving `/mcp` yet;
    /// see [`CredentialRegistry::set_endpoint`]).
    pub fn new(endpoint: Option<String>) -> Arc<Self> {
        Arc::new(Self {
            state: Mutex::new(RegistryState {
                endpoint,
                ..Default::default()
            }),
        })
    }

    fn lock(&self) -> MutexGuard<'_, RegistryState> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Sets the endpoint later configs name (the server learns its address after bind).
    pub fn set_endpoint(&self, endpoint: String) {
        self.lock().endpoint = Some(endpoint);
    }

    /// Changes the liveness window (default [`DEFAULT_LIVENESS_WINDOW`]).
    pub fn set_liveness_window(&self, window: std::time::Duration) {
        self.lock().liveness_window = Some(window);
    }

    /// Marks every credential of `thread` alive now (called when a turn starts on the
    /// thread: a bearer token cannot prove its own session is alive, a turn can).
    /// Returns how many credentials it refreshed.
    pub fn touch(&self, thread: &ThreadId) -> usize {
        let mut state = self.lock();
        state.prune();
        let now = tokio::time::Instant::now();
        let mut n = 0;
        for record in state.records.values_mut() {
            if &record.scope.thread_id == thread {
                record.last_alive = now;
                n += 1;
            }
        }
        n
    }

    /// The endpoint configs name, if known.
    pub fn endpoint(&self) -> Option<String> {
        self.lock().endpoint.clone()
    }

    /// Mints a credential for `thread` on `instance` with the default capabilities
    /// (`{preview, orchestration, worktree, pull-requests}`, MCP-02).
    /// Errors: [`CredentialIssueError`].
    pub fn issue(
        &self,
        thread: &ThreadId,
        instance: &ProviderInstanceId,
    ) -> Result<McpSessionConfig, CredentialIssueError> {
        self.issue_for(CredentialRequest {
            thread_id: thread.clone(),
            provider_instance_id: instance.clone(),
            provider_session_id: None,
            capabilities: capabilities_for(AgentAccess::default()),
        })
    }

    /// Mints a credential for `request`. Errors: [`CredentialIssueError`].
    pub fn issue_for(
        &self,
        request: CredentialRequest,
    ) -> Result<McpSessionConfig, CredentialIssueError> {
        let mut bytes = [0u8; TOKEN_BYTES];
        getrandom::fill(&mut bytes).map_err(|e| CredentialIssueError(e.to_string()))?;
        let token = format!("{TOKEN_PREFIX}{}", URL_SAFE_NO_PAD.encode(bytes));
        let id = CredentialId(format!("mcpcred_{}", uuid::Uuid::now_v7().simple()));
        let scope = CredentialScope {
            credential_id: id.clone(),
            thread_id: request.thread_id.clone(),
            provider_instance_id: request.provider_instance_id.clone(),
            capabilities: request.capabilities.clone(),
        };
        let mut state = self.lock();
        state.prune();
        state.records.insert(
            id.clone(),
            Record {
                digest: digest(&token),
                scope,
                last_alive: tokio::time::Instant::now(),
            },
        );
        Ok(McpSessionConfig {
            credential_id: id,
            thread_id: request.thread_id,
            provider_instance_id: request.provider_instance_id,
            provider_session_id: request.provider_session_id,
            endpoint: state.endpoint.clone(),
            authorization_header: format!("Bearer {token}"),
            browser_tools_available: request.capabilities.contains(&McpCapability::Preview),
            capabilities: request.capabilities,
        })
    }

    /// Whom `raw_token` speaks for; `None` for unknown, revoked or expired tokens
    /// (not touched within the liveness window).
    pub fn resolve(&self, raw_token: &str) -> Option<CredentialScope> {
        let wanted = digest(raw_token);
        let mut state = self.lock();
        state.prune();
        // Every record is compared in constant time, so timing reveals nothing about
        // how close a guess came.
        let mut found = None;
        for record in state.records.values() {
            if bool::from(record.digest.ct_eq(&wanted)) {
                found = Some(record.scope.clone());
            }
        }
        found
    }

    /// Revokes credential `id`; true when it existed.
    pub fn revoke(&self, id: &CredentialId) -> bool {
        self.lock().records.remove(id).is_some()
    }

    /// Revokes every credential of `thread`; returns how many.
    pub fn revoke_thread(&self, thread: &ThreadId) -> usize {
        let mut state = self.lock();
        let before = state.records.len();
        state.records.retain(|_, r| &r.scope.thread_id != thread);
        before - state.records.len()
    }

    /// True while credential `id` is live.
    pub fn is_live(&self, id: &CredentialId) -> bool {
        let mut state = self.lock();
        state.prune();
        state.records.contains_key(id)
    }

    /// The public state of `thread`'s credentials: active when one is live, with the
    /// union of their capabilities (normally there is one). Never the token.
    pub fn info(&self, thread: &ThreadId) -> McpCredentialInfo {
        let mut state = self.lock();
        state.prune();
        let mut active = false;
        let mut capabilities = BTreeSet::new();
        for record in state.records.values() {
            if &record.scope.thread_id == thread {
                active = true;
                capabilities.extend(record.scope.capabilities.iter().copied());
            }
        }
        McpCredentialInfo {
            active,
            capabilities: capabilities.into_iter().collect(),
        }
    }

    /// Marks `id` as held by an in-flight open until the returned guard drops; a
    /// release of another session must not revoke it meanwhile.
    pub fn reserve(self: &Arc<Self>, id: &CredentialId) -> Reservation {
        *self.lock().reservations.entry(id.clone()).or_insert(0) += 1;
        Reservation {
            registry: Arc::clone(self),
            id: id.clone(),
        }
    }

    /// True while some [`Reservation`] of `id` is alive.
    pub fn is_reserved(&self, id: &CredentialId) -> bool {
        self.lock().reservations.contains_key(id)
    }
}

/// Guard of [`CredentialRegistry::reserve`]; dropping it ends the reservation.
#[derive(Debug)]
pub struct Reservation {
    registry: Arc<CredentialRegistry>,
    id: CredentialId,
}

impl Drop for Reservation {
    fn drop(&mut self) {
        let mut state = self.registry.lock();
        if let Some(count) = state.reservations.get_mut(&self.id) {
            *count -= 1;
            if *count == 0 {
                state.reservations.remove(&self.id);
            }
        }
    }
}

/// `http://<ip>:<port>/mcp` for a bound server address; an unspecified host
/// (`0.0.0.0`, `::`) becomes `127.0.0.1`, IPv6 literals are bracketed.
pub fn endpoint_for(addr: std::net::SocketAddr) -> String {
    let ip = if addr.ip().is_unspecified() {
        std::net::IpAddr::from([127, 0, 0, 1])
    } else {
        addr.ip()
    };
    format!("http://{}/mcp", std::net::SocketAddr::new(ip, addr.port()))
}

fn digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// The per-thread MCP slot: the config the manager prepared for a thread, read by
/// adapters when they spawn (the hand-off from manager to adapter).
#[derive(Debug, Default)]
pub struct McpSlots {
    slots: Mutex<HashMap<ThreadId, McpSessionConfig>>,
}

impl McpSlots {
    fn lock(&self) -> MutexGuard<'_, HashMap<ThreadId, McpSessionConfig>> {
        self.slots
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The config in `thread`'s slot.
    pub fn get(&self, thread: &ThreadId) -> Option<McpSessionConfig> {
        self.lock().get(thread).cloned()
    }

    /// Puts `config` in its thread's slot.
    pub fn set(&self, config: McpSessionConfig) {
        self.lock().insert(config.thread_id.clone(), config);
    }

    /// Empties `thread`'s slot.
    pub fn clear(&self, thread: &ThreadId) {
        self.lock().remove(thread);
    }

    /// Empties `thread`'s slot only if it still holds credential `id` (a newer
    /// credential of a replacement session survives).
    pub fn clear_if(&self, thread: &ThreadId, id: &CredentialId) {
        let mut slots = self.lock();
        if slots.get(thread).is_some_and(|c| &c.credential_id == id) {
            slots.remove(thread);
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn tokens_resolve_until_revoked_and_only_digests_are_kept() {
        let registry = CredentialRegistry::new(Some("http://127.0.0.1:1/mcp".into()));
        let thread = ThreadId::from("thread_a");
        let instance = ProviderInstanceId::from("codex");
        let config = registry.issue(&thread, &instance).unwrap();
        let token = config.token().to_owned();
        assert!(token.starts_with(TOKEN_PREFIX));
        assert_eq!(token.len(), TOKEN_PREFIX.len() + 43);
        assert!(!token.contains('.'));
        let scope = registry.resolve(&token).unwrap();
        assert_eq!(scope.thread_id, thread);
        assert!(registry.resolve("knife_mcp_nope").is_none());
        assert!(!format!("{registry:?}").contains(&token));
        assert!(
            !format!("{config:?}").contains(&token),
            "Debug redacts the token"
        );
        let other = registry.issue(&thread, &instance).unwrap();
        assert_ne!(other.token(), token);
        assert_eq!(registry.revoke_thread(&thread), 2);
        assert!(registry.resolve(&token).is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn credentials_expire_without_a_touch_within_the_liveness_window() {
        let registry = CredentialRegistry::new(None);
        let (a, b) = (ThreadId::from("thread_a"), ThreadId::from("thread_b"));
        let instance = ProviderInstanceId::from("codex");
        let ca = registry.issue(&a, &instance).unwrap();
        let cb = registry.issue(&b, &instance).unwrap();
        tokio::time::advance(DEFAULT_LIVENESS_WINDOW - std::time::Duration::from_secs(60)).await;
        assert_eq!(registry.touch(&a), 1);
        tokio::time::advance(std::time::Duration::from_secs(120)).await;
        assert!(registry.resolve(ca.token()).is_some(), "touched: alive");
        assert!(
            registry.resolve(cb.token()).is_none(),
            "not touched: expired"
        );
        assert!(!registry.info(&b).active);
    }

    #[test]
    fn reservations_count_and_end_on_drop() {
        let registry = CredentialRegistry::new(None);
        let id = CredentialId("c".into());
        let a = registry.reserve(&id);
        let b = registry.reserve(&id);
        drop(a);
        assert!(registry.is_reserved(&id));
        drop(b);
        assert!(!registry.is_reserved(&id));
    }
}
