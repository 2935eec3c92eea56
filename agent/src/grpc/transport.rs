//! The agent's gRPC transport: its own accept loop over TCP (plaintext or TLS) and the local
//! Unix socket, feeding one `serve_with_incoming_shutdown`.
//!
//! Every accepted connection becomes a [`Conn`] whose tonic `ConnectInfo` is a [`Peer`], so
//! handlers read the caller's connection with [`Peer::of`]. A loopback TCP peer's uid is looked
//! up in `/proc/net/tcp{,6}` when it is accepted; a Unix peer's uid is `SO_PEERCRED`.
//!
//! Limits (DESIGN §10, issue 19 "Transport"):
//! - a TLS handshake must finish, and a plaintext client must send its first bytes (the
//!   HTTP/2 preface), within [`TransportLimits::handshake_timeout`], or the connection is
//!   closed; handshakes run concurrently, so a slow one holds up no other;
//! - at most [`TransportLimits::max_connections`] connections are open in total and at most
//!   [`TransportLimits::max_connections_per_peer`] per peer IP (the Unix socket counts per
//!   uid); a connection beyond a cap is closed at once, with a rate-limited warning. The slot
//!   is held by the connection itself and freed when it is dropped, handshake or not.
//!
//! The socket file (`--socket`, default [`leasehold_shared::local::socket_path`] of the TCP
//! port) is made 0600 in a private (0700, owned, not a symlink) directory; a stale socket left
//! by a killed agent is replaced, a live one or a non-socket refuses the start. The file is
//! removed when the server stops, if it is still the one this agent bound (same inode and
//! change time).

use std::collections::HashMap;
use std::io;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context as TaskContext, Poll};
use std::time::{Duration, Instant};

use futures_util::{Stream, StreamExt};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream, UnixListener, UnixStream};
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::ServerConfig;
use tokio_rustls::server::TlsStream;
use tonic::transport::server::{Connected, TcpIncoming};

use super::peer::Peer;
use crate::error::{AgentError, Result};

/// Default of [`TransportLimits::handshake_timeout`].
pub const DEFAULT_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Default of [`TransportLimits::max_connections`].
pub const DEFAULT_MAX_CONNECTIONS: u32 = 1024;
/// Default of [`TransportLimits::max_connections_per_peer`].
pub const DEFAULT_MAX_CONNECTIONS_PER_PEER: u32 = 64;
/// TCP keepalive of accepted connections.
pub const TCP_KEEPALIVE: Duration = Duration::from_secs(30);
/// At most one "connection refused by a cap" warning per this interval.
const WARN_EVERY: Duration = Duration::from_secs(10);
/// Pause after a failed `accept` (e.g. out of file descriptors), so the loop does not spin.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// Handshake timeout and connection caps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TransportLimits {
    /// How long a TCP client has to finish the TLS handshake, or to send its first bytes.
    pub handshake_timeout: Duration,
    /// Open connections in total (TCP and the socket).
    pub max_connections: u32,
    /// Open connections per peer IP (per uid on the socket).
    pub max_connections_per_peer: u32,
}

impl Default for TransportLimits {
    fn default() -> Self {
        TransportLimits {
            handshake_timeout: DEFAULT_HANDSHAKE_TIMEOUT,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            max_connections_per_peer: DEFAULT_MAX_CONNECTIONS_PER_PEER,
        }
    }
}

/// Where the local Unix socket goes.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum SocketSetting {
    /// [`leasehold_shared::local::socket_path`] of the bound TCP port.
    #[default]
    Default,
    /// No socket.
    Off,
    /// This path.
    Path(PathBuf),
}

/// A bound local socket: its listener and the file, removed when this agent is done with it.
#[derive(Debug)]
pub struct UnixSocket {
    listener: UnixListener,
    file: SocketFile,
}

impl UnixSocket {
    /// Binds the socket `setting` names for the agent on TCP `port`; `None` when it is off.
    pub fn open(setting: &SocketSetting, port: u16) -> Result<Option<UnixSocket>> {
        let path = match setting {
            SocketSetting::Off => return Ok(None),
            SocketSetting::Path(path) => path.clone(),
            SocketSetting::Default => leasehold_shared::local::socket_path(port).map_err(|e| {
                AgentError::socket("finding the runtime directory for the agent's socket", e)
            })?,
        };
        UnixSocket::bind(&path).map(Some)
    }

