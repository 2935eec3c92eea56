//! [`AgentError`]: what the agent library's public functions ([`crate::runtime::AgentBuilder::connect`],
//! [`crate::runtime::Agent::run`], the gRPC server's setup, the log setup, …) return, typed by
//! what a caller must tell apart. `anyhow` stays in the binary's `main`/`cli`.
//!
//! Messages: each variant's text is the sentence's first part, and its `source` the causes
//! after it, so [`leasehold_shared::store::error_sentence`] prints what the agent printed when
//! these were `anyhow` contexts; [`AgentError::report`] is the whole chain on one line (what
//! `{:#}` of an `anyhow::Error` gave). Exit codes: [`crate::exit::ExitCode::for_agent_error`].

use std::io;

use leasehold_shared::StoreError;

use crate::runtime::agent::ServiceFailed;
use crate::runtime::settings::SettingsError;

/// Any cause of a setup error (I/O, rustls, PEM, …).
pub type Cause = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Result of the agent library.
pub type Result<T, E = AgentError> = std::result::Result<T, E>;

/// Why the agent library could not do what it was asked.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// A database operation failed (the operation is named in the [`StoreError`]).
    #[error("{0}")]
    Store(#[from] StoreError),
    /// A database operation failed while the agent was `doing` something (`registering the
    /// agent`, `joining shard group …`).
    #[error("{doing}")]
    StoreWhile {
        doing: String,
        #[source]
        source: StoreError,
    },
    /// A runtime setting that cannot work (checked by `connect`).
    #[error("{} is invalid: {}", .0.setting, .0.detail)]
    Settings(SettingsError),
    /// `connect` with no handler registered.
    #[error("no handlers registered: nothing to run")]
    NoHandlers,
    /// A bad argument, e.g. a concurrency out of range.
    #[error("{0}")]
    Invalid(String),
    /// The gRPC listener cannot be used.
    #[error("reading the gRPC listener's address")]
    Listen {
        #[source]
        source: io::Error,
    },
    /// The gRPC server's TLS files cannot be used.
    #[error("{doing}")]
    Tls {
        doing: String,
        #[source]
        source: Option<Cause>,
    },
    /// The agent's local Unix socket cannot be bound.
    #[error("{doing}")]
    Socket {
        doing: String,
        #[source]
        source: Option<Cause>,
    },
    /// The gRPC server's services cannot be built.
    #[error("{doing}")]
    Grpc {
        doing: String,
        #[source]
        source: Option<Cause>,
    },
    /// Logging cannot be set up (the log directory, its files, the global subscriber).
    #[error("{doing}")]
    Logs {
        doing: String,
        #[source]
        source: Option<Cause>,
    },
    /// Anything else, with what the agent was doing.
    #[error("{doing}")]
    Internal {
        doing: String,
        #[source]
        source: Cause,
    },
    /// A service of the agent failed while it ran; `run` stopped the agent.
    #[error(
        "the agent's {name} service {how} while the agent ran; the agent stopped claiming, stopped its executions and released their leases"
    )]
    Service {
        /// The service's name (`heartbeat`, `claimer`, `completer`, …).
        name: &'static str,
        /// What happened: `returned early` or `panicked: <message>`.
        how: String,
    },
}

impl AgentError {
    /// The database error behind this one, if the database failed.
    pub fn store(&self) -> Option<&StoreError> {
        match self {
            AgentError::Store(store) | AgentError::StoreWhile { source: store, .. } => Some(store),
            _ => None,
        }
    }

    /// The whole chain on one line, each cause after a `: ` (a cause repeating the text just
    /// before it is left out): what `{:#}` of an `anyhow::Error` shows.
    pub fn report(&self) -> String {
        chain(self)
    }

    pub(crate) fn store_while(doing: impl Into<String>, source: StoreError) -> Self {
        AgentError::StoreWhile {
            doing: doing.into(),
            source,
        }
    }

    pub(crate) fn tls(doing: impl Into<String>, source: impl Into<Cause>) -> Self {
        AgentError::Tls {
            doing: doing.into(),
            source: Some(source.into()),
        }
    }

    pub(crate) fn socket(doing: impl Into<String>, source: impl Into<Cause>) -> Self {
        AgentError::Socket {
            doing: doing.into(),
            source: Some(source.into()),
        }
    }

