//! Permission rules of the built-in agent's tools, and the approval hook.
//!
//! A rule is `{tool, pattern, action}`: `tool` and `pattern` are globs, `action`
//! is [`PermissionAction::Allow`], [`PermissionAction::Ask`] or
//! [`PermissionAction::Deny`]. A call is matched against its tool's name and its
//! *subject*, the tool's primary argument ([`crate::tools::Tool::permission_subject`]):
//! the root-relative path for file tools, where the argument really leads with
//! symlinks resolved (`src/main.rs`, `.` for the root), the whole command for `bash`.
//!
//! Evaluation ([`PermissionRules::evaluate`]): the **last** matching rule wins;
//! when none matches, the default applies: read-only tools are allowed, mutating
//! tools (`write`, `edit`, `bash`) ask. Defaults therefore behave like rules placed
//! before the configured ones, so per-project rules appended after the global ones
//! override them.
//!
//! Glob syntax (the `globset` crate): `*` matches any run of characters *including*
//! `/` and newlines, `?` one character, `[abc]` a class, `{a,b}` alternatives,
//! `**` is the same as `*`. Patterns match the whole subject: `git *` matches
//! `git status` but not `sudo git status`. A `bash` pattern sees the command as one
//! string, so `rm *` does not match `cd x && rm y`: use `deny` rules as a seat belt,
//! not as a sandbox. Conversely an `allow` rule for `bash` applies only to a plain
//! command: one with shell control characters ([`has_shell_control`]: `;`, `&`,
//! `|`, backticks, `$(`, `>`, `<`, line breaks) is asked about instead, so
//! `cargo *` does not allow `cargo build; curl x | sh`. A rule whose pattern is
//! `*` (every command) still allows such commands.
//!
//! An `ask` is put to the user as a runtime request and the turn waits for the
//! answer (`crate::approvals`), unless the tool policy sets an automatic
//! [`ApprovalGate`] (e.g. [`AllowAll`] for tests and unattended embeddings).

use std::sync::Arc;

use globset::{GlobBuilder, GlobMatcher};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// What happens to a matching tool call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum PermissionAction {
    /// The tool runs without asking.
    Allow,
    /// The [`ApprovalGate`] is asked first; the tool runs only if it allows.
    Ask,
    /// The tool does not run; the model reads a denial instead of its result.
    Deny,
}

impl PermissionAction {
    /// The action as written in config files (`allow`, `ask`, `deny`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Allow => "allow",
            Self::Ask => "ask",
            Self::Deny => "deny",
        }
    }
}

/// One configured rule, e.g. `{tool = "bash", pattern = "git *", action = "allow"}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PermissionRule {
    /// Glob over tool names (`bash`, `*`, `{write,edit}`).
    pub tool: String,
    /// Glob over the call's subject (path or command); `*` matches every call.
    #[serde(default = "any")]
    pub pattern: String,
    /// What a matching call gets.
    pub action: PermissionAction,
}

fn any() -> String {
    "*".to_owned()
}

impl PermissionRule {
    /// A rule from its three parts.
    pub fn new(
        tool: impl Into<String>,
        pattern: impl Into<String>,
        action: PermissionAction,
    ) -> Self {
        Self {
            tool: tool.into(),
            pattern: pattern.into(),
            action,
        }
    }
}

/// A rule whose glob does not compile.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "permission rule {index} ({field} = {glob:?}) is not a valid glob: {message}; \
     fix the pattern (use * for any text, ? for one character)"
)]
pub struct PermissionRuleError {
    /// 0-based position of the rule in the list.
    pub index: usize,
    /// `tool` or `pattern`.
    pub field: &'static str,
    /// The glob as written.
    pub glob: String,
    /// The glob parser's message.
    pub message: String,
}

#[derive(Clone, Debug)]
struct CompiledRule {
    rule: PermissionRule,
    tool: GlobMatcher,
    pattern: GlobMatcher,
}

/// Where a decision came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DecisionSource {
    /// The tool's default (read-only → allow, mutating → ask).
    Default,
    /// The configured rule at this 0-based index (the last one that matched).
    Rule(usize),
}

/// The outcome of [`PermissionRules::evaluate`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    /// What to do with the call.
    pub action: PermissionAction,
    /// Which rule decided it.
    pub source: DecisionSource,
}

/// An ordered list of rules; see the module docs. Cheap to clone.
#[derive(Clone, Debug, Default)]
pub struct PermissionRules {
    rules: Arc<[CompiledRule]>,
}

