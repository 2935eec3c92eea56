//! The gRPC part of the agent's configuration: where it listens, TLS and tokens (DESIGN §10).
//!
//! ```toml
//! listen = "0.0.0.0:7070"      # default 127.0.0.1:7070; "off" serves no gRPC
//!
//! [tls]
//! cert = "/etc/leasehold/agent.pem"
//! key = "/etc/leasehold/agent-key.pem"
//! client_ca = "/etc/leasehold/clients-ca.pem"   # optional: require client certs (mTLS)
//!
//! [[tokens]]
//! name = "oncall"              # written to the audit log
//! role = "operator"            # or "viewer" (watch and list only)
//! secret_file = "/etc/leasehold/oncall.token"   # or secret = "..." (16+ characters)
//! ```
//!
//! On any address that is not loopback the agent refuses to start without TLS and at least
//! one token, unless `--insecure` (or `insecure = true`) says the network is trusted.
//!
//! Without tokens, loopback TCP callers may only watch and list (local users act through the
//! agent's Unix socket) unless `--insecure-local` (or `insecure_local = true`) makes them
//! operators.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use leasehold_shared::Role;
use serde::Deserialize;

use super::{ConfigError, invalid};
use crate::grpc::{Auth, SocketSetting, TlsFiles, Token, TransportLimits};

/// Where the agent serves gRPC unless told otherwise.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:7070";

/// The `[tls]` table.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsFile {
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
    pub client_ca: Option<PathBuf>,
}

/// A role as written in the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RoleName {
    Viewer,
    Operator,
}

/// One `[[tokens]]` entry.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenFile {
    pub name: String,
    pub role: RoleName,
    pub secret: Option<String>,
    pub secret_file: Option<PathBuf>,
}

/// The resolved gRPC settings.
#[derive(Debug, Clone)]
pub struct GrpcConfig {
    pub listen: SocketAddr,
    pub tls: Option<TlsFiles>,
    pub tokens: Vec<Token>,
    pub insecure: bool,
    /// Loopback TCP callers without a token are operators, not viewers.
    pub insecure_local: bool,
    /// The Unix socket, handshake timeout and connection caps ([`resolve_transport`]).
    pub transport: Transport,
}

impl GrpcConfig {
    /// The token table, checked, and who local callers are.
    pub fn auth(&self) -> Result<Auth, ConfigError> {
        Auth::new(self.tokens.clone())
            .map(|auth| auth.with_insecure_local(self.insecure_local))
            .map_err(|e| invalid("tokens", e.to_string()))
    }
}

/// What the flags and environment say about gRPC.
#[derive(Debug, Default, Clone)]
pub struct GrpcOverrides {
    pub listen: Option<String>,
    pub tls_cert: Option<PathBuf>,
    pub tls_key: Option<PathBuf>,
    pub tls_client_ca: Option<PathBuf>,
    pub insecure: bool,
    /// `--insecure-local`, or `insecure_local = true` in the file (merged by the caller).
    pub insecure_local: bool,
}

