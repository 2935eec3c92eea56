//! Leasehold's shared core: domain types, the task state machine, and the [`store::Store`]
//! trait with its PostgreSQL implementation.
//!
//! This crate knows nothing of gRPC or terminals: the agent and the console build on it, never
//! the other way round.

pub mod domain;
pub mod store;

pub use domain::{
    Actor, AgentId, AttemptOutcome, InputLimits, LeaseEpoch, LeaseKey, Progress, Role, TaskError,
    TaskId, TaskStatus, TaskType, ValidationError,
};
pub use store::{Store, StoreError};
