//! The `--metrics-listen` endpoint: hyper's HTTP/1.1 server answering with the agent's
//! [`Metrics`] in the Prometheus text format, and with its liveness and readiness
//! ([`super::health`]).
//!
//! | request                          | answer                                              |
//! |----------------------------------|-----------------------------------------------------|
//! | `GET /metrics`, `GET /`          | 200, `text/plain; version=0.0.4`, the metrics       |
//! | `GET /healthz`                   | 200, `text/plain`, `ok` (no database call)          |
//! | `GET /readyz`                    | 200 `ready` or 503 `not ready: …`, a line a check   |
//! | `HEAD` on those                  | the same head, no body                              |
//! | another method on those          | 405, `allow: GET, HEAD`                             |
//! | any other path                   | 404                                                 |
//!
//! Invariants: at most [`MAX_CONNECTIONS`] connections are open at once, and each must send
//! every request head (the first, and each later one on a keep-alive connection) within
//! [`HEADER_READ_TIMEOUT`] of the server starting to wait for it, so an idle or slow client
//! gives its slot back within that time.
//!
//! When things fail: a failed accept (out of descriptors, say) is logged and retried after a
//! short pause; a client that breaks the protocol or times out loses its connection and nothing
//! else. On `cancel` the listener is closed, each open connection is asked to finish the
//! response in flight and close, one still open after [`SHUTDOWN_GRACE`] is dropped, and
//! [`serve_metrics`] returns once every connection is gone.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper::header::{ALLOW, CONTENT_TYPE, HeaderValue};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::Metrics;
use super::health::Readiness;

/// Connections served at once. A connection beyond it waits, not accepted, in the kernel's
/// listen backlog until one ends (see [`serve_metrics`]).
pub(crate) const MAX_CONNECTIONS: usize = 64;

/// How long a client has to send a request head before its connection is closed.
pub(crate) const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(5);

/// How long open connections get to finish after `cancel` before they are dropped.
pub(crate) const SHUTDOWN_GRACE: Duration = Duration::from_secs(1);

/// The exposition format's content type (text format 0.0.4).
const CONTENT_TYPE_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The content type of `/healthz` and `/readyz`.
const CONTENT_TYPE_PLAIN: &str = "text/plain; charset=utf-8";

/// Pause after a failed accept, so a persistent error (no descriptors left) does not spin.
const ACCEPT_RETRY: Duration = Duration::from_millis(100);

/// Serves the metrics, `/healthz` and `/readyz` (from `readiness`) on `listener` until
/// `cancel` fires (routes and limits in the module doc), then closes the listener and returns
/// once the open connections have ended.
pub async fn serve_metrics(
    listener: TcpListener,
    metrics: Arc<Metrics>,
    readiness: Arc<Readiness>,
    cancel: CancellationToken,
) -> std::io::Result<()> {
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let connections = TaskTracker::new();
    let mut http = http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT);
    loop {
        // The slot is taken before `accept`, so a connection beyond the limit waits in the
        // kernel's backlog instead of being accepted and closed: it costs the agent no memory
        // or task while it waits, and a Prometheus scrape that lands during a flood is late
        // (held slots free within HEADER_READ_TIMEOUT of going idle) rather than refused.
        let slot = tokio::select! {
            _ = cancel.cancelled() => break,
            slot = Arc::clone(&slots).acquire_owned() => match slot {
                Ok(slot) => slot,
                // Only a closed semaphore fails, and this one is never closed.
                Err(_closed) => break,
            },
        };
        let socket = tokio::select! {
            _ = cancel.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok((socket, _peer)) => socket,
                Err(error) => {
                    tracing::warn!(%error, "metrics accept failed");
                    tokio::select! {
                        _ = cancel.cancelled() => break,
                        _ = tokio::time::sleep(ACCEPT_RETRY) => continue,
                    }
                }
            },
        };
        let metrics = Arc::clone(&metrics);
        let readiness = Arc::clone(&readiness);
        let service = service_fn(move |request: hyper::Request<hyper::body::Incoming>| {
            let metrics = Arc::clone(&metrics);
            let readiness = Arc::clone(&readiness);
            let method = request.method().clone();
            let path = request.uri().path().to_owned();
            async move {
                let response = respond(&metrics, &readiness, &method, &path).await;
                Ok::<_, Infallible>(response)
            }
        });
        let connection = http.serve_connection(TokioIo::new(socket), service);
        let cancel = cancel.clone();
        connections.spawn(async move {
            let _slot = slot;
            tokio::pin!(connection);
            let ended = tokio::select! {
                ended = connection.as_mut() => ended,
                _ = cancel.cancelled() => {
                    connection.as_mut().graceful_shutdown();
                    match tokio::time::timeout(SHUTDOWN_GRACE, connection.as_mut()).await {
                        Ok(ended) => ended,
                        Err(_elapsed) => {
                            tracing::debug!("metrics connection dropped at shutdown");
                            return;
                        }
                    }
                }
            };
            if let Err(error) = ended {
                // A client's problem (reset, timeout, bad request), not the agent's.
                tracing::debug!(%error, "metrics connection ended with an error");
            }
        });
    }
    drop(listener);
    connections.close();
    connections.wait().await;
    Ok(())
}

/// What a path serves.
enum Route {
    Metrics,
    Health,
    Ready,
}

/// The answer to `method path` (see the table in the module doc).
async fn respond(
    metrics: &Metrics,
    readiness: &Readiness,
    method: &Method,
    path: &str,
) -> Response<String> {
    let route = match path {
        "/metrics" | "/" => Route::Metrics,
        "/healthz" => Route::Health,
        "/readyz" => Route::Ready,
        _ => return empty(StatusCode::NOT_FOUND),
    };
    if method != Method::GET && method != Method::HEAD {
        let mut response = empty(StatusCode::METHOD_NOT_ALLOWED);
        response
            .headers_mut()
            .insert(ALLOW, HeaderValue::from_static("GET, HEAD"));
        return response;
    }
    // HEAD gets the full body too: hyper sends its length and leaves the bytes out.
    match route {
        Route::Metrics => text(StatusCode::OK, CONTENT_TYPE_TEXT, metrics.encode()),
        Route::Health => text(StatusCode::OK, CONTENT_TYPE_PLAIN, "ok\n".to_string()),
        Route::Ready => {
            let report = readiness.check().await;
            let status = if report.ready {
                StatusCode::OK
            } else {
                StatusCode::SERVICE_UNAVAILABLE
            };
            text(status, CONTENT_TYPE_PLAIN, report.body)
        }
    }
}

fn text(status: StatusCode, content_type: &'static str, body: String) -> Response<String> {
    let mut response = Response::new(body);
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

fn empty(status: StatusCode) -> Response<String> {
    let mut response = Response::new(String::new());
    *response.status_mut() = status;
    response
}

/// Binds the metrics listener (so a bad address fails at start, not later).
pub async fn bind_metrics(addr: SocketAddr) -> std::io::Result<TcpListener> {
    TcpListener::bind(addr).await
}
