//! The connection settings of `leasehold`: the `--agent` address, TLS material read from
//! files, the token as a header value (from `--token` or `--token-file`), and how to reach the
//! agent (its local Unix socket or TCP), checked before any network I/O.
//!
//! Invariants: TLS is on when `--tls`, `--ca`, `--cert`/`--key` or an `https://` address say
//! so, and then a CA file is required (this build carries no system roots); an `http://`
//! address with TLS flags is refused rather than silently picking one; the token never
//! appears in an error or a `Debug` output, and is never sent in plaintext over TCP to a host
//! that is not loopback unless `--insecure` says so ([`token_plaintext_refusal`]).
//!
//! ```text
//! --socket PATH ─────────────────────────────▶ Transport::Socket(PATH)   (that socket only)
//! --no-socket, TLS, or a non-loopback host ──▶ Transport::Tcp
//! otherwise (loopback, plaintext) ──────────▶ Transport::Auto           (socket if one answers)
//! ```

use std::net::{IpAddr, Ipv6Addr};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
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

    /// True when the host is this machine's loopback: `localhost`, 127.0.0.0/8, `[::1]` (or an
    /// IPv4-mapped loopback). A name that merely resolves to loopback does not count.
    pub fn is_loopback(&self) -> bool {
        is_loopback_host(&self.host)
    }
}

/// See [`AgentAddr::is_loopback`]; `host` as [`AgentAddr::host`] keeps it (IPv6 in brackets).
pub fn is_loopback_host(host: &str) -> bool {
    if host.eq_ignore_ascii_case("localhost") {
        return true;
    }
    if let Some(inner) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        return inner.parse::<Ipv6Addr>().is_ok_and(|ip| {
            ip.is_loopback() || ip.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
        });
    }
    host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// How the console reaches the agent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transport {
    /// The agent's local socket when one of
    /// [`leasehold_shared::local::socket_candidates`] accepts a connection, else TCP.
    Auto,
    /// This Unix socket only (`--socket`).
    Socket(PathBuf),
    /// TCP only (`--no-socket`, TLS, or a host that is not loopback).
    Tcp,
}

impl Transport {
    /// The transport for `addr` without `--socket`: [`Transport::Auto`] for a loopback host
    /// without TLS unless `--no-socket`, else [`Transport::Tcp`].
    pub fn default_for(addr: &AgentAddr, tls: bool, no_socket: bool) -> Self {
        if no_socket || tls || !addr.is_loopback() {
            Transport::Tcp
        } else {
            Transport::Auto
        }
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
    /// Socket or TCP.
    pub transport: Transport,
    /// `--no-socket`: never a Unix socket, for the seed or for agents found in the registry.
    pub no_socket: bool,
    /// `--insecure`: a token may go in plaintext to a host that is not loopback.
    pub insecure: bool,
    /// `--verbose`: say on stderr how the agent was reached.
    pub verbose: bool,
}

impl std::fmt::Debug for Settings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Settings")
            .field("addr", &self.addr)
            .field("tls", &self.tls)
            .field("token", &self.token.as_ref().map(|_| "<hidden>"))
            .field("call_timeout", &self.call_timeout)
            .field("transport", &self.transport)
            .field("no_socket", &self.no_socket)
            .field("insecure", &self.insecure)
            .field("verbose", &self.verbose)
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
    let socket = non_empty_path(global.socket.as_deref());
    if socket.is_some() && use_tls {
        return Err(Error::usage(
            "--socket talks to a local agent over its Unix socket: drop --tls, --ca, --cert \
             and --key (or https://), or drop --socket",
        ));
    }
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
    let token = match (
        global.token.as_deref(),
        non_empty_path(global.token_file.as_deref()),
    ) {
        (Some(token), None) if !token.is_empty() => {
            Some(bearer(token, "--token (or LEASEHOLD_TOKEN)")?)
        }
        (_, Some(file)) => Some(bearer(
            &read_token_file(file)?,
            &format!("the token in --token-file {}", file.display()),
        )?),
        _ => None,
    };
    let transport = match socket {
        Some(path) => Transport::Socket(path.to_path_buf()),
        None => Transport::default_for(&addr, tls.is_some(), global.no_socket),
    };
    let settings = Settings {
        addr,
        tls,
        token,
        call_timeout: global.call_timeout,
        transport,
        no_socket: global.no_socket,
        insecure: global.insecure,
        verbose: global.verbose,
    };
    // Over `--socket` the token stays on this host whatever --agent says.
    if !matches!(settings.transport, Transport::Socket(_))
        && let Some(why) = token_plaintext_refusal(&settings)
    {
        return Err(Error::usage(why));
    }
    Ok(settings)
}

