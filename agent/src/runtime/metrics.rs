//! Prometheus metrics of one agent, and the plain HTTP endpoint that serves them
//! (`--metrics-listen`, `GET /metrics`, text exposition format).
//!
//! Label sets stay small: task types are the agent's own registered types, outcomes a fixed set.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TypeLabel {
    task_type: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TickLabel {
    schedule: String,
    outcome: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabel {
    task_type: String,
    outcome: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OpLabel {
    op: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DirectionLabel {
    direction: &'static str,
}

fn seconds_histogram() -> Histogram {
    // 1 ms … ~9 h in 16 doubling buckets… plus a few more for long tasks.
    Histogram::new(exponential_buckets(0.001, 2.0, 25))
}

/// The per-type series a task touches when it is claimed and when it ends, resolved once per
/// type and kept: the hot path hashes the type name only, and builds no label set (the series
/// are shared handles, so the registry sees every update).
struct TypeSeries {
    claimed: Counter,
    queue_wait: Histogram,
    run_time: Histogram,
    /// By outcome name; a handful at most, so a scan.
    outcomes: RwLock<Vec<(&'static str, Counter)>>,
}

/// The agent's metrics.
pub struct Metrics {
    registry: Registry,
    active: Gauge,
    claimed: Family<TypeLabel, Counter>,
    claim_statements: Counter,
    claim_errors: Counter,
    queue_wait: Family<TypeLabel, Histogram, fn() -> Histogram>,
    run_time: Family<TypeLabel, Histogram, fn() -> Histogram>,
    outcomes: Family<OutcomeLabel, Counter>,
    renewals: Counter,
    renewal_failures: Counter,
    fenced: Family<OpLabel, Counter>,
    leases_lost: Family<OpLabel, Counter>,
    recoveries: Counter,
    clock_jumps: Family<DirectionLabel, Counter>,
    ticks: Family<TickLabel, Counter>,
    timeouts: Family<TypeLabel, Counter>,
    slow: Family<TypeLabel, Counter>,
    database_up: Gauge,
    leader: Gauge,
    by_type: RwLock<HashMap<String, Arc<TypeSeries>>>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Metrics")
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("leasehold");
        let m = Metrics {
            active: Gauge::default(),
            claimed: Family::default(),
            claim_statements: Counter::default(),
            claim_errors: Counter::default(),
            queue_wait: Family::new_with_constructor(seconds_histogram),
            run_time: Family::new_with_constructor(seconds_histogram),
            outcomes: Family::default(),
            renewals: Counter::default(),
            renewal_failures: Counter::default(),
            fenced: Family::default(),
            leases_lost: Family::default(),
            recoveries: Counter::default(),
            clock_jumps: Family::default(),
            ticks: Family::default(),
            timeouts: Family::default(),
            slow: Family::default(),
            database_up: Gauge::default(),
            leader: Gauge::default(),
            by_type: RwLock::default(),
            registry: Registry::default(),
        };
        registry.register(
            "active_tasks",
            "Executions running on this agent",
            m.active.clone(),
        );
        registry.register(
            "tasks_claimed",
            "Tasks claimed by this agent",
            m.claimed.clone(),
        );
        registry.register(
            "claim_statements",
            "Claim statements run",
            m.claim_statements.clone(),
        );
        registry.register(
            "claim_errors",
            "Claim statements that failed",
            m.claim_errors.clone(),
        );
        registry.register(
            "queue_wait_seconds",
            "Time from due to claimed, by type",
            m.queue_wait.clone(),
        );
        registry.register(
            "execution_seconds",
            "Run time of an attempt, by type",
            m.run_time.clone(),
        );
        registry.register(
            "task_outcomes",
            "Ended attempts by type and outcome",
            m.outcomes.clone(),
        );
        registry.register(
            "renewals",
            "Batch lease renewals that landed",
            m.renewals.clone(),
        );
        registry.register(
            "renewal_failures",
            "Batch lease renewals that failed or timed out",
            m.renewal_failures.clone(),
        );
        registry.register(
            "fenced_writes",
            "Holder writes refused because the lease moved on, by operation",
            m.fenced.clone(),
        );
        registry.register(
            "leases_lost",
            "Executions stopped because their lease was lost, by how it was found",
            m.leases_lost.clone(),
        );
        registry.register(
            "recoveries",
            "Expired leases recovered by this agent as leader",
            m.recoveries.clone(),
        );
        registry.register(
            "database_clock_jumps",
            "Jumps of the database clock against monotonic time seen by maintenance, by direction \
             (a forward jump holds lease recovery for one TTL)",
            m.clock_jumps.clone(),
        );
        registry.register(
            "schedule_ticks",
            "Cron ticks this agent fired as leader, by schedule and outcome (enqueued; duplicate: \
             another leader had enqueued the tick; failed: not enqueued)",
            m.ticks.clone(),
        );
        registry.register(
            "timeouts",
            "Attempts stopped by their timeout, by type",
            m.timeouts.clone(),
        );
        registry.register(
            "slow_tasks",
            "Executions flagged slow, by type",
            m.slow.clone(),
        );
        registry.register(
            "database_up",
            "1 while the last database round trip succeeded",
            m.database_up.clone(),
        );
        registry.register(
            "leader",
            "1 while this agent holds the leader lease",
            m.leader.clone(),
        );
        // Series that exist from the start, so dashboards and alerts see zeros, not gaps.
        for op in ["renew", "complete", "release", "progress"] {
            m.fenced
                .get_or_create(&OpLabel { op: op.to_string() })
                .inc_by(0);
        }
        for direction in ["forward", "backward"] {
            m.clock_jumps
                .get_or_create(&DirectionLabel { direction })
                .inc_by(0);
        }
        for how in ["revoked", "unprovable"] {
            m.leases_lost
                .get_or_create(&OpLabel {
                    op: how.to_string(),
                })
                .inc_by(0);
        }
        Metrics { registry, ..m }
    }

    /// Creates the per-type series of the agent's task types at zero.
    pub(crate) fn register_types<'a>(&self, types: impl IntoIterator<Item = &'a str>) {
        for t in types {
            let label = TypeLabel {
                task_type: t.to_string(),
            };
            self.claimed.get_or_create(&label).inc_by(0);
            self.timeouts.get_or_create(&label).inc_by(0);
            self.slow.get_or_create(&label).inc_by(0);
        }
    }

    pub(crate) fn set_active(&self, n: usize) {
        self.active.set(i64::try_from(n).unwrap_or(i64::MAX));
    }

    pub(crate) fn claim_statement(&self, ok: bool) {
        self.claim_statements.inc();
        if !ok {
            self.claim_errors.inc();
        }
    }

    /// The series of `task_type`, made on first use.
    fn series(&self, task_type: &str) -> Arc<TypeSeries> {
        if let Some(found) = self
            .by_type
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(task_type)
        {
            return Arc::clone(found);
        }
        let label = TypeLabel {
            task_type: task_type.to_string(),
        };
        let made = Arc::new(TypeSeries {
            claimed: self.claimed.get_or_create(&label).clone(),
            queue_wait: self.queue_wait.get_or_create(&label).clone(),
            run_time: self.run_time.get_or_create(&label).clone(),
            outcomes: RwLock::default(),
        });
        let mut by_type = self.by_type.write().unwrap_or_else(|p| p.into_inner());
        Arc::clone(by_type.entry(task_type.to_string()).or_insert(made))
    }

    pub(crate) fn claimed(&self, task_type: &str, queue_wait: Duration) {
        let series = self.series(task_type);
        series.claimed.inc();
        series.queue_wait.observe(queue_wait.as_secs_f64());
    }

    pub(crate) fn finished(&self, task_type: &str, outcome: &'static str, run_time: Duration) {
        let series = self.series(task_type);
        series.run_time.observe(run_time.as_secs_f64());
        let found = series
            .outcomes
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .find(|(name, _)| *name == outcome)
            .map(|(_, counter)| counter.clone());
        let counter = found.unwrap_or_else(|| {
            let counter = self
                .outcomes
                .get_or_create(&OutcomeLabel {
                    task_type: task_type.to_string(),
                    outcome: outcome.to_string(),
                })
                .clone();
            series
                .outcomes
                .write()
                .unwrap_or_else(|p| p.into_inner())
                .push((outcome, counter.clone()));
            counter
        });
        counter.inc();
    }

    pub(crate) fn renewal(&self, ok: bool) {
        if ok {
            self.renewals.inc();
        } else {
            self.renewal_failures.inc();
        }
    }

    pub(crate) fn fenced(&self, op: &str) {
        self.fenced
            .get_or_create(&OpLabel { op: op.to_string() })
            .inc();
    }

    pub(crate) fn lease_lost(&self, how: &str) {
        self.leases_lost
            .get_or_create(&OpLabel {
                op: how.to_string(),
            })
            .inc();
    }

    pub(crate) fn recovered(&self, n: usize) {
        self.recoveries.inc_by(u64::try_from(n).unwrap_or(0));
    }

    pub(crate) fn clock_jump(&self, direction: &'static str) {
        self.clock_jumps
            .get_or_create(&DirectionLabel { direction })
            .inc();
    }

    pub(crate) fn tick(&self, schedule: &str, outcome: &str) {
        self.ticks
            .get_or_create(&TickLabel {
                schedule: schedule.to_string(),
                outcome: outcome.to_string(),
            })
            .inc();
    }

    pub(crate) fn timeout(&self, task_type: &str) {
        self.timeouts
            .get_or_create(&TypeLabel {
                task_type: task_type.to_string(),
            })
            .inc();
    }

    pub(crate) fn slow(&self, task_type: &str) {
        self.slow
            .get_or_create(&TypeLabel {
                task_type: task_type.to_string(),
            })
            .inc();
    }

    pub(crate) fn database(&self, up: bool) {
        self.database_up.set(i64::from(up));
    }

    pub(crate) fn set_leader(&self, leader: bool) {
        self.leader.set(i64::from(leader));
    }

    /// The metrics in the Prometheus text format.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        if prometheus_client::encoding::text::encode(&mut out, &self.registry).is_err() {
            out.clear();
        }
        out
    }
}

