//! The agent's gRPC server (DESIGN §8, §10): `leasehold.v1.AgentService`, the standard health
//! service and server reflection (v1 and v1alpha, so `grpcurl` works), over TLS (rustls) when
//! configured, with tokens and roles.
//!
//! Limits: messages up to [`leasehold_proto::MAX_MESSAGE_BYTES`] in both directions, checked
//! after decompression (gzip is accepted; a request above them is RESOURCE_EXHAUSTED, see
//! [`limits`]); at most [`MAX_STREAMS_PER_CONNECTION`] concurrent streams per connection and
//! [`hub::MAX_WATCHERS`] watchers per agent; HTTP/2 keepalive pings find dead clients (a
//! watcher that stops reading is dropped by the aggregator anyway).
//!
//! Transport ([`transport`]): TCP (TLS by tokio-rustls when configured) and the local Unix
//! socket, each connection tagged with its [`peer::Peer`]; a handshake timeout and caps on
//! open connections, total and per peer.
//!
//! Start and stop: the server starts after the agent registered (its address is in the
//! registry) and stops after the last leases were released: the aggregator sends every
//! watcher a `closing` update and ends the streams, then the server shuts down, bounded by
//! [`SHUTDOWN_WAIT`], so open streams never hold the agent's exit.

mod actions;
pub mod audit;
pub mod auth;
pub mod convert;
pub mod dead_letters;
pub mod denials;
mod history;
pub mod hub;
pub mod limits;
pub mod overview;
pub mod page;
pub mod peer;
mod policy;
mod policy_settings;
pub mod read_cache;
mod reads;
pub mod resources;
pub mod schedules;
pub mod service;
pub mod stats;
pub mod status;
pub mod suspect;
pub mod transport;

#[cfg(test)]
mod convert_props;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use leasehold_proto::v1::agent_service_server::AgentServiceServer;
use tokio::net::TcpListener;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::server::WebPkiClientVerifier;
use tokio_rustls::rustls::{RootCertStore, ServerConfig};
use tokio_util::sync::CancellationToken;
use tonic::codec::CompressionEncoding;
use tonic::transport::Server;

pub use auth::{Auth, Token, TokenError};
pub use transport::{SocketSetting, TransportLimits, UnixSocket};

use crate::error::{AgentError, Result};
use crate::runtime::core::Core;
use hub::{Hub, HubHandle};
use service::Service;

/// Concurrent streams (calls) one client connection may have open.
pub const MAX_STREAMS_PER_CONNECTION: u32 = 32;
/// How long the server may take to stop once the streams were closed.
pub const SHUTDOWN_WAIT: Duration = Duration::from_secs(3);
/// HTTP/2 keepalive ping interval; a client that does not answer within the timeout is gone.
pub const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(10);
/// See [`KEEPALIVE_INTERVAL`].
pub const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(20);

/// PEM files of the server's TLS identity and, for mTLS, the CA that signs client certs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub client_ca: Option<PathBuf>,
}

