// The driver conformance suite (crates/knife-testkit/tests/conformance.rs) against real
// peers, opt-in like the peer suite: each module is gated on `knife_peer_<name>` (set
// when the peer is installed or KNIFE_PEERS selects it; then a missing peer fails).
// Here, not in knife-testkit, because this crate's build script emits those gates.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, dead_code)]

#[path = "../../knife-testkit/tests/conformance/rigs.rs"]
mod rigs;
#[path = "../../knife-testkit/tests/conformance/scenarios.rs"]
#[macro_use]
mod scenarios;
#[path = "../../knife-testkit/tests/conformance/real_codex.rs"]
mod real_codex;

conformance!(
    codex,
    crate::real_codex::real_codex,
    #[cfg_attr(
        not(knife_peer_codex),
        ignore = "needs the codex peer: run scripts/test (or scripts/install-peers.sh --only codex)"
    )]
);
