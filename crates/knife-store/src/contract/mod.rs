// The store contract test suite (feature `contract-tests`): written once here, run by
// every backend's tests through `store_contract_tests!` with that backend's factory.

//! The one test suite every store backend must pass (docs/2026-12-01-store-contract.md).
//!
//! A backend's test file implements [`StoreFactory`] (a fresh, empty store per call)
//! and invokes the macro once:
//!
//! ```ignore
//! struct Sqlite;
//! #[async_trait::async_trait]
//! impl knife_store::contract::StoreFactory for Sqlite { /* open a temp file */ }
//! knife_store::store_contract_tests!(Sqlite);
//! ```
//!
//! Each case is a `pub async fn name(factory: &dyn StoreFactory)` in one of the modules
//! below; the macro turns each into a `#[tokio::test]` of the same name in the backend's
//! test binary. Covered: append and reads ([`log`]), compare-and-set ([`log`]),
//! rebuild == incremental fold ([`log`], [`project_root`], the [`rebuild`] property),
//! appended text chunks and old whole-snapshot logs ([`chunks`], LIVE-03),
//! gap-free replay-then-live streams with concurrent appenders and a lagging
//! subscriber ([`streams`]), claims, process groups and
//! session activity ([`claims`]), leases and fenced writes ([`leases`]), node
//! membership, singletons and per-node process groups ([`cluster`]).
//!
//! Adding a case: write the `pub async fn` in the module of its trait and add its name
//! to the list in [`store_contract_tests!`] (`crate::store_contract_tests`).
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

pub mod chunks;
pub mod claims;
pub mod cluster;
pub mod fixtures;
pub mod import;
pub mod leases;
pub mod log;
pub mod migration;
pub mod project_root;
pub mod rebuild;
pub mod search;
pub mod streams;
pub mod usage;

/// Re-exported so the macro's property test resolves `proptest` in the caller.
pub use proptest;

use crate::Store;

/// Keeps a test store's resources alive (a temp dir, a database to drop) until dropped.
pub type StoreGuard = Box<dyn std::any::Any + Send + Sync>;

/// Backend knobs some cases need. `Default` is the backend's defaults.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ContractOptions {
    /// Capacity of the in-process live feed, in events (the lag case uses 4).
    pub live_capacity: Option<usize>,
}

/// Opens fresh, empty stores of one backend for the contract suite.
#[async_trait::async_trait]
pub trait StoreFactory: Send + Sync {
    /// A new store with no events (its own file or database) and the guard that keeps
    /// it alive. Panics when the backend cannot be opened (a test failure).
    async fn open(&self, options: ContractOptions) -> (StoreGuard, Store);
}

