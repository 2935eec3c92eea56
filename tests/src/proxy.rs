//! A small tokio TCP proxy to put between an agent and PostgreSQL (or a console and an agent)
//! and break the network on command: [`ProxyMode::Reset`] closes every connection,
//! [`ProxyMode::Blackhole`] makes them half-open (sockets stay open, no byte moves either
//! way), [`ProxyMode::Latency`] delays every chunk.
//!
//! ```no_run
//! # async fn demo(db_url: &str) -> anyhow::Result<()> {
//! use leasehold_tests::proxy::{ProxyMode, TcpProxy, addr_of_url};
//! let proxy = TcpProxy::start(addr_of_url(db_url).await?).await?;
//! let agent_url = proxy.url_for(db_url); // give this one to the agent
//! proxy.set_mode(ProxyMode::Blackhole);
//! // … the agent's connections hang …
//! proxy.set_mode(ProxyMode::Pass);
//! # let _ = agent_url;
//! # Ok(())
//! # }
//! ```
//!
//! Mode changes apply to the connections already open as well as to new ones. Each connection
//! is one task with one pump per direction; a pump reads a chunk, stamps it with its due time
//! (now, plus the latency in force) and queues it for its writer, which writes it once due and
//! once the mode lets bytes flow. So:
//!
//! - `Pass` forwards both ways.
//! - `Reset` closes every open connection at once, both sides, with an RST (zero linger), and
//!   while it lasts closes new connections as soon as they are accepted. Bytes read before the
//!   reset are never forwarded after it.
//! - `Blackhole` stops reading and writing on every connection; new connections are accepted
//!   but not connected upstream. Nothing is discarded: going back to `Pass` (or `Latency`)
//!   resumes every held connection where it stopped, new ones included.
//! - `Latency(d)` delays each chunk by `d` in each direction (pipelined: throughput is kept).
//!
//! Dropping the proxy stops its accept loop and closes every connection.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::Context;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// Bytes read at most per chunk.
const CHUNK: usize = 16 * 1024;
/// Chunks queued per direction between a pump's reader and writer.
const QUEUE: usize = 64;

/// What the proxy does with the bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProxyMode {
    /// Forward both ways.
    Pass,
    /// Close every connection (RST), and every new one at once.
    Reset,
    /// Half-open: sockets stay open, no byte moves either way.
    Blackhole,
    /// Forward both ways, each chunk delayed by the duration.
    Latency(Duration),
}

#[derive(Debug, Clone, Copy)]
struct State {
    mode: ProxyMode,
    /// Bumped by every switch to [`ProxyMode::Reset`]: a connection born in an earlier
    /// generation is closed, even if the mode changed again before its task looked.
    resets: u64,
}

/// A running proxy on 127.0.0.1 towards one upstream address.
#[derive(Debug)]
pub struct TcpProxy {
    addr: SocketAddr,
    upstream: SocketAddr,
    /// Dropping it closes every receiver: the accept loop and all connections end.
    state: watch::Sender<State>,
    live: Arc<AtomicUsize>,
    accepted: Arc<AtomicU64>,
    accept_task: JoinHandle<()>,
}

impl TcpProxy {
    /// Starts a proxy in [`ProxyMode::Pass`] listening on a free port of 127.0.0.1 and
    /// forwarding to `upstream`.
    pub async fn start(upstream: SocketAddr) -> anyhow::Result<TcpProxy> {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .context("binding the proxy to 127.0.0.1:0")?;
        let addr = listener
            .local_addr()
            .context("reading the proxy's address")?;
        let (state, rx) = watch::channel(State {
            mode: ProxyMode::Pass,
            resets: 0,
        });
        let live = Arc::new(AtomicUsize::new(0));
        let accepted = Arc::new(AtomicU64::new(0));
        let accept_task = tokio::spawn(accept_loop(
            listener,
            upstream,
            rx,
            Arc::clone(&live),
            Arc::clone(&accepted),
        ));
        Ok(TcpProxy {
            addr,
            upstream,
            state,
            live,
            accepted,
            accept_task,
        })
    }

    /// The address clients connect to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The address the proxy forwards to.
    pub fn upstream(&self) -> SocketAddr {
        self.upstream
    }

