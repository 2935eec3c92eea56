//! Policies: concurrency limits, pause, retry backoff, timeouts and the slow threshold, for the
//! whole cluster (scope `*`) and per task type. A type's unset fields inherit the global row.
//!
//! Retry delay (DESIGN §6) = min(max, base × multiplier^(attempt−1)) ± jitter. The stores
//! compute it in the same statement that fails the task, from the policy row in force at that
//! moment; [`RetryPolicy::delay_bounds`] is the same formula for tests and explanations.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::ids::TaskType;
use super::validate::ValidationError;

/// Default first retry delay.
pub const DEFAULT_RETRY_BASE: Duration = Duration::from_secs(30);
/// Default growth of the delay per attempt.
pub const DEFAULT_RETRY_MULTIPLIER: f64 = 2.0;
/// Default longest retry delay.
pub const DEFAULT_RETRY_MAX: Duration = Duration::from_secs(600);
/// Default jitter, as a fraction of the delay (±20 %).
pub const DEFAULT_RETRY_JITTER: f64 = 0.2;
/// Default max run time of one attempt.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30 * 60);
/// Default time after which a running task is flagged slow.
pub const DEFAULT_SLOW_THRESHOLD: Duration = Duration::from_secs(60);
/// Default attempts before a task is dead-lettered (a task enqueued without its own
/// `max_attempts` takes its type's, else the global row's, else this).
pub const DEFAULT_MAX_ATTEMPTS: i32 = 25;
/// Highest `max_attempts` a policy row accepts.
pub const MAX_POLICY_MAX_ATTEMPTS: u32 = 1000;
/// Default snoozes a task may take before the next one dead-letters it.
pub const DEFAULT_MAX_SNOOZES: u32 = 100;
/// Highest `max_snoozes` accepted.
pub const MAX_MAX_SNOOZES: u32 = 1_000_000;
/// Highest global or per-type concurrency limit accepted.
pub const MAX_CONCURRENCY_LIMIT: u32 = 1_000_000;
/// Highest concurrency of one agent (its local limit, `--concurrency`).
pub const MAX_LOCAL_CONCURRENCY: u32 = 100_000;
/// Longest duration accepted for delays, timeouts and thresholds (7 days).
pub const MAX_POLICY_DURATION: Duration = Duration::from_secs(7 * 24 * 3600);
/// Most starts a rate limit may allow per period.
pub const MAX_RATE_STARTS: u32 = 1_000_000;
/// Longest period of a rate limit (one day): the stores keep one row per claim that started
/// tasks within the period.
pub const MAX_RATE_PERIOD: Duration = Duration::from_secs(24 * 3600);

/// Which policy row: the global one or one task type's.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PolicyScope {
    Global,
    Type(TaskType),
}

impl PolicyScope {
    /// The `policies.scope` key: `*` or the type name.
    pub fn key(&self) -> &str {
        match self {
            PolicyScope::Global => "*",
            PolicyScope::Type(t) => t.as_str(),
        }
    }

    /// Parses a stored key.
    pub fn from_key(key: &str) -> Result<Self, ValidationError> {
        if key == "*" {
            Ok(PolicyScope::Global)
        } else {
            TaskType::new(key).map(PolicyScope::Type)
        }
    }
}

impl fmt::Display for PolicyScope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PolicyScope::Global => f.write_str("global"),
            PolicyScope::Type(t) => write!(f, "type {t}"),
        }
    }
}

/// Retry backoff settings.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct RetryPolicy {
    pub base: Duration,
    pub multiplier: f64,
    pub max: Duration,
    pub jitter: f64,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            base: DEFAULT_RETRY_BASE,
            multiplier: DEFAULT_RETRY_MULTIPLIER,
            max: DEFAULT_RETRY_MAX,
            jitter: DEFAULT_RETRY_JITTER,
        }
    }
}