impl PermissionRules {
    /// No rules: every tool gets its default.
    pub fn defaults() -> Self {
        Self::default()
    }

    /// Compiles `rules` (kept in order; the last match wins).
    ///
    /// Errors: [`PermissionRuleError`] naming the first rule whose glob is invalid.
    pub fn new(rules: Vec<PermissionRule>) -> Result<Self, PermissionRuleError> {
        let compiled = rules
            .into_iter()
            .enumerate()
            .map(|(index, rule)| {
                Ok(CompiledRule {
                    tool: compile(index, "tool", &rule.tool)?,
                    pattern: compile(index, "pattern", &rule.pattern)?,
                    rule,
                })
            })
            .collect::<Result<Vec<_>, PermissionRuleError>>()?;
        Ok(Self {
            rules: compiled.into(),
        })
    }

    /// These rules followed by `later` (which win over these when both match):
    /// e.g. global rules, then a project's overrides.
    ///
    /// Errors: as [`Self::new`], with indices counted in the combined list.
    pub fn then(&self, later: Vec<PermissionRule>) -> Result<Self, PermissionRuleError> {
        let mut all = self.rules();
        all.extend(later);
        Self::new(all)
    }

    /// The rules as configured, in order.
    pub fn rules(&self) -> Vec<PermissionRule> {
        self.rules.iter().map(|r| r.rule.clone()).collect()
    }

    /// The configured rule at 0-based `index`.
    pub fn rule(&self, index: usize) -> Option<&PermissionRule> {
        self.rules.get(index).map(|r| &r.rule)
    }

    /// Whether some rule for `tool` denies or asks (so a directory walk of that
    /// tool must check each entry, `crate::tools::walker`).
    pub fn restricts(&self, tool: &str) -> bool {
        self.rules
            .iter()
            .any(|r| r.rule.action != PermissionAction::Allow && r.tool.is_match(tool))
    }

    /// The action for a call of `tool` on `subject`; `mutating` is the tool's
    /// [`crate::tools::Tool::mutating`] marker, which picks the default.
    pub fn evaluate(&self, tool: &str, subject: &str, mutating: bool) -> Decision {
        let matched = self
            .rules
            .iter()
            .enumerate()
            .rev()
            .find(|(_, r)| r.tool.is_match(tool) && r.pattern.is_match(subject));
        match matched {
            Some((index, rule)) => Decision {
                action: rule.rule.action,
                source: DecisionSource::Rule(index),
            },
            None => Decision {
                action: default_action(mutating),
                source: DecisionSource::Default,
            },
        }
    }
}

/// Characters and sequences that make a shell command more than one plain
/// command: `;`, `&` (`&&`, background), `|`, backticks, `$(`, redirections
/// `>` `<`, and line breaks.
const SHELL_CONTROL: &[&str] = &[";", "&", "|", "`", "$(", ">", "<", "\n", "\r"];

/// True when `command` chains, pipes, backgrounds, redirects or substitutes
/// ([`SHELL_CONTROL`], quoted or not: the check is deliberately blunt). An
/// `allow` rule for `bash` does not apply to such a command, which is asked
/// about instead (`crate::tools::ToolSet::permission`), unless its pattern is
/// `*` (it allows every command anyway); `deny` rules still apply.
pub fn has_shell_control(command: &str) -> bool {
    SHELL_CONTROL.iter().any(|c| command.contains(c))
}

/// The action when no rule matches: `allow` for read-only tools, `ask` for mutating ones.
pub fn default_action(mutating: bool) -> PermissionAction {
    if mutating {
        PermissionAction::Ask
    } else {
        PermissionAction::Allow
    }
}

fn compile(
    index: usize,
    field: &'static str,
    glob: &str,
) -> Result<GlobMatcher, PermissionRuleError> {
    GlobBuilder::new(glob)
        .literal_separator(false)
        .backslash_escape(true)
        .build()
        .map(|g| g.compile_matcher())
        .map_err(|e| PermissionRuleError {
            index,
            field,
            glob: glob.to_owned(),
            message: e.kind().to_string(),
        })
}

