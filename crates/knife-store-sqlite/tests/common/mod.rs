// Test helpers shared by the knife-store-sqlite integration tests: a store in a fresh
// temp directory, and the contract suite's entity builders (one copy, in knife-store).
// Each test binary uses a subset of these, hence `dead_code` and `unused_imports`.
#![allow(clippy::unwrap_used, clippy::expect_used, dead_code, unused_imports)]

use knife_store::Store;
use knife_store_sqlite::StoreOptions;

pub use knife_store::contract::fixtures::{
    ev, ev_on, node, project, provider_thread, provider_turn, run, runtime_request, session,
    thread, ts, turn_item,
};

/// Opens a store on `<tempdir>/data/knife.db`; keep the TempDir alive.
pub async fn temp_store() -> (tempfile::TempDir, Store) {
    temp_store_with(StoreOptions::default()).await
}

pub async fn temp_store_with(options: StoreOptions) -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let store = knife_store_sqlite::open_with(dir.path().join("data").join("knife.db"), options)
        .await
        .unwrap();
    (dir, store)
}
