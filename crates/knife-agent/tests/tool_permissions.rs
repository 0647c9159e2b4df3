//! Permission rules and approvals of tool calls: deny, ask through the approval
//! gate, subjects resolved through symlinks, `bash` allow rules on plain commands
//! only, and confinement checked before anyone is asked.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::fs;
use std::sync::{Arc, Mutex};

use common::*;
use knife_agent::permissions::{
    ApprovalGate, ApprovalRequest, ApprovalVerdict, PermissionAction, PermissionRule,
    PermissionRules,
};
use knife_agent::tools::{Permission, ToolContext, ToolError, ToolPolicy, ToolSet};
use knife_protocol::*;
use serde_json::json;

fn project() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    fs::create_dir_all(dir.path().join("src")).unwrap();
    fs::write(
        dir.path().join("src/main.rs"),
        "fn main() {\n    println!(\"hello\");\n}\n",
    )
    .unwrap();
    dir
}

// ------------------------------------------------------------ permissions

/// A gate that records what it is asked and answers with `answer`.
struct Gate {
    asked: Mutex<Vec<ApprovalRequest>>,
    answer: ApprovalVerdict,
}

#[async_trait::async_trait]
impl ApprovalGate for Gate {
    async fn request(&self, request: ApprovalRequest) -> ApprovalVerdict {
        self.asked.lock().unwrap().push(request);
        self.answer.clone()
    }
}

fn gate(answer: ApprovalVerdict) -> Arc<Gate> {
    Arc::new(Gate {
        asked: Mutex::new(Vec::new()),
        answer,
    })
}

fn policy(rules: Vec<PermissionRule>, gate: Arc<Gate>) -> Arc<ToolPolicy> {
    Arc::new(ToolPolicy {
        permissions: PermissionRules::new(rules).unwrap(),
        approvals: Some(gate),
        ..ToolPolicy::default()
    })
}

#[tokio::test]
async fn authorize_asks_only_for_mutating_tools_with_root_relative_subjects() {
    let p = project();
    let g = gate(ApprovalVerdict::Deny {
        message: Some("not now".into()),
    });
    let ctx = ToolContext::new(p.path())
        .unwrap()
        .with_policy(policy(vec![], Arc::clone(&g)));
    let tools = ToolSet::standard();

    tools
        .authorize("c0", "read", &json!({"path": "src/main.rs"}), &ctx)
        .await
        .unwrap();
    tools
        .authorize("c0", "list", &json!({}), &ctx)
        .await
        .unwrap();
    assert!(
        g.asked.lock().unwrap().is_empty(),
        "read-only tools were asked about"
    );

    let args = json!({"path": "./src/../new.txt", "content": "x"});
    let err = tools
        .authorize("c1", "write", &args, &ctx)
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "the user denied this write call: not now; do not retry it unchanged — ask the user how to proceed"
    );
    let abs = ctx.root().join("src/main.rs").display().to_string();
    let _ = tools
        .authorize(
            "c2",
            "edit",
            &json!({"path": abs, "old_string": "a", "new_string": "b"}),
            &ctx,
        )
        .await;
    let _ = tools
        .authorize("c3", "bash", &json!({"command": "  cargo test \n"}), &ctx)
        .await;
    let asked: Vec<_> = g
        .asked
        .lock()
        .unwrap()
        .iter()
        .map(|r| (r.call_id.clone(), r.tool.clone(), r.subject.clone()))
        .collect();
    assert_eq!(
        asked,
        [
            ("c1".into(), "write".into(), "new.txt".into()),
            ("c2".into(), "edit".into(), "src/main.rs".into()),
            ("c3".into(), "bash".into(), "cargo test".into()),
        ]
    );
    assert_eq!(g.asked.lock().unwrap()[0].input, args);
}

