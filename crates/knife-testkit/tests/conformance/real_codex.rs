//! The conformance rig of the real `codex app-server` (opt-in: the peer suite's
//! `knife_peer_codex` gate, set when codex is installed or `KNIFE_PEERS` selects it),
//! its model calls answered by the mock LLM (OpenAI Responses over loopback).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use knife_adapters::codex::{CodexAdapter, CodexConfig};
use knife_protocol::*;
use knife_runtime::process_groups::ProcessGroups;
use knife_runtime::*;
use knife_store::Store;
use knife_testkit::mock_llm::{MockLlmHandle, ScriptResponse, ToolCallSpec};
use serde_json::json;

use super::rigs::{Peer, Rig, Step, manager, mock_llm, mock_responses, rig};

/// codex's shell call, escalated so codex asks for approval whatever its policy.
fn shell(command: &str) -> ScriptResponse {
    let arguments = json!({
        "cmd": command,
        "sandbox_permissions": "require_escalated",
        "justification": "The conformance suite asks for this.",
    });
    ScriptResponse {
        tool_calls: vec![ToolCallSpec {
            name: "exec_command".into(),
            arguments: arguments.to_string(),
            ..ToolCallSpec::default()
        }],
        ..ScriptResponse::default()
    }
}

/// The codex driver on the installed codex (`knife_prereqs::peer_bin("codex")`).
pub async fn real_codex(steps: &[Step]) -> Rig {
    let codex = knife_prereqs::peer_bin("codex").unwrap_or_else(|missing| panic!("{missing}"));
    let mock = mock_llm(mock_responses(steps, shell)).await;
    let instance = ProviderInstanceId::from("codex");
    rig(&instance.clone(), move |dir| {
        let home = dir.join("codex-home");
        std::fs::create_dir(&home).unwrap();
        std::fs::write(
            home.join("config.toml"),
            format!(
                "model = \"mock-model\"\nmodel_provider = \"mock\"\n\n[model_providers.mock]\n\
                 name = \"knife mock\"\nbase_url = \"{}\"\nenv_key = \"MOCK_API_KEY\"\n\
                 wire_api = \"responses\"\nrequest_max_retries = 0\nstream_max_retries = 0\n",
                mock.base_url()
            ),
        )
        .unwrap();
        Box::new(RealCodex {
            instance,
            codex,
            home,
            mock,
        })
    })
    .await
}

struct RealCodex {
    instance: ProviderInstanceId,
    codex: PathBuf,
    home: PathBuf,
    mock: MockLlmHandle,
}

impl Peer for RealCodex {
    fn driver(&self) -> &'static str {
        "codex"
    }
    fn prompt(&self, step: Step) -> String {
        format!("conformance step {step:?}")
    }
    fn execution(&self, store: &Store, clock: &SharedClock) -> ExecutionService {
        let mut config = CodexConfig::new(self.instance.clone());
        config.command = self.codex.clone().into();
        config.args = [
            "app-server",
            "--disable",
            "plugins",
            "--disable",
            "apps",
            "--disable",
            "remote_plugin",
            "--disable",
            "in_app_updates",
            "--disable",
            "plugin_sharing",
        ]
        .map(Into::into)
        .to_vec();
        config.env = vec![
            ("CODEX_HOME".into(), self.home.as_os_str().to_owned()),
            ("MOCK_API_KEY".into(), "mock-key".into()),
        ];
        config.model = Some("mock-model".into());
        config.process_groups = Some(ProcessGroups::new(store.clone(), Arc::clone(clock)));
        config.request_timeout = Duration::from_secs(15);
        manager(
            store,
            clock,
            &self.instance,
            Arc::new(CodexAdapter::new(config)),
        )
    }
    fn approval_answered_before_interrupt(&self) -> Option<bool> {
        None
    }
    fn resumed_with_context(&self, earlier: &str) -> bool {
        self.mock
            .model_requests()
            .last()
            .is_some_and(|r| r.body_text.contains(earlier))
    }
    fn skips_malformed_output(&self) -> bool {
        false
    }
    fn runs_a_process(&self) -> bool {
        true
    }
}
