//! The one mapping from errors and gRPC statuses to the process's exit code (DESIGN §9).
//!
//! ```text
//! 0  ok
//! 1  a task failed, or a wait ended with failures or timed out; a lock someone else holds
//!    (`locks acquire`, after any `--wait`) or that is no longer the caller's (`locks renew`,
//!    `locks release --holder --fencing-token`: fenced). These are answers, not errors: the call
//!    worked, nothing changed, and the command returns the code itself
//! 2  usage or bad input: clap's own errors, local checks, a local file that cannot be read
//!    or stdout that cannot be written; INVALID_ARGUMENT, NOT_FOUND, ALREADY_EXISTS,
//!    FAILED_PRECONDITION, OUT_OF_RANGE, RESOURCE_EXHAUSTED
//! 3  cannot reach the agent or its database: connection failures, UNAVAILABLE,
//!    DEADLINE_EXCEEDED, and every status that is neither bad input nor permission (UNKNOWN,
//!    INTERNAL, CANCELLED, ABORTED, UNIMPLEMENTED, DATA_LOSS, and an error status claiming OK);
//!    also bad wire data: an agent that answers outside the contract is not one we can use;
//!    and `leasehold demo`'s database that cannot be opened, or its agents failing
//! 4  permission denied: UNAUTHENTICATED, PERMISSION_DENIED
//! ```
//!
//! When several independent calls are made (`cancel 1 2 3`), the exit code is the highest of
//! their codes.

use tonic::Code;

use crate::error::Error;

/// Everything went well.
pub const OK: u8 = 0;
/// A task failed, or a wait ended with failures (or timed out).
pub const TASK_FAILED: u8 = 1;
/// A lock held by someone else, or a holding that is gone (fenced): nothing changed. The same
/// number as [`TASK_FAILED`], as `flock -n` does: the call worked and the answer is no, which
/// no error ever exits with, so a script tells it from bad input (2), an unreachable agent
/// (3) and a refusal (4).
pub const LOCK_NOT_HELD: u8 = 1;
/// Usage or bad input.
pub const USAGE: u8 = 2;
/// The agent (or its database) cannot be reached, or it answered outside the contract.
pub const UNREACHABLE: u8 = 3;
/// Permission denied.
pub const DENIED: u8 = 4;

/// The exit code for an error.
pub fn exit_code(err: &Error) -> u8 {
    match err {
        Error::Usage(_) | Error::Local { .. } => USAGE,
        Error::Connect { .. } | Error::BadWire { .. } | Error::Database { .. } => UNREACHABLE,
        Error::Rpc { status, .. } => status_exit_code(status.code()),
    }
}

/// The exit code for a gRPC status code.
pub fn status_exit_code(code: Code) -> u8 {
    match code {
        Code::InvalidArgument
        | Code::NotFound
        | Code::AlreadyExists
        | Code::FailedPrecondition
        | Code::OutOfRange
        | Code::ResourceExhausted => USAGE,
        Code::Unauthenticated | Code::PermissionDenied => DENIED,
        Code::Unavailable
        | Code::DeadlineExceeded
        | Code::Unknown
        | Code::Internal
        | Code::Cancelled
        | Code::Aborted
        | Code::Unimplemented
        | Code::DataLoss
        // An error that says OK is not something the contract allows.
        | Code::Ok => UNREACHABLE,
    }
}

/// A status code in words, as printed at the end of an error line: `not found`.
pub fn code_words(code: Code) -> &'static str {
    match code {
        Code::Ok => "ok",
        Code::Cancelled => "cancelled",
        Code::Unknown => "unknown",
        Code::InvalidArgument => "invalid argument",
        Code::DeadlineExceeded => "deadline exceeded",
        Code::NotFound => "not found",
        Code::AlreadyExists => "already exists",
        Code::PermissionDenied => "permission denied",
        Code::ResourceExhausted => "resource exhausted",
        Code::FailedPrecondition => "failed precondition",
        Code::Aborted => "aborted",
        Code::OutOfRange => "out of range",
        Code::Unimplemented => "unimplemented",
        Code::Internal => "internal",
        Code::Unavailable => "unavailable",
        Code::DataLoss => "data loss",
        Code::Unauthenticated => "unauthenticated",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::convert::WireError;

    /// Every code tonic knows, by number, so a code added to tonic fails this test rather
    /// than silently falling into a bucket.
    #[test]
    fn every_status_code_has_its_documented_exit_code() {
        let expected: [(i32, Code, u8); 17] = [
            (0, Code::Ok, 3),
            (1, Code::Cancelled, 3),
            (2, Code::Unknown, 3),
            (3, Code::InvalidArgument, 2),
            (4, Code::DeadlineExceeded, 3),
            (5, Code::NotFound, 2),
            (6, Code::AlreadyExists, 2),
            (7, Code::PermissionDenied, 4),
            (8, Code::ResourceExhausted, 2),
            (9, Code::FailedPrecondition, 2),
            (10, Code::Aborted, 3),
            (11, Code::OutOfRange, 2),
            (12, Code::Unimplemented, 3),
            (13, Code::Internal, 3),
            (14, Code::Unavailable, 3),
            (15, Code::DataLoss, 3),
            (16, Code::Unauthenticated, 4),
        ];
        for (number, code, exit) in expected {
            assert_eq!(Code::from_i32(number), code, "code number {number}");
            assert_eq!(status_exit_code(code), exit, "{code:?}");
            let err = Error::rpc("call", tonic::Status::new(code, "m"));
            assert_eq!(exit_code(&err), exit, "{code:?} through Error");
            assert!(!code_words(code).is_empty());
        }
        // Numbers past the known ones are UNKNOWN in tonic.
        assert_eq!(status_exit_code(Code::from_i32(17)), UNREACHABLE);
    }

    #[test]
    fn a_transport_failure_inside_unknown_is_unreachable() {
        let mut status = tonic::Status::unknown("h2 protocol error: connection reset");
        status.set_source(std::sync::Arc::new(std::io::Error::other("reset")));
        assert_eq!(exit_code(&Error::rpc("watch", status)), UNREACHABLE);
    }

    #[test]
    fn local_and_wire_errors() {
        assert_eq!(exit_code(&Error::usage("bad")), USAGE);
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "no such file");
        assert_eq!(
            exit_code(&Error::Local {
                what: "reading --ca x".into(),
                source: io
            }),
            USAGE
        );
        assert_eq!(
            exit_code(&Error::Connect {
                addr: "a:1".into(),
                cause: "refused".into()
            }),
            UNREACHABLE
        );
        assert_eq!(
            exit_code(&Error::bad_wire(
                "get task 1",
                WireError::MissingField("task")
            )),
            UNREACHABLE
        );
    }
}
