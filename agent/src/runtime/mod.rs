//! The agent runtime.

pub mod progress;