/// Serves `GET /metrics` on `listener` until `cancel` fires. Any other path is a 404; each
/// connection answers one request (no keep-alive), reading at most 8 KiB of request.
pub async fn serve_metrics(
    listener: TcpListener,
    metrics: Arc<Metrics>,
    cancel: CancellationToken,
) -> std::io::Result<()> {
    loop {
        let (mut socket, _) = tokio::select! {
            _ = cancel.cancelled() => return Ok(()),
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(error) => {
                    tracing::warn!(%error, "metrics accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let metrics = Arc::clone(&metrics);
        tokio::spawn(async move {
            let mut buf = vec![0u8; 8192];
            let mut len = 0;
            let read = tokio::time::timeout(Duration::from_secs(5), async {
                while len < buf.len() {
                    let n = socket.read(&mut buf[len..]).await?;
                    if n == 0 {
                        break;
                    }
                    len += n;
                    if buf[..len].windows(4).any(|w| w == b"\r\n\r\n") {
                        break;
                    }
                }
                std::io::Result::Ok(())
            })
            .await;
            if !matches!(read, Ok(Ok(()))) {
                return;
            }
            let request = String::from_utf8_lossy(&buf[..len]);
            let path = request.split_whitespace().nth(1).unwrap_or("");
            let response = if request.starts_with("GET ") && (path == "/metrics" || path == "/") {
                let body = metrics.encode();
                format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: text/plain; version=0.0.4; charset=utf-8\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                )
            } else {
                "HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
                    .to_string()
            };
            let _ = socket.write_all(response.as_bytes()).await;
            let _ = socket.shutdown().await;
        });
    }
}

/// Binds the metrics listener (so a bad address fails at start, not later).
pub async fn bind_metrics(addr: SocketAddr) -> std::io::Result<TcpListener> {
    TcpListener::bind(addr).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_every_family_with_labels() {
        let m = Metrics::new();
        m.claimed("email", Duration::from_millis(3));
        m.finished("email", "succeeded", Duration::from_millis(5));
        // Later updates go through the kept series and still reach the registry.
        m.claimed("email", Duration::from_millis(3));
        m.finished("email", "succeeded", Duration::from_millis(5));
        m.finished("email", "dead", Duration::from_millis(5));
        m.fenced("complete");
        m.renewal(false);
        m.database(true);
        m.clock_jump("forward");
        let text = m.encode();
        for name in [
            "leasehold_active_tasks",
            "leasehold_tasks_claimed_total{task_type=\"email\"} 2",
            "leasehold_queue_wait_seconds_bucket",
            "leasehold_execution_seconds_count{task_type=\"email\"} 3",
            "leasehold_task_outcomes_total{task_type=\"email\",outcome=\"succeeded\"} 2",
            "leasehold_task_outcomes_total{task_type=\"email\",outcome=\"dead\"} 1",
            "leasehold_renewal_failures_total 1",
            "leasehold_fenced_writes_total{op=\"complete\"} 1",
            "leasehold_database_up 1",
            "leasehold_database_clock_jumps_total{direction=\"forward\"} 1",
            "leasehold_database_clock_jumps_total{direction=\"backward\"} 0",
        ] {
            assert!(text.contains(name), "{name} missing from\n{text}");
        }
    }
}
