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
//! Start and stop: the server starts after the agent registered (its address is in the
//! registry) and stops after the last leases were released: the aggregator sends every
//! watcher a `closing` update and ends the streams, then the server shuts down, bounded by
//! [`SHUTDOWN_WAIT`], so open streams never hold the agent's exit.

pub mod auth;
pub mod convert;
pub mod hub;
pub mod limits;
pub mod overview;
pub mod resources;
pub mod schedules;
pub mod service;
pub mod status;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use leasehold_proto::v1::agent_service_server::AgentServiceServer;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tonic::codec::CompressionEncoding;
use tonic::transport::server::TcpIncoming;
use tonic::transport::{Certificate, Identity, Server, ServerTlsConfig};

pub use auth::{Auth, Token, TokenError};

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
    /// Reads the files into a rustls server config.
    pub fn load(&self) -> anyhow::Result<ServerTlsConfig> {
        let read = |p: &PathBuf, what: &str| {
            std::fs::read(p).with_context(|| format!("reading the TLS {what} {}", p.display()))
        };
        let cert = read(&self.cert, "certificate")?;
        let key = read(&self.key, "key")?;
        for (bytes, what, path) in [
            (&cert, "CERTIFICATE", &self.cert),
            (&key, "PRIVATE KEY", &self.key),
        ] {
            anyhow::ensure!(
                String::from_utf8_lossy(bytes).contains(&format!("{what}-----")),
                "{} is not a PEM file holding a {}",
                path.display(),
                what.to_lowercase()
            );
        }
        let mut config = ServerTlsConfig::new().identity(Identity::from_pem(cert, key));
        if let Some(ca) = &self.client_ca {
            let ca = read(ca, "client CA")?;
            config = config.client_ca_root(Certificate::from_pem(ca));
        }
        Ok(config)
    }
}

/// What the agent serves gRPC with.
pub struct GrpcOptions {
    pub listener: TcpListener,
    pub tls: Option<TlsFiles>,
    pub auth: Auth,
}

impl GrpcOptions {
    /// The address it listens on.
    pub fn local_addr(&self) -> anyhow::Result<SocketAddr> {
        self.listener
            .local_addr()
            .context("reading the gRPC listener's address")
    }
}

/// A running gRPC server and its aggregator.
pub(crate) struct Running {
    hub: tokio::task::JoinHandle<()>,
    server: tokio::task::JoinHandle<()>,
    hub_stop: CancellationToken,
    server_stop: CancellationToken,
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
    }
}

/// Starts the aggregator and the server.
pub(crate) fn start(core: &Arc<Core>, options: GrpcOptions) -> anyhow::Result<Running> {
    let (hub, handle): (Hub, HubHandle) =
        Hub::new(Arc::clone(core)).context("the Watch aggregator was already started")?;
    let addr = options.local_addr()?;
    let service = Service {
        core: Arc::clone(core),
        hub: handle,
        auth: Arc::new(options.auth),
        overview: Arc::default(),
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
        .context("building the reflection service")?;
    let reflection_v1alpha = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(leasehold_proto::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1alpha()
        .context("building the reflection service")?;
    let (health_reporter, health) = tonic_health::server::health_reporter();
    let mut builder = Server::builder()
        .http2_keepalive_interval(Some(KEEPALIVE_INTERVAL))
        .http2_keepalive_timeout(Some(KEEPALIVE_TIMEOUT))
        .tcp_keepalive(Some(Duration::from_secs(30)))
        .max_concurrent_streams(Some(MAX_STREAMS_PER_CONNECTION))
        .http2_max_header_list_size(Some(16 * 1024));
    let tls = options.tls.is_some();
    if let Some(files) = &options.tls {
        builder = builder
            .tls_config(files.load()?)
            .context("configuring TLS")?;
    }
    let router = builder
        .add_service(health)
        .add_service(reflection_v1)
        .add_service(reflection_v1alpha)
        // A request above the message limit is RESOURCE_EXHAUSTED, as the contract says.
        .add_service(limits::MessageLimit::new(agent));
    let server_stop = CancellationToken::new();
    let hub_stop = CancellationToken::new();
    let incoming = TcpIncoming::from(options.listener).with_nodelay(Some(true));
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
    tracing::info!(%addr, tls, "serving gRPC");
    Ok(Running {
        hub,
        server,
        hub_stop,
        server_stop,
    })
}
