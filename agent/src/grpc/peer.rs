//! Who is on the other end of a gRPC connection: a local user on the Unix socket (with the
//! uid the kernel vouches for), or a TCP address (loopback or not, with the owning uid of the
//! client's socket when it is loopback and the kernel's table names it).
//!
//! The transport ([`super::transport`]) puts a [`Peer`] into every request's extensions when
//! the connection is accepted; [`Peer::of`] reads it back.

use std::net::SocketAddr;

use tonic::Request;

/// The caller's connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Peer {
    /// A process on this host connected to the agent's Unix socket.
    Unix {
        /// The peer's effective uid (`SO_PEERCRED`).
        uid: u32,
        /// Its pid, when the kernel gave one.
        pid: Option<i32>,
    },
    /// A TCP connection.
    Tcp {
        addr: SocketAddr,
        /// The client's socket owner on this host, for a loopback connection whose socket
        /// `/proc/net/tcp{,6}` lists; `None` otherwise.
        uid: Option<u32>,
    },
}

impl Peer {
    /// The peer of `request`, as the transport recorded it; `None` for a connection the
    /// transport did not accept (in-process tests).
    pub fn of<T>(request: &Request<T>) -> Option<Peer> {
        request.extensions().get::<Peer>().cloned()
    }

    /// True for a TCP peer on a loopback address.
    pub fn is_loopback_tcp(&self) -> bool {
        matches!(self, Peer::Tcp { addr, .. } if addr.ip().is_loopback())
    }

    /// The local uid behind the connection, when known.
    pub fn uid(&self) -> Option<u32> {
        match self {
            Peer::Unix { uid, .. } => Some(*uid),
            Peer::Tcp { uid, .. } => *uid,
        }
    }

    /// The peer as the audit log's `peer` column records it: `unix:uid:1000(alice)` or the TCP
    /// address (`127.0.0.1:53211`, `[::1]:40000`).
    pub fn label(&self) -> String {
        match self {
            Peer::Unix { uid, .. } => format!("unix:{}", leasehold_shared::local::uid_label(*uid)),
            Peer::Tcp { addr, .. } => addr.to_string(),
        }
    }

    /// The peer's address without the port, for per-address limits and the aggregation of
    /// denied calls (`unix:uid:N` for the socket, the IP for TCP).
    pub fn address_key(&self) -> String {
        match self {
            Peer::Unix { uid, .. } => format!("unix:uid:{uid}"),
            Peer::Tcp { addr, .. } => addr.ip().to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    #[test]
    fn labels_and_keys() {
        let unix = Peer::Unix {
            uid: 0,
            pid: Some(1),
        };
        assert_eq!(unix.label(), "unix:uid:0(root)");
        assert_eq!(unix.address_key(), "unix:uid:0");
        assert!(!unix.is_loopback_tcp());
        let tcp = Peer::Tcp {
            addr: "127.0.0.1:4000".parse().unwrap(),
            uid: Some(65534),
        };
        assert!(tcp.is_loopback_tcp());
        assert_eq!(tcp.address_key(), "127.0.0.1");
        assert_eq!(tcp.uid(), Some(65534));
        let mut req = Request::new(());
        req.extensions_mut().insert(tcp.clone());
        assert_eq!(Peer::of(&req), Some(tcp));
    }
}
