//! What `/healthz` and `/readyz` of the metrics listener ([`super::serve`]) answer: liveness
//! and readiness for a service manager or a Kubernetes probe.
//!
//! - `/healthz` is liveness only: `ok` while the process serves HTTP. It asks nothing of the
//!   database, so an outage of the database never gets a healthy agent restarted.
//! - `/readyz` ([`Readiness::check`]) passes when every check passes:
//!
//! | check        | passes when                                                          |
//! |--------------|----------------------------------------------------------------------|
//! | `database`   | a query through the agent's store answers within [`DATABASE_TIMEOUT`] |
//! | `migrations` | its answer shows every migration this build knows applied            |
//! | `draining`   | the agent still claims (not after SIGTERM, `Drain`, an idle exit)    |
//!
//! ```text
//!   probe ──▶ draining? (an atomic, every probe)
//!        └──▶ database result younger than DATABASE_CHECK_TTL? ──yes──▶ use it
//!                                   │ no (one probe at a time gets here)
//!                                   ▼
//!             migrations read, under DATABASE_TIMEOUT ──▶ kept DATABASE_CHECK_TTL
//! ```
//!
//! Invariant: at most one database check runs at a time, and its result is kept for
//! [`DATABASE_CHECK_TTL`]; probes that arrive while it runs wait for it and share it. A flood
//! of probes therefore costs the database at most one check (two short statements) per
//! [`DATABASE_CHECK_TTL`] plus the check's own time.
//!
//! The migrations are read on every database check rather than once at start: it is the same
//! round trip that proves the database answers, so it costs nothing extra, and a database
//! restored from an older backup is seen. A database that applied *more* migrations than this
//! build knows (a newer build migrated it ahead of a rolling upgrade) passes.
//!
//! When things fail: a database that does not answer within [`DATABASE_TIMEOUT`] (stopped,
//! black-holed, or the agent's pool held by handlers that long) makes the check fail with
//! `no answer within 2s`, and its query is dropped; an error is reported as its one-sentence
//! message. Either way the failure is kept for [`DATABASE_CHECK_TTL`] like a success, so a
//! database that is down is asked again at most once per interval.

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

use leasehold_shared::StoreError;
use tokio::sync::Mutex;
use tokio::time::Instant;

/// Longest a database check may take before `/readyz` reports the database as not answering.
pub const DATABASE_TIMEOUT: Duration = Duration::from_secs(2);

/// How long the result of a database check is reused by later probes.
pub const DATABASE_CHECK_TTL: Duration = Duration::from_secs(1);

/// Longest reason quoted in a `/readyz` body, in characters.
const MAX_REASON_CHARS: usize = 200;

/// The migrations a database applied and the number this build knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MigrationCount {
    pub applied: usize,
    pub known: usize,
}

/// What [`Readiness`] asks of the agent it reports on.
#[async_trait::async_trait]
pub trait ReadinessSource: Send + Sync {
    /// True once the agent stopped claiming for good (it is shutting down).
    fn draining(&self) -> bool;

    /// One round trip to the database: the migrations it applied. [`Readiness`] bounds it by
    /// [`DATABASE_TIMEOUT`] and keeps its result for [`DATABASE_CHECK_TTL`].
    async fn migrations(&self) -> Result<MigrationCount, StoreError>;
}

/// The outcome of one database check.
#[derive(Debug, Clone, PartialEq, Eq)]
enum DatabaseCheck {
    Answered(MigrationCount),
    Failed(String),
    NoAnswer,
}

/// The answer to one `/readyz` probe.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadinessReport {
    /// Every check passed (200); otherwise 503.
    pub ready: bool,
    /// `ready` or `not ready: <failing checks>`, then one line per check.
    pub body: String,
}

/// The readiness checks of one agent, with the database check cached (see the module doc).
pub struct Readiness {
    source: Arc<dyn ReadinessSource>,
    /// The last database check and when it ended; the lock is held while a check runs, so
    /// probes arriving meanwhile wait for it instead of starting their own.
    last: Mutex<Option<(Instant, DatabaseCheck)>>,
}

impl Readiness {
    pub fn new(source: Arc<dyn ReadinessSource>) -> Self {
        Self {
            source,
            last: Mutex::new(None),
        }
    }

    /// Runs the checks (the database one from the cache when fresh) and says whether the
    /// agent is ready, naming every check that fails.
    pub async fn check(&self) -> ReadinessReport {
        let draining = self.source.draining();
        let database = self.database().await;
        let mut failing = Vec::new();
        let mut lines = String::new();
        match &database {
            DatabaseCheck::Answered(count) => {
                lines.push_str("database: ok\n");
                if count.applied >= count.known {
                    let _ = writeln!(
                        lines,
                        "migrations: ok ({} applied, {} known to this build)",
                        count.applied, count.known
                    );
                } else {
                    failing.push("migrations");
                    let _ = writeln!(
                        lines,
                        "migrations: {} of {} applied: run `leasehold-agent migrate`",
                        count.applied, count.known
                    );
                }
            }
            DatabaseCheck::Failed(reason) => {
                failing.push("database");
                let _ = writeln!(lines, "database: {reason}");
                lines.push_str("migrations: unknown (the database check failed)\n");
            }
            DatabaseCheck::NoAnswer => {
                failing.push("database");
                let _ = writeln!(lines, "database: no answer within {DATABASE_TIMEOUT:?}");
                lines.push_str("migrations: unknown (the database check failed)\n");
            }
        }
        if draining {
            failing.push("draining");
            lines.push_str("draining: yes (shutting down: no new claims)\n");
        } else {
            lines.push_str("draining: no\n");
        }
        let head = if failing.is_empty() {
            "ready\n".to_string()
        } else {
            format!("not ready: {}\n", failing.join(", "))
        };
        ReadinessReport {
            ready: failing.is_empty(),
            body: head + &lines,
        }
    }

    /// The last database check if younger than [`DATABASE_CHECK_TTL`], else a new one.
    async fn database(&self) -> DatabaseCheck {
        let mut last = self.last.lock().await;
        if let Some((at, check)) = &*last
            && at.elapsed() < DATABASE_CHECK_TTL
        {
            return check.clone();
        }
        let check = match tokio::time::timeout(DATABASE_TIMEOUT, self.source.migrations()).await {
            Ok(Ok(count)) => DatabaseCheck::Answered(count),
            Ok(Err(error)) => {
                tracing::debug!(%error, "readiness: the database check failed");
                DatabaseCheck::Failed(one_line(&error.to_string()))
            }
            Err(_elapsed) => {
                tracing::debug!(timeout = ?DATABASE_TIMEOUT, "readiness: the database did not answer");
                DatabaseCheck::NoAnswer
            }
        };
        *last = Some((Instant::now(), check.clone()));
        check
    }
}

/// `text` on one line (control characters become spaces), at most [`MAX_REASON_CHARS`].
pub(super) fn one_line(text: &str) -> String {
    let mut line: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(MAX_REASON_CHARS)
        .collect();
    if text.chars().count() > MAX_REASON_CHARS {
        line.push('…');
    }
    line
}