impl RetryPolicy {
    /// The delay before retrying after failed attempt `attempt` (1-based), without jitter.
    pub fn nominal_delay(&self, attempt: i32) -> Duration {
        let exponent = attempt.saturating_sub(1).max(0);
        let base_ms = self.base.as_millis() as f64;
        let max_ms = self.max.as_millis() as f64;
        let raw = base_ms * self.multiplier.powi(exponent);
        let ms = if raw.is_finite() {
            raw.min(max_ms)
        } else {
            max_ms
        };
        Duration::from_millis(ms.max(0.0) as u64)
    }

    /// The shortest and longest delay jitter can produce after failed attempt `attempt`.
    pub fn delay_bounds(&self, attempt: i32) -> (Duration, Duration) {
        let nominal = self.nominal_delay(attempt).as_millis() as f64;
        let low = nominal * (1.0 - self.jitter);
        let high = nominal * (1.0 + self.jitter);
        (
            Duration::from_millis(low.floor() as u64),
            Duration::from_millis(high.ceil() as u64),
        )
    }
}

/// A rate limit: at most `starts` task starts (claims) in any window of length `period`,
/// counted in database time across every agent. The global row's limit counts the starts of
/// every type; a type's counts its own. Unlike the other fields, a type's rate limit does not
/// inherit the global one: both apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RateLimit {
    pub starts: u32,
    #[serde(with = "period_ms")]
    pub period: Duration,
}

/// A rate limit's period travels and is stored in whole milliseconds.
mod period_ms {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        u64::deserialize(d).map(Duration::from_millis)
    }
}

impl RateLimit {
    /// Checks the bounds: 1..=[`MAX_RATE_STARTS`] starts per 1 ms..=[`MAX_RATE_PERIOD`], whole
    /// milliseconds.
    pub fn new(starts: u32, period: Duration) -> Result<Self, ValidationError> {
        if !(1..=MAX_RATE_STARTS).contains(&starts) {
            return Err(ValidationError::OutOfRange {
                field: "rate_limit",
                detail: format!("{starts} starts is not within 1..={MAX_RATE_STARTS}"),
            });
        }
        if period < Duration::from_millis(1) || period > MAX_RATE_PERIOD {
            return Err(ValidationError::OutOfRange {
                field: "rate_limit",
                detail: format!(
                    "a period of {} is not within 1ms..=24h",
                    RateLimit::period_text(period)
                ),
            });
        }
        if !period.subsec_nanos().is_multiple_of(1_000_000) {
            return Err(ValidationError::OutOfRange {
                field: "rate_limit",
                detail: "the period must be whole milliseconds".into(),
            });
        }
        Ok(Self { starts, period })
    }

    /// The period in milliseconds, as stored.
    pub fn period_ms(&self) -> i64 {
        i64::try_from(self.period.as_millis()).unwrap_or(i64::MAX)
    }

    pub fn period_text(d: Duration) -> String {
        duration_text(d)
    }
}

/// A duration in its largest whole unit, one word: `1s`, `1m`, `90s`, `250ms`, `1h`, `1d` (a
/// rate limit's period, a `shed_after`).
pub fn duration_text(d: Duration) -> String {
    let ms = d.as_millis();
    for (unit, size) in [
        ("d", 86_400_000),
        ("h", 3_600_000),
        ("m", 60_000),
        ("s", 1_000),
    ] {
        if ms >= size && ms.is_multiple_of(size) {
            return format!("{}{unit}", ms / size);
        }
    }
    format!("{ms}ms")
}

/// `50/1s`, `1000/1m`: the form `leasehold ratelimit set` takes.
impl fmt::Display for RateLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.starts, RateLimit::period_text(self.period))
    }
}

