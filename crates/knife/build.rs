// The knife_has_* / knife_peer_* cfg flags for this crate's tests that need outside programs
// (docs/2026-12-01-test-prerequisites.md): a missing one makes those tests `ignored`.
fn main() {
    knife_prereqs::build::emit(knife_prereqs::Prereq::ALL);
    knife_prereqs::build::emit_peers();
}
