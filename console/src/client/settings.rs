//! The connection settings of `leasehold`: the `--agent` address, TLS material read from
//! files, and the token as a header value, checked before any network I/O.
//!
//! Invariants: TLS is on when `--tls`, `--ca`, `--cert`/`--key` or an `https://` address say
//! so, and then a CA file is required (this build carries no system roots); an `http://`
//! address with TLS flags is refused rather than silently picking one; the token never
//! appears in an error or a `Debug` output.

use std::path::Path;
use std::time::Duration;

use tonic::metadata::{Ascii, MetadataValue};

use crate::cli::GlobalArgs;
use crate::error::{Error, Result};

/// Where the agent is, as given with `--agent`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentAddr {
    /// The text given, for messages.
    pub given: String,
    /// `Some(true)` for `https://`, `Some(false)` for `http://`, `None` without a scheme.
    pub scheme_tls: Option<bool>,
    /// Host name or IP address; IPv6 keeps its brackets.
    pub host: String,
    pub port: u16,
}

impl AgentAddr {
    /// Parses `HOST:PORT`, `http://HOST:PORT` or `https://HOST:PORT` (a trailing `/` is
    /// allowed; a path is not).
    pub fn parse(given: &str) -> Result<Self> {
        let bad = |why: &str| {
            Error::usage(format!(
                "--agent {}: {why} (expected HOST:PORT, http://HOST:PORT or https://HOST:PORT)",
                crate::output::text::shown(given, 100)
            ))
        };
        let (scheme_tls, rest) = if let Some(rest) = given.strip_prefix("https://") {
            (Some(true), rest)
        } else if let Some(rest) = given.strip_prefix("http://") {
            (Some(false), rest)
        } else if given.contains("://") {
            return Err(bad("unknown scheme"));
        } else {
            (None, given)
        };
        let rest = rest.strip_suffix('/').unwrap_or(rest);
        if rest.is_empty() {
            return Err(bad("empty address"));
        }
        if rest.contains(['/', '@', '?', '#']) || rest.chars().any(|c| c.is_whitespace()) {
            return Err(bad("not a plain host and port"));
        }
        let (host, port) = rest.rsplit_once(':').ok_or_else(|| bad("no port"))?;
        if host.is_empty() {
            return Err(bad("no host"));
        }
        if host.starts_with('[') != host.ends_with(']')
            || (!host.starts_with('[') && host.contains(':'))
        {
            return Err(bad("an IPv6 address goes in brackets, [::1]:7070"));
        }
        let port: u16 = port.parse().map_err(|_| bad("the port is not a number"))?;
        if port == 0 {
            return Err(bad("port 0"));
        }
        Ok(Self {
            given: given.to_owned(),
            scheme_tls,
            host: host.to_owned(),
            port,
        })
    }

    /// The URI dialled.
    pub fn uri(&self, tls: bool) -> String {
        let scheme = if tls { "https" } else { "http" };
        format!("{scheme}://{}:{}", self.host, self.port)
    }
}

/// TLS material, read from files.
#[derive(Clone)]
pub struct TlsSettings {
    pub ca_pem: Vec<u8>,
    /// Client certificate and key, for mutual TLS.
    pub identity: Option<(Vec<u8>, Vec<u8>)>,
    /// Name checked in the agent's certificate; `None` = the host of the address.
    pub server_name: Option<String>,
}

impl std::fmt::Debug for TlsSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsSettings")
            .field("identity", &self.identity.is_some())
            .field("server_name", &self.server_name)
            .finish_non_exhaustive()
    }
}

/// Everything needed to connect, checked.
#[derive(Clone)]
pub struct Settings {
    pub addr: AgentAddr,
    pub tls: Option<TlsSettings>,
    pub token: Option<MetadataValue<Ascii>>,
    pub call_timeout: Duration,
}

impl std::fmt::Debug for Settings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Settings")
            .field("addr", &self.addr)
            .field("tls", &self.tls)
            .field("token", &self.token.as_ref().map(|_| "<hidden>"))
            .field("call_timeout", &self.call_timeout)
            .finish()
    }
}

