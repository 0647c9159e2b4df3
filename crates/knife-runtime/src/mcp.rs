//! Per-thread MCP credentials: the registry of bearer tokens a provider session uses
//! to call knife's `/mcp` endpoint, and the per-thread slot handing them to adapters.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use knife_protocol::{ProviderInstanceId, ThreadId};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// Prefix of every raw MCP bearer token (`knife_mcp_<43 base64url chars>`), so a
/// leaked token is recognisable in logs and secret scanners.
pub const TOKEN_PREFIX: &str = "knife_mcp_";

/// Number of random OS bytes in a token (256 bits).
pub const TOKEN_BYTES: usize = 32;

/// Id of one issued credential (`mcpcred_<uuid v7>`); not the secret.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CredentialId(pub String);

impl std::fmt::Display for CredentialId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// What an adapter needs to call `/mcp` for one thread: endpoint and bearer header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct McpSessionConfig {
    /// Id of the credential (revocation handle; not the secret).
    pub credential_id: CredentialId,
    /// The thread the credential acts for.
    pub thread_id: ThreadId,
    /// The provider instance whose session uses it.
    pub provider_instance_id: ProviderInstanceId,
    /// `http://<host>:<port>/mcp`, when the server knows its address.
    pub endpoint: Option<String>,
    /// `Bearer <raw token>`.
    pub authorization_header: String,
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
}

/// Failure to mint a token: the OS random source failed.
#[derive(Debug, thiserror::Error)]
#[error(
    "could not read random bytes from the operating system for an MCP credential: {0}; \
     check that /dev/urandom (or getrandom) is available to knife"
)]
pub struct CredentialIssueError(String);

#[derive(Debug)]
struct Record {
    digest: [u8; 32],
    scope: CredentialScope,
}

#[derive(Debug, Default)]
struct RegistryState {
    /// Keyed by credential id; only the SHA-256 of the token is kept.
    records: HashMap<CredentialId, Record>,
    /// In-flight opens holding a credential they issued or reuse (MGR-16, MGR-17).
    reservations: HashMap<CredentialId, u32>,
}

/// The registry of MCP credentials (issue 6 item 1). Tokens are 32 OS-random bytes,
/// base64url with [`TOKEN_PREFIX`]; only their SHA-256 digest is stored and
/// [`CredentialRegistry::resolve`] compares digests in constant time.
#[derive(Debug, Default)]
pub struct CredentialRegistry {
    state: Mutex<RegistryState>,
    endpoint: Option<String>,
}

impl CredentialRegistry {
    /// An empty registry whose configs name `endpoint` (`None`: not serving `/mcp`).
    pub fn new(endpoint: Option<String>) -> Arc<Self> {
        Arc::new(Self {
            state: Mutex::default(),
            endpoint,
        })
    }

    fn lock(&self) -> MutexGuard<'_, RegistryState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Mints a credential for `thread` on `instance`. Errors: [`CredentialIssueError`].
    pub fn issue(
        &self,
        thread: &ThreadId,
        instance: &ProviderInstanceId,
    ) -> Result<McpSessionConfig, CredentialIssueError> {
        let mut bytes = [0u8; TOKEN_BYTES];
        getrandom::fill(&mut bytes).map_err(|e| CredentialIssueError(e.to_string()))?;
        let token = format!("{TOKEN_PREFIX}{}", URL_SAFE_NO_PAD.encode(bytes));
        let id = CredentialId(format!("mcpcred_{}", uuid::Uuid::now_v7().simple()));
        let scope = CredentialScope {
            credential_id: id.clone(),
            thread_id: thread.clone(),
            provider_instance_id: instance.clone(),
        };
        self.lock().records.insert(
            id.clone(),
            Record {
                digest: digest(&token),
                scope,
            },
        );
        Ok(McpSessionConfig {
            credential_id: id,
            thread_id: thread.clone(),
            provider_instance_id: instance.clone(),
            endpoint: self.endpoint.clone(),
            authorization_header: format!("Bearer {token}"),
        })
    }

    /// Whom `raw_token` speaks for; `None` for unknown or revoked tokens.
    pub fn resolve(&self, raw_token: &str) -> Option<CredentialScope> {
        let wanted = digest(raw_token);
        let state = self.lock();
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
        self.lock().records.contains_key(id)
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
        self.slots.lock().unwrap_or_else(|e| e.into_inner())
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
        let other = registry.issue(&thread, &instance).unwrap();
        assert_ne!(other.token(), token);
        assert_eq!(registry.revoke_thread(&thread), 2);
        assert!(registry.resolve(&token).is_none());
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
