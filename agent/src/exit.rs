//! The one mapping from errors to process exit codes (DESIGN §9): 0 ok · 1 a task failed ·
//! 2 usage or bad input · 3 cannot reach agent or database · 4 permission denied.

use leasehold_shared::StoreError;

use crate::error::AgentError;

/// Exit codes of `leasehold-agent` (the console has its own mapping in `console/src/exit.rs`
/// with the same numbers, and uses this one for the agents of `leasehold demo`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitCode {
    Ok = 0,
    TaskFailed = 1,
    Usage = 2,
    Unreachable = 3,
    PermissionDenied = 4,
    /// `leasehold-agent run --exit-when-idle --idle-timeout`: work remained when the timeout
    /// passed (also code 4: `run` has no permission checks of its own).
    IdleTimeout = 5,
}

impl ExitCode {
    /// The exit code an error should end the process with: from the typed [`AgentError`]
    /// first; errors of `main`/`cli` that still come through `anyhow` by their chain.
    pub fn for_error(error: &anyhow::Error) -> ExitCode {
        for cause in error.chain() {
            if let Some(agent) = cause.downcast_ref::<AgentError>() {
                return ExitCode::for_agent_error(agent);
            }
            if let Some(store) = cause.downcast_ref::<StoreError>() {
                return ExitCode::for_store_error(store);
            }
            if cause.downcast_ref::<clap::Error>().is_some() {
                return ExitCode::Usage;
            }
        }
        ExitCode::TaskFailed
    }

    /// The exit code of an error of the agent library.
    pub fn for_agent_error(error: &AgentError) -> ExitCode {
        match error {
            AgentError::Store(store) | AgentError::StoreWhile { source: store, .. } => {
                ExitCode::for_store_error(store)
            }
            AgentError::Settings(_) => ExitCode::Usage,
            // Exit 1 as when these were untyped: a library caller's bad argument, a dead
            // service, a server or log setup that failed (the command line reads the TLS
            // files and binds the socket itself first, as usage errors).
            AgentError::NoHandlers
            | AgentError::Invalid(_)
            | AgentError::Listen { .. }
            | AgentError::Tls { .. }
            | AgentError::Socket { .. }
            | AgentError::Grpc { .. }
            | AgentError::Logs { .. }
            | AgentError::Internal { .. }
            | AgentError::Service { .. } => ExitCode::TaskFailed,
        }
    }

    /// The exit code of a database error.
    pub fn for_store_error(store: &StoreError) -> ExitCode {
        match store {
            StoreError::Invalid(_)
            | StoreError::NotFound(_)
            | StoreError::ScheduleNotFound(_)
            | StoreError::ScheduleExists { .. }
            | StoreError::LockNotFound(_)
            | StoreError::ShardGroupNotFound(_)
            | StoreError::ShardGroupExists { .. }
            | StoreError::Transition { .. }
            | StoreError::UnsupportedUrl(_) => ExitCode::Usage,
            StoreError::PermissionDenied { .. } => ExitCode::PermissionDenied,
            StoreError::Busy { .. } | StoreError::NotMigrated { .. } => ExitCode::Unreachable,
            StoreError::Database { .. } if store.is_connection() => ExitCode::Unreachable,
            // Refused at connect (PostgreSQL authentication, a SQLite file that cannot
            // be opened or is not a database): the database cannot be used.
            StoreError::Database { op: "connect", .. } => ExitCode::Unreachable,
            // The database answered and refused the statement.
            StoreError::Database { .. } if store.is_database_refusal() => ExitCode::TaskFailed,
            StoreError::Database { .. } => ExitCode::Unreachable,
            StoreError::Migrate(_) | StoreError::Corrupt { .. } => ExitCode::TaskFailed,
        }
    }
}

impl From<ExitCode> for std::process::ExitCode {
    fn from(code: ExitCode) -> Self {
        let code = match code {
            ExitCode::IdleTimeout => 4,
            other => other as u8,
        };
        std::process::ExitCode::from(code)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use leasehold_shared::ValidationError;

    #[test]
    fn bad_input_is_a_usage_error() {
        let e = anyhow::Error::new(StoreError::Invalid(ValidationError::Invalid {
            field: "x",
            detail: "y".into(),
        }));
        assert_eq!(ExitCode::for_error(&e), ExitCode::Usage);
        let e =
            anyhow::Error::new(StoreError::UnsupportedUrl("mysql://".into())).context("connecting");
        assert_eq!(ExitCode::for_error(&e), ExitCode::Usage);
    }

    #[test]
    fn connection_failures_are_unreachable() {
        let e = anyhow::Error::new(StoreError::timed_out("connect"));
        assert_eq!(ExitCode::for_error(&e), ExitCode::Unreachable);
    }

    #[test]
    fn denials_are_permission_errors() {
        let e = anyhow::Error::new(StoreError::PermissionDenied {
            action: "cancel".into(),
            actor: "v".into(),
        });
        assert_eq!(ExitCode::for_error(&e), ExitCode::PermissionDenied);
    }

    #[test]
    fn typed_agent_errors_keep_the_codes_their_chains_gave() {
        let connect = || StoreError::timed_out("connect");
        let e = anyhow::Error::new(AgentError::store_while("registering the agent", connect()));
        assert_eq!(ExitCode::for_error(&e), ExitCode::Unreachable);
        let e = anyhow::Error::new(AgentError::from(connect()));
        assert_eq!(ExitCode::for_error(&e), ExitCode::Unreachable);
        let e = anyhow::Error::new(AgentError::from(crate::runtime::settings::SettingsError {
            setting: "lease_ttl",
            detail: "too short".into(),
        }));
        assert_eq!(ExitCode::for_error(&e), ExitCode::Usage);
        let e = anyhow::Error::new(AgentError::Service {
            name: "heartbeat",
            how: "returned early".into(),
        });
        assert_eq!(ExitCode::for_error(&e), ExitCode::TaskFailed);
        let e = anyhow::Error::new(AgentError::NoHandlers);
        assert_eq!(ExitCode::for_error(&e), ExitCode::TaskFailed);
    }
}
