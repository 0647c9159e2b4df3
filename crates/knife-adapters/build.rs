//! The knife_has_* cfg flags for this crate's tests that need outside programs
//! (docs/2026-12-01-test-prerequisites.md): a missing one makes those tests `ignored`.
use knife_prereqs::Prereq;

fn main() {
    knife_prereqs::build::emit(&[Prereq::Codex]);
}
