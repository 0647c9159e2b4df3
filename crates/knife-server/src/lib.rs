//! knife-server
