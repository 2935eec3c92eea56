//! Runtime settings with their defaults (the `run` flags and the TOML file map onto these).
//!
//! Lease timing rules the validation enforces: the heartbeat must fit at least twice into the
//! lease TTL (one lost heartbeat never loses a lease), and the revoke threshold (suspect) is
//! three heartbeats.

use std::time::Duration;

use thiserror::Error;

/// Tasks one agent runs at once.
pub const DEFAULT_CONCURRENCY: u32 = 1000;
/// Lease time-to-live: a lease not renewed for this long can be taken after the grace.
pub const DEFAULT_LEASE_TTL: Duration = Duration::from_secs(20);
/// Interval between batch renewals.
pub const DEFAULT_HEARTBEAT: Duration = Duration::from_secs(4);
/// Extra time after a lease expires before recovery takes it (debounce).
pub const DEFAULT_GRACE: Duration = Duration::from_secs(5);
/// Fallback polling interval for claims and the maintenance loop.
pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_secs(1);
/// How long a graceful shutdown waits for running tasks before releasing them.
pub const DEFAULT_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a handler asked to stop (cancel, timeout, shutdown) may take before it is dropped.
pub const DEFAULT_STOP_GRACE: Duration = Duration::from_secs(10);
/// Most tasks claimed by one statement.
pub const DEFAULT_CLAIM_BATCH: u32 = 500;
/// Finished tasks are kept this long, then deleted by the leader.
pub const DEFAULT_RETENTION: Duration = Duration::from_secs(7 * 24 * 3600);
/// Dead-lettered tasks are kept this long.
pub const DEFAULT_DEAD_RETENTION: Duration = Duration::from_secs(30 * 24 * 3600);
/// A waiting task whose type no live agent serves is dead-lettered after this long.
pub const DEFAULT_UNSERVED_AFTER: Duration = Duration::from_secs(15 * 60);
/// Claim statements one agent keeps in flight at once.
pub const DEFAULT_CLAIM_WORKERS: u32 = 2;
/// Completion statements one agent keeps in flight at once.
pub const DEFAULT_COMPLETE_WORKERS: usize = 2;
/// Completions are flushed when this many are pending…
pub const DEFAULT_COMPLETE_BATCH: usize = 100;
/// …or after this long.
pub const DEFAULT_COMPLETE_FLUSH: Duration = Duration::from_millis(2);
/// Connections of the agent's main pool (the heartbeat has its own connection on top).
pub const DEFAULT_MAX_CONNECTIONS: u32 = 10;
/// Most expired leases the leader recovers per maintenance tick (one recovery statement).
pub const DEFAULT_RECOVERY_PER_TICK: u32 = 1000;

/// Everything the runtime needs to know, validated by [`RuntimeSettings::validate`].
#[derive(Debug, Clone, PartialEq)]
pub struct RuntimeSettings {
    /// Agent name (the lease owner is this plus a per-start suffix).
    pub name: String,
    pub concurrency: u32,
    pub lease_ttl: Duration,
    pub heartbeat: Duration,
    pub grace: Duration,
    pub poll_interval: Duration,
    pub shutdown_timeout: Duration,
    pub stop_grace: Duration,
    pub claim_batch: u32,
    pub claim_workers: u32,
    pub complete_batch: usize,
    pub complete_workers: usize,
    pub complete_flush: Duration,
    pub retention: Duration,
    pub dead_retention: Duration,
    /// `None`: never dead-letter tasks of unserved types.
    pub unserved_after: Option<Duration>,
    pub max_connections: u32,
    /// Most expired leases the leader recovers per maintenance tick: a mass expiry of N leases
    /// is spread over N / this many ticks instead of being revoked at once.
    pub recovery_per_tick: u32,
    /// Exit once nothing of our types is queued, retrying or running.
    pub exit_when_idle: bool,
    /// With `exit_when_idle`: give up this long after the start while work remains (exit 4).
    /// `None`: wait as long as it takes (a retry is waited for, however long its backoff).
    pub idle_timeout: Option<Duration>,
    /// With `exit_when_idle`: dead and cancelled tasks of our types fail the run only when
    /// created or finished at most this long before the agent started. `None`: every one
    /// still stored (a rerun against the same database still fails on them).
    pub idle_since: Option<Duration>,
    /// gRPC address recorded in the registry (the server itself arrives with the gRPC API).
    pub grpc_address: Option<String>,
    /// Shard groups this agent joins (`--shard-groups`).
    pub shard_groups: Vec<leasehold_shared::store::GroupName>,
}

