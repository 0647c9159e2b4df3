//! Agent access settings → MCP capabilities (SPEC.md MCP-02..05): the pure resolver
//! and the store-backed policy.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;

use knife_protocol::*;
use knife_runtime::commands::create_project;
use knife_runtime::mcp::*;
use knife_runtime::{SharedClock, SystemClock};

fn project(root: &str) -> Project {
    let now = chrono::Utc::now();
    Project {
        id: ProjectId::from("project_1"),
        name: "p".into(),
        root: root.into(),
        created_at: now,
        updated_at: now,
    }
}

fn settings(browser: bool, device: bool, over: &[(&str, ProjectAccessOverride)]) -> AccessSettings {
    AccessSettings {
        agent_browser_access: browser,
        agent_device_access: device,
        projects: over
            .iter()
            .map(|(k, v)| ((*k).to_owned(), *v))
            .collect::<HashMap<_, _>>(),
    }
}

#[test]
fn mcp_02_default_capabilities_and_browser_off() {
    let d = AccessSettings::default();
    let p = project("/w");
    let access = resolve_access(&d, ThreadLookup::Found(&p));
    assert_eq!(
        capabilities_for(access).into_iter().collect::<Vec<_>>(),
        vec![
            McpCapability::Preview,
            McpCapability::Orchestration,
            McpCapability::Worktree,
            McpCapability::PullRequests
        ]
    );
    let off = settings(false, false, &[]);
    let caps = capabilities_for(resolve_access(&off, ThreadLookup::Found(&p)));
    assert!(!caps.contains(&McpCapability::Preview));
    assert!(caps.contains(&McpCapability::Orchestration));
}

#[test]
fn mcp_03_a_project_setting_overrides_browser_access_both_ways() {
    let p = project("/w");
    let opt_out = ProjectAccessOverride {
        agent_browser_access: Some(false),
        agent_device_access: None,
    };
    let opt_in = ProjectAccessOverride {
        agent_browser_access: Some(true),
        agent_device_access: None,
    };
    let s = settings(true, false, &[("/w", opt_out)]);
    assert!(
        !resolve_access(&s, ThreadLookup::Found(&p)).browser,
        "opt-out"
    );
    let s = settings(false, false, &[("/w", opt_in)]);
    assert!(
        resolve_access(&s, ThreadLookup::Found(&p)).browser,
        "opt-in"
    );
    // Keyed by project id too; other projects follow the global setting.
    let s = settings(false, false, &[("project_1", opt_in)]);
    assert!(resolve_access(&s, ThreadLookup::Found(&p)).browser);
    let s = settings(false, false, &[("/elsewhere", opt_in)]);
    assert!(!resolve_access(&s, ThreadLookup::Found(&p)).browser);
}

#[test]
fn mcp_04_browser_access_fails_closed_when_thread_or_project_is_missing() {
    let s = settings(true, true, &[]);
    assert_eq!(
        resolve_access(&s, ThreadLookup::ThreadMissing),
        AgentAccess::CLOSED
    );
    assert_eq!(
        resolve_access(&s, ThreadLookup::ProjectMissing),
        AgentAccess::CLOSED
    );
}

#[tokio::test]
async fn mcp_04_store_policy_fails_closed_for_an_unknown_thread() {
    let dir = tempfile::tempdir().unwrap();
    let store = knife_store_sqlite::open(dir.path().join("knife.db"))
        .await
        .unwrap();
    let policy = StoreAccessPolicy {
        store: store.clone(),
        settings: settings(true, true, &[]),
    };
    let access = policy.access(&ThreadId::from("thread_missing")).await;
    assert_eq!(access, AgentAccess::CLOSED);

    // A real thread of a real project gets the global settings.
    let clock: SharedClock = std::sync::Arc::new(SystemClock);
    let root = dir.path().join("w");
    std::fs::create_dir(&root).unwrap();
    let (project, _) = create_project(
        &store,
        clock.as_ref(),
        CreateProjectRequest {
            root: root.display().to_string(),
            name: None,
        },
    )
    .await
    .unwrap();
    let instance = ProviderInstanceId::from("fake");
    let thread = knife_runtime::commands::create_thread(
        &store,
        clock.as_ref(),
        CreateThreadRequest {
            project_id: project.id.clone(),
            title: None,
            provider_instance_id: Some(instance.clone()),
            model: None,
            parent_thread_id: None,
            worktree: None,
        },
        &instance,
        std::slice::from_ref(&instance),
    )
    .await
    .unwrap();
    let access = policy.access(&thread.id).await;
    assert_eq!(
        access,
        AgentAccess {
            browser: true,
            device: true
        }
    );
    // The project's root override applies.
    let policy = StoreAccessPolicy {
        store,
        settings: settings(
            true,
            true,
            &[(
                project.root.as_str(),
                ProjectAccessOverride {
                    agent_browser_access: Some(false),
                    agent_device_access: None,
                },
            )],
        ),
    };
    assert!(!policy.access(&thread.id).await.browser);
}

#[test]
fn mcp_05_device_access_follows_its_own_project_setting_and_is_denied_without_project() {
    let p = project("/w");
    let device_on = ProjectAccessOverride {
        agent_browser_access: None,
        agent_device_access: Some(true),
    };
    let s = settings(false, false, &[("/w", device_on)]);
    let access = resolve_access(&s, ThreadLookup::Found(&p));
    assert!(access.device, "project enables device");
    assert!(!access.browser, "browser independent of device");
    assert!(capabilities_for(access).contains(&McpCapability::Device));

    let browser_only = ProjectAccessOverride {
        agent_browser_access: Some(true),
        agent_device_access: Some(false),
    };
    let s = settings(true, true, &[("/w", browser_only)]);
    let access = resolve_access(&s, ThreadLookup::Found(&p));
    assert!(access.browser && !access.device);
    assert!(!capabilities_for(access).contains(&McpCapability::Device));

    let s = settings(true, true, &[]);
    assert!(!resolve_access(&s, ThreadLookup::ProjectMissing).device);
}
