// The store contract suite (knife_store::contract) on the PostgreSQL backend: every case
// on a fresh database of this test binary's throwaway cluster.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use knife_store::Store;
use knife_store::contract::{ContractOptions, StoreFactory, StoreGuard};
use knife_store_postgres::PgOptions;
use knife_store_postgres::testing::cluster;

/// A fresh database per store; the guard is empty (the cluster dies with the binary).
struct Postgres;

#[async_trait::async_trait]
impl StoreFactory for Postgres {
    async fn open(&self, options: ContractOptions) -> (StoreGuard, Store) {
        let cluster = cluster().await;
        let db = cluster.fresh_database().await;
        let mut opts = PgOptions {
            max_connections: 4,
            ..PgOptions::default()
        };
        if let Some(capacity) = options.live_capacity {
            opts.live_capacity = capacity;
        }
        let store = knife_store_postgres::open_with(&cluster.url(&db), opts)
            .await
            .unwrap();
        (Box::new(()), store)
    }
}

knife_store::store_contract_tests!(
    Postgres,
    #[cfg_attr(
        not(knife_has_postgres),
        ignore = "needs PostgreSQL (Debian package postgresql, or KNIFE_PG_BIN)"
    )]
);