/// Merges the file's and the flags' gRPC settings; `None` when gRPC is off.
pub fn resolve(
    flags: GrpcOverrides,
    file_listen: Option<String>,
    file_tls: Option<TlsFile>,
    file_tokens: Option<Vec<TokenFile>>,
    file_insecure: Option<bool>,
) -> Result<Option<GrpcConfig>, ConfigError> {
    let listen = flags
        .listen
        .or(file_listen)
        .unwrap_or_else(|| DEFAULT_LISTEN.to_string());
    if listen.trim() == "off" {
        return Ok(None);
    }
    let addr = listen_addr(listen.trim())?;
    let file_tls = file_tls.unwrap_or_default();
    let cert = flags.tls_cert.or(file_tls.cert);
    let key = flags.tls_key.or(file_tls.key);
    let client_ca = flags.tls_client_ca.or(file_tls.client_ca);
    let tls = match (cert, key) {
        (Some(cert), Some(key)) => Some(TlsFiles {
            cert,
            key,
            client_ca,
        }),
        (None, None) if client_ca.is_none() => None,
        (None, None) => {
            return Err(invalid(
                "tls.client_ca",
                "a client CA needs the server's own cert and key (tls.cert, tls.key)",
            ));
        }
        _ => {
            return Err(invalid(
                "tls",
                "give both tls.cert and tls.key (--tls-cert, --tls-key)",
            ));
        }
    };
    let mut tokens = Vec::new();
    for t in file_tokens.unwrap_or_default() {
        let secret = match (t.secret, t.secret_file) {
            (Some(s), None) => s,
            (None, Some(path)) => std::fs::read_to_string(&path)
                .map_err(|e| {
                    invalid(
                        "tokens",
                        format!(
                            "token {:?}: cannot read secret_file {}: {e}",
                            t.name,
                            path.display()
                        ),
                    )
                })?
                .trim()
                .to_string(),
            _ => {
                return Err(invalid(
                    "tokens",
                    format!(
                        "token {:?}: give exactly one of secret, secret_file",
                        t.name
                    ),
                ));
            }
        };
        tokens.push(Token {
            name: t.name,
            role: match t.role {
                RoleName::Viewer => Role::Viewer,
                RoleName::Operator => Role::Operator,
            },
            secret,
        });
    }
    let insecure = flags.insecure || file_insecure.unwrap_or(false);
    let config = GrpcConfig {
        listen: addr,
        tls,
        tokens,
        insecure,
        insecure_local: flags.insecure_local,
        transport: Transport::default(),
    };
    config.auth()?;
    if !addr.ip().is_loopback() && !insecure && (config.tls.is_none() || config.tokens.is_empty()) {
        return Err(invalid(
            "listen",
            format!(
                "{addr} is not a loopback address: the agent serves it only with TLS ([tls] cert \
                 and key) and at least one token ([[tokens]]), or with --insecure on a trusted \
                 network"
            ),
        ));
    }
    Ok(Some(config))
}

/// Longest `tls_handshake_timeout` accepted.
pub const MAX_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(300);
/// Shortest `tls_handshake_timeout` accepted.
pub const MIN_HANDSHAKE_TIMEOUT: Duration = Duration::from_millis(100);
/// Largest `grpc_max_connections` accepted.
pub const MAX_CONNECTIONS_CAP: u32 = 100_000;

/// The transport settings as the flags (or the file) give them:
///
/// ```toml
/// socket = "off"                    # default: <runtime dir>/agent-<port>.sock; or a path
/// tls_handshake_timeout = "10s"     # also handshake_timeout; plaintext: the first bytes
/// grpc_max_connections = 1024       # open connections in total
/// grpc_max_connections_per_peer = 64   # per client IP (per uid on the socket)
/// ```
#[derive(Debug, Default, Clone)]
pub struct TransportOverrides {
    pub socket: Option<String>,
    pub handshake_timeout: Option<String>,
    pub max_connections: Option<u32>,
    pub max_connections_per_peer: Option<u32>,
}

/// The resolved transport settings.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Transport {
    pub socket: SocketSetting,
    pub limits: TransportLimits,
}

