//! gRPC clients of real agents for end-to-end tests: find an agent's address in the registry,
//! connect (plaintext, TLS, tokens), and follow its Watch stream into a [`WatchView`] — the
//! client-side model of the snapshot-then-deltas contract (`proto/leasehold/v1/agent.proto`).

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context, bail};
use leasehold_proto::v1 as pb;
use leasehold_proto::v1::agent_service_client::AgentServiceClient;
use sqlx::PgPool;
use tonic::service::Interceptor;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

/// A client of one agent, with an optional token.
pub type Client = AgentServiceClient<InterceptedService<Channel, Bearer>>;

/// Adds `authorization: Bearer <token>` to every call when a token is set.
#[derive(Clone, Debug, Default)]
pub struct Bearer(pub Option<String>);

impl Interceptor for Bearer {
    fn call(
        &mut self,
        mut request: tonic::Request<()>,
    ) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(token) = &self.0 {
            let value = format!("Bearer {token}")
                .parse()
                .map_err(|_| tonic::Status::invalid_argument("token is not valid metadata"))?;
            request
                .metadata_mut()
                .insert(leasehold_proto::AUTHORIZATION, value);
        }
        Ok(request)
    }
}

/// The gRPC address agent `name` registered (waits for it), e.g. `127.0.0.1:40123`.
pub async fn agent_address(pool: &PgPool, name: &str, timeout: Duration) -> anyhow::Result<String> {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        let row: Option<(String,)> = sqlx::query_as(
            "SELECT grpc_address FROM agents WHERE name = $1 AND state <> 'stopped' \
             AND grpc_address IS NOT NULL ORDER BY started_at DESC LIMIT 1",
        )
        .bind(name)
        .fetch_optional(pool)
        .await?;
        if let Some((addr,)) = row {
            return Ok(addr);
        }
        if std::time::Instant::now() >= deadline {
            bail!("agent {name} did not register a gRPC address within {timeout:?}");
        }
        tokio::time::sleep(crate::wait::POLL_INTERVAL).await;
    }
}

/// TLS settings of a client: the CA that signs the agent's cert, and an optional client
/// identity (mTLS).
#[derive(Clone, Debug)]
pub struct ClientTls {
    pub ca_pem: Vec<u8>,
    pub identity: Option<(Vec<u8>, Vec<u8>)>,
    pub domain: String,
}

/// Connects to `addr` (host:port) in plaintext or with `tls`.
pub async fn connect_with(
    addr: &str,
    token: Option<&str>,
    tls: Option<&ClientTls>,
) -> anyhow::Result<Client> {
    let scheme = if tls.is_some() { "https" } else { "http" };
    let mut endpoint = Endpoint::from_shared(format!("{scheme}://{addr}"))?
        .connect_timeout(Duration::from_secs(5))
        .timeout(Duration::from_secs(60));
    if let Some(tls) = tls {
        let mut config = ClientTlsConfig::new()
            .ca_certificate(Certificate::from_pem(&tls.ca_pem))
            .domain_name(tls.domain.clone());
        if let Some((cert, key)) = &tls.identity {
            config = config.identity(Identity::from_pem(cert, key));
        }
        endpoint = endpoint.tls_config(config)?;
    }
    let channel = endpoint
        .connect()
        .await
        .with_context(|| format!("connecting to agent {addr}"))?;
    Ok(
        AgentServiceClient::with_interceptor(channel, Bearer(token.map(str::to_string)))
            .max_decoding_message_size(leasehold_proto::MAX_MESSAGE_BYTES)
            .max_encoding_message_size(leasehold_proto::MAX_MESSAGE_BYTES),
    )
}

/// Connects to `addr` in plaintext without a token.
pub async fn connect(addr: &str) -> anyhow::Result<Client> {
    connect_with(addr, None, None).await
}

/// Connects to the agent's Unix socket at `path`, without a token.
pub async fn connect_unix(path: &std::path::Path) -> anyhow::Result<Client> {
    let socket = path.to_path_buf();
    // The URI is not used to connect: the connector dials the socket.
    let channel = Endpoint::from_static("http://localhost")
        .connect_timeout(Duration::from_secs(5))
        .timeout(Duration::from_secs(60))
        .connect_with_connector(tower::service_fn(move |_: tonic::transport::Uri| {
            let socket = socket.clone();
            async move {
                let stream = tokio::net::UnixStream::connect(&socket).await?;
                Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(stream))
            }
        }))
        .await
        .with_context(|| format!("connecting to the agent's socket {}", path.display()))?;
    Ok(AgentServiceClient::with_interceptor(channel, Bearer(None))
        .max_decoding_message_size(leasehold_proto::MAX_MESSAGE_BYTES)
        .max_encoding_message_size(leasehold_proto::MAX_MESSAGE_BYTES))
}