/// A circuit breaker of a task type: after `failures` failed attempts within `within`, the type
/// is not claimed for `cooldown`; then one task at a time tries (half-open): a success closes
/// the breaker, a failure opens it again. The leader agent moves breakers and audits each move.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct BreakerPolicy {
    pub failures: u32,
    #[serde(with = "period_ms")]
    pub within: Duration,
    #[serde(with = "period_ms")]
    pub cooldown: Duration,
}

/// Most failures a breaker may wait for.
pub const MAX_BREAKER_FAILURES: u32 = 1_000_000;
/// Longest failure window of a breaker (one day).
pub const MAX_BREAKER_WINDOW: Duration = Duration::from_secs(24 * 3600);

impl BreakerPolicy {
    /// Checks the bounds: 1..=1,000,000 failures within 1 ms..=24 h, a cooldown of 1 ms..=7
    /// days, whole milliseconds.
    pub fn new(
        failures: u32,
        within: Duration,
        cooldown: Duration,
    ) -> Result<Self, ValidationError> {
        let out = |detail: String| ValidationError::OutOfRange {
            field: "breaker",
            detail,
        };
        if !(1..=MAX_BREAKER_FAILURES).contains(&failures) {
            return Err(out(format!(
                "{failures} failures is not within 1..={MAX_BREAKER_FAILURES}"
            )));
        }
        for (what, d, max, max_text) in [
            ("window", within, MAX_BREAKER_WINDOW, "24h"),
            ("cooldown", cooldown, MAX_POLICY_DURATION, "7 days"),
        ] {
            if d < Duration::from_millis(1) || d > max {
                return Err(out(format!(
                    "a {what} of {} is not within 1ms..={max_text}",
                    RateLimit::period_text(d)
                )));
            }
            if !d.subsec_nanos().is_multiple_of(1_000_000) {
                return Err(out(format!("the {what} must be whole milliseconds")));
            }
        }
        Ok(Self {
            failures,
            within,
            cooldown,
        })
    }

    pub fn within_ms(&self) -> i64 {
        i64::try_from(self.within.as_millis()).unwrap_or(i64::MAX)
    }

    pub fn cooldown_ms(&self) -> i64 {
        i64::try_from(self.cooldown.as_millis()).unwrap_or(i64::MAX)
    }
}

/// `5 failures within 1m, cooldown 30s`.
impl fmt::Display for BreakerPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} failures within {}, cooldown {}",
            self.failures,
            RateLimit::period_text(self.within),
            RateLimit::period_text(self.cooldown)
        )
    }
}

/// A policy row as stored. For a type row, `None` fields inherit the global row; the global
/// row always has every retry, timeout and slow field set.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Policy {
    pub scope: PolicyScope,
    pub max_concurrency: Option<u32>,
    pub paused: bool,
    pub retry_base: Option<Duration>,
    pub retry_multiplier: Option<f64>,
    pub retry_max: Option<Duration>,
    pub retry_jitter: Option<f64>,
    pub timeout: Option<Duration>,
    pub slow_threshold: Option<Duration>,
    /// Starts allowed per period (this scope's own; see [`RateLimit`]).
    #[serde(default)]
    pub rate_limit: Option<RateLimit>,
    /// Load shedding (task types only, not inherited): a waiting task due longer ago than this
    /// is cancelled with reason `shed` instead of run late.
    #[serde(default)]
    pub shed_after: Option<Duration>,
    /// Per-key concurrency (task types only, not inherited): at most this many running tasks
    /// of one concurrency key of the type. Tasks without a key are not limited by it.
    #[serde(default)]
    pub per_key_concurrency: Option<u32>,
    /// Circuit breaker (task types only, not inherited).
    #[serde(default)]
    pub breaker: Option<BreakerPolicy>,
    /// Snoozes a task may take; the next one dead-letters it (`snooze_limit`). A type's unset
    /// value inherits the global row's, [`DEFAULT_MAX_SNOOZES`] when neither sets it.
    #[serde(default)]
    pub max_snoozes: Option<u32>,
    /// Attempts a task enqueued without its own `max_attempts` gets (1..=1000). A type's unset
    /// value inherits the global row's, [`DEFAULT_MAX_ATTEMPTS`] when neither sets it. Read at
    /// enqueue: changing it does not change tasks already enqueued.
    #[serde(default)]
    pub max_attempts: Option<u32>,
}