    /// `db_url` with its host and port replaced by the proxy's (user, database and query
    /// string kept).
    pub fn url_for(&self, db_url: &str) -> String {
        replace_host_port(db_url, &self.addr.to_string())
    }

    /// Switches mode; open connections follow at once.
    pub fn set_mode(&self, mode: ProxyMode) {
        self.state.send_modify(|state| {
            state.mode = mode;
            if mode == ProxyMode::Reset {
                state.resets += 1;
            }
        });
    }

    /// The mode in force.
    pub fn mode(&self) -> ProxyMode {
        self.state.borrow().mode
    }

    /// Client connections currently open through the proxy (held ones included).
    pub fn connections(&self) -> usize {
        self.live.load(Ordering::SeqCst)
    }

    /// Client connections accepted since the start.
    pub fn accepted(&self) -> u64 {
        self.accepted.load(Ordering::SeqCst)
    }
}

impl Drop for TcpProxy {
    fn drop(&mut self) {
        // The connections end when they see the state channel closed (the sender is dropped
        // right after this); the accept loop is aborted so the port is released now.
        self.accept_task.abort();
    }
}

/// The socket address of the host and port in a `postgres://` URL (port 5432 by default).
pub async fn addr_of_url(url: &str) -> anyhow::Result<SocketAddr> {
    let (start, end) = host_port_span(url).with_context(|| format!("no host in URL {url}"))?;
    let host_port = &url[start..end];
    let with_port = if host_port.starts_with('[') {
        if host_port.contains("]:") {
            host_port.to_string()
        } else {
            format!("{host_port}:5432")
        }
    } else if host_port.contains(':') {
        host_port.to_string()
    } else {
        format!("{host_port}:5432")
    };
    tokio::net::lookup_host(with_port.as_str())
        .await
        .with_context(|| format!("resolving {with_port}"))?
        .next()
        .with_context(|| format!("{with_port} resolves to no address"))
}

/// `url` with the host and port of its authority replaced by `host_port`.
pub fn replace_host_port(url: &str, host_port: &str) -> String {
    match host_port_span(url) {
        Some((start, end)) => format!("{}{host_port}{}", &url[..start], &url[end..]),
        None => url.to_string(),
    }
}

/// Byte range of `host[:port]` in a URL: after `scheme://` and any `userinfo@`, up to the
/// path, query or fragment.
fn host_port_span(url: &str) -> Option<(usize, usize)> {
    let authority_start = url.find("://")? + 3;
    let rest = &url[authority_start..];
    let authority_end = authority_start + rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &url[authority_start..authority_end];
    let host_start = authority_start + authority.rfind('@').map_or(0, |at| at + 1);
    Some((host_start, authority_end))
}

async fn accept_loop(
    listener: TcpListener,
    upstream: SocketAddr,
    mut rx: watch::Receiver<State>,
    live: Arc<AtomicUsize>,
    accepted: Arc<AtomicU64>,
) {
    loop {
        tokio::select! {
            changed = rx.changed() => {
                if changed.is_err() {
                    return;
                }
            }
            result = listener.accept() => match result {
                Ok((client, _)) => {
                    accepted.fetch_add(1, Ordering::SeqCst);
                    live.fetch_add(1, Ordering::SeqCst);
                    let guard = LiveGuard(Arc::clone(&live));
                    tokio::spawn(serve(client, upstream, rx.clone(), guard));
                }
                // Out of descriptors and the like: try again shortly.
                Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
            },
        }
    }
}

/// Decrements the live-connection count when its connection task ends.
struct LiveGuard(Arc<AtomicUsize>);

impl Drop for LiveGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Why bytes may not flow.
#[derive(Debug)]
enum Stop {
    /// A reset since the connection was born.
    Reset,
    /// The proxy was dropped.
    Shutdown,
}

