//! Identifiers. Allocated ids are a short type prefix plus a UUID v7
//! (time-ordered), e.g. `thread_0193c7…`; derived ids are deterministic functions of
//! their parents (`run:<thread>:<ordinal>`), so a replayed stream upserts instead of
//! duplicating (ARCHITECTURE.md "Identifiers").

use serde::{Deserialize, Serialize};
use std::fmt;

macro_rules! string_id {
    ($(#[$doc:meta])* $name:ident, $prefix:literal) => {
        $(#[$doc])*
        #[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, schemars::JsonSchema)]
        #[serde(transparent)]
        pub struct $name(pub String);

        impl $name {
            /// Prefix of allocated ids of this kind (`<prefix>_<uuid v7>`).
            pub const PREFIX: &'static str = $prefix;

            /// Allocates a fresh, time-ordered id: `<prefix>_<uuid v7 simple>`.
            pub fn new() -> Self {
                Self(format!("{}_{}", $prefix, uuid::Uuid::now_v7().simple()))
            }

            /// The id as a string slice.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl Default for $name {
            fn default() -> Self {
                Self::new()
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl From<&str> for $name {
            fn from(s: &str) -> Self {
                Self(s.to_owned())
            }
        }

        impl From<String> for $name {
            fn from(s: String) -> Self {
                Self(s)
            }
        }
    };
}

string_id!(/// A project (workspace root).
    ProjectId, "project");
string_id!(/// An app thread: one conversation inside a project.
    ThreadId, "thread");
string_id!(/// A run: one user request on a thread. Usually derived, see [`RunId::for_thread`].
    RunId, "run");
string_id!(/// One event of the event log.
    EventId, "event");
string_id!(/// A node of a run's work tree (root turn, tool call, approval).
    NodeId, "node");
string_id!(/// A transcript item (user message, assistant text, reasoning, tool call, error).
    TurnItemId, "item");
string_id!(/// One live runtime of a provider instance (often one OS process).
    ProviderSessionId, "psession");
string_id!(/// The runtime's native conversation backing an app thread.
    ProviderThreadId, "pthread");
string_id!(/// The runtime's execution of one run attempt.
    ProviderTurnId, "pturn");
string_id!(/// Something the runtime asks the user mid-turn (approval, input).
    RuntimeRequestId, "request");
string_id!(/// A configured driver (`openai`, `local-ollama`, …); named in `knife.toml`.
    ProviderInstanceId, "instance");
string_id!(/// A revert of a thread's files to a checkpoint (CHG-04).
    RevertId, "revert");
string_id!(/// A message waiting in a thread's queue, or a steer not yet delivered (TURN-01).
    QueuedMessageId, "queued");
string_id!(/// A command to the node driving a thread's run (SCALE-06, `thread.command`).
    ThreadCommandId, "command");
string_id!(/// A command to the node running a provider session (SCALE-06, `session.command`).
    SessionCommandId, "scommand");

impl RunId {
    /// The deterministic id of run `ordinal` (1-based) of `thread`: `run:<thread>:<ordinal>`.
    pub fn for_thread(thread: &ThreadId, ordinal: u32) -> Self {
        Self(format!("run:{thread}:{ordinal}"))
    }
}

impl NodeId {
    /// The root node of a run: `node:<run>:root`.
    pub fn root_of(run: &RunId) -> Self {
        Self(format!("node:{run}:root"))
    }
}

impl TurnItemId {
    /// The user message item that opened a run: `item:<run>:user`.
    pub fn user_message_of(run: &RunId) -> Self {
        Self(format!("item:{run}:user"))
    }

    /// The user-message item of steer `steer` delivered into `run` (TURN-01):
    /// `item:<run>:steer:<steer id>`. A runtime that takes the steer records this item.
    pub fn steer_of(run: &RunId, steer: &QueuedMessageId) -> Self {
        Self(format!("item:{run}:steer:{steer}"))
    }

    /// The `n`-th item (0-based) a provider turn produced: `item:<turn>:<n>`.
    pub fn of_turn(turn: &ProviderTurnId, n: u32) -> Self {
        Self(format!("item:{turn}:{n}"))
    }
}

impl ProviderSessionId {
    /// The shared session of a provider instance: `provider-session:<instance>:shared`.
    pub fn shared(instance: &ProviderInstanceId) -> Self {
        Self(format!("provider-session:{instance}:shared"))
    }

    /// The exclusive session of `thread` on `instance`: `provider-session:<instance>:<thread>`.
    pub fn exclusive(instance: &ProviderInstanceId, thread: &ThreadId) -> Self {
        Self(format!("provider-session:{instance}:{thread}"))
    }

    /// The shared session of `instance` on knife node `node` (SPEC SCALE-04/07): two
    /// nodes' shared sessions never collide. `provider-session:<instance>:shared@<node>`,
    /// or [`ProviderSessionId::shared`]'s form on the default node `local` (a single
    /// installation keeps its ids).
    pub fn shared_on(instance: &ProviderInstanceId, node: &str) -> Self {
        Self::on_node(Self::shared(instance), node)
    }

    /// The exclusive session of `thread` on `instance` run by node `node`:
    /// `provider-session:<instance>:<thread>@<node>` (the plain form on node `local`), so
    /// the session a node takes over is a new row, not the dead node's.
    pub fn exclusive_on(instance: &ProviderInstanceId, thread: &ThreadId, node: &str) -> Self {
        Self::on_node(Self::exclusive(instance, thread), node)
    }

    fn on_node(id: Self, node: &str) -> Self {
        if node == Self::DEFAULT_NODE {
            id
        } else {
            Self(format!("{}@{node}", id.0))
        }
    }

    /// The node of a single installation, whose session ids carry no node suffix.
    pub const DEFAULT_NODE: &'static str = "local";

    /// The knife node whose process runs this session: the `@<node>` suffix of
    /// [`ProviderSessionId::shared_on`] / [`ProviderSessionId::exclusive_on`], else
    /// [`ProviderSessionId::DEFAULT_NODE`] (ids without one: a single node's, or written
    /// before nodes were named). Node ids never contain `@`.
    pub fn node(&self) -> &str {
        self.0
            .rsplit_once('@')
            .map_or(Self::DEFAULT_NODE, |(_, node)| node)
    }
}

impl ProviderThreadId {
    /// `provider-thread:<driver>:<native id>`.
    pub fn native(driver: &str, native_id: &str) -> Self {
        Self(format!("provider-thread:{driver}:{native_id}"))
    }
}

impl ProviderTurnId {
    /// The provider turn executing `run`, attempt `attempt` (1-based): `provider-turn:<run>:<attempt>`.
    pub fn for_run(run: &RunId, attempt: u32) -> Self {
        Self(format!("provider-turn:{run}:{attempt}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocated_ids_are_prefixed_and_time_ordered() {
        let a = ThreadId::new();
        let b = ThreadId::new();
        assert!(a.as_str().starts_with("thread_"));
        assert_ne!(a, b);
        assert!(a < b, "uuid v7 ids sort by creation time");
    }

    #[test]
    fn derived_ids_are_deterministic() {
        let t = ThreadId::from("thread_x");
        assert_eq!(RunId::for_thread(&t, 3).as_str(), "run:thread_x:3");
        assert_eq!(RunId::for_thread(&t, 3), RunId::for_thread(&t, 3));
        let i = ProviderInstanceId::from("openai");
        assert_eq!(
            ProviderSessionId::shared(&i).as_str(),
            "provider-session:openai:shared"
        );
        let shared_b = ProviderSessionId::shared_on(&i, "node-b");
        assert_eq!(shared_b.as_str(), "provider-session:openai:shared@node-b");
        assert_eq!(shared_b.node(), "node-b");
        assert_eq!(
            ProviderSessionId::shared_on(&i, "local"),
            ProviderSessionId::shared(&i)
        );
        assert_eq!(ProviderSessionId::shared(&i).node(), "local");
        let ex = ProviderSessionId::exclusive_on(&i, &t, "n.1");
        assert_eq!(ex.as_str(), "provider-session:openai:thread_x@n.1");
        assert_eq!(ex.node(), "n.1");
    }
}