    /// Binds `path` (see the module docs for what an existing file means).
    pub fn bind(path: &Path) -> Result<UnixSocket> {
        let refused = |doing: String| AgentError::Socket {
            doing,
            source: None,
        };
        let dir = match path.parent() {
            Some(dir) if !dir.as_os_str().is_empty() => dir,
            _ => {
                return Err(refused(format!(
                    "socket path {} has no directory; give an absolute --socket PATH",
                    path.display()
                )));
            }
        };
        leasehold_shared::local::ensure_private_dir(dir).map_err(|e| {
            refused(format!(
                "cannot use {} for the agent's socket: {e}; start with --socket off (no local \
                 socket) or --socket PATH (a socket in a private directory)",
                dir.display()
            ))
        })?;
        match std::fs::symlink_metadata(path) {
            Ok(meta) if !meta.file_type().is_socket() => {
                return Err(refused(format!(
                    "{} exists and is not a socket; remove it, or start with --socket PATH or \
                     --socket off",
                    path.display()
                )));
            }
            Ok(_) => match std::os::unix::net::UnixStream::connect(path) {
                Ok(_) => {
                    return Err(refused(format!(
                        "another agent serves the socket {}; stop it, or start this one with \
                         --socket PATH or --socket off",
                        path.display()
                    )));
                }
                Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
                    tracing::info!(path = %path.display(), "replacing a stale socket");
                    std::fs::remove_file(path).map_err(|e| {
                        AgentError::socket(
                            format!("removing the stale socket {}", path.display()),
                            e,
                        )
                    })?;
                }
                Err(e) => {
                    return Err(refused(format!(
                        "{} exists and cannot be checked ({e}); remove it, or start with --socket \
                         PATH or --socket off",
                        path.display()
                    )));
                }
            },
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(refused(format!("cannot read {}: {e}", path.display()))),
        }
        let listener = UnixListener::bind(path)
            .map_err(|e| AgentError::socket(format!("binding the socket {}", path.display()), e))?;
        // Before the file's identity is taken: chmod changes its ctime. The directory is
        // private already; the mode keeps the socket private should it be moved.
        if let Err(e) = std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)) {
            let _ = std::fs::remove_file(path);
            return Err(AgentError::socket(
                format!("making the socket {} mode 0600", path.display()),
                e,
            ));
        }
        let file = SocketFile {
            path: path.to_path_buf(),
            id: file_id(&std::fs::symlink_metadata(path).map_err(|e| {
                AgentError::socket(format!("reading the socket {}", path.display()), e)
            })?),
        };
        Ok(UnixSocket { listener, file })
    }

    /// The socket's path.
    pub fn path(&self) -> &Path {
        &self.file.path
    }

    pub(crate) fn into_parts(self) -> (UnixListener, SocketFile) {
        (self.listener, self.file)
    }
}

/// The socket file this agent bound; dropping it removes the file if it is still that one.
#[derive(Debug)]
pub(crate) struct SocketFile {
    path: PathBuf,
    id: (u64, u64, i64, i64),
}

/// Which file this is: device, inode and change time (an inode number alone is reused at once
/// when a file is removed and another made).
fn file_id(meta: &std::fs::Metadata) -> (u64, u64, i64, i64) {
    (meta.dev(), meta.ino(), meta.ctime(), meta.ctime_nsec())
}

impl SocketFile {
    /// The socket's path.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for SocketFile {
    fn drop(&mut self) {
        match std::fs::symlink_metadata(&self.path) {
            Ok(meta) if file_id(&meta) == self.id && meta.file_type().is_socket() => {
                if let Err(error) = std::fs::remove_file(&self.path) {
                    tracing::warn!(path = %self.path.display(), %error, "cannot remove the socket");
                }
            }
            _ => {}
        }
    }
}

/// Counts open connections against the caps.
#[derive(Debug)]
pub(crate) struct Limiter {
    limits: TransportLimits,
    state: Mutex<LimiterState>,
}

#[derive(Debug, Default)]
struct LimiterState {
    total: u32,
    per_peer: HashMap<String, u32>,
    last_warning: Option<Instant>,
    refused_since_warning: u64,
}

