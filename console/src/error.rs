//! The console's error type: everything a headless command can fail with, each variant
//! carrying what was being done so the one-line message printed on stderr says what failed.
//!
//! Invariants: every message is one line (untrusted text quoted in it is made inert by
//! [`crate::output::text::inert`] when printed); the exit code of each variant is decided in
//! one place only, [`crate::exit::exit_code`].

use thiserror::Error;

use crate::convert::WireError;

/// What a headless command can fail with.
#[derive(Debug, Error)]
pub enum Error {
    /// Bad input found before any call: a flag value, a payload, a missing filter.
    #[error("{0}")]
    Usage(String),

    /// A local file or terminal could not be read or written (`--payload-file`, `--ca`,
    /// stdout).
    #[error("{what}: {source}")]
    Local {
        what: String,
        #[source]
        source: std::io::Error,
    },

    /// No connection to the agent could be made (TCP, TLS or HTTP/2 setup).
    #[error("cannot reach agent at {addr}: {cause}")]
    Connect { addr: String, cause: String },

    /// A call reached the agent (or tried to) and ended with a gRPC status.
    #[error("{what}: {}", describe_status(.status, .hint))]
    Rpc {
        what: String,
        status: tonic::Status,
        /// A likely explanation added by the client (e.g. a TLS mismatch), or nothing.
        hint: Option<String>,
    },

    /// `leasehold demo` could not open or use its database, or an agent it runs failed.
    #[error("{what}: {cause}")]
    Database { what: String, cause: String },

    /// The agent answered with data that breaks the contract (an unknown status, JSON that
    /// does not parse, a time out of range).
    #[error("{what}: the agent sent {source}")]
    BadWire {
        what: String,
        #[source]
        source: WireError,
    },
}

/// Result of the console's library functions.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// A usage error with a message.
    pub fn usage(message: impl Into<String>) -> Self {
        Error::Usage(message.into())
    }

    /// A status returned by (or on the way to) the agent while doing `what`.
    pub fn rpc(what: impl Into<String>, status: tonic::Status) -> Self {
        Error::Rpc {
            what: what.into(),
            status,
            hint: None,
        }
    }

    /// Bad wire data met while doing `what`.
    pub fn bad_wire(what: impl Into<String>, source: WireError) -> Self {
        Error::BadWire {
            what: what.into(),
            source,
        }
    }

    /// The gRPC status, when this error is one.
    pub fn status(&self) -> Option<&tonic::Status> {
        match self {
            Error::Rpc { status, .. } => Some(status),
            _ => None,
        }
    }
}

/// `<message>[: <cause chain>][; <hint>] (<code in words>)`.
///
/// A status made on the client from a transport failure carries the underlying error as its
/// source (a status decoded from the agent's trailers never has one); its chain is what says
/// what happened ("connection reset", "invalid peer certificate"), so it is appended.
fn describe_status(status: &tonic::Status, hint: &Option<String>) -> String {
    let mut text = status.message().to_owned();
    if let Some(source) = std::error::Error::source(status) {
        let chain = cause_chain(source);
        if !chain.is_empty() && !text.contains(&chain) {
            // tonic's own "transport error" says nothing the chain does not, and hyper's
            // messages often repeat as the first link of the chain.
            if text.is_empty() || text == "transport error" || chain.starts_with(&text) {
                text = chain;
            } else {
                text = format!("{text}: {chain}");
            }
        }
    }
    if text.is_empty() {
        text = "no message".to_owned();
    }
    if let Some(hint) = hint {
        text = format!("{text}; {hint}");
    }
    format!("{text} ({})", crate::exit::code_words(status.code()))
}

/// The messages of an error and its sources joined with `: `, skipping a message that only
/// repeats (or is already contained in) the one before it, and tonic's bare "transport error".
pub fn cause_chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut next: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = next {
        let text = e.to_string();
        let redundant = text.is_empty()
            || text == "transport error"
            || parts.last().is_some_and(|last| last.contains(&text));
        if !redundant {
            parts.push(text);
        }
        next = e.source();
    }
    parts.join(": ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Error)]
    #[error("outer")]
    struct Outer(#[source] Inner);

    #[derive(Debug, Error)]
    #[error("inner: refused")]
    struct Inner(#[source] std::io::Error);

    #[test]
    fn cause_chain_joins_and_drops_repeats() {
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        let err = Outer(Inner(io));
        assert_eq!(cause_chain(&err), "outer: inner: refused");
    }

    #[test]
    fn rpc_errors_say_what_failed_then_the_status_then_the_code() {
        let err = Error::rpc("get task 7", tonic::Status::not_found("no task 7"));
        assert_eq!(err.to_string(), "get task 7: no task 7 (not found)");
        let err = Error::Rpc {
            what: "list tasks".into(),
            status: tonic::Status::unavailable(""),
            hint: Some("is the agent serving TLS?".into()),
        };
        assert_eq!(
            err.to_string(),
            "list tasks: no message; is the agent serving TLS? (unavailable)"
        );
    }

    #[test]
    fn a_status_with_a_source_shows_the_source() {
        let mut status = tonic::Status::unknown("transport error");
        status.set_source(std::sync::Arc::new(std::io::Error::new(
            std::io::ErrorKind::ConnectionReset,
            "connection reset by peer",
        )));
        let err = Error::rpc("list agents", status);
        assert_eq!(
            err.to_string(),
            "list agents: connection reset by peer (unknown)"
        );
    }
}