/// A tool call waiting for approval (an `ask` decision).
#[derive(Clone, Debug, PartialEq)]
pub struct ApprovalRequest {
    /// The model's id of the call (the transcript item's `call_id`).
    pub call_id: String,
    /// The tool's name.
    pub tool: String,
    /// The call's subject: root-relative path or command.
    pub subject: String,
    /// The call's arguments object, as the model sent it.
    pub input: Value,
    /// Which rule asked: `permission rule N` (0-based) or `the default rule`.
    pub rule: String,
    /// The proposed change of a `write` / `edit` call as a unified diff (CHG-05), filled
    /// in before the user is asked ([`crate::tools::diff::proposed_diff`]); `None` otherwise.
    pub diff: Option<String>,
}

/// What an [`ApprovalGate`] tells the agent loop to do with one call: run it or not.
/// (The user's recorded answer, with its once/always scope, is
/// `knife_protocol::ApprovalDecision`; this is its effect on the call.)
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ApprovalVerdict {
    /// Run the tool.
    Allow,
    /// Do not run it; `message` (the user's words, if any) is passed to the model.
    Deny {
        /// Why, in the user's words.
        message: Option<String>,
    },
}

/// Decides `ask` calls automatically when set as `ToolPolicy::approvals` (instead
/// of asking the user). The agent loop awaits [`ApprovalGate::request`] before it
/// marks the call running; the turn waits meanwhile. An interrupt drops the
/// pending future (the turn's task is cancelled at that await), so an
/// implementation must treat a dropped request as abandoned.
#[async_trait::async_trait]
pub trait ApprovalGate: Send + Sync + 'static {
    /// Asks for permission to run one call and waits for the answer.
    async fn request(&self, request: ApprovalRequest) -> ApprovalVerdict;
}

/// An automatic gate that allows every `ask` at once (tests, unattended use:
/// `ToolPolicy { approvals: Some(Arc::new(AllowAll)), .. }`). `deny` rules still
/// apply (they never reach a gate).
#[derive(Clone, Copy, Debug, Default)]
pub struct AllowAll;