/// Merges the flags' and the file's transport settings (the flags win) and checks them.
pub fn resolve_transport(
    flags: TransportOverrides,
    file: TransportOverrides,
) -> Result<Transport, ConfigError> {
    let socket = match flags.socket.or(file.socket) {
        None => SocketSetting::Default,
        Some(text) if text.trim() == "off" => SocketSetting::Off,
        Some(text) => {
            let path = PathBuf::from(text.trim());
            if !path.is_absolute() || path.file_name().is_none() {
                return Err(invalid(
                    "socket",
                    format!(
                        "{text:?} is not an absolute file path; give e.g. /run/leasehold/agent.sock, or off"
                    ),
                ));
            }
            SocketSetting::Path(path)
        }
    };
    let d = TransportLimits::default();
    let handshake_timeout = match flags.handshake_timeout.or(file.handshake_timeout) {
        None => d.handshake_timeout,
        Some(text) => super::duration("tls_handshake_timeout", &text)?,
    };
    if !(MIN_HANDSHAKE_TIMEOUT..=MAX_HANDSHAKE_TIMEOUT).contains(&handshake_timeout) {
        return Err(invalid(
            "tls_handshake_timeout",
            format!(
                "{} is out of range: give {}..={}",
                humantime::format_duration(handshake_timeout),
                humantime::format_duration(MIN_HANDSHAKE_TIMEOUT),
                humantime::format_duration(MAX_HANDSHAKE_TIMEOUT)
            ),
        ));
    }
    let max_connections = flags
        .max_connections
        .or(file.max_connections)
        .unwrap_or(d.max_connections);
    if !(1..=MAX_CONNECTIONS_CAP).contains(&max_connections) {
        return Err(invalid(
            "grpc_max_connections",
            format!("{max_connections} is out of range: give 1..={MAX_CONNECTIONS_CAP}"),
        ));
    }
    let max_connections_per_peer = flags
        .max_connections_per_peer
        .or(file.max_connections_per_peer)
        .unwrap_or(d.max_connections_per_peer.min(max_connections));
    if !(1..=max_connections).contains(&max_connections_per_peer) {
        return Err(invalid(
            "grpc_max_connections_per_peer",
            format!(
                "{max_connections_per_peer} is out of range: give 1..={max_connections} \
                 (at most grpc_max_connections)"
            ),
        ));
    }
    Ok(Transport {
        socket,
        limits: TransportLimits {
            handshake_timeout,
            max_connections,
            max_connections_per_peer,
        },
    })
}

/// `--listen` as an address: an IP and port, or a host name and port resolved here (the
/// loopback and TLS rules then apply to the address it names, so `localhost:7070` is as
/// local as `127.0.0.1:7070`). A name with several addresses binds the first, loopback first.
fn listen_addr(listen: &str) -> Result<SocketAddr, ConfigError> {
    if let Ok(addr) = listen.parse::<SocketAddr>() {
        return Ok(addr);
    }
    let example = "e.g. 127.0.0.1:7070, localhost:7070, or off";
    if listen
        .rsplit_once(':')
        .is_none_or(|(host, port)| host.is_empty() || port.parse::<u16>().is_err())
    {
        return Err(invalid(
            "listen",
            format!("{listen:?} is not host:port; {example}"),
        ));
    }
    let addrs: Vec<SocketAddr> = std::net::ToSocketAddrs::to_socket_addrs(listen)
        .map_err(|e| {
            invalid(
                "listen",
                format!("cannot resolve {listen:?} ({e}); {example}"),
            )
        })?
        .collect();
    addrs
        .iter()
        .find(|a| a.ip().is_loopback())
        .or_else(|| addrs.first())
        .copied()
        .ok_or_else(|| invalid("listen", format!("{listen:?} resolves to no address")))
}

