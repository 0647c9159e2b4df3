//! knife-testkit
