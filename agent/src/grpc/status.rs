//! The one mapping from store errors to gRPC statuses. Messages say what to do; database
//! internals are logged, not sent.

use leasehold_shared::StoreError;
use tonic::Status;

/// The status a client gets for `error` in `op`.
pub fn from_store(op: &str, error: StoreError) -> Status {
    match &error {
        StoreError::Invalid(e) => Status::invalid_argument(e.to_string()),
        StoreError::NotFound(_)
        | StoreError::ScheduleNotFound(_)
        | StoreError::LockNotFound(_)
        | StoreError::ShardGroupNotFound(_) => Status::not_found(error.to_string()),
        StoreError::ScheduleExists { .. } => Status::already_exists(error.to_string()),
        StoreError::Transition { .. } | StoreError::ShardGroupExists { .. } => {
            Status::failed_precondition(error.to_string())
        }
        StoreError::PermissionDenied { .. } => Status::permission_denied(error.to_string()),
        StoreError::Busy { .. } => Status::unavailable(error.to_string()),
        e if e.is_connection() => {
            tracing::warn!(op, error = %format!("{error:#}"), "database unreachable");
            Status::unavailable(format!(
                "{op}: the agent cannot reach the database; nothing changed, try again"
            ))
        }
        StoreError::Corrupt { .. } => {
            tracing::error!(op, error = %error, "bad database state");
            Status::internal(format!("{op}: {error}"))
        }
        _ => {
            tracing::error!(op, error = %format!("{error:#}"), "store operation failed");
            Status::internal(format!(
                "{op} failed in the database (see the agent's log); nothing changed"
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use leasehold_shared::{TaskId, ValidationError};
    use tonic::Code;

    #[test]
    fn store_errors_map_to_the_codes_clients_act_on() {
        let cases = [
            (
                StoreError::Invalid(ValidationError::Invalid {
                    field: "payload",
                    detail: "too big".into(),
                }),
                Code::InvalidArgument,
            ),
            (StoreError::NotFound(TaskId(9)), Code::NotFound),
            (
                StoreError::PermissionDenied {
                    action: "cancel".into(),
                    actor: "dash".into(),
                },
                Code::PermissionDenied,
            ),
            (StoreError::Busy { op: "claim" }, Code::Unavailable),
            (StoreError::timed_out("x"), Code::Unavailable),
        ];
        for (error, code) in cases {
            assert_eq!(from_store("op", error).code(), code);
        }
    }
}