impl Default for RuntimeSettings {
    fn default() -> Self {
        Self {
            name: default_name(),
            concurrency: DEFAULT_CONCURRENCY,
            lease_ttl: DEFAULT_LEASE_TTL,
            heartbeat: DEFAULT_HEARTBEAT,
            grace: DEFAULT_GRACE,
            poll_interval: DEFAULT_POLL_INTERVAL,
            shutdown_timeout: DEFAULT_SHUTDOWN_TIMEOUT,
            stop_grace: DEFAULT_STOP_GRACE,
            claim_batch: DEFAULT_CLAIM_BATCH,
            claim_workers: DEFAULT_CLAIM_WORKERS,
            complete_batch: DEFAULT_COMPLETE_BATCH,
            complete_workers: DEFAULT_COMPLETE_WORKERS,
            complete_flush: DEFAULT_COMPLETE_FLUSH,
            retention: DEFAULT_RETENTION,
            dead_retention: DEFAULT_DEAD_RETENTION,
            unserved_after: Some(DEFAULT_UNSERVED_AFTER),
            max_connections: DEFAULT_MAX_CONNECTIONS,
            recovery_per_tick: DEFAULT_RECOVERY_PER_TICK,
            exit_when_idle: false,
            idle_timeout: None,
            idle_since: None,
            grpc_address: None,
            shard_groups: Vec::new(),
        }
    }
}

/// The host name, or `agent` when it cannot be read.
pub fn default_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().to_string())
        .filter(|h| leasehold_shared::domain::ids::validate_agent_name(h).is_ok())
        .unwrap_or_else(|| "agent".to_string())
}

/// A setting that cannot work, with the setting's name.
#[derive(Debug, Error, PartialEq, Eq)]
#[error("{setting}: {detail}")]
pub struct SettingsError {
    pub setting: &'static str,
    pub detail: String,
}

fn bad(setting: &'static str, detail: impl Into<String>) -> SettingsError {
    SettingsError {
        setting,
        detail: detail.into(),
    }
}

fn within(
    setting: &'static str,
    d: Duration,
    min: Duration,
    max: Duration,
) -> Result<(), SettingsError> {
    if d < min || d > max {
        return Err(bad(
            setting,
            format!(
                "{} is not within {}..={}",
                humantime::format_duration(d),
                humantime::format_duration(min),
                humantime::format_duration(max)
            ),
        ));
    }
    Ok(())
}

const MS: Duration = Duration::from_millis(1);
const DAY: Duration = Duration::from_secs(24 * 3600);