    pub(crate) fn logs(doing: impl Into<String>, source: impl Into<Cause>) -> Self {
        AgentError::Logs {
            doing: doing.into(),
            source: Some(source.into()),
        }
    }
}

impl From<SettingsError> for AgentError {
    fn from(error: SettingsError) -> Self {
        AgentError::Settings(error)
    }
}

impl From<ServiceFailed> for AgentError {
    fn from(failed: ServiceFailed) -> Self {
        AgentError::Service {
            name: failed.service,
            how: failed.how,
        }
    }
}

/// `error` and each of its causes on one line, joined by `: ` (a cause repeating the text just
/// before it is left out): the whole chain, for logs and for a message that must keep the
/// driver's own words ("… no connection free in time: pool timed out …").
pub(crate) fn chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut line = error.to_string();
    let mut last = line.clone();
    let mut next = error.source();
    while let Some(cause) = next {
        let text = cause.to_string();
        if text != last {
            line.push_str(": ");
            line.push_str(&text);
            last = text;
        }
        next = cause.source();
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;
    use leasehold_shared::store::error_sentence;

    #[test]
    fn the_sentence_is_the_one_anyhow_gave() {
        let store = || StoreError::timed_out("connect");
        let old = anyhow::Error::new(store()).context("registering the agent");
        let new = AgentError::store_while("registering the agent", store());
        assert_eq!(error_sentence(new.as_dyn()), error_sentence(old.as_ref()));
        assert_eq!(new.report(), format!("{old:#}"));
        let old = anyhow::Error::new(store());
        let new = AgentError::from(store());
        assert_eq!(error_sentence(new.as_dyn()), error_sentence(old.as_ref()));
        assert_eq!(new.report(), format!("{old:#}"));
        let io = || io::Error::other("permission denied");
        let old = anyhow::Error::new(io()).context("binding the socket /x");
        let new = AgentError::socket("binding the socket /x", io());
        assert_eq!(error_sentence(new.as_dyn()), error_sentence(old.as_ref()));
        assert_eq!(new.report(), format!("{old:#}"));
    }

    #[test]
    fn settings_read_as_the_invalid_store_error_they_were() {
        let e = SettingsError {
            setting: "lease_ttl",
            detail: "must be at least 1s".into(),
        };
        let old = StoreError::Invalid(leasehold_shared::ValidationError::Invalid {
            field: e.setting,
            detail: e.detail.clone(),
        });
        let new = AgentError::from(e);
        assert_eq!(error_sentence(new.as_dyn()), error_sentence(&old));
    }

    #[test]
    fn service_and_setup_texts_are_the_old_ones() {
        let failed = ServiceFailed {
            service: "heartbeat",
            how: "returned early".into(),
        };
        let old = anyhow::Error::new(failed.clone());
        let new = AgentError::from(failed);
        assert_eq!(error_sentence(new.as_dyn()), error_sentence(old.as_ref()));
        let old = anyhow::anyhow!("/x is not a PEM file holding a certificate");
        let new = AgentError::Tls {
            doing: "/x is not a PEM file holding a certificate".into(),
            source: None,
        };
        assert_eq!(new.report(), format!("{old:#}"));
    }

    /// `connect` tells a bad setting and a missing handler apart before it touches the
    /// database (the URL is never dialled).
    #[tokio::test]
    async fn connect_refusals_are_typed() {
        use crate::handler::HandlerRegistry;
        use crate::runtime::{AgentBuilder, RuntimeSettings};
        let url = "postgres://nobody@127.0.0.1:1/none";
        let settings = RuntimeSettings {
            concurrency: 0,
            ..RuntimeSettings::default()
        };
        let e = AgentBuilder::new(settings, HandlerRegistry::new())
            .connect(url)
            .await
            .err();
        assert!(
            matches!(&e, Some(AgentError::Settings(s)) if s.setting == "concurrency"),
            "{e:?}"
        );
        assert_eq!(
            e.map(|e| e.to_string()).as_deref(),
            Some("concurrency is invalid: must be within 1..=100000")
        );
        let e = AgentBuilder::new(RuntimeSettings::default(), HandlerRegistry::new())
            .connect(url)
            .await
            .err();
        assert!(matches!(e, Some(AgentError::NoHandlers)), "{e:?}");
    }

    impl AgentError {
        fn as_dyn(&self) -> &(dyn std::error::Error + 'static) {
            self
        }
    }
}