impl TlsFiles {
    /// Reads the files into a rustls server config (ring, TLS 1.2 and 1.3, ALPN `h2`; client
    /// certificates signed by `client_ca` required when it is given).
    pub fn load(&self) -> Result<Arc<ServerConfig>> {
        let read = |p: &PathBuf, what: &str| {
            std::fs::read(p)
                .map_err(|e| AgentError::tls(format!("reading the TLS {what} {}", p.display()), e))
        };
        let cert = read(&self.cert, "certificate")?;
        let key = read(&self.key, "key")?;
        for (bytes, what, path) in [
            (&cert, "CERTIFICATE", &self.cert),
            (&key, "PRIVATE KEY", &self.key),
        ] {
            if !String::from_utf8_lossy(bytes).contains(&format!("{what}-----")) {
                return Err(AgentError::Tls {
                    doing: format!(
                        "{} is not a PEM file holding a {}",
                        path.display(),
                        what.to_lowercase()
                    ),
                    source: None,
                });
            }
        }
        let chain = CertificateDer::pem_slice_iter(&cert)
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(|e| {
                AgentError::tls(
                    format!("reading the certificates in {}", self.cert.display()),
                    e,
                )
            })?;
        let key = PrivateKeyDer::from_pem_slice(&key).map_err(|e| {
            AgentError::tls(
                format!("reading the private key in {}", self.key.display()),
                e,
            )
        })?;
        let provider = Arc::new(tokio_rustls::rustls::crypto::ring::default_provider());
        let builder = ServerConfig::builder_with_provider(Arc::clone(&provider))
            .with_safe_default_protocol_versions()
            .map_err(|e| AgentError::tls("choosing the TLS versions", e))?;
        let builder = match &self.client_ca {
            Some(path) => {
                let ca = read(path, "client CA")?;
                let mut roots = RootCertStore::empty();
                for cert in CertificateDer::pem_slice_iter(&ca) {
                    let cert = cert.map_err(|e| {
                        AgentError::tls(
                            format!("reading the certificates in {}", path.display()),
                            e,
                        )
                    })?;
                    roots.add(cert).map_err(|e| {
                        AgentError::tls(
                            format!("{} holds a certificate rustls refuses", path.display()),
                            e,
                        )
                    })?;
                }
                if roots.is_empty() {
                    return Err(AgentError::Tls {
                        doing: format!("{} holds no CA certificate", path.display()),
                        source: None,
                    });
                }
                let verifier =
                    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                        .build()
                        .map_err(|e| {
                            AgentError::tls(format!("using {} as the client CA", path.display()), e)
                        })?;
                builder.with_client_cert_verifier(verifier)
            }
            None => builder.with_no_client_auth(),
        };
        let mut config = builder.with_single_cert(chain, key).map_err(|e| {
            AgentError::tls(
                format!(
                    "{} and {} are not a certificate and its key",
                    self.cert.display(),
                    self.key.display()
                ),
                e,
            )
        })?;
        config.alpn_protocols = vec![b"h2".to_vec()];
        Ok(Arc::new(config))
    }
}

/// What the agent serves gRPC with.
pub struct GrpcOptions {
    pub listener: TcpListener,
    pub tls: Option<TlsFiles>,
    pub auth: Auth,
    /// The local Unix socket, bound ([`UnixSocket::open`]); `None` serves TCP only.
    pub socket: Option<UnixSocket>,
    /// Handshake timeout and connection caps.
    pub limits: TransportLimits,
}

impl GrpcOptions {
    /// The address it listens on.
    pub fn local_addr(&self) -> Result<SocketAddr> {
        self.listener
            .local_addr()
            .map_err(|source| AgentError::Listen { source })
    }
}

/// A running gRPC server and its aggregator.
pub(crate) struct Running {
    hub: tokio::task::JoinHandle<()>,
    server: tokio::task::JoinHandle<()>,
    hub_stop: CancellationToken,
    server_stop: CancellationToken,
    /// Writes the rows of denied calls; its last rows once the server stopped.
    denials: tokio::task::JoinHandle<()>,
    denials_stop: CancellationToken,
    /// Removed (if still ours) once the server stopped, or when this is dropped.
    socket_file: Option<transport::SocketFile>,
}

impl Running {
    /// Closes every Watch stream, then stops the server (bounded).
    pub(crate) async fn stop(self) {
        self.hub_stop.cancel();
        let _ = self.hub.await;
        self.server_stop.cancel();
        let mut server = self.server;
        if tokio::time::timeout(SHUTDOWN_WAIT, &mut server)
            .await
            .is_err()
        {
            tracing::warn!("gRPC server did not stop in time; closing its connections");
            server.abort();
        }
        // No call is refused any more: the last counted denials are written.
        self.denials_stop.cancel();
        let _ = self.denials.await;
        drop(self.socket_file);
    }
}

