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

use std::net::SocketAddr;
use std::path::PathBuf;

use leasehold_shared::Role;
use serde::Deserialize;

use super::{ConfigError, invalid};
use crate::grpc::{Auth, TlsFiles, Token};

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
}

impl GrpcConfig {
    /// The token table, checked.
    pub fn auth(&self) -> Result<Auth, ConfigError> {
        Auth::new(self.tokens.clone()).map_err(|e| invalid("tokens", e.to_string()))
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
    let addr: SocketAddr = listen.trim().parse().map_err(|e| {
        invalid(
            "listen",
            format!("{listen:?} is not host:port ({e}); e.g. 127.0.0.1:7070, or off"),
        )
    })?;
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
}