/// Instantiates the whole contract suite for a backend: `$factory` is an expression
/// of a type implementing [`StoreFactory`], evaluated once per test. Attributes after
/// it go on every generated test, e.g. to report the suite ignored where the backend
/// is missing:
/// `store_contract_tests!(Postgres, #[cfg_attr(not(knife_has_postgres), ignore = "…")]);`
#[macro_export]
macro_rules! store_contract_tests {
    ($factory:expr $(, #[$attr:meta])* $(,)?) => {
        $crate::store_contract_tests!(@cases $factory; [$(#[$attr])*];
            log::write_returns_consecutive_sequences_and_reads_return_the_exact_events,
            log::latest_sequence_is_global_and_per_thread,
            log::projections_upsert_by_id_bump_versions_and_answer_queries,
            log::provider_sessions_bind_on_attach_only_and_unbind_on_detach,
            log::write_if_commits_only_when_the_guarded_row_version_matches,
            log::live_07_a_thread_is_read_with_its_version_in_one_call,
            log::a_failed_write_rolls_back_the_whole_batch,
            log::rebuild_reproduces_the_incremental_projections,
            log::concurrent_compare_and_set_writers_commit_exactly_one,
            project_root::second_project_on_a_root_is_refused_and_nothing_of_its_batch_is_written,
            project_root::rebuild_of_a_unique_root_log_keeps_every_project_and_its_root,
            streams::three_streams_see_every_event_once_in_order_while_a_writer_appends,
            streams::stream_filters_by_thread_and_by_event_type_across_replay_and_live,
            streams::a_lagging_stream_recovers_from_the_table_without_gap_or_duplicate,
            streams::a_stream_created_before_writes_and_polled_later_misses_nothing,
            streams::concurrent_writers_are_serialized_and_a_thread_stream_sees_its_events_once,
            claims::claimed_threads_are_listed_by_kind_and_survive_a_rebuild,
            claims::process_groups_round_trip_and_are_not_touched_by_rebuild,
            claims::session_activity_follows_bindings_and_touches_only_move_forward,
            leases::scale_04_a_lease_names_its_node_and_expiry_and_another_node_is_refused_while_it_is_live,
            leases::scale_04_the_epoch_grows_with_every_resume_and_takeover,
            leases::scale_04_a_write_fenced_by_a_lost_lease_is_refused_and_writes_nothing,
            leases::takeover_of_expired_claims_by_concurrent_sweepers_takes_each_exactly_once,
            leases::scale_04_a_node_fences_every_write_of_a_thread_it_holds_and_stops_after_losing_it,
            leases::scale_08_a_taker_never_takes_the_threads_it_excludes,
            cluster::scale_07_process_groups_are_recorded_per_node_and_one_node_never_forgets_another_s,
            cluster::scale_07_a_cluster_singleton_is_held_by_one_node_at_a_time,
            cluster::scale_05_a_node_id_is_held_by_one_live_process_and_taken_back_by_its_own_place,
            import::scale_09_imported_events_keep_their_sequences_and_rebuild_to_the_same_projections,
            search::turn_08_search_finds_settled_items_and_titles_ranked_with_snippets,
            search::turn_08_a_project_filter_finds_old_matches_behind_many_newer_ones,
            usage::turn_06_usage_sums_count_each_model_call_once_per_scope_and_survive_a_rebuild,
            chunks::live_03_a_log_of_whole_snapshots_from_before_chunks_rebuilds_to_the_same_projections,
            chunks::live_03_chunks_extend_the_item_and_a_replayed_or_gapped_chunk_changes_nothing,
            chunks::live_03_a_chunk_is_one_row_of_its_own_and_never_rewrites_the_item_row,
        );

        $crate::contract::proptest::proptest! {
            #![proptest_config($crate::contract::proptest::prelude::ProptestConfig {
                cases: 24,
                ..$crate::contract::proptest::prelude::ProptestConfig::default()
            })]

            /// Contract (LIVE-03): folding `turn-item.appended` chunks, in any batching
            /// and by `rebuild`, equals folding the equivalent whole snapshots.
            #[test]
            $(#[$attr])*
            fn live_03_folding_chunks_equals_folding_the_equivalent_snapshots(
                input in $crate::contract::chunks::streams()
            ) {
                $crate::contract::chunks::run_check(&$factory, input);
            }
        }

        $crate::contract::proptest::proptest! {
            #![proptest_config($crate::contract::proptest::prelude::ProptestConfig {
                cases: 48,
                ..$crate::contract::proptest::prelude::ProptestConfig::default()
            })]

            /// Contract: for random event sequences, `rebuild` reproduces exactly the
            /// projections `write` built incrementally, batch by batch.
            #[test]
            $(#[$attr])*
            fn rebuild_equals_incremental_projection(
                batches in $crate::contract::rebuild::batches()
            ) {
                $crate::contract::rebuild::run_check(&$factory, batches);
            }
        }
    };
    (@cases $factory:expr; $attrs:tt; $($module:ident :: $name:ident),* $(,)?) => {
        $( $crate::__store_contract_case!($attrs $factory, $module, $name); )*
    };
}

/// One generated contract test (used by [`store_contract_tests!`]).
#[doc(hidden)]
#[macro_export]
macro_rules! __store_contract_case {
    ([$(#[$attr:meta])*] $factory:expr, $module:ident, $name:ident) => {
        /// Contract case (knife_store::contract).
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        $(#[$attr])*
        async fn $name() {
            $crate::contract::$module::$name(&$factory).await;
        }
    };
}
