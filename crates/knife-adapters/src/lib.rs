//! External agent runtimes supervised by knife as child processes.
//!
//! - [`acp`]: agents speaking the Agent Client Protocol over stdio (claude-agent-acp,
//!   `gemini --acp`, `opencode acp`, …), driver `acp`.

pub mod acp;
