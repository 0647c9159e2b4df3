//! knife-agent
