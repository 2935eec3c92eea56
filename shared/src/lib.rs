//! Leasehold's shared core: domain types, the task state machine, the [`store::Store`] trait
//! written once over a thin `Driver` per backend (PostgreSQL always; SQLite with the cargo
//! feature `sqlite`, on by default), and local identity (socket paths, uids).
//!
//! This crate knows nothing of gRPC or terminals: the agent and the console build on it, never
//! the other way round.

// Only the agent's exec spawner may use unsafe (the workspace lint is `deny` for its sake).
#![forbid(unsafe_code)]

pub mod domain;
pub mod local;
pub mod store;

pub use domain::{
    Actor, AgentId, AttemptOutcome, InputLimits, LeaseEpoch, LeaseKey, Progress, Role, TaskError,
    TaskId, TaskStatus, TaskType, ValidationError,
};
pub use store::{Store, StoreError};