/// One agent's leases as a watcher sees them: the snapshot, then every delta applied.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct WatchView {
    pub agent_id: String,
    pub leases: BTreeMap<i64, pb::Lease>,
    pub stats: Option<pb::AgentStats>,
    /// The last sequence number applied.
    pub seq: u64,
    pub dropped_events: u64,
    pub now_ms: i64,
    pub closing: bool,
    /// Deltas applied since the snapshot.
    pub deltas: u64,
    /// Resource leases (locks, shards) the agent holds, by name.
    pub resources: BTreeMap<String, pb::HeldResource>,
}

impl WatchView {
    /// Applies one update; refuses a stream that breaks the contract (no snapshot first, a gap
    /// or repeat in the sequence, a snapshot later on).
    pub fn apply(&mut self, update: pb::WatchUpdate) -> anyhow::Result<()> {
        if update.seq == 0 {
            let Some(snapshot) = update.snapshot else {
                bail!("update 0 carries no snapshot");
            };
            self.agent_id = update.agent_id.clone();
            self.leases = snapshot
                .leases
                .into_iter()
                .map(|l| (l.task_id, l))
                .collect();
            self.stats = snapshot.stats;
            self.resources = snapshot
                .resources
                .into_iter()
                .map(|r| (r.name.clone(), r))
                .collect();
            self.deltas = 0;
        } else {
            if update.seq != self.seq + 1 {
                bail!("sequence jumped from {} to {}", self.seq, update.seq);
            }
            if update.snapshot.is_some() {
                bail!("a snapshot in update {}", update.seq);
            }
        }
        if update.agent_id != self.agent_id {
            bail!(
                "agent id changed from {} to {}",
                self.agent_id,
                update.agent_id
            );
        }
        self.seq = update.seq;
        self.dropped_events = update.dropped_events;
        self.now_ms = update.now_ms;
        self.closing |= update.closing;
        for delta in update.deltas {
            self.deltas += 1;
            self.apply_delta(delta);
        }
        Ok(())
    }

    fn apply_delta(&mut self, delta: pb::Delta) {
        use pb::delta::Kind;
        let Some(kind) = delta.kind else { return };
        match kind {
            Kind::LeaseAcquired(l) => {
                self.leases.insert(l.task_id, l);
            }
            Kind::LeaseRenewed(r) => {
                if let Some(l) = self
                    .leases
                    .get_mut(&r.task_id)
                    .filter(|l| l.epoch == r.epoch)
                {
                    l.lease_until_ms = r.lease_until_ms;
                    l.heartbeat_at_ms = r.heartbeat_at_ms;
                    l.renewal_failures = 0;
                    l.renewal_failure_reason.clear();
                }
            }
            Kind::RenewalFailed(f) => {
                if let Some(l) = self
                    .leases
                    .get_mut(&f.task_id)
                    .filter(|l| l.epoch == f.epoch)
                {
                    l.renewal_failures = f.consecutive;
                    l.renewal_failure_reason = f.reason;
                }
            }
            Kind::LeaseReleased(r) => {
                if self
                    .leases
                    .get(&r.task_id)
                    .is_some_and(|l| l.epoch == r.epoch)
                {
                    self.leases.remove(&r.task_id);
                }
            }
            Kind::LeaseFenced(f) => {
                if self
                    .leases
                    .get(&f.task_id)
                    .is_some_and(|l| l.epoch == f.epoch)
                {
                    self.leases.remove(&f.task_id);
                }
            }
            Kind::Progress(p) => {
                if let Some(l) = self
                    .leases
                    .get_mut(&p.task_id)
                    .filter(|l| l.epoch == p.epoch)
                {
                    l.progress = p.progress;
                }
            }
            Kind::Slow(s) => {
                if let Some(l) = self
                    .leases
                    .get_mut(&s.task_id)
                    .filter(|l| l.epoch == s.epoch)
                {
                    l.slow = true;
                    l.slow_rule = s.rule;
                    l.slow_limit_ms = s.limit_ms;
                    l.slow_history_runs = s.history_runs;
                }
            }
            Kind::Stats(s) => self.stats = Some(s),
            Kind::CancelRequested(c) => {
                if let Some(l) = self
                    .leases
                    .get_mut(&c.task_id)
                    .filter(|l| l.epoch == c.epoch)
                {
                    l.cancel_requested = true;
                }
            }
            Kind::ResourceChange(c) => {
                if let Some(r) = c.resource {
                    if c.held {
                        self.resources.insert(r.name.clone(), r);
                    } else if self
                        .resources
                        .get(&r.name)
                        .is_some_and(|h| h.token == r.token)
                    {
                        self.resources.remove(&r.name);
                    }
                }
            }
        }
    }
}