#[async_trait::async_trait]
impl ApprovalGate for AllowAll {
    async fn request(&self, _request: ApprovalRequest) -> ApprovalVerdict {
        ApprovalVerdict::Allow
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::PermissionAction::{Allow, Ask, Deny};
    use super::*;

    fn rules(list: &[(&str, &str, PermissionAction)]) -> PermissionRules {
        PermissionRules::new(
            list.iter()
                .map(|(t, p, a)| PermissionRule::new(*t, *p, *a))
                .collect(),
        )
        .unwrap()
    }

    #[test]
    fn defaults_allow_read_only_tools_and_ask_for_mutating_ones() {
        let none = PermissionRules::defaults();
        for tool in ["read", "list", "glob", "grep"] {
            let d = none.evaluate(tool, "src/main.rs", false);
            assert_eq!(d.action, Allow, "{tool}");
            assert_eq!(d.source, DecisionSource::Default);
        }
        assert_eq!(none.evaluate("write", "a.txt", true).action, Ask);
        assert_eq!(none.evaluate("edit", "a.txt", true).action, Ask);
        assert_eq!(none.evaluate("bash", "ls", true).action, Ask);
    }

    #[test]
    fn table_of_rule_lists_and_calls() {
        struct Case {
            rules: &'static [(&'static str, &'static str, PermissionAction)],
            tool: &'static str,
            subject: &'static str,
            mutating: bool,
            want: PermissionAction,
        }
        let cases = [
            // A matching rule overrides the default, both ways.
            Case {
                rules: &[("bash", "git status", Allow)],
                tool: "bash",
                subject: "git status",
                mutating: true,
                want: Allow,
            },
            Case {
                rules: &[("read", "*", Deny)],
                tool: "read",
                subject: "a",
                mutating: false,
                want: Deny,
            },
            // Non-matching rules leave the default.
            Case {
                rules: &[("bash", "git status", Allow)],
                tool: "bash",
                subject: "git push",
                mutating: true,
                want: Ask,
            },
            Case {
                rules: &[("write", "*", Allow)],
                tool: "bash",
                subject: "ls",
                mutating: true,
                want: Ask,
            },
            // Last match wins, in either order.
            Case {
                rules: &[("bash", "*", Deny), ("bash", "git *", Allow)],
                tool: "bash",
                subject: "git log",
                mutating: true,
                want: Allow,
            },
            Case {
                rules: &[("bash", "git *", Allow), ("bash", "*", Deny)],
                tool: "bash",
                subject: "git log",
                mutating: true,
                want: Deny,
            },
            Case {
                rules: &[("bash", "git *", Allow), ("bash", "git push*", Ask)],
                tool: "bash",
                subject: "git push origin main",
                mutating: true,
                want: Ask,
            },
            // `*` crosses `/` and newlines; the pattern must match the whole subject.
            Case {
                rules: &[("write", "src/*", Allow)],
                tool: "write",
                subject: "src/a/b.rs",
                mutating: true,
                want: Allow,
            },
            Case {
                rules: &[("write", "src/*", Allow)],
                tool: "write",
                subject: "tests/src/a.rs",
                mutating: true,
                want: Ask,
            },
            Case {
                rules: &[("bash", "echo *", Allow)],
                tool: "bash",
                subject: "echo a\nrm -rf x",
                mutating: true,
                want: Allow,
            },
            Case {
                rules: &[("bash", "git *", Allow)],
                tool: "bash",
                subject: "sudo git status",
                mutating: true,
                want: Ask,
            },
            // Tool globs and alternatives.
            Case {
                rules: &[("*", "*.env", Deny)],
                tool: "read",
                subject: "config/.env",
                mutating: false,
                want: Deny,
            },
            Case {
                rules: &[("{write,edit}", "docs/*", Allow)],
                tool: "edit",
                subject: "docs/x.md",
                mutating: true,
                want: Allow,
            },
            Case {
                rules: &[("{write,edit}", "docs/*", Allow)],
                tool: "bash",
                subject: "docs/x.md",
                mutating: true,
                want: Ask,
            },
            Case {
                rules: &[("bash", "rm -rf ?", Deny)],
                tool: "bash",
                subject: "rm -rf /",
                mutating: true,
                want: Deny,
            },
        ];
        for (i, case) in cases.iter().enumerate() {
            let got = rules(case.rules).evaluate(case.tool, case.subject, case.mutating);
            assert_eq!(
                got.action, case.want,
                "case {i}: {} {:?}",
                case.tool, case.subject
            );
        }
    }

    #[test]
    fn the_decision_names_the_last_matching_rule() {
        let r = rules(&[
            ("bash", "*", Deny),
            ("bash", "ls*", Allow),
            ("read", "*", Deny),
        ]);
        assert_eq!(
            r.evaluate("bash", "ls -la", true).source,
            DecisionSource::Rule(1)
        );
        assert_eq!(
            r.evaluate("bash", "rm x", true).source,
            DecisionSource::Rule(0)
        );
    }

    #[test]
    fn later_rules_override_earlier_ones() {
        let global = rules(&[("bash", "*", Deny)]);
        let project = global
            .then(vec![PermissionRule::new("bash", "cargo *", Allow)])
            .unwrap();
        assert_eq!(project.evaluate("bash", "cargo test", true).action, Allow);
        assert_eq!(project.evaluate("bash", "curl x", true).action, Deny);
        assert_eq!(project.rules().len(), 2);
    }

    #[test]
    fn an_invalid_glob_names_the_rule_and_field() {
        let err = PermissionRules::new(vec![
            PermissionRule::new("bash", "*", Allow),
            PermissionRule::new("bash", "[unclosed", Deny),
        ])
        .unwrap_err();
        assert_eq!(err.index, 1);
        assert_eq!(err.field, "pattern");
        assert!(err.to_string().contains("[unclosed"), "{err}");
        assert!(err.to_string().contains("fix the pattern"), "{err}");
    }

    #[test]
    fn rules_deserialize_from_config_with_a_default_pattern() {
        let rule: PermissionRule =
            serde_json::from_value(serde_json::json!({"tool": "bash", "action": "deny"})).unwrap();
        assert_eq!(rule, PermissionRule::new("bash", "*", Deny));
        let rule: PermissionRule = serde_json::from_value(
            serde_json::json!({"tool": "edit", "pattern": "src/*", "action": "allow"}),
        )
        .unwrap();
        assert_eq!(rule.action, Allow);
        assert_eq!(rule.action.as_str(), "allow");
    }

    #[tokio::test]
    async fn allow_all_allows() {
        let d = AllowAll
            .request(ApprovalRequest {
                call_id: "c".into(),
                tool: "bash".into(),
                subject: "ls".into(),
                input: serde_json::json!({"command": "ls"}),
                rule: "the default rule".into(),
                diff: None,
            })
            .await;
        assert_eq!(d, ApprovalVerdict::Allow);
    }
}