/// Checks the connection flags and reads the TLS files.
pub fn settings(global: &GlobalArgs) -> Result<Settings> {
    let addr = AgentAddr::parse(&global.agent)?;
    let ca = non_empty_path(global.ca.as_deref());
    let cert = non_empty_path(global.cert.as_deref());
    let key = non_empty_path(global.key.as_deref());
    let flags_want_tls = global.tls || ca.is_some() || cert.is_some() || key.is_some();
    if addr.scheme_tls == Some(false) && flags_want_tls {
        return Err(Error::usage(format!(
            "--agent {} is plaintext (http://) but --tls, --ca, --cert or --key ask for TLS: \
             use https:// or HOST:PORT",
            crate::output::text::shown(&addr.given, 100)
        )));
    }
    let use_tls = flags_want_tls || addr.scheme_tls == Some(true);
    let tls = if use_tls {
        let ca = ca.ok_or_else(|| {
            Error::usage(
                "TLS needs --ca FILE (or LEASEHOLD_CA): this build has no system root certificates",
            )
        })?;
        let ca_pem = read_pem("--ca", ca, "CERTIFICATE")?;
        let identity = match (cert, key) {
            (Some(cert), Some(key)) => Some((
                read_pem("--cert", cert, "CERTIFICATE")?,
                read_pem("--key", key, "PRIVATE KEY")?,
            )),
            (None, None) => None,
            _ => return Err(Error::usage("--cert and --key go together")),
        };
        Some(TlsSettings {
            ca_pem,
            identity,
            server_name: global.tls_server_name.clone(),
        })
    } else {
        if global.tls_server_name.is_some() {
            return Err(Error::usage("--tls-server-name needs TLS (give --ca)"));
        }
        None
    };
    let token = match global.token.as_deref() {
        None | Some("") => None,
        Some(token) => Some(bearer(token)?),
    };
    Ok(Settings {
        addr,
        tls,
        token,
        call_timeout: global.call_timeout,
    })
}

fn non_empty_path(p: Option<&Path>) -> Option<&Path> {
    p.filter(|p| !p.as_os_str().is_empty())
}

/// `Bearer <token>` as a header value; the token itself never appears in an error.
fn bearer(token: &str) -> Result<MetadataValue<Ascii>> {
    let token = token.trim();
    if token.is_empty() || !token.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(Error::usage(
            "--token (or LEASEHOLD_TOKEN) has characters a header cannot carry: use printable \
             ASCII without spaces",
        ));
    }
    format!("Bearer {token}")
        .parse()
        .map_err(|_| Error::usage("--token (or LEASEHOLD_TOKEN) cannot be sent as a header"))
}