#[cfg(test)]
#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    fn token(role: RoleName) -> TokenFile {
        TokenFile {
            name: "ops".into(),
            role,
            secret: Some("0123456789abcdef-secret".into()),
            secret_file: None,
        }
    }

    fn tls() -> TlsFile {
        TlsFile {
            cert: Some("c.pem".into()),
            key: Some("k.pem".into()),
            client_ca: None,
        }
    }

    fn listen(addr: &str) -> GrpcOverrides {
        GrpcOverrides {
            listen: Some(addr.into()),
            ..GrpcOverrides::default()
        }
    }

    #[test]
    fn loopback_is_the_default_and_needs_nothing_else() {
        let c = resolve(GrpcOverrides::default(), None, None, None, None)
            .unwrap()
            .unwrap();
        assert_eq!(c.listen.to_string(), DEFAULT_LISTEN);
        assert!(c.tls.is_none() && c.tokens.is_empty());
        assert!(
            resolve(listen("off"), None, None, None, None)
                .unwrap()
                .is_none()
        );
    }

    #[test]
    fn a_public_address_needs_tls_and_a_token_or_insecure() {
        let e = resolve(listen("0.0.0.0:7070"), None, None, None, None).unwrap_err();
        assert!(e.to_string().contains("not a loopback address"), "{e}");
        let e = resolve(listen("0.0.0.0:7070"), None, Some(tls()), None, None).unwrap_err();
        assert!(e.to_string().starts_with("listen:"), "{e}");
        let e = resolve(
            listen("0.0.0.0:7070"),
            None,
            None,
            Some(vec![token(RoleName::Operator)]),
            None,
        )
        .unwrap_err();
        assert!(e.to_string().starts_with("listen:"), "{e}");
        assert!(
            resolve(
                listen("0.0.0.0:7070"),
                None,
                Some(tls()),
                Some(vec![token(RoleName::Viewer)]),
                None
            )
            .unwrap()
            .is_some()
        );
        let insecure = GrpcOverrides {
            insecure: true,
            ..listen("0.0.0.0:7070")
        };
        assert!(resolve(insecure, None, None, None, None).unwrap().is_some());
        assert!(
            resolve(listen("[::]:7070"), None, None, None, Some(true))
                .unwrap()
                .is_some()
        );
    }

    #[test]
    fn half_given_tls_and_bad_tokens_are_refused_by_name() {
        let half = TlsFile { key: None, ..tls() };
        let e = resolve(GrpcOverrides::default(), None, Some(half), None, None).unwrap_err();
        assert!(e.to_string().starts_with("tls:"), "{e}");
        let ca_only = TlsFile {
            cert: None,
            key: None,
            client_ca: Some("ca.pem".into()),
        };
        assert!(resolve(GrpcOverrides::default(), None, Some(ca_only), None, None).is_err());
        let mut short = token(RoleName::Operator);
        short.secret = Some("short".into());
        let e = resolve(
            GrpcOverrides::default(),
            None,
            None,
            Some(vec![short]),
            None,
        )
        .unwrap_err();
        assert!(e.to_string().starts_with("tokens:"), "{e}");
        let mut both = token(RoleName::Operator);
        both.secret_file = Some("/nowhere".into());
        assert!(resolve(GrpcOverrides::default(), None, None, Some(vec![both]), None).is_err());
        let mut missing = token(RoleName::Operator);
        missing.secret = None;
        missing.secret_file = Some("/nowhere/at/all".into());
        let e = resolve(
            GrpcOverrides::default(),
            None,
            None,
            Some(vec![missing]),
            None,
        )
        .unwrap_err();
        assert!(e.to_string().contains("cannot read secret_file"), "{e}");
        let e = resolve(listen("localhost"), None, None, None, None).unwrap_err();
        assert!(e.to_string().starts_with("listen:"), "{e}");
    }

    #[test]
    fn a_host_name_that_resolves_to_loopback_is_local() {
        // No TLS and no token: allowed only because localhost is loopback.
        let c = resolve(listen("localhost:7073"), None, None, None, None)
            .unwrap()
            .unwrap();
        assert!(c.listen.ip().is_loopback(), "{}", c.listen);
        assert_eq!(c.listen.port(), 7073);
    }

    #[test]
    fn insecure_local_comes_from_the_flag_or_the_file() {
        use crate::config::{AgentConfig, FileConfig, Overrides};
        let cli = Overrides {
            database_url: Some("postgres://x@y/z".into()),
            handlers: Some("noop".into()),
            ..Overrides::default()
        };
        let local = |file: FileConfig, cli: Overrides| {
            let c = AgentConfig::resolve(file, cli, None).unwrap();
            c.grpc.unwrap().auth().unwrap().insecure_local()
        };
        assert!(!local(FileConfig::default(), cli.clone()));
        let file: FileConfig = toml::from_str("insecure_local = true\n").unwrap();
        assert!(local(file, cli.clone()));
        let flag = Overrides {
            insecure_local: true,
            ..cli
        };
        assert!(local(FileConfig::default(), flag));
    }

    #[test]
    fn tokens_and_tls_parse_from_toml() {
        let f: crate::config::FileConfig = toml::from_str(
            "[tls]\ncert = \"a.pem\"\nkey = \"b.pem\"\n\n[[tokens]]\nname = \"dash\"\nrole = \"viewer\"\nsecret = \"0123456789abcdefg\"\n",
        )
        .unwrap();
        let c = resolve(GrpcOverrides::default(), None, f.tls, f.tokens, None)
            .unwrap()
            .unwrap();
        assert_eq!(c.tokens[0].role, Role::Viewer);
        assert!(c.tls.is_some());
        assert!(
            toml::from_str::<crate::config::FileConfig>(
                "[[tokens]]\nname = \"x\"\nrole = \"admin\"\nsecret = \"0123456789abcdefg\"\n"
            )
            .is_err()
        );
    }

    fn transport(f: TransportOverrides) -> Result<Transport, ConfigError> {
        resolve_transport(f, TransportOverrides::default())
    }

    #[test]
    fn transport_defaults_flags_over_file_and_bad_values() {
        let t = transport(TransportOverrides::default()).unwrap();
        assert_eq!(t, Transport::default());
        assert_eq!(t.limits.handshake_timeout, Duration::from_secs(10));
        assert_eq!(
            (t.limits.max_connections, t.limits.max_connections_per_peer),
            (1024, 64)
        );
        let file = TransportOverrides {
            socket: Some("/srv/a.sock".into()),
            handshake_timeout: Some("5s".into()),
            max_connections: Some(10),
            max_connections_per_peer: Some(3),
        };
        let flags = TransportOverrides {
            socket: Some("off".into()),
            handshake_timeout: Some("2s".into()),
            ..TransportOverrides::default()
        };
        let t = resolve_transport(flags, file.clone()).unwrap();
        assert_eq!(t.socket, SocketSetting::Off);
        assert_eq!(t.limits.handshake_timeout, Duration::from_secs(2));
        assert_eq!(t.limits.max_connections, 10);
        let t = resolve_transport(TransportOverrides::default(), file).unwrap();
        assert_eq!(t.socket, SocketSetting::Path("/srv/a.sock".into()));
        // A small total lowers the default per-peer cap with it.
        let t = transport(TransportOverrides {
            max_connections: Some(8),
            ..TransportOverrides::default()
        })
        .unwrap();
        assert_eq!(t.limits.max_connections_per_peer, 8);
        for (bad, setting) in [
            (
                TransportOverrides {
                    socket: Some("rel.sock".into()),
                    ..TransportOverrides::default()
                },
                "socket",
            ),
            (
                TransportOverrides {
                    handshake_timeout: Some("0s".into()),
                    ..TransportOverrides::default()
                },
                "tls_handshake_timeout",
            ),
            (
                TransportOverrides {
                    handshake_timeout: Some("2h".into()),
                    ..TransportOverrides::default()
                },
                "tls_handshake_timeout",
            ),
            (
                TransportOverrides {
                    handshake_timeout: Some("soon".into()),
                    ..TransportOverrides::default()
                },
                "tls_handshake_timeout",
            ),
            (
                TransportOverrides {
                    max_connections: Some(0),
                    ..TransportOverrides::default()
                },
                "grpc_max_connections",
            ),
            (
                TransportOverrides {
                    max_connections: Some(10_000_000),
                    ..TransportOverrides::default()
                },
                "grpc_max_connections",
            ),
            (
                TransportOverrides {
                    max_connections_per_peer: Some(0),
                    ..TransportOverrides::default()
                },
                "grpc_max_connections_per_peer",
            ),
            (
                TransportOverrides {
                    max_connections: Some(4),
                    max_connections_per_peer: Some(5),
                    ..TransportOverrides::default()
                },
                "grpc_max_connections_per_peer",
            ),
        ] {
            let e = transport(bad).unwrap_err().to_string();
            assert!(e.starts_with(&format!("{setting}:")), "{e}");
        }
    }
}