async fn serve(
    mut client: TcpStream,
    upstream: SocketAddr,
    mut rx: watch::Receiver<State>,
    _guard: LiveGuard,
) {
    let born = {
        let state = *rx.borrow_and_update();
        if state.mode == ProxyMode::Reset {
            reset(&client);
            return;
        }
        state.resets
    };
    // A blackhole holds new connections here, unforwarded, until bytes may flow again.
    match wait_flowing(&mut rx, born).await {
        Ok(()) => {}
        Err(Stop::Reset) => {
            reset(&client);
            return;
        }
        Err(Stop::Shutdown) => return,
    }
    let mut server = match TcpStream::connect(upstream).await {
        Ok(server) => server,
        Err(_) => {
            reset(&client);
            return;
        }
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);

    let stop = {
        let (client_read, client_write) = client.split();
        let (server_read, server_write) = server.split();
        let pumps = async {
            tokio::join!(
                pump(client_read, server_write, rx.clone(), born),
                pump(server_read, client_write, rx.clone(), born),
            )
        };
        tokio::select! {
            _ = pumps => None,
            stop = stopped(rx.clone(), born) => Some(stop),
        }
    };
    if matches!(stop, Some(Stop::Reset)) {
        reset(&client);
        reset(&server);
    }
}

/// Makes the socket's close send an RST instead of a FIN.
fn reset(stream: &TcpStream) {
    let _ = stream.set_zero_linger();
}

/// Returns once a reset happened since generation `born` or the proxy was dropped.
async fn stopped(mut rx: watch::Receiver<State>, born: u64) -> Stop {
    loop {
        if rx.borrow_and_update().resets != born {
            return Stop::Reset;
        }
        if rx.changed().await.is_err() {
            return Stop::Shutdown;
        }
    }
}

/// Returns once bytes may flow (Pass or Latency), or why they never will again.
async fn wait_flowing(rx: &mut watch::Receiver<State>, born: u64) -> Result<(), Stop> {
    loop {
        {
            let state = *rx.borrow_and_update();
            if state.resets != born {
                return Err(Stop::Reset);
            }
            match state.mode {
                ProxyMode::Pass | ProxyMode::Latency(_) => return Ok(()),
                ProxyMode::Reset => return Err(Stop::Reset),
                ProxyMode::Blackhole => {}
            }
        }
        if rx.changed().await.is_err() {
            return Err(Stop::Shutdown);
        }
    }
}

/// Forwards one direction until end of stream (passed on as a write shutdown), an error, or
/// a stop. The reader stops reading while bytes may not flow; the writer holds what was
/// read until it is due and may flow.
async fn pump<R, W>(mut from: R, mut to: W, rx: watch::Receiver<State>, born: u64)
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let (tx, mut queue) = mpsc::channel::<(Instant, Vec<u8>)>(QUEUE);
    let mut reader_rx = rx.clone();
    let reader = async move {
        let mut buf = vec![0u8; CHUNK];
        loop {
            if wait_flowing(&mut reader_rx, born).await.is_err() {
                return;
            }
            let read = tokio::select! {
                read = from.read(&mut buf) => read,
                changed = reader_rx.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    continue;
                }
            };
            let n = match read {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            let (resets, delay) = {
                let state = reader_rx.borrow();
                let delay = match state.mode {
                    ProxyMode::Latency(delay) => delay,
                    _ => Duration::ZERO,
                };
                (state.resets, delay)
            };
            if resets != born {
                return;
            }
            let due = Instant::now() + delay;
            if tx.send((due, buf[..n].to_vec())).await.is_err() {
                return;
            }
        }
        // Dropping `tx` tells the writer the stream ended.
    };
    let mut writer_rx = rx;
    let writer = async move {
        while let Some((due, chunk)) = queue.recv().await {
            tokio::time::sleep_until(due).await;
            if wait_flowing(&mut writer_rx, born).await.is_err() {
                return;
            }
            if to.write_all(&chunk).await.is_err() {
                return;
            }
        }
        let _ = to.shutdown().await;
    };
    tokio::join!(reader, writer);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_and_port_are_replaced() {
        assert_eq!(
            replace_host_port("postgres://postgres@127.0.0.1:54329/db", "127.0.0.1:1"),
            "postgres://postgres@127.0.0.1:1/db"
        );
        assert_eq!(
            replace_host_port("postgres://u:p@h/db?sslmode=disable", "127.0.0.1:1"),
            "postgres://u:p@127.0.0.1:1/db?sslmode=disable"
        );
        assert_eq!(
            replace_host_port("postgres://h:5432", "127.0.0.1:1"),
            "postgres://127.0.0.1:1"
        );
        assert_eq!(replace_host_port("nonsense", "x"), "nonsense");
    }
}