impl Policy {
    /// A type row with nothing set (what a type without a row behaves like).
    pub fn inherit(scope: PolicyScope) -> Self {
        Self {
            scope,
            max_concurrency: None,
            paused: false,
            retry_base: None,
            retry_multiplier: None,
            retry_max: None,
            retry_jitter: None,
            timeout: None,
            slow_threshold: None,
            rate_limit: None,
            shed_after: None,
            per_key_concurrency: None,
            breaker: None,
            max_snoozes: None,
            max_attempts: None,
        }
    }

    /// This row's max attempts with an unset value taken from `global`.
    pub fn max_attempts_over(&self, global: &Policy) -> i32 {
        self.max_attempts
            .or(global.max_attempts)
            .and_then(|n| i32::try_from(n).ok())
            .unwrap_or(DEFAULT_MAX_ATTEMPTS)
    }

    /// This row's snooze cap with an unset value taken from `global`.
    pub fn max_snoozes_over(&self, global: &Policy) -> u32 {
        self.max_snoozes
            .or(global.max_snoozes)
            .unwrap_or(DEFAULT_MAX_SNOOZES)
    }

    /// This row's retry settings with unset fields taken from `global`.
    pub fn retry_over(&self, global: &Policy) -> RetryPolicy {
        let d = RetryPolicy::default();
        RetryPolicy {
            base: self.retry_base.or(global.retry_base).unwrap_or(d.base),
            multiplier: self
                .retry_multiplier
                .or(global.retry_multiplier)
                .unwrap_or(d.multiplier),
            max: self.retry_max.or(global.retry_max).unwrap_or(d.max),
            jitter: self
                .retry_jitter
                .or(global.retry_jitter)
                .unwrap_or(d.jitter),
        }
    }
}

/// A change to a policy row: `None` leaves a field alone; `Some(None)` clears an inheritable
/// field (or, for `max_concurrency`, removes the limit).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PolicyPatch {
    pub max_concurrency: Option<Option<u32>>,
    pub paused: Option<bool>,
    pub retry_base: Option<Option<Duration>>,
    pub retry_multiplier: Option<Option<f64>>,
    pub retry_max: Option<Option<Duration>>,
    pub retry_jitter: Option<Option<f64>>,
    pub timeout: Option<Option<Duration>>,
    pub slow_threshold: Option<Option<Duration>>,
    #[serde(default)]
    pub rate_limit: Option<Option<RateLimit>>,
    #[serde(default)]
    pub shed_after: Option<Option<Duration>>,
    #[serde(default)]
    pub per_key_concurrency: Option<Option<u32>>,
    #[serde(default)]
    pub breaker: Option<Option<BreakerPolicy>>,
    #[serde(default)]
    pub max_snoozes: Option<Option<u32>>,
    #[serde(default)]
    pub max_attempts: Option<Option<u32>>,
}

impl PolicyPatch {
    /// The row `p` with this patch's fields set (the stores write the whole result).
    pub fn apply_to(&self, mut p: Policy) -> Policy {
        if let Some(v) = self.max_concurrency {
            p.max_concurrency = v;
        }
        if let Some(v) = self.paused {
            p.paused = v;
        }
        if let Some(v) = self.retry_base {
            p.retry_base = v;
        }
        if let Some(v) = self.retry_multiplier {
            p.retry_multiplier = v;
        }
        if let Some(v) = self.retry_max {
            p.retry_max = v;
        }
        if let Some(v) = self.retry_jitter {
            p.retry_jitter = v;
        }
        if let Some(v) = self.timeout {
            p.timeout = v;
        }
        if let Some(v) = self.slow_threshold {
            p.slow_threshold = v;
        }
        if let Some(v) = self.rate_limit {
            p.rate_limit = v;
        }
        if let Some(v) = self.shed_after {
            p.shed_after = v;
        }
        if let Some(v) = self.per_key_concurrency {
            p.per_key_concurrency = v;
        }
        if let Some(v) = self.breaker {
            p.breaker = v;
        }
        if let Some(v) = self.max_snoozes {
            p.max_snoozes = v;
        }
        if let Some(v) = self.max_attempts {
            p.max_attempts = v;
        }
        p
    }

