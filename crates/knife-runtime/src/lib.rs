//! knife-runtime
