// Emits `cfg(knife_has_postgres)` when PostgreSQL's server binaries are on this machine,
// so the PostgreSQL tests are reported ignored (not passed) where they are missing.

fn main() {
    println!("cargo::rustc-check-cfg=cfg(knife_has_postgres)");
    println!("cargo::rerun-if-env-changed=KNIFE_PG_BIN");
    println!("cargo::rerun-if-changed=/usr/lib/postgresql");
    // Same lookup as knife_store_postgres::testing::postgres_bin: $KNIFE_PG_BIN when
    // set, else any /usr/lib/postgresql/<version>/bin.
    let found = match std::env::var_os("KNIFE_PG_BIN") {
        Some(dir) => std::path::Path::new(&dir).join("initdb").exists(),
        None => std::fs::read_dir("/usr/lib/postgresql")
            .map(|dirs| {
                dirs.filter_map(Result::ok)
                    .any(|d| d.path().join("bin").join("initdb").exists())
            })
            .unwrap_or(false),
    };
    if found {
        println!("cargo::rustc-cfg=knife_has_postgres");
    }
}
