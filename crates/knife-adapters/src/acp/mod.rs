//! The `acp` driver: agents speaking the Agent Client Protocol (v1) over stdio,
//! one knife thread per agent process unless the agent advertises otherwise.

pub mod mapping;
pub mod types;