/// Which cap refused a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refused {
    Total,
    PerPeer,
}

impl Limiter {
    pub(crate) fn new(limits: TransportLimits) -> Arc<Limiter> {
        Arc::new(Limiter {
            limits,
            state: Mutex::default(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, LimiterState> {
        // The counters stay consistent even if a holder panicked: every update is one step.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A slot for a connection of `key`, or which cap is full (warned about, rate-limited).
    pub(crate) fn try_acquire(self: &Arc<Self>, key: String) -> Result<Slot, Refused> {
        let mut state = self.lock();
        let of_peer = state.per_peer.get(&key).copied().unwrap_or(0);
        let refused = if state.total >= self.limits.max_connections {
            Some(Refused::Total)
        } else if of_peer >= self.limits.max_connections_per_peer {
            Some(Refused::PerPeer)
        } else {
            None
        };
        if let Some(refused) = refused {
            state.refused_since_warning += 1;
            let now = Instant::now();
            if state
                .last_warning
                .is_none_or(|at| now.duration_since(at) >= WARN_EVERY)
            {
                let count = std::mem::take(&mut state.refused_since_warning);
                state.last_warning = Some(now);
                drop(state);
                match refused {
                    Refused::Total => tracing::warn!(
                        peer = %key,
                        max_connections = self.limits.max_connections,
                        refused = count,
                        "gRPC connection limit reached: closing new connections"
                    ),
                    Refused::PerPeer => tracing::warn!(
                        peer = %key,
                        max_connections_per_peer = self.limits.max_connections_per_peer,
                        refused = count,
                        "gRPC per-peer connection limit reached: closing the peer's new connections"
                    ),
                }
            }
            return Err(refused);
        }
        state.total += 1;
        *state.per_peer.entry(key.clone()).or_insert(0) += 1;
        Ok(Slot {
            limiter: Arc::clone(self),
            key,
        })
    }

    /// Open connections in total and of `key`.
    #[cfg(test)]
    pub(crate) fn counts(&self, key: &str) -> (u32, u32) {
        let state = self.lock();
        (state.total, state.per_peer.get(key).copied().unwrap_or(0))
    }
}

/// One connection's place under the caps, given back on drop.
#[derive(Debug)]
pub(crate) struct Slot {
    limiter: Arc<Limiter>,
    key: String,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut state = self.limiter.lock();
        state.total = state.total.saturating_sub(1);
        if let Some(n) = state.per_peer.get_mut(&self.key) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                state.per_peer.remove(&self.key);
            }
        }
    }
}

enum Io {
    Tcp(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
    Unix(UnixStream),
}

/// An accepted connection: its stream, who is on the other end, and its slot.
pub struct Conn {
    io: Io,
    peer: Peer,
    _slot: Slot,
}

impl Conn {
    /// Who is on the other end.
    pub fn peer(&self) -> &Peer {
        &self.peer
    }
}

impl Connected for Conn {
    type ConnectInfo = Peer;

    fn connect_info(&self) -> Peer {
        self.peer.clone()
    }
}

impl AsyncRead for Conn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match &mut self.get_mut().io {
            Io::Tcp(s) => Pin::new(s).poll_read(cx, buf),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
            Io::Unix(s) => Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match &mut self.get_mut().io {
            Io::Tcp(s) => Pin::new(s).poll_write(cx, buf),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
            Io::Unix(s) => Pin::new(s).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match &mut self.get_mut().io {
            Io::Tcp(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
            Io::Unix(s) => Pin::new(s).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match &self.io {
            Io::Tcp(s) => s.is_write_vectored(),
            Io::Tls(s) => s.is_write_vectored(),
            Io::Unix(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().io {
            Io::Tcp(s) => Pin::new(s).poll_flush(cx),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
            Io::Unix(s) => Pin::new(s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().io {
            Io::Tcp(s) => Pin::new(s).poll_shutdown(cx),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
            Io::Unix(s) => Pin::new(s).poll_shutdown(cx),
        }
    }
}

/// What the accept loop works with.
struct Acceptor {
    tcp: TcpIncoming,
    tcp_open: bool,
    local: Option<SocketAddr>,
    tls: Option<TlsAcceptor>,
    unix: Option<UnixListener>,
    limiter: Arc<Limiter>,
    handshake_timeout: Duration,
    handshakes: JoinSet<Option<Conn>>,
}

/// The connections of `tcp` (TLS when `tls` is given) and `unix`, ready for tonic.
pub(crate) fn incoming(
    tcp: TcpListener,
    tls: Option<Arc<ServerConfig>>,
    unix: Option<UnixListener>,
    limits: TransportLimits,
) -> impl Stream<Item = io::Result<Conn>> + Send + 'static {
    let local = tcp.local_addr().ok().map(canonical);
    let acceptor = Acceptor {
        tcp: TcpIncoming::from(tcp)
            .with_nodelay(Some(true))
            .with_keepalive(Some(TCP_KEEPALIVE)),
        tcp_open: true,
        local,
        tls: tls.map(TlsAcceptor::from),
        unix,
        limiter: Limiter::new(limits),
        handshake_timeout: limits.handshake_timeout,
        handshakes: JoinSet::new(),
    };
    futures_util::stream::unfold(acceptor, |mut a| async move {
        let conn = a.next_conn().await;
        Some((Ok(conn), a))
    })
}

async fn accept_unix(unix: &mut Option<UnixListener>) -> io::Result<UnixStream> {
    match unix {
        Some(listener) => listener.accept().await.map(|(stream, _)| stream),
        None => std::future::pending().await,
    }
}

impl Acceptor {
    /// The next connection that passed the caps and its handshake.
    async fn next_conn(&mut self) -> Conn {
        loop {
            tokio::select! {
                accepted = self.tcp.next(), if self.tcp_open => match accepted {
                    Some(Ok(stream)) => self.start_tcp(stream),
                    Some(Err(error)) => {
                        tracing::warn!(%error, "accepting a gRPC TCP connection failed");
                        tokio::time::sleep(ACCEPT_BACKOFF).await;
                    }
                    // The listener never ends; should it, the socket and handshakes go on.
                    None => self.tcp_open = false,
                },
                accepted = accept_unix(&mut self.unix) => match accepted {
                    Ok(stream) => {
                        if let Some(conn) = self.start_unix(stream) {
                            return conn;
                        }
                    }
                    Err(error) => {
                        tracing::warn!(%error, "accepting a connection on the socket failed");
                        tokio::time::sleep(ACCEPT_BACKOFF).await;
                    }
                },
                Some(done) = self.handshakes.join_next() => {
                    if let Ok(Some(conn)) = done {
                        return conn;
                    }
                }
            }
        }
    }

    fn start_unix(&self, stream: UnixStream) -> Option<Conn> {
        let cred = match stream.peer_cred() {
            Ok(cred) => cred,
            Err(error) => {
                tracing::warn!(%error, "cannot read the socket peer's credentials; closing");
                return None;
            }
        };
        let peer = Peer::Unix {
            uid: cred.uid(),
            pid: cred.pid(),
        };
        let slot = self.limiter.try_acquire(peer.address_key()).ok()?;
        Some(Conn {
            io: Io::Unix(stream),
            peer,
            _slot: slot,
        })
    }

    fn start_tcp(&mut self, stream: TcpStream) {
        let addr = match stream.peer_addr() {
            Ok(addr) => canonical(addr),
            Err(error) => {
                tracing::debug!(%error, "an accepted connection has no peer address");
                return;
            }
        };
        let Ok(slot) = self.limiter.try_acquire(addr.ip().to_string()) else {
            return;
        };
        // The connection's own local address: the listener's may be a wildcard.
        let local = stream.local_addr().ok().map(canonical).or(self.local);
        let tls = self.tls.clone();
        let timeout = self.handshake_timeout;
        self.handshakes.spawn(async move {
            let uid = match local {
                Some(local) if addr.ip().is_loopback() => loopback_uid(addr, local),
                _ => None,
            };
            let peer = Peer::Tcp { addr, uid };
            let io = match tls {
                Some(acceptor) => match tokio::time::timeout(timeout, acceptor.accept(stream)).await {
                    Ok(Ok(tls)) => Io::Tls(Box::new(tls)),
                    Ok(Err(error)) => {
                        tracing::debug!(%addr, %error, "TLS handshake failed");
                        return None;
                    }
                    Err(_) => {
                        tracing::debug!(%addr, ?timeout, "TLS handshake timed out; closing");
                        return None;
                    }
                },
                None => {
                    let mut first = [0u8; 1];
                    match tokio::time::timeout(timeout, stream.peek(&mut first)).await {
                        Ok(Ok(n)) if n > 0 => Io::Tcp(stream),
                        Ok(Ok(_)) => return None,
                        Ok(Err(error)) => {
                            tracing::debug!(%addr, %error, "connection failed before its first bytes");
                            return None;
                        }
                        Err(_) => {
                            tracing::debug!(%addr, ?timeout, "client sent nothing in time; closing");
                            return None;
                        }
                    }
                }
            };
            Some(Conn {
                io,
                peer,
                _slot: slot,
            })
        });
    }
}

/// `addr` with an IPv4-mapped IPv6 address turned into IPv4.
fn canonical(addr: SocketAddr) -> SocketAddr {
    SocketAddr::new(addr.ip().to_canonical(), addr.port())
}

/// The uid owning the client socket of the loopback connection `peer` -> `local`, from the
/// kernel's socket tables; `None` when neither lists it.
pub(crate) fn loopback_uid(peer: SocketAddr, local: SocketAddr) -> Option<u32> {
    let (peer, local) = (canonical(peer), canonical(local));
    ["/proc/net/tcp", "/proc/net/tcp6"].iter().find_map(|file| {
        let text = std::fs::read_to_string(file).ok()?;
        text.lines().find_map(|line| {
            let (l, r, uid) = parse_proc_net_line(line)?;
            (canonical(l) == peer && canonical(r) == local).then_some(uid)
        })
    })
}

/// One line of `/proc/net/tcp` or `/proc/net/tcp6`: local address, remote address and the
/// socket owner's uid; `None` for the header or a line it cannot read.
pub(crate) fn parse_proc_net_line(line: &str) -> Option<(SocketAddr, SocketAddr, u32)> {
    let mut fields = line.split_whitespace();
    if !fields.next()?.ends_with(':') {
        return None;
    }
    let local = parse_proc_addr(fields.next()?)?;
    let remote = parse_proc_addr(fields.next()?)?;
    // st, tx_queue:rx_queue, tr:tm->when, retrnsmt, then uid.
    let uid = fields.nth(4)?.parse().ok()?;
    Some((local, remote, uid))
}

/// `0100007F:1F90` (IPv4) or 32 hex digits and a port (IPv6): the kernel prints each 32-bit
/// word of the address as a number in host byte order.
fn parse_proc_addr(text: &str) -> Option<SocketAddr> {
    let (ip, port) = text.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    let word = |hex: &str| u32::from_str_radix(hex, 16).ok().map(u32::to_ne_bytes);
    let ip = match ip.len() {
        8 => std::net::IpAddr::V4(Ipv4Addr::from(word(ip)?)),
        32 => {
            let mut bytes = [0u8; 16];
            for (i, chunk) in bytes.chunks_exact_mut(4).enumerate() {
                chunk.copy_from_slice(&word(ip.get(i * 8..i * 8 + 8)?)?);
            }
            std::net::IpAddr::V6(Ipv6Addr::from(bytes))
        }
        _ => return None,
    };
    Some(SocketAddr::new(ip, port))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    #[cfg(target_endian = "little")]
    #[test]
    fn proc_net_lines_parse_in_both_formats() {
        let v4 = "   3: 0100007F:1F90 0100007F:D431 01 00000000:00000000 00:00000000 00000000  1000        0 123456 1 0000000000000000 20 4 30 10 -1";
        let (local, remote, uid) = parse_proc_net_line(v4).unwrap();
        assert_eq!(local, "127.0.0.1:8080".parse().unwrap());
        assert_eq!(remote, "127.0.0.1:54321".parse().unwrap());
        assert_eq!(uid, 1000);
        let v6 = "   0: 00000000000000000000000001000000:1F90 0000000000000000FFFF00000100007F:0050 01 00000000:00000000 00:00000000 00000000 65534        0 99 1 0000000000000000 20 4 30 10 -1";
        let (local, remote, uid) = parse_proc_net_line(v6).unwrap();
        assert_eq!(local, "[::1]:8080".parse().unwrap());
        assert_eq!(remote, "[::ffff:127.0.0.1]:80".parse().unwrap());
        assert_eq!(canonical(remote), "127.0.0.1:80".parse().unwrap());
        assert_eq!(uid, 65534);
        let header = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode";
        assert!(parse_proc_net_line(header).is_none());
        assert!(parse_proc_net_line("   1: 0100007F:ZZZZ 0100007F:0050 01").is_none());
        assert!(parse_proc_net_line("   1: 01007F:0050 0100007F:0050 01 0:0 0:0 0 0").is_none());
    }

    #[tokio::test]
    async fn a_loopback_connection_is_found_with_its_owner() {
        let me = leasehold_shared::local::current_uid().unwrap();
        for bind in ["127.0.0.1:0", "[::1]:0"] {
            let Ok(listener) = TcpListener::bind(bind).await else {
                continue; // no IPv6 loopback here
            };
            let server = listener.local_addr().unwrap();
            let client = TcpStream::connect(server).await.unwrap();
            let (accepted, peer) = listener.accept().await.unwrap();
            assert_eq!(peer, client.local_addr().unwrap());
            let local = accepted.local_addr().unwrap();
            assert_eq!(loopback_uid(peer, local), Some(me), "{bind}");
            // The reverse direction is the server's socket, not a client's: another port.
            let elsewhere = SocketAddr::new(peer.ip(), 1);
            assert_eq!(loopback_uid(elsewhere, local), None);
        }
    }

    #[test]
    fn caps_hold_and_slots_come_back() {
        let limiter = Limiter::new(TransportLimits {
            handshake_timeout: Duration::from_secs(1),
            max_connections: 3,
            max_connections_per_peer: 2,
        });
        let a1 = limiter.try_acquire("a".into()).unwrap();
        let a2 = limiter.try_acquire("a".into()).unwrap();
        assert_eq!(
            limiter.try_acquire("a".into()).unwrap_err(),
            Refused::PerPeer
        );
        let b1 = limiter.try_acquire("b".into()).unwrap();
        assert_eq!(limiter.try_acquire("c".into()).unwrap_err(), Refused::Total);
        assert_eq!(limiter.counts("a"), (3, 2));
        drop(a1);
        assert_eq!(limiter.counts("a"), (2, 1));
        let a3 = limiter.try_acquire("a".into()).unwrap();
        drop((a2, a3, b1));
        assert_eq!(limiter.counts("a"), (0, 0));
        assert!(limiter.lock().per_peer.is_empty());
    }

    fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("lh-transport-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        dir
    }

    #[tokio::test]
    async fn the_socket_is_private_replaces_a_stale_one_and_refuses_a_live_one() {
        let dir = temp_dir("sock");
        let path = dir.join("run").join("agent-1.sock");
        let socket = UnixSocket::bind(&path).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let dir_mode = std::fs::metadata(path.parent().unwrap())
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(dir_mode & 0o777, 0o700);
        let e = UnixSocket::bind(&path).unwrap_err();
        assert!(format!("{e:#}").contains("another agent serves"), "{e:#}");
        // A socket nobody listens on any more is stale: it is replaced.
        let (listener, file) = socket.into_parts();
        drop(listener);
        std::mem::forget(file);
        let again = UnixSocket::bind(&path).unwrap();
        drop(again);
        assert!(!path.exists(), "the socket is removed when dropped");
        std::fs::write(&path, b"not a socket").unwrap();
        let e = UnixSocket::bind(&path).unwrap_err();
        assert!(format!("{e:#}").contains("not a socket"), "{e:#}");
        std::fs::remove_file(&path).unwrap();
        let open = dir.join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = UnixSocket::bind(&open.join("a.sock")).unwrap_err();
        let text = format!("{e:#}");
        assert!(
            text.contains("--socket off") && text.contains(&open.display().to_string()),
            "{text}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[tokio::test]
    async fn a_replaced_socket_file_is_not_removed_by_the_old_agent() {
        let dir = temp_dir("inode");
        let path = dir.join("agent-2.sock");
        let socket = UnixSocket::bind(&path).unwrap();
        let (listener, file) = socket.into_parts();
        drop(listener);
        std::fs::remove_file(&path).unwrap();
        let newer = UnixSocket::bind(&path).unwrap();
        drop(file);
        assert!(path.exists(), "the newer agent's socket stays");
        drop(newer);
        assert!(!path.exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
