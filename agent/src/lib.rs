//! The Leasehold agent: the runtime that claims, runs and heartbeats tasks, the built-in
//! handlers, and the gRPC server. This first cut carries the store benchmark and the exit-code
//! mapping; the runtime loops arrive with the agent issue.

pub mod bench;
pub mod exit;