    /// Refuses absurd values (and clearing what the global row must keep) before anything is
    /// written.
    pub fn validate(&self, scope: &PolicyScope) -> Result<(), ValidationError> {
        if let Some(Some(limit)) = self.max_concurrency
            && limit > MAX_CONCURRENCY_LIMIT
        {
            return Err(ValidationError::OutOfRange {
                field: "max_concurrency",
                detail: format!("{limit} is above {MAX_CONCURRENCY_LIMIT}"),
            });
        }
        if let Some(Some(limit)) = self.per_key_concurrency {
            if *scope == PolicyScope::Global {
                return Err(ValidationError::OutOfRange {
                    field: "per_key_concurrency",
                    detail: "a per-key limit belongs to a task type, not the global policy".into(),
                });
            }
            if !(1..=MAX_CONCURRENCY_LIMIT).contains(&limit) {
                return Err(ValidationError::OutOfRange {
                    field: "per_key_concurrency",
                    detail: format!("{limit} is not within 1..={MAX_CONCURRENCY_LIMIT}"),
                });
            }
        }
        if let Some(Some(b)) = self.breaker {
            if *scope == PolicyScope::Global {
                return Err(ValidationError::OutOfRange {
                    field: "breaker",
                    detail: "a circuit breaker belongs to a task type, not the global policy"
                        .into(),
                });
            }
            BreakerPolicy::new(b.failures, b.within, b.cooldown)?;
        }
        if let Some(Some(rate)) = self.rate_limit {
            RateLimit::new(rate.starts, rate.period)?;
        }
        if let Some(Some(d)) = self.shed_after {
            if *scope == PolicyScope::Global {
                return Err(ValidationError::OutOfRange {
                    field: "shed_after",
                    detail: "only a task type sheds its waiting tasks, not the global policy"
                        .into(),
                });
            }
            if d < Duration::from_millis(1) || d > MAX_POLICY_DURATION {
                return Err(ValidationError::OutOfRange {
                    field: "shed_after",
                    detail: format!("{} ms is not within 1 ms..=7 days", d.as_millis()),
                });
            }
            if !d.subsec_nanos().is_multiple_of(1_000_000) {
                return Err(ValidationError::OutOfRange {
                    field: "shed_after",
                    detail: "must be whole milliseconds".into(),
                });
            }
        }
        let durations = [
            ("retry_base", self.retry_base),
            ("retry_max", self.retry_max),
            ("timeout", self.timeout),
            ("slow_threshold", self.slow_threshold),
        ];
        for (field, value) in durations {
            if let Some(Some(d)) = value
                && d > MAX_POLICY_DURATION
            {
                return Err(ValidationError::OutOfRange {
                    field,
                    detail: format!("{} is above 7 days", humanish(d)),
                });
            }
            if matches!(field, "timeout" | "slow_threshold")
                && matches!(value, Some(Some(d)) if d.as_millis() == 0)
            {
                return Err(ValidationError::OutOfRange {
                    field,
                    detail: "must be at least 1 ms".into(),
                });
            }
        }
        if let Some(Some(n)) = self.max_snoozes
            && n > MAX_MAX_SNOOZES
        {
            return Err(ValidationError::OutOfRange {
                field: "max_snoozes",
                detail: format!("{n} is not within 0..={MAX_MAX_SNOOZES}"),
            });
        }
        if let Some(Some(n)) = self.max_attempts
            && !(1..=MAX_POLICY_MAX_ATTEMPTS).contains(&n)
        {
            return Err(ValidationError::OutOfRange {
                field: "max_attempts",
                detail: format!("{n} is not within 1..={MAX_POLICY_MAX_ATTEMPTS}"),
            });
        }
        if let Some(Some(m)) = self.retry_multiplier
            && !(1.0..=100.0).contains(&m)
        {
            return Err(ValidationError::OutOfRange {
                field: "retry_multiplier",
                detail: format!("{m} is not within 1..=100"),
            });
        }
        if let Some(Some(j)) = self.retry_jitter
            && !(0.0..=1.0).contains(&j)
        {
            return Err(ValidationError::OutOfRange {
                field: "retry_jitter",
                detail: format!("{j} is not within 0..=1"),
            });
        }
        if *scope == PolicyScope::Global {
            let clears = [
                ("retry_base", self.retry_base.is_some_and(|v| v.is_none())),
                (
                    "retry_multiplier",
                    self.retry_multiplier.is_some_and(|v| v.is_none()),
                ),
                ("retry_max", self.retry_max.is_some_and(|v| v.is_none())),
                (
                    "retry_jitter",
                    self.retry_jitter.is_some_and(|v| v.is_none()),
                ),
                ("timeout", self.timeout.is_some_and(|v| v.is_none())),
                (
                    "slow_threshold",
                    self.slow_threshold.is_some_and(|v| v.is_none()),
                ),
            ];
            if let Some((field, _)) = clears.iter().find(|(_, cleared)| *cleared) {
                return Err(ValidationError::OutOfRange {
                    field,
                    detail: "the global policy must keep a value".into(),
                });
            }
        }
        Ok(())
    }
}