/// Why `settings` must not be used over TCP: a token would travel in plaintext to a host that
/// is not loopback without `--insecure`. `None` when the connection may be made.
pub fn token_plaintext_refusal(settings: &Settings) -> Option<String> {
    if settings.token.is_none()
        || settings.tls.is_some()
        || settings.insecure
        || settings.addr.is_loopback()
    {
        return None;
    }
    Some(format!(
        "refusing to send the token in plaintext to {} (not loopback): use TLS (--ca, \
         https://), or give --insecure to send it anyway",
        crate::output::text::shown(&settings.addr.given, 100)
    ))
}

/// The token in `path`: the file's content, trimmed. Warns on stderr when the file is
/// readable by group or others.
fn read_token_file(path: &Path) -> Result<String> {
    let what = || format!("reading --token-file {}", path.display());
    let meta = std::fs::metadata(path).map_err(|source| Error::Local {
        what: what(),
        source,
    })?;
    if let Some(warning) = open_file_warning(path, meta.permissions().mode()) {
        // stderr only: stdout may be JSON for a script.
        eprintln!("leasehold: warning: {warning}");
    }
    let text = std::fs::read_to_string(path).map_err(|source| Error::Local {
        what: what(),
        source,
    })?;
    let token = text.trim();
    if token.is_empty() {
        return Err(Error::usage(format!(
            "--token-file {}: the file is empty",
            path.display()
        )));
    }
    Ok(token.to_owned())
}

/// The warning for a secret file whose `mode` lets group or others read it.
fn open_file_warning(path: &Path, mode: u32) -> Option<String> {
    (mode & 0o044 != 0).then(|| {
        format!(
            "--token-file {} is readable by other users (mode {:o}): chmod 600 it",
            path.display(),
            mode & 0o777
        )
    })
}

fn non_empty_path(p: Option<&Path>) -> Option<&Path> {
    p.filter(|p| !p.as_os_str().is_empty())
}