/// Starts the aggregator and the server.
pub(crate) fn start(core: &Arc<Core>, options: GrpcOptions) -> Result<Running> {
    let (hub, handle): (Hub, HubHandle) =
        Hub::new(Arc::clone(core)).ok_or_else(|| AgentError::Grpc {
            doing: "the Watch aggregator was already started".to_string(),
            source: None,
        })?;
    let addr = options.local_addr()?;
    if options.auth.is_open() && !addr.ip().is_loopback() {
        tracing::warn!(%addr, "no tokens on a non-loopback address (--insecure): every network caller is an operator");
    }
    let denials = Arc::new(denials::Denials::new(Arc::clone(&core.store)));
    let service = Service {
        core: Arc::clone(core),
        hub: handle,
        auth: Arc::new(options.auth),
        overview: Arc::default(),
        stats: Arc::default(),
        counts: Arc::new(reads::CountCache::new(
            std::time::Duration::ZERO,
            reads::COUNTS_SLOW,
        )),
        denials: Arc::clone(&denials),
    };
    let agent = AgentServiceServer::new(service)
        .max_decoding_message_size(leasehold_proto::MAX_MESSAGE_BYTES)
        .max_encoding_message_size(leasehold_proto::MAX_MESSAGE_BYTES)
        .accept_compressed(CompressionEncoding::Gzip)
        .send_compressed(CompressionEncoding::Gzip);
    let reflection_v1 = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(leasehold_proto::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1()
        .map_err(|e| AgentError::Grpc {
            doing: "building the reflection service".to_string(),
            source: Some(e.into()),
        })?;
    let reflection_v1alpha = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(leasehold_proto::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1alpha()
        .map_err(|e| AgentError::Grpc {
            doing: "building the reflection service".to_string(),
            source: Some(e.into()),
        })?;
    let (health_reporter, health) = tonic_health::server::health_reporter();
    let mut builder = Server::builder()
        .http2_keepalive_interval(Some(KEEPALIVE_INTERVAL))
        .http2_keepalive_timeout(Some(KEEPALIVE_TIMEOUT))
        .max_concurrent_streams(Some(MAX_STREAMS_PER_CONNECTION))
        .http2_max_header_list_size(Some(16 * 1024));
    let tls = match &options.tls {
        Some(files) => Some(files.load()?),
        None => None,
    };
    let router = builder
        .add_service(health)
        .add_service(reflection_v1)
        .add_service(reflection_v1alpha)
        // A request above the message limit is RESOURCE_EXHAUSTED, as the contract says.
        .add_service(limits::MessageLimit::new(agent));
    let server_stop = CancellationToken::new();
    let hub_stop = CancellationToken::new();
    let (unix, socket_file) = match options.socket {
        Some(socket) => {
            let (listener, file) = socket.into_parts();
            (Some(listener), Some(file))
        }
        None => (None, None),
    };
    let socket = socket_file.as_ref().map(|f| f.path().display().to_string());
    let tls_on = tls.is_some();
    let incoming = transport::incoming(options.listener, tls, unix, options.limits);
    let stop = server_stop.clone();
    let server = tokio::spawn(async move {
        health_reporter
            .set_serving::<AgentServiceServer<Service>>()
            .await;
        if let Err(error) = router
            .serve_with_incoming_shutdown(incoming, stop.cancelled())
            .await
        {
            tracing::error!(%error, "gRPC server failed");
        }
    });
    let hub = tokio::spawn(hub.run(hub_stop.clone()));
    let denials_stop = CancellationToken::new();
    let denials = tokio::spawn(denials.run(denials_stop.clone()));
    tracing::info!(
        %addr,
        tls = tls_on,
        socket = socket.as_deref().unwrap_or("off"),
        "serving gRPC"
    );
    Ok(Running {
        hub,
        server,
        hub_stop,
        server_stop,
        denials,
        denials_stop,
        socket_file,
    })
}
