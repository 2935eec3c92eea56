//! The agent's local Unix socket as a tonic transport: an [`Endpoint`] (still addressed as
//! `http://HOST:PORT`, which only names the HTTP/2 authority) dialled through a connector that
//! opens the socket instead of TCP.
//!
//! ```text
//! Transport::Socket(p) ──connect(p)──▶ channel | Error::Connect "unix:p" (exit 3)
//! Transport::Auto ──for p in socket_candidates(port): exists? connect(p)? ──▶ first channel
//!                   (missing, permission denied, refused, HTTP/2 failure: next) ─▶ none: TCP
//! ```
//!
//! Invariants: a candidate is only dialled when the path exists; every failure of a candidate
//! is logged at debug level with the path and the reason, so "why did it use TCP" has an
//! answer in the console's log.

use std::path::{Path, PathBuf};

use hyper_util::rt::TokioIo;
use tokio::net::UnixStream;
use tonic::transport::{Channel, Endpoint, Uri};

/// Connects `endpoint` over the Unix socket at `path` (HTTP/2 handshake included, within the
/// endpoint's connect timeout).
pub async fn connect(endpoint: &Endpoint, path: &Path) -> Result<Channel, tonic::transport::Error> {
    let path = path.to_path_buf();
    let connector = tower::service_fn(move |_: Uri| {
        let path = path.clone();
        async move { UnixStream::connect(path).await.map(TokioIo::new) }
    });
    endpoint.clone().connect_with_connector(connector).await
}

/// The first of `candidates` that exists and accepts a connection, with its path; `None` when
/// none does (the caller uses TCP).
pub async fn first_answering(
    endpoint: &Endpoint,
    candidates: Vec<PathBuf>,
) -> Option<(Channel, PathBuf)> {
    for path in candidates {
        if std::fs::symlink_metadata(&path).is_err() {
            tracing::debug!(socket = %path.display(), "no agent socket there");
            continue;
        }
        match connect(endpoint, &path).await {
            Ok(channel) => return Some((channel, path)),
            Err(e) => tracing::debug!(
                socket = %path.display(),
                error = %crate::error::cause_chain(&e),
                "agent socket not usable; trying the next way"
            ),
        }
    }
    None
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    fn endpoint() -> Endpoint {
        Endpoint::from_static("http://127.0.0.1:7070")
            .connect_timeout(std::time::Duration::from_secs(2))
    }

    #[tokio::test]
    async fn missing_and_refusing_sockets_are_skipped() {
        let dir = std::env::temp_dir().join(format!("lh-console-sock-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        // A socket file nobody listens on: connecting is refused.
        let stale = dir.join("stale.sock");
        drop(std::os::unix::net::UnixListener::bind(&stale).unwrap());
        let missing = dir.join("missing.sock");
        assert!(
            first_answering(&endpoint(), vec![missing.clone(), stale.clone()])
                .await
                .is_none()
        );
        let e = connect(&endpoint(), &missing).await.unwrap_err();
        assert!(
            crate::error::cause_chain(&e).contains("No such file"),
            "{e}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
