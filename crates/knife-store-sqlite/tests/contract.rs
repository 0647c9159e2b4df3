// The store contract suite (knife_store::contract) on the SQLite backend: every case
// on a fresh SQLite file in its own temp directory.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use knife_store::Store;
use knife_store::contract::{ContractOptions, StoreFactory, StoreGuard};
use knife_store_sqlite::StoreOptions;

/// Opens `<tempdir>/data/knife.db`; the guard is the temp dir.
struct Sqlite;

#[async_trait::async_trait]
impl StoreFactory for Sqlite {
    async fn open(&self, options: ContractOptions) -> (StoreGuard, Store) {
        let dir = tempfile::tempdir().unwrap();
        let mut opts = StoreOptions::default();
        if let Some(capacity) = options.live_capacity {
            opts.live_capacity = capacity;
        }
        let store = knife_store_sqlite::open_with(dir.path().join("data").join("knife.db"), opts)
            .await
            .unwrap();
        (Box::new(dir), store)
    }
}

knife_store::store_contract_tests!(Sqlite);
