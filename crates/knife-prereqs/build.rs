//! knife-prereqs' own build script: only the probe gate that is never open, so
//! tests/ux_01.rs can show an ignored test. (No env-dependent gate here: a change would
//! rebuild this crate and everything above it.)
#[path = "src/lib.rs"]
#[allow(dead_code)]
mod prereqs;

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rerun-if-changed=src/lib.rs");
    prereqs::build::emit_gate(&prereqs::build::Gate::never("knife_has_ux01_absent_probe"));
}