/// `Bearer <token>` as a header value; the token itself never appears in an error.
/// `from` names where the token came from, for messages.
fn bearer(token: &str, from: &str) -> Result<MetadataValue<Ascii>> {
    let token = token.trim();
    if token.is_empty() || !token.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(Error::usage(format!(
            "{from} has characters a header cannot carry: use printable ASCII without spaces"
        )));
    }
    format!("Bearer {token}")
        .parse()
        .map_err(|_| Error::usage(format!("{from} cannot be sent as a header")))
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

    /// Every flag that can take a secret from the environment hides its value in `--help`.
    #[test]
    fn secret_env_values_are_hidden_from_help() {
        use clap::CommandFactory;
        fn visit(cmd: &clap::Command, found: &mut Vec<String>) {
            for arg in cmd.get_arguments() {
                let Some(env) = arg.get_env() else { continue };
                let env = env.to_string_lossy().to_ascii_uppercase();
                let secret = ["TOKEN", "URL", "PASSWORD", "SECRET", "KEY"]
                    .iter()
                    .any(|w| env.contains(w));
                if secret && !arg.is_hide_env_values_set() {
                    found.push(format!("{} --{}", cmd.get_name(), arg.get_id()));
                }
            }
            for sub in cmd.get_subcommands() {
                visit(sub, found);
            }
        }
        let mut cmd = crate::cli::Cli::command();
        cmd.build();
        let mut found = Vec::new();
        visit(&cmd, &mut found);
        assert!(found.is_empty(), "env values shown in --help: {found:?}");
    }

    #[test]
    fn loopback_hosts_are_recognised() {
        for host in [
            "127.0.0.1",
            "127.8.9.10",
            "localhost",
            "LocalHost",
            "[::1]",
            "[::ffff:127.0.0.1]",
        ] {
            assert!(is_loopback_host(host), "{host} is loopback");
        }
        for host in [
            "10.1.2.3",
            "0.0.0.0",
            "[::]",
            "[fe80::1]",
            "localhost.example.com",
            "127.0.0.1.nip.io",
            "agent.internal",
        ] {
            assert!(!is_loopback_host(host), "{host} is not loopback");
        }
    }

    #[test]
    fn a_token_is_not_sent_in_plaintext_off_the_host() {
        let m = usage_message(settings(&global(&[
            "--agent",
            "10.1.2.3:7070",
            "--token",
            "s3cret",
        ])));
        assert!(m.contains("plaintext") && m.contains("--insecure"), "{m}");
        assert!(!m.contains("s3cret"), "{m}");
        // Loopback, --insecure, TLS, or no token: allowed.
        for args in [
            &["--agent", "127.0.0.1:7070", "--token", "t"][..],
            &["--agent", "localhost:7070", "--token", "t"],
            &["--agent", "[::1]:7070", "--token", "t"],
            &["--agent", "10.1.2.3:7070", "--token", "t", "--insecure"],
            &["--agent", "10.1.2.3:7070"],
            &[
                "--agent",
                "10.1.2.3:7070",
                "--token",
                "t",
                "--socket",
                "/x.sock",
            ],
        ] {
            let s = settings(&global(args));
            assert!(s.is_ok(), "{args:?}: {s:?}");
        }
    }

    #[test]
    fn the_transport_follows_the_address_and_the_flags() {
        let transport = |args: &[&str]| settings(&global(args)).map(|s| s.transport).ok();
        assert_eq!(transport(&[]), Some(Transport::Auto));
        assert_eq!(
            transport(&["--agent", "localhost:9"]),
            Some(Transport::Auto)
        );
        assert_eq!(transport(&["--no-socket"]), Some(Transport::Tcp));
        assert_eq!(
            transport(&["--agent", "10.0.0.1:7070"]),
            Some(Transport::Tcp)
        );
        assert_eq!(
            transport(&["--socket", "/run/x.sock"]),
            Some(Transport::Socket(PathBuf::from("/run/x.sock")))
        );
        let m = usage_message(settings(&global(&[
            "--socket",
            "/x",
            "--agent",
            "https://h:1",
        ])));
        assert!(m.contains("--socket"), "{m}");
        let both = crate::cli::Cli::try_parse_from([
            "leasehold",
            "--socket",
            "/x",
            "--no-socket",
            "drain",
        ]);
        assert!(both.is_err());
    }

    #[test]
    fn a_token_file_is_read_trimmed_and_checked() {
        let dir = std::env::temp_dir().join(format!("leasehold-token-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let _ = std::fs::create_dir_all(&dir);
        let file = dir.join("token");
        let _ = std::fs::write(&file, "  s3cret\n");
        let _ = std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600));
        let path = file.to_string_lossy().into_owned();
        let value = settings(&global(&["--token-file", &path]))
            .ok()
            .and_then(|s| s.token)
            .and_then(|v| v.to_str().ok().map(str::to_owned));
        assert_eq!(value.as_deref(), Some("Bearer s3cret"));
        // With --token too: a usage error of clap's.
        let both = crate::cli::Cli::try_parse_from([
            "leasehold",
            "--token",
            "x",
            "--token-file",
            &path,
            "drain",
        ]);
        assert!(both.is_err());
        // Unreadable: a local error (exit 2) naming the file.
        let missing = dir.join("missing").to_string_lossy().into_owned();
        match settings(&global(&["--token-file", &missing])) {
            Err(e @ Error::Local { .. }) => {
                assert!(e.to_string().contains(&missing), "{e}");
                assert_eq!(crate::exit::exit_code(&e), crate::exit::USAGE);
            }
            other => panic!("expected a local error, got {other:?}"),
        }
        let empty = dir.join("empty");
        let _ = std::fs::write(&empty, "\n");
        let empty = empty.to_string_lossy().into_owned();
        let m = usage_message(settings(&global(&["--token-file", &empty])));
        assert!(m.contains("empty"), "{m}");
        // The same plaintext rule as --token.
        let m = usage_message(settings(&global(&[
            "--token-file",
            &path,
            "--agent",
            "10.1.2.3:7070",
        ])));
        assert!(m.contains("plaintext"), "{m}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_token_file_open_to_others_is_warned_about() {
        let p = Path::new("/etc/lh-token");
        assert_eq!(open_file_warning(p, 0o100600), None);
        assert_eq!(open_file_warning(p, 0o400), None);
        let w = open_file_warning(p, 0o100640).unwrap_or_default();
        assert!(w.contains("/etc/lh-token") && w.contains("640"), "{w}");
        assert!(open_file_warning(p, 0o604).is_some());
    }
}
