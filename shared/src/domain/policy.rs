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
/// Default attempts before a task is dead-lettered.
pub const DEFAULT_MAX_ATTEMPTS: i32 = 25;
/// Highest global or per-type concurrency limit accepted.
pub const MAX_CONCURRENCY_LIMIT: u32 = 1_000_000;
/// Highest concurrency of one agent (its local limit, `--concurrency`).
pub const MAX_LOCAL_CONCURRENCY: u32 = 100_000;
/// Longest duration accepted for delays, timeouts and thresholds (7 days).
pub const MAX_POLICY_DURATION: Duration = Duration::from_secs(7 * 24 * 3600);

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
        }
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
