//! The Leasehold agent: the runtime that claims, runs and heartbeats tasks ([`runtime`]), the
//! [`Handler`] trait and the built-in handlers ([`handlers`]), configuration ([`config`]),
//! logs and metrics, and the `leasehold-agent` command line ([`cli`]).

pub mod bench;
pub mod cli;
pub mod config;
pub mod error;
pub mod exit;
pub mod grpc;
pub mod handler;
pub mod handlers;
pub mod runtime;
pub mod telemetry;

pub use error::AgentError;
pub use handler::{
    ContextStopper, Handler, HandlerError, HandlerRegistry, Outcome, StopReason, TaskContext,
    TaskTransaction,
};