#[tokio::test]
async fn permission_is_the_verdict_without_waiting() {
    let p = project();
    let g = gate(ApprovalVerdict::Allow);
    let rules = vec![PermissionRule::new("bash", "rm *", PermissionAction::Deny)];
    let ctx = ToolContext::new(p.path())
        .unwrap()
        .with_policy(policy(rules, Arc::clone(&g)));
    let tools = ToolSet::standard();
    assert_eq!(
        tools.permission("c1", "grep", &json!({"pattern": "x"}), &ctx),
        Permission::Allowed
    );
    assert_eq!(
        tools.permission("c2", "no_such_tool", &json!({}), &ctx),
        Permission::Allowed
    );
    let args = json!({"command": "cargo build"});
    assert_eq!(
        tools.permission("c3", "bash", &args, &ctx),
        Permission::Ask(ApprovalRequest {
            call_id: "c3".into(),
            tool: "bash".into(),
            subject: "cargo build".into(),
            input: args,
            rule: "the default rule".into(),
            diff: None,
        })
    );
    match tools.permission("c4", "bash", &json!({"command": "rm -rf src"}), &ctx) {
        Permission::Denied(ToolError::PermissionDenied { subject, rule, .. }) => {
            assert_eq!(
                (subject.as_str(), rule.as_str()),
                ("rm -rf src", "permission rule 0")
            );
        }
        other => panic!("{other:?}"),
    }
    assert!(
        g.asked.lock().unwrap().is_empty(),
        "permission() must not ask the gate"
    );
}

