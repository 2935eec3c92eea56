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
//!
//! # the transport
//! socket = "off"                    # default: <runtime dir>/agent-<port>.sock; or a path
//! tls_handshake_timeout = "10s"     # also handshake_timeout; plaintext: the first bytes
//! grpc_max_connections = 1024       # open connections in total
//! grpc_max_connections_per_peer = 64   # per client IP (per uid on the socket)
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
use serde::{Deserialize, Serialize};

use super::{ConfigError, invalid};
use crate::grpc::{Auth, SocketSetting, TlsFiles, Token, TransportLimits};

/// Where the agent serves gRPC unless told otherwise.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:7070";

/// The `[tls]` table (also `--tls-cert`, `--tls-key`, `--tls-client-ca`).
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsFile {
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
    pub client_ca: Option<PathBuf>,
}

/// A role as written in the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RoleName {
    Viewer,
    Operator,
}

/// One `[[tokens]]` entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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

/// The gRPC settings, merged from every layer; `None` when gRPC is off.
pub fn resolve(
    listen: &str,
    tls: Option<TlsFile>,
    tokens: Vec<TokenFile>,
    insecure: bool,
    insecure_local: bool,
) -> Result<Option<GrpcConfig>, ConfigError> {
    if listen.trim() == "off" {
        return Ok(None);
    }
    let addr = listen_addr(listen.trim())?;
    let TlsFile {
        cert,
        key,
        client_ca,
    } = tls.unwrap_or_default();
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
    let mut secrets = Vec::new();
    for t in tokens {
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
        secrets.push(Token {
            name: t.name,
            role: match t.role {
                RoleName::Viewer => Role::Viewer,
                RoleName::Operator => Role::Operator,
            },
            secret,
        });
    }
    let config = GrpcConfig {
        listen: addr,
        tls,
        tokens: secrets,
        insecure,
        insecure_local,
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

/// The resolved transport settings.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Transport {
    pub socket: SocketSetting,
    pub limits: TransportLimits,
}

/// Checks the merged transport settings (`socket`, `tls_handshake_timeout`,
/// `grpc_max_connections`, `grpc_max_connections_per_peer`).
pub fn resolve_transport(
    socket: Option<&str>,
    handshake_timeout: Duration,
    max_connections: u32,
    max_connections_per_peer: Option<u32>,
) -> Result<Transport, ConfigError> {
    let socket = match socket {
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
    if !(1..=MAX_CONNECTIONS_CAP).contains(&max_connections) {
        return Err(invalid(
            "grpc_max_connections",
            format!("{max_connections} is out of range: give 1..={MAX_CONNECTIONS_CAP}"),
        ));
    }
    let max_connections_per_peer =
        max_connections_per_peer.unwrap_or(d.max_connections_per_peer.min(max_connections));
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

    fn listen(addr: &str) -> Result<Option<GrpcConfig>, ConfigError> {
        resolve(addr, None, Vec::new(), false, false)
    }

    #[test]
    fn loopback_is_the_default_and_needs_nothing_else() {
        let c = listen(DEFAULT_LISTEN).unwrap().unwrap();
        assert_eq!(c.listen.to_string(), DEFAULT_LISTEN);
        assert!(c.tls.is_none() && c.tokens.is_empty());
        assert!(listen("off").unwrap().is_none());
    }

    #[test]
    fn a_public_address_needs_tls_and_a_token_or_insecure() {
        let public = "0.0.0.0:7070";
        let e = listen(public).unwrap_err();
        assert!(e.to_string().contains("not a loopback address"), "{e}");
        let e = resolve(public, Some(tls()), Vec::new(), false, false).unwrap_err();
        assert!(e.to_string().starts_with("listen:"), "{e}");
        let e = resolve(public, None, vec![token(RoleName::Operator)], false, false).unwrap_err();
        assert!(e.to_string().starts_with("listen:"), "{e}");
        let both = resolve(
            public,
            Some(tls()),
            vec![token(RoleName::Viewer)],
            false,
            false,
        );
        assert!(both.unwrap().is_some());
        assert!(
            resolve(public, None, Vec::new(), true, false)
                .unwrap()
                .is_some()
        );
        assert!(
            resolve("[::]:7070", None, Vec::new(), true, false)
                .unwrap()
                .is_some()
        );
    }

    #[test]
    fn half_given_tls_and_bad_tokens_are_refused_by_name() {
        let with_tls = |t: TlsFile| resolve(DEFAULT_LISTEN, Some(t), Vec::new(), false, false);
        let with_token = |t: TokenFile| resolve(DEFAULT_LISTEN, None, vec![t], false, false);
        let e = with_tls(TlsFile { key: None, ..tls() }).unwrap_err();
        assert!(e.to_string().starts_with("tls:"), "{e}");
        let ca_only = TlsFile {
            cert: None,
            key: None,
            client_ca: Some("ca.pem".into()),
        };
        let e = with_tls(ca_only).unwrap_err();
        assert!(e.to_string().starts_with("tls.client_ca:"), "{e}");
        let mut short = token(RoleName::Operator);
        short.secret = Some("short".into());
        let e = with_token(short).unwrap_err();
        assert!(e.to_string().starts_with("tokens:"), "{e}");
        let mut both = token(RoleName::Operator);
        both.secret_file = Some("/nowhere".into());
        assert!(with_token(both).is_err());
        let mut missing = token(RoleName::Operator);
        missing.secret = None;
        missing.secret_file = Some("/nowhere/at/all".into());
        let e = with_token(missing).unwrap_err();
        assert!(e.to_string().contains("cannot read secret_file"), "{e}");
        let e = listen("localhost").unwrap_err();
        assert!(e.to_string().starts_with("listen:"), "{e}");
    }

    #[test]
    fn a_host_name_that_resolves_to_loopback_is_local() {
        // No TLS and no token: allowed only because localhost is loopback.
        let c = listen("localhost:7073").unwrap().unwrap();
        assert!(c.listen.ip().is_loopback(), "{}", c.listen);
        assert_eq!(c.listen.port(), 7073);
    }

    #[test]
    fn insecure_local_comes_from_the_flag_the_variable_or_the_file() {
        use crate::config::layers::tests::{given, layers};
        use crate::config::{AgentConfig, Layers};
        let local = |layers: Layers| {
            let c = AgentConfig::resolve(&layers).unwrap();
            c.grpc.unwrap().auth().unwrap().insecure_local()
        };
        let noop = || given(&[("handlers", "noop".into())]);
        let on = || given(&[("handlers", "noop".into()), ("insecure_local", true.into())]);
        assert!(!local(layers(None, noop())));
        assert!(local(layers(Some("insecure_local = true\n"), noop())));
        assert!(local(layers(None, on())));
        assert!(local(
            Layers::new()
                .database_url_fallback(Some("sqlite:///x".into()))
                .environment(on())
        ));
        // A variable set to false does not turn off what the file turned on.
        let off = layers(Some("insecure_local = true\n"), noop())
            .environment(given(&[("insecure_local", false.into())]));
        assert!(local(off));
    }

    #[test]
    fn tokens_and_tls_parse_from_toml() {
        use crate::config::layers::tests::{given, layers};
        let text = "[tls]\ncert = \"a.pem\"\nkey = \"b.pem\"\n\n[[tokens]]\nname = \"dash\"\n\
                    role = \"viewer\"\nsecret = \"0123456789abcdefg\"\n";
        let f = layers(Some(text), given(&[])).settings().unwrap();
        let c = resolve(DEFAULT_LISTEN, f.tls, f.tokens, false, false)
            .unwrap()
            .unwrap();
        assert_eq!(c.tokens[0].role, Role::Viewer);
        assert!(c.tls.is_some());
        let admin = "[[tokens]]\nname = \"x\"\nrole = \"admin\"\nsecret = \"0123456789abcdefg\"\n";
        let e = layers(Some(admin), given(&[])).settings().unwrap_err();
        assert!(
            e.to_string().starts_with(
                "tokens[0].role: unknown variant `admin`, expected `viewer` or `operator`"
            ),
            "{e}"
        );
    }

    #[test]
    fn transport_defaults_and_bad_values() {
        let d = TransportLimits::default();
        let transport = |socket: Option<&str>, timeout: &str, max: u32, per_peer: Option<u32>| {
            let timeout = humantime::parse_duration(timeout).unwrap();
            resolve_transport(socket, timeout, max, per_peer)
        };
        let t = transport(None, "10s", d.max_connections, None).unwrap();
        assert_eq!(t, Transport::default());
        assert_eq!(t.limits.handshake_timeout, Duration::from_secs(10));
        assert_eq!(
            (t.limits.max_connections, t.limits.max_connections_per_peer),
            (1024, 64)
        );
        let t = transport(Some("off"), "2s", 10, Some(3)).unwrap();
        assert_eq!(t.socket, SocketSetting::Off);
        assert_eq!(t.limits.handshake_timeout, Duration::from_secs(2));
        assert_eq!(t.limits.max_connections, 10);
        let t = transport(Some("/srv/a.sock"), "5s", 10, None).unwrap();
        assert_eq!(t.socket, SocketSetting::Path("/srv/a.sock".into()));
        // A small total lowers the default per-peer cap with it.
        assert_eq!(
            transport(None, "10s", 8, None)
                .unwrap()
                .limits
                .max_connections_per_peer,
            8
        );
        // (socket, handshake timeout, connections, per peer, the setting refused)
        type Case<'a> = (Option<&'a str>, &'a str, u32, Option<u32>, &'a str);
        let bad: [Case; 7] = [
            (Some("rel.sock"), "10s", 1024, None, "socket"),
            (None, "0s", 1024, None, "tls_handshake_timeout"),
            (None, "2h", 1024, None, "tls_handshake_timeout"),
            (None, "10s", 0, None, "grpc_max_connections"),
            (None, "10s", 10_000_000, None, "grpc_max_connections"),
            (None, "10s", 1024, Some(0), "grpc_max_connections_per_peer"),
            (None, "10s", 4, Some(5), "grpc_max_connections_per_peer"),
        ];
        for (socket, timeout, max, per_peer, setting) in bad {
            let e = transport(socket, timeout, max, per_peer)
                .unwrap_err()
                .to_string();
            assert!(e.starts_with(&format!("{setting}:")), "{e}");
        }
    }
}
