//! Calls made to one real agent by the end-to-end tests of its front doors, and the checks they
//! share: [`grpc`] for the bad-request tests (`grpc_bad_requests_*.rs`: a refused call has the
//! right code, names its field and changes nothing), [`cli`] for the operator actions run
//! through the `leasehold` binary (`cli_actions_*.rs`: exit code, output, rows and audit log).
//!
//! Like the rest of the harness these return [`anyhow::Result`] and never unwrap; the checks
//! of a command's output are assertions (`#[track_caller]`, so a failure points at the test).

pub mod cli;
pub mod grpc;
