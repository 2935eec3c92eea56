//! The ledger's limit check (TESTING.md, "The ledger"): at every instant, the leases per type
//! and in total stayed within the limits in force.
//!
//! Every lease leaves an attempt row with its start (the claim's `statement_timestamp()`) and
//! end (the ending transaction's `now()`), both database time; a lease still held counts until
//! `infinity`. For each limited scope in `policies` (`'*'` for the global limit, or a task
//! type), [`check`] sweeps the starts and ends in time order (an end before a start at the same
//! instant) and finds the most leases held at once — the peak — and fails if any peak is above
//! the scope's `max_concurrency`.
//!
//! The limits are read when the check runs: a scenario that changes them midway cannot use it.
//!
//! A lease counts from its start plus a small tolerance: a claim's start is stamped when its
//! statement arrives, and a completion that began and committed in the instant between that and
//! the claim's snapshot (which sees the slot free) carries an end a little later than the
//! claim's start. A real excess lasts as long as the excess lease runs, far above the
//! tolerance; a lease shorter than the tolerance is not counted.

use std::time::Duration;

use anyhow::{Context, bail};
use sqlx::PgPool;

/// The tolerance [`check`] gives the scenarios: well above the time between a claim
/// statement's arrival and its snapshot, well below any handler's run.
pub const TOLERANCE: Duration = Duration::from_millis(5);

/// The most leases held at once in one limited scope.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitPeak {
    /// `'*'` (all types) or a task type.
    pub scope: String,
    /// The scope's `max_concurrency`.
    pub limit: i64,
    /// The most leases of the scope held at one instant (0 when it had none).
    pub peak: i64,
    /// Leases of the scope counted (attempt rows plus leases still held).
    pub leases: i64,
}

impl LimitPeak {
    /// `scope peak/limit` for summaries.
    pub fn describe(&self) -> String {
        format!(
            "{} {}/{} ({} leases)",
            self.scope, self.peak, self.limit, self.leases
        )
    }
}

const PEAKS: &str = "
WITH leases AS (
    SELECT t.task_type, a.started_at, a.finished_at
    FROM task_attempts a JOIN tasks t ON t.id = a.task_id
    UNION ALL
    SELECT task_type, started_at, 'infinity'::timestamptz
    FROM tasks WHERE status IN ('running', 'cancel_requested') AND started_at IS NOT NULL
),
limited AS (
    SELECT scope, max_concurrency::bigint AS max_concurrency
    FROM policies WHERE max_concurrency IS NOT NULL
),
scoped AS (
    SELECT l.scope, least(s.started_at + $1::bigint * interval '1 microsecond', s.finished_at) AS started_at,
           s.finished_at
    FROM limited l JOIN leases s ON l.scope = '*' OR l.scope = s.task_type
),
events AS (
    SELECT scope, started_at AS at, 1 AS d FROM scoped
    UNION ALL
    SELECT scope, finished_at, -1 FROM scoped
),
running AS (
    SELECT scope, sum(d) OVER (PARTITION BY scope ORDER BY at, d ROWS UNBOUNDED PRECEDING) AS n
    FROM events
)
SELECT l.scope, l.max_concurrency,
       coalesce((SELECT max(r.n) FROM running r WHERE r.scope = l.scope), 0)::bigint,
       (SELECT count(*) FROM scoped s WHERE s.scope = l.scope)
FROM limited l ORDER BY l.scope";

/// The peak of every limited scope, from the attempt rows; leases count from their start plus
/// `tolerance` (see the module documentation).
pub async fn peaks(pool: &PgPool, tolerance: Duration) -> anyhow::Result<Vec<LimitPeak>> {
    let micros = i64::try_from(tolerance.as_micros()).context("tolerance out of range")?;
    let rows: Vec<(String, i64, i64, i64)> = sqlx::query_as(PEAKS)
        .bind(micros)
        .fetch_all(pool)
        .await
        .context("sweeping the leases of every limited scope")?;
    Ok(rows
        .into_iter()
        .map(|(scope, limit, peak, leases)| LimitPeak {
            scope,
            limit,
            peak,
            leases,
        })
        .collect())
}

/// [`peaks`] with [`TOLERANCE`], failing when a scope's peak is above its limit.
pub async fn check(pool: &PgPool) -> anyhow::Result<Vec<LimitPeak>> {
    let peaks = peaks(pool, TOLERANCE).await?;
    let over: Vec<String> = peaks
        .iter()
        .filter(|p| p.peak > p.limit)
        .map(LimitPeak::describe)
        .collect();
    if !over.is_empty() {
        bail!(
            "a concurrency limit was exceeded (peak/limit): {}",
            over.join(", ")
        );
    }
    Ok(peaks)
}
