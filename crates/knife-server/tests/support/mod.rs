//! What the knife-server test binaries share: an `AppState` over a fresh SQLite store,
//! the router served on loopback, and a project with one thread written below the API.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use knife_protocol::*;
use knife_runtime::commands::{create_project, create_thread};
use knife_runtime::*;
use knife_server::AppState;
use knife_store::Store;

/// A fresh store in `dir` (`knife.db`).
pub async fn open_store(dir: &Path) -> Store {
    knife_store_sqlite::open(dir.join("knife.db"))
        .await
        .unwrap()
}

/// The state `knife serve` would build over `store` and `adapters`, with every option
/// off: no token, no MCP, no metrics, no provider list, default subscriber limits,
/// default prices, default instance `fake`. Tests change fields with `AppState { .., ..state }`.
pub fn app_state(
    store: &Store,
    adapters: HashMap<ProviderInstanceId, Arc<dyn ProviderAdapter>>,
) -> AppState {
    let clock: SharedClock = Arc::new(SystemClock);
    let manager = SessionManager::new(
        Arc::new(store.clone()),
        clock.clone(),
        adapters,
        SessionManagerOptions::default(),
    );
    AppState {
        store: store.clone(),
        execution: ExecutionService::new(store.clone(), clock.clone(), manager),
        clock,
        default_instance: ProviderInstanceId::from("fake"),
        providers: Arc::from([]),
        metrics: None,
        api_token: None,
        closing: Default::default(),
        mcp: None,
        prices: Arc::new(PriceTable::defaults()),
        subscribers: knife_server::Subscribers::default(),
    }
}

/// Serves `knife_server::router(state)` on a listener already bound (so a caller can
/// learn the address first); the task ends with the test's runtime.
pub fn serve_on(listener: tokio::net::TcpListener, state: AppState) -> tokio::task::JoinHandle<()> {
    let app = knife_server::router(state);
    tokio::spawn(async move {
        axum::serve(listener, app).await.unwrap();
    })
}

/// Binds 127.0.0.1:0.
pub async fn loopback() -> (tokio::net::TcpListener, SocketAddr) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    (listener, addr)
}

/// A project rooted at `root` (created) and one thread in it on instance `fake`, written
/// through the commands as the API would.
pub async fn project_thread(store: &Store, root: &Path, title: Option<String>) -> Thread {
    let clock = SystemClock;
    std::fs::create_dir_all(root).unwrap();
    let (project, _) = create_project(
        store,
        &clock,
        CreateProjectRequest {
            root: root.display().to_string(),
            name: None,
        },
    )
    .await
    .unwrap();
    let instance = ProviderInstanceId::from("fake");
    create_thread(
        store,
        &clock,
        CreateThreadRequest {
            project_id: project.id,
            title,
            provider_instance_id: None,
            model: None,
            parent_thread_id: None,
            worktree: None,
        },
        &instance,
        std::slice::from_ref(&instance),
    )
    .await
    .unwrap()
}