#[tokio::test]
async fn a_deny_rule_refuses_the_call_in_the_agent_loop_and_the_model_reads_why() {
    let g = gate(ApprovalVerdict::Allow);
    let rules = vec![
        PermissionRule::new("write", "*", PermissionAction::Allow),
        PermissionRule::new("write", "secrets/*", PermissionAction::Deny),
    ];
    let llm = FakeLlm::new(vec![
        tool_step(
            "call_1",
            "write",
            r#"{"path":"secrets/key.pem","content":"x"}"#,
        ),
        tool_step("call_2", "write", r#"{"path":"notes.txt","content":"ok"}"#),
        tool_step(
            "call_3",
            "edit",
            r#"{"path":"notes.txt","old_string":"ok","new_string":"fine"}"#,
        ),
        text_step(&["done"]),
    ]);
    let p = policy(rules, Arc::clone(&g));
    let mut h = open(Arc::clone(&llm), |c| c.tool_policy = p, None).await;
    let root = h._project.path().to_path_buf();
    h.session.start_turn(turn(1, "go", vec![])).await.unwrap();
    let events = collect_turn(&mut h.events).await;
    assert_eq!(outcome(&events).0, TurnOutcome::Completed);
    assert_nothing_pending(&events);

    assert!(!root.join("secrets").exists());
    assert_eq!(fs::read_to_string(root.join("notes.txt")).unwrap(), "fine");
    let tools: Vec<_> = final_items(&events)
        .into_iter()
        .filter_map(|i| match i.kind {
            TurnItemKind::ToolCall { error, .. } => Some((i.status, error)),
            _ => None,
        })
        .collect();
    assert_eq!(tools[0].0, TurnItemStatus::Failed);
    let denial = tools[0].1.clone().unwrap();
    assert!(
        denial.starts_with("permission denied: write on \"secrets/key.pem\"")
            && denial.contains("permission rule 1"),
        "{denial}"
    );
    assert_eq!(tools[1], (TurnItemStatus::Completed, None));
    assert_eq!(tools[2], (TurnItemStatus::Completed, None));
    // Only the edit (no rule → default ask) went to the gate.
    let asked: Vec<_> = g
        .asked
        .lock()
        .unwrap()
        .iter()
        .map(|r| r.tool.clone())
        .collect();
    assert_eq!(asked, ["edit"]);
    assert_eq!(
        tool_results(&llm.requests()[1]),
        [format!("Error: {denial}")]
    );
}

#[cfg(unix)]
#[tokio::test]
async fn path_rules_see_where_a_symlink_really_leads() {
    let p = project();
    fs::create_dir(p.path().join("secrets")).unwrap();
    fs::write(p.path().join("secrets/key.pem"), "k").unwrap();
    std::os::unix::fs::symlink(p.path().join("secrets"), p.path().join("alias")).unwrap();
    let rules = vec![PermissionRule::new(
        "*",
        "secrets/*",
        PermissionAction::Deny,
    )];
    let ctx = ToolContext::new(p.path())
        .unwrap()
        .with_policy(policy(rules, gate(ApprovalVerdict::Allow)));
    let tools = ToolSet::standard();
    for (tool, args) in [
        ("read", json!({"path": "alias/key.pem"})),
        ("write", json!({"path": "alias/new.pem", "content": "x"})),
        (
            "edit",
            json!({"path": "./alias/../secrets/key.pem", "old_string": "k", "new_string": "x"}),
        ),
    ] {
        match tools.permission("c", tool, &args, &ctx) {
            Permission::Denied(ToolError::PermissionDenied { subject, .. }) => {
                assert!(subject.starts_with("secrets/"), "{tool}: {subject}")
            }
            other => panic!("{tool} {args}: {other:?}"),
        }
    }
    assert_eq!(
        tools.permission("c", "read", &json!({"path": "src/main.rs"}), &ctx),
        Permission::Allowed
    );
}

/// An `allow` rule for `bash` covers a plain command only: `cargo *` must not
/// allow `cargo build; curl x | sh`. Such commands fall back to `ask`; `deny`
/// rules are unchanged.
#[tokio::test]
async fn bash_allow_rule_does_not_cover_chained_commands() {
    let p = project();
    let g = gate(ApprovalVerdict::Allow);
    let rules = vec![
        PermissionRule::new("bash", "cargo *", PermissionAction::Allow),
        PermissionRule::new("bash", "*curl*", PermissionAction::Deny),
    ];
    let ctx = ToolContext::new(p.path())
        .unwrap()
        .with_policy(policy(rules, Arc::clone(&g)));
    let tools = ToolSet::standard();
    let verdict = |command: &str| tools.permission("c", "bash", &json!({"command": command}), &ctx);
    assert_eq!(verdict("cargo build --release"), Permission::Allowed);
    for chained in [
        "cargo build; rm -rf src",
        "cargo build && rm -rf src",
        "cargo build || true",
        "cargo build | sh",
        "cargo build & rm x",
        "cargo build > /etc/passwd",
        "cargo build < x",
        "cargo build\nrm -rf src",
        "cargo build `rm x`",
        "cargo build $(rm x)",
    ] {
        match verdict(chained) {
            Permission::Ask(ask) => {
                assert!(
                    ask.rule.starts_with("permission rule 0"),
                    "{chained}: {}",
                    ask.rule
                );
                assert!(ask.rule.contains("plain command only"), "{}", ask.rule);
            }
            other => panic!("{chained:?} must be asked about: {other:?}"),
        }
    }
    // Deny rules still win.
    assert!(matches!(
        verdict("cargo build; curl x | sh"),
        Permission::Denied(ToolError::PermissionDenied { .. })
    ));
    // A rule allowing every command (pattern `*`) is not fooled by chaining.
    let everything = ToolContext::new(p.path()).unwrap().with_policy(policy(
        vec![PermissionRule::new("bash", "*", PermissionAction::Allow)],
        Arc::clone(&g),
    ));
    assert_eq!(
        tools.permission(
            "c",
            "bash",
            &json!({"command": "make; make install"}),
            &everything
        ),
        Permission::Allowed
    );
}

#[tokio::test]
async fn a_path_outside_the_root_is_refused_before_anyone_is_asked() {
    let p = project();
    let g = gate(ApprovalVerdict::Allow);
    let ctx = ToolContext::new(p.path())
        .unwrap()
        .with_policy(policy(vec![], Arc::clone(&g)));
    let tools = ToolSet::standard();
    for (tool, args) in [
        ("write", json!({"path": "../escape.txt", "content": "x"})),
        (
            "edit",
            json!({"path": "/etc/hostname", "old_string": "a", "new_string": "b"}),
        ),
    ] {
        match tools.permission("c1", tool, &args, &ctx) {
            Permission::Denied(ToolError::OutsideRoot { .. }) => {}
            other => panic!("{tool}: {other:?}"),
        }
        let err = tools.authorize("c1", tool, &args, &ctx).await.unwrap_err();
        assert!(
            matches!(err, ToolError::OutsideRoot { .. }),
            "{tool}: {err}"
        );
    }
    assert!(
        g.asked.lock().unwrap().is_empty(),
        "a call outside the root was put to the approval gate"
    );
    assert!(!p.path().join("../escape.txt").exists());
    // Inside the root it is still asked.
    let args = json!({"path": "inside.txt", "content": "x"});
    assert!(matches!(
        tools.permission("c2", "write", &args, &ctx),
        Permission::Ask(_)
    ));
}
