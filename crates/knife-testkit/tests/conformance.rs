//! The driver conformance suite: the same scenarios (conformance/scenarios.rs) run
//! against every driver's rig (conformance/rigs.rs): the built-in agent on the mock LLM,
//! the codex driver on the fake app-server, the ACP driver on the fake agent.
//! Real processes, real SQLite, real loopback HTTP; nothing of knife is faked.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "conformance/rigs.rs"]
mod rigs;
#[path = "conformance/scenarios.rs"]
mod scenarios;

/// One test per scenario for the driver whose rig `$rig` builds, in module `$driver`.
macro_rules! conformance {
    ($driver:ident, $rig:path) => {
        mod $driver {
            use crate::scenarios;

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn open_and_stream() {
                scenarios::open_and_stream($rig).await;
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn approval() {
                scenarios::approval($rig).await;
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn interrupt() {
                scenarios::interrupt($rig).await;
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn stop_with_open_approval() {
                scenarios::stop_with_open_approval($rig).await;
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn crash() {
                scenarios::crash($rig).await;
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn resume() {
                scenarios::resume($rig).await;
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn close() {
                scenarios::close($rig).await;
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn malformed_output() {
                scenarios::malformed_output($rig).await;
            }
        }
    };
}

conformance!(builtin, crate::rigs::builtin);
conformance!(fake_codex, crate::rigs::fake_codex);
conformance!(fake_acp, crate::rigs::fake_acp);