/// Reads a PEM file and checks it holds a block whose label ends with `label`.
fn read_pem(flag: &str, path: &Path, label: &str) -> Result<Vec<u8>> {
    let bytes = std::fs::read(path).map_err(|source| Error::Local {
        what: format!("reading {flag} {}", path.display()),
        source,
    })?;
    let text = String::from_utf8_lossy(&bytes);
    let has_block = text
        .lines()
        .any(|l| l.starts_with("-----BEGIN ") && l.trim_end().ends_with(&format!("{label}-----")));
    if !has_block {
        return Err(Error::usage(format!(
            "{flag} {}: no PEM {label} block in it",
            path.display()
        )));
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn global(args: &[&str]) -> GlobalArgs {
        let args = std::iter::once("leasehold")
            .chain(args.iter().copied())
            .chain(["drain"]);
        match crate::cli::Cli::try_parse_from(args) {
            Ok(cli) => cli.global,
            Err(e) => panic!("{e}"),
        }
    }

    fn usage_message(r: Result<Settings>) -> String {
        match r {
            Err(Error::Usage(m)) => m,
            Err(other) => panic!("expected a usage error, got {other}"),
            Ok(s) => panic!("expected a usage error, got {s:?}"),
        }
    }

    #[test]
    fn addresses() {
        let a = AgentAddr::parse("127.0.0.1:7070").ok();
        assert_eq!(
            a.as_ref().map(|a| a.uri(false)).as_deref(),
            Some("http://127.0.0.1:7070")
        );
        assert_eq!(a.as_ref().and_then(|a| a.scheme_tls), None);
        let a = AgentAddr::parse("https://agent.internal:443/").ok();
        assert_eq!(a.as_ref().and_then(|a| a.scheme_tls), Some(true));
        assert_eq!(
            a.map(|a| a.uri(true)).as_deref(),
            Some("https://agent.internal:443")
        );
        let a = AgentAddr::parse("http://[::1]:7070").ok();
        assert_eq!(a.as_ref().map(|a| a.host.as_str()), Some("[::1]"));
        assert_eq!(a.and_then(|a| a.scheme_tls), Some(false));
        for bad in [
            "",
            "host",
            "host:",
            ":7070",
            "host:port",
            "host:70000",
            "host:0",
            "ftp://host:1",
            "http://host:1/path",
            "user@host:1",
            "::1:7070",
            "[::1:7070",
            "ho st:1",
        ] {
            assert!(AgentAddr::parse(bad).is_err(), "{bad:?} should be refused");
        }
    }

    #[test]
    fn plaintext_by_default() {
        let s = settings(&global(&["--agent", "10.0.0.1:7070"])).ok();
        assert!(
            s.as_ref()
                .is_some_and(|s| s.tls.is_none() && s.token.is_none())
        );
    }

    #[test]
    fn tls_needs_a_ca() {
        let m = usage_message(settings(&global(&["--tls"])));
        assert!(m.contains("--ca"), "{m}");
        let m = usage_message(settings(&global(&["--agent", "https://h:1"])));
        assert!(m.contains("--ca"), "{m}");
    }

    #[test]
    fn tls_flags_with_an_http_address_are_refused() {
        let m = usage_message(settings(&global(&["--agent", "http://h:1", "--tls"])));
        assert!(m.contains("plaintext"), "{m}");
        let m = usage_message(settings(&global(&["--tls-server-name", "x"])));
        assert!(m.contains("needs TLS"), "{m}");
    }

    #[test]
    fn tls_files_are_read_and_checked() {
        let dir = std::env::temp_dir().join(format!("leasehold-console-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        let ca = dir.join("ca.pem");
        let junk = dir.join("junk.pem");
        let _ = std::fs::write(
            &ca,
            "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
        );
        let _ = std::fs::write(&junk, "not pem\n");
        let ca_s = ca.to_string_lossy().into_owned();
        let s = settings(&global(&["--ca", &ca_s])).ok();
        assert!(s.is_some_and(|s| s.tls.is_some_and(|t| t.identity.is_none())));
        let junk_s = junk.to_string_lossy().into_owned();
        let m = usage_message(settings(&global(&["--ca", &junk_s])));
        assert!(m.contains("no PEM CERTIFICATE"), "{m}");
        let m = usage_message(settings(&global(&[
            "--ca", &ca_s, "--cert", &ca_s, "--key", &ca_s,
        ])));
        assert!(m.contains("PRIVATE KEY"), "{m}");
        let missing = dir.join("missing.pem").to_string_lossy().into_owned();
        assert!(matches!(
            settings(&global(&["--ca", &missing])),
            Err(Error::Local { .. })
        ));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn tokens_become_bearer_headers_and_are_never_echoed() {
        let s = settings(&global(&["--token", "s3cret"])).ok();
        let value = s
            .and_then(|s| s.token)
            .map(|v| v.to_str().map(str::to_owned).ok());
        assert_eq!(value, Some(Some("Bearer s3cret".to_owned())));
        let m = usage_message(settings(&global(&["--token", "bad\u{7}tok"])));
        assert!(!m.contains("bad"), "{m}");
        let s = settings(&global(&["--token", ""])).ok();
        assert!(s.is_some_and(|s| s.token.is_none()));
        let s = settings(&global(&["--token", "s3cret"])).ok();
        assert!(!format!("{s:?}").contains("s3cret"));
    }
}
