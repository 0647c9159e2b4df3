//! knife-store