impl RuntimeSettings {
    /// Checks every setting and how they fit together.
    pub fn validate(&self) -> Result<(), SettingsError> {
        leasehold_shared::domain::ids::validate_agent_name(&self.name)
            .map_err(|e| bad("id", e.to_string()))?;
        let most = leasehold_shared::domain::policy::MAX_LOCAL_CONCURRENCY;
        if !(1..=most).contains(&self.concurrency) {
            return Err(bad("concurrency", format!("must be within 1..={most}")));
        }
        within("lease_ttl", self.lease_ttl, 200 * MS, DAY)?;
        within("heartbeat", self.heartbeat, 50 * MS, DAY)?;
        if self.heartbeat * 2 > self.lease_ttl {
            return Err(bad(
                "heartbeat",
                format!(
                    "{} must be at most half the lease TTL ({}), so one lost heartbeat never loses a lease",
                    humantime::format_duration(self.heartbeat),
                    humantime::format_duration(self.lease_ttl)
                ),
            ));
        }
        within("grace", self.grace, Duration::ZERO, DAY)?;
        within(
            "poll_interval",
            self.poll_interval,
            10 * MS,
            Duration::from_secs(3600),
        )?;
        within(
            "shutdown_timeout",
            self.shutdown_timeout,
            Duration::ZERO,
            DAY,
        )?;
        within(
            "stop_grace",
            self.stop_grace,
            Duration::ZERO,
            Duration::from_secs(3600),
        )?;
        if !(1..=10_000).contains(&self.claim_batch) {
            return Err(bad("claim_batch", "must be within 1..=10000"));
        }
        if !(1..=16).contains(&self.claim_workers) {
            return Err(bad("claim_workers", "must be within 1..=16"));
        }
        if !(1..=16).contains(&self.complete_workers) {
            return Err(bad("complete_workers", "must be within 1..=16"));
        }
        if !(1..=10_000).contains(&self.complete_batch) {
            return Err(bad("complete_batch", "must be within 1..=10000"));
        }
        within(
            "complete_flush",
            self.complete_flush,
            Duration::ZERO,
            Duration::from_secs(1),
        )?;
        within(
            "retention",
            self.retention,
            Duration::from_secs(60),
            3650 * DAY,
        )?;
        within(
            "dead_retention",
            self.dead_retention,
            Duration::from_secs(60),
            3650 * DAY,
        )?;
        if let Some(after) = self.unserved_after {
            within("unserved_after", after, Duration::from_secs(1), 7 * DAY)?;
        }
        if let Some(d) = self.idle_timeout {
            within("idle_timeout", d, MS, 365 * DAY)?;
        }
        if let Some(d) = self.idle_since {
            within("idle_since", d, Duration::ZERO, 3650 * DAY)?;
        }
        if !(2..=1000).contains(&self.max_connections) {
            return Err(bad("max_connections", "must be within 2..=1000"));
        }
        if !(1..=100_000).contains(&self.recovery_per_tick) {
            return Err(bad("recovery_per_tick", "must be within 1..=100000"));
        }
        Ok(())
    }

    /// A renewal (connecting included) gives up after this, client and server side. It is at
    /// most the safety margin, so a renewal stuck at a lease's local deadline delays stopping
    /// the execution by less than the margin — before the lease could expire in the database.
    pub fn renew_timeout(&self) -> Duration {
        self.heartbeat
            .min(self.lease_ttl / 4)
            .min(self.safety_margin())
            .max(50 * MS)
    }

    /// Margin kept between the local safety deadline and the lease's expiry.
    pub fn safety_margin(&self) -> Duration {
        (self.lease_ttl / 5).min(Duration::from_secs(2))
    }

    /// How far ahead this agent's liveness deadline (`agents.alive_until`) is set at
    /// registration and on every heartbeat: lease TTL + grace, the time its leases are also
    /// held without a renewal. A healthy agent beats at least every heartbeat + renew timeout,
    /// which the validation keeps under half the TTL, so it always beats in time; the leader's
    /// unserved-type check trusts this deadline rather than its own timings.
    pub fn alive_for(&self) -> Duration {
        self.lease_ttl + self.grace
    }

    /// Leases whose heartbeat is older than this are suspect (DESIGN §4: 3 × heartbeat).
    pub fn revoke_threshold(&self) -> Duration {
        self.heartbeat * 3
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid() {
        assert_eq!(RuntimeSettings::default().validate(), Ok(()));
    }

    #[test]
    fn heartbeat_must_fit_twice_into_the_ttl() {
        let s = RuntimeSettings {
            heartbeat: Duration::from_secs(11),
            ..RuntimeSettings::default()
        };
        assert_eq!(s.validate().map_err(|e| e.setting), Err("heartbeat"));
    }

    #[test]
    fn out_of_range_values_name_their_setting() {
        let s = RuntimeSettings {
            concurrency: 0,
            ..RuntimeSettings::default()
        };
        assert_eq!(s.validate().map_err(|e| e.setting), Err("concurrency"));
        let s = RuntimeSettings {
            lease_ttl: Duration::from_millis(10),
            ..RuntimeSettings::default()
        };
        assert_eq!(s.validate().map_err(|e| e.setting), Err("lease_ttl"));
        let s = RuntimeSettings {
            name: "bad name".into(),
            ..RuntimeSettings::default()
        };
        assert_eq!(s.validate().map_err(|e| e.setting), Err("id"));
    }
}
