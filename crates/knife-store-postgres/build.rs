//! Emits `cfg(knife_has_postgres)` (knife-prereqs) when PostgreSQL's server binaries are on
//! this machine, so the PostgreSQL tests are reported ignored (not passed) where they are missing.

fn main() {
    knife_prereqs::build::emit(&[knife_prereqs::Prereq::Postgres]);
}