fn humanish(d: Duration) -> String {
    format!("{}s", d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rate_limit_prints_its_period_in_the_largest_whole_unit() {
        let rate = |n, ms| RateLimit::new(n, Duration::from_millis(ms)).map(|r| r.to_string());
        assert_eq!(rate(50, 1_000).as_deref(), Ok("50/1s"));
        assert_eq!(rate(1000, 60_000).as_deref(), Ok("1000/1m"));
        assert_eq!(rate(7, 90_000).as_deref(), Ok("7/90s"));
        assert_eq!(rate(3, 250).as_deref(), Ok("3/250ms"));
        assert_eq!(rate(1, 86_400_000).as_deref(), Ok("1/1d"));
        assert_eq!(rate(2, 7_200_000).as_deref(), Ok("2/2h"));
    }

    #[test]
    fn a_rate_limit_out_of_bounds_is_refused_with_its_field() {
        let refused = |n, d| match RateLimit::new(n, d) {
            Err(ValidationError::OutOfRange { field, detail }) => format!("{field}: {detail}"),
            other => panic!("accepted {n}/{d:?}: {other:?}"),
        };
        assert_eq!(
            refused(0, Duration::from_secs(1)),
            "rate_limit: 0 starts is not within 1..=1000000"
        );
        assert!(refused(MAX_RATE_STARTS + 1, Duration::from_secs(1)).contains("1000001"));
        assert!(refused(1, Duration::ZERO).contains("within 1ms..=24h"));
        assert!(refused(1, Duration::from_secs(86_401)).contains("24h"));
        assert!(refused(1, Duration::from_micros(1500)).contains("whole milliseconds"));
        let patch = PolicyPatch {
            rate_limit: Some(Some(RateLimit {
                starts: 0,
                period: Duration::from_secs(1),
            })),
            ..PolicyPatch::default()
        };
        assert!(patch.validate(&PolicyScope::Global).is_err());
    }

    #[test]
    fn a_rate_limit_travels_as_starts_and_milliseconds() {
        let rate = RateLimit::new(20, Duration::from_secs(1)).unwrap();
        let json = serde_json::to_value(rate).unwrap();
        assert_eq!(json, serde_json::json!({"starts": 20, "period": 1000}));
        assert_eq!(serde_json::from_value::<RateLimit>(json).unwrap(), rate);
        // Audit rows written before rate limits existed still decode.
        let old: PolicyPatch = serde_json::from_value(serde_json::json!({"paused": true})).unwrap();
        assert_eq!(old.rate_limit, None);
    }

    #[test]
    fn nominal_delay_follows_the_formula_and_caps() {
        let p = RetryPolicy::default();
        assert_eq!(p.nominal_delay(1), Duration::from_secs(30));
        assert_eq!(p.nominal_delay(2), Duration::from_secs(60));
        assert_eq!(p.nominal_delay(3), Duration::from_secs(120));
        assert_eq!(p.nominal_delay(6), Duration::from_secs(600));
        assert_eq!(p.nominal_delay(1000), Duration::from_secs(600));
        assert_eq!(p.nominal_delay(0), Duration::from_secs(30));
    }

    #[test]
    fn delays_never_shrink_and_stay_within_jittered_bounds() {
        for base_ms in [0u64, 1, 250, 30_000] {
            for multiplier in [1.0, 1.5, 2.0, 10.0, 100.0] {
                for max_ms in [0u64, 1_000, 600_000, 604_800_000] {
                    let p = RetryPolicy {
                        base: Duration::from_millis(base_ms),
                        multiplier,
                        max: Duration::from_millis(max_ms),
                        jitter: 0.2,
                    };
                    let mut last = Duration::ZERO;
                    for attempt in 1..=1000 {
                        let d = p.nominal_delay(attempt);
                        assert!(d >= last, "delay shrank at attempt {attempt}");
                        assert!(d <= Duration::from_millis(max_ms.max(base_ms.min(max_ms))));
                        let (lo, hi) = p.delay_bounds(attempt);
                        assert!(lo <= d && d <= hi);
                        last = d;
                    }
                }
            }
        }
    }

    #[test]
    fn patches_refuse_absurd_values() {
        let global = PolicyScope::Global;
        let bad = [
            PolicyPatch {
                max_concurrency: Some(Some(2_000_000)),
                ..Default::default()
            },
            PolicyPatch {
                retry_multiplier: Some(Some(0.5)),
                ..Default::default()
            },
            PolicyPatch {
                retry_multiplier: Some(Some(f64::NAN)),
                ..Default::default()
            },
            PolicyPatch {
                retry_jitter: Some(Some(1.5)),
                ..Default::default()
            },
            PolicyPatch {
                timeout: Some(Some(Duration::ZERO)),
                ..Default::default()
            },
            PolicyPatch {
                retry_max: Some(Some(Duration::from_secs(8 * 86400))),
                ..Default::default()
            },
            PolicyPatch {
                retry_base: Some(None),
                ..Default::default()
            },
            PolicyPatch {
                max_attempts: Some(Some(0)),
                ..Default::default()
            },
            PolicyPatch {
                max_attempts: Some(Some(1001)),
                ..Default::default()
            },
        ];
        for patch in bad {
            assert!(patch.validate(&global).is_err(), "{patch:?}");
        }
        let type_scope = PolicyScope::Type(TaskType::new("email").unwrap());
        assert!(
            PolicyPatch {
                retry_base: Some(None),
                ..Default::default()
            }
            .validate(&type_scope)
            .is_ok()
        );
    }

    #[test]
    fn scope_keys_round_trip() {
        assert_eq!(PolicyScope::from_key("*"), Ok(PolicyScope::Global));
        let t = PolicyScope::from_key("email.send").unwrap();
        assert_eq!(t.key(), "email.send");
        assert!(PolicyScope::from_key("Bad Type").is_err());
    }
}
