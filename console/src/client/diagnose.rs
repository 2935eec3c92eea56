//! Reading transport failures: tonic's client-side deadline, and hints for the failures whose
//! likely cause the user can fix (TLS on one side only, a missing client certificate, an
//! address that is not a Leasehold agent).
//!
//! A hint is a guess and is worded as one ("if the agent serves TLS, …"); it is only given
//! when the failure came from the transport (the status carries a source) and, for the
//! TLS-mismatch guess, only before the agent ever answered on this connection.

use std::time::Duration;

use tonic::{Code, Status};

/// How the connection was made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Security {
    Plaintext,
    Tls,
    /// TLS with a client certificate.
    MutualTls,
    /// The agent's local Unix socket (no TLS; the agent knows the caller's uid).
    Socket,
}

impl Security {
    fn is_tls(self) -> bool {
        matches!(self, Security::Tls | Security::MutualTls)
    }
}

use crate::error::{Error, cause_chain};

const HINT_PLAINTEXT: &str =
    "the plaintext connection closed before any answer: if the agent serves TLS, give --ca";
const HINT_TLS: &str = "the TLS connection closed before any answer: the agent may need a client \
     certificate (--cert, --key), or serve plaintext (drop --tls and --ca)";
const HINT_MUTUAL_TLS: &str = "the TLS connection closed before any answer: the agent may refuse this \
     client certificate, or serve plaintext (drop --tls, --ca, --cert and --key)";
const HINT_CLIENT_CERT: &str = "the agent asks for a client certificate: give --cert and --key";
const HINT_SERVES_PLAINTEXT: &str = "the agent may serve plaintext: drop --tls and --ca";
const HINT_SOCKET: &str = "the agent's socket closed before any answer: is a Leasehold agent \
     serving it? (--no-socket uses TCP)";

/// The hint for a failed call, if any.
pub fn status_hint(
    status: &Status,
    addr: &str,
    security: Security,
    answered: bool,
) -> Option<String> {
    let source = std::error::Error::source(status);
    match status.code() {
        Code::Unimplemented => Some(format!(
            "is {} a Leasehold agent of a matching version?",
            crate::output::text::shown(addr, 100)
        )),
        Code::Unavailable | Code::Unknown | Code::Internal | Code::Cancelled => {
            let chain = cause_chain(source?);
            tls_hint(&chain, security).or_else(|| {
                // The connection broke before the agent ever answered: the likeliest cause is
                // TLS on one side only (a TLS agent closes on a plaintext client's first bytes).
                (!answered).then(|| {
                    match security {
                        Security::Plaintext => HINT_PLAINTEXT,
                        Security::Tls => HINT_TLS,
                        Security::MutualTls => HINT_MUTUAL_TLS,
                        Security::Socket => HINT_SOCKET,
                    }
                    .to_owned()
                })
            })
        }
        _ => None,
    }
}

/// True for tonic's client-side deadline (`grpc-timeout` passed).
pub fn is_timeout(status: &Status) -> bool {
    let mut source = std::error::Error::source(status);
    while let Some(e) = source {
        if e.is::<tonic::TimeoutExpired>() {
            return true;
        }
        source = e.source();
    }
    false
}

/// DEADLINE_EXCEEDED for a call that got no answer in time.
pub fn no_answer(what: String, timeout: Duration) -> Error {
    Error::rpc(
        what,
        Status::deadline_exceeded(format!(
            "no answer within {}",
            humantime::format_duration(timeout)
        )),
    )
}

/// A hint for TLS failures whose cause chain names them.
pub fn tls_hint(chain: &str, security: Security) -> Option<String> {
    if chain.contains("CertificateRequired") {
        Some(HINT_CLIENT_CERT.to_owned())
    } else if security.is_tls()
        && (chain.contains("InvalidContentType") || chain.contains("corrupt message"))
    {
        Some(HINT_SERVES_PLAINTEXT.to_owned())
    } else {
        None
    }
}

/// Why a connection failed, in words.
pub fn connect_cause(
    err: &tonic::transport::Error,
    timeout: Duration,
    security: Security,
) -> String {
    let chain = cause_chain(err);
    let lower = chain.to_ascii_lowercase();
    let cause =
        if lower.contains("timed out") || lower.contains("timeout") || lower.contains("elapsed") {
            format!(
                "no connection within {} ({chain})",
                humantime::format_duration(timeout)
            )
        } else if lower.contains("connection refused") {
            // Nothing listens there: said at once, in words, not as an OS error code.
            "connection refused (is the agent running, and listening on that address?)".to_owned()
        } else if chain.is_empty() {
            "connection failed".to_owned()
        } else {
            chain.clone()
        };
    match tls_hint(&chain, security) {
        Some(hint) => format!("{cause}; {hint}"),
        None => cause,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    fn transport(code: Code, cause: &str) -> Status {
        let mut status = Status::new(code, "transport error");
        status.set_source(Arc::new(std::io::Error::other(cause.to_owned())));
        status
    }

    #[test]
    fn tls_mismatch_hints_only_before_any_answer() {
        let s = transport(Code::Unknown, "connection error: broken pipe");
        let hint = status_hint(&s, "a:1", Security::Plaintext, false).unwrap_or_default();
        assert!(hint.contains("give --ca"), "{hint}");
        let hint = status_hint(&s, "a:1", Security::Tls, false).unwrap_or_default();
        assert!(
            hint.contains("--cert, --key") && hint.contains("drop --tls"),
            "{hint}"
        );
        let hint = status_hint(&s, "a:1", Security::MutualTls, false).unwrap_or_default();
        assert!(hint.contains("refuse this client certificate"), "{hint}");
        let hint = status_hint(&s, "a:1", Security::Socket, false).unwrap_or_default();
        assert!(hint.contains("--no-socket"), "{hint}");
        assert_eq!(status_hint(&s, "a:1", Security::Plaintext, true), None);
        // A status from the agent itself (no source) gets no guess.
        let own = Status::unknown("boom");
        assert_eq!(status_hint(&own, "a:1", Security::Plaintext, false), None);
    }

    #[test]
    fn named_tls_failures_get_their_own_hint() {
        let s = transport(Code::Unknown, "received fatal alert: CertificateRequired");
        let hint = status_hint(&s, "a:1", Security::Tls, false).unwrap_or_default();
        assert!(hint.contains("--cert and --key"), "{hint}");
        let corrupt = "received corrupt message of type InvalidContentType";
        assert!(tls_hint(corrupt, Security::Tls).is_some());
        assert!(tls_hint(corrupt, Security::Plaintext).is_none());
    }

    #[test]
    fn unimplemented_asks_whether_it_is_an_agent() {
        let hint = status_hint(
            &Status::unimplemented("404"),
            "h:1",
            Security::Plaintext,
            true,
        );
        assert_eq!(
            hint.as_deref(),
            Some("is h:1 a Leasehold agent of a matching version?")
        );
    }

    #[test]
    fn tonic_deadlines_are_recognised() {
        let mut s = Status::cancelled("Timeout expired");
        assert!(!is_timeout(&s));
        s.set_source(Arc::new(tonic::TimeoutExpired(())));
        assert!(is_timeout(&s));
        let e = no_answer("list tasks".into(), Duration::from_millis(300));
        assert_eq!(
            e.to_string(),
            "list tasks: no answer within 300ms (deadline exceeded)"
        );
    }
}
