//! `leasehold policy show|set`: the flags of a type's (or the global) retry, timeout and
//! attempt settings. Values clap accepts are within the agent's bounds; that BASE ≤ MAX in
//! `--backoff`, that something changes and that nothing is both set and cleared are checked by
//! [`crate::commands::policy::prepare_set`] (exit 2, no call).

use std::time::Duration;

use clap::{ArgGroup, Args, Subcommand, ValueEnum};
use leasehold_shared::domain::policy::{
    MAX_MAX_SNOOZES, MAX_POLICY_DURATION, MAX_POLICY_MAX_ATTEMPTS,
};

use super::values;

/// `leasehold policy …`.
#[derive(Debug, Clone, Subcommand)]
pub enum PolicyCommand {
    /// Show a type's retry, timeout and attempt settings and where each comes from
    ///
    /// Each setting's value in force and its source: `type` (the type's own), `global` (the
    /// global policy, which types inherit) or `default` (built in); then the type's own
    /// limits (concurrency, per key, rate, shedding, breaker, paused). A type without a
    /// policy shows what it inherits.
    /// Output (table):
    ///   SETTING             VALUE     FROM
    ///   max attempts        5         type
    ///   backoff base        2s        type
    ///   ...
    /// Output (json): {"task_type":"email" (null with --global),"max_attempts":{"value":5,
    /// "from":"type"},"retry_base_ms":{...},"retry_multiplier":{...},"retry_max_ms":{...},
    /// "retry_jitter":{...},"timeout_ms":{...},"slow_after_ms":{...},"max_snoozes":{...},
    /// "concurrency":N or null,"per_key_limit":N or null,"rate_limit":{"starts":N,
    /// "period_ms":N} or null,"shed_after_ms":N or null,"breaker":{"failures":N,
    /// "within_ms":N,"cooldown_ms":N} or null,"paused":false}.
    #[command(verbatim_doc_comment)]
    Show(PolicyShowArgs),

    /// Set or clear a type's (or the global) retry, timeout and attempt settings
    ///
    /// A task enqueued without --max-attempts takes its type's max attempts, else the global
    /// policy's, else 25 (tasks already enqueued keep theirs). Retry delay = min(MAX, BASE ×
    /// MULTIPLIER^(attempt−1)) ± jitter. Durations: 250ms, 30s, 5m, 1h (at most 7 days).
    /// --clear SETTING (repeatable) returns a type's setting to what it inherits; the global
    /// policy keeps its backoff, timeout and slow-after (only its max-attempts and
    /// max-snoozes clear). Operator token needed (exit 4 otherwise); bad flags exit 2 and
    /// change nothing.
    /// Output (table): `type email: max attempts 5 (was 25, default)`; several changes as
    /// `type email:` then one line each (`  backoff base 2s (was 30s, global)`); or
    /// `type email: nothing changed`.
    /// Output (json): {"task_type":"email" or null,"previous":SETTINGS,"current":SETTINGS},
    /// SETTINGS as the settings of `policy show --output json`.
    #[command(verbatim_doc_comment)]
    Set(PolicySetArgs),
}

/// `leasehold policy show`.
#[derive(Debug, Clone, Args)]
pub struct PolicyShowArgs {
    /// The task type (or --global).
    #[arg(
        value_name = "TYPE",
        value_parser = values::task_type,
        required_unless_present = "global",
        conflicts_with = "global"
    )]
    pub task_type: Option<String>,

    /// The global policy, which types inherit.
    #[arg(long)]
    pub global: bool,
}

/// A setting `--clear` names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PolicyField {
    MaxAttempts,
    /// Both the backoff base and max.
    Backoff,
    BackoffMultiplier,
    Jitter,
    Timeout,
    SlowAfter,
    MaxSnoozes,
}

impl PolicyField {
    /// The flag that sets it.
    pub fn flag(self) -> &'static str {
        match self {
            PolicyField::MaxAttempts => "--max-attempts",
            PolicyField::Backoff => "--backoff",
            PolicyField::BackoffMultiplier => "--backoff-multiplier",
            PolicyField::Jitter => "--jitter",
            PolicyField::Timeout => "--timeout",
            PolicyField::SlowAfter => "--slow-after",
            PolicyField::MaxSnoozes => "--max-snoozes",
        }
    }

    /// The names SetPolicy's `clear` takes for it.
    pub fn wire_names(self) -> &'static [&'static str] {
        match self {
            PolicyField::MaxAttempts => &["max_attempts"],
            PolicyField::Backoff => &["retry_base_ms", "retry_max_ms"],
            PolicyField::BackoffMultiplier => &["retry_multiplier"],
            PolicyField::Jitter => &["retry_jitter"],
            PolicyField::Timeout => &["timeout_ms"],
            PolicyField::SlowAfter => &["slow_after_ms"],
            PolicyField::MaxSnoozes => &["max_snoozes"],
        }
    }
}

/// `leasehold policy set`.
#[derive(Debug, Clone, Args)]
#[command(group(
    ArgGroup::new("change")
        .required(true)
        .multiple(true)
        .args([
            "max_attempts", "backoff", "backoff_multiplier", "jitter", "timeout", "slow_after",
            "max_snoozes", "clear",
        ])
))]
pub struct PolicySetArgs {
    /// The task type (or --global).
    #[arg(
        value_name = "TYPE",
        value_parser = values::task_type,
        required_unless_present = "global",
        conflicts_with = "global"
    )]
    pub task_type: Option<String>,

    /// Change the global policy, which types inherit.
    #[arg(long)]
    pub global: bool,

    /// Attempts a task enqueued without --max-attempts gets (1..=1000).
    #[arg(
        long,
        value_name = "N",
        value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_POLICY_MAX_ATTEMPTS))
    )]
    pub max_attempts: Option<u32>,

    /// First and longest retry delay: 2s..5m (BASE ≤ MAX, each at most 7 days).
    #[arg(long, value_name = "BASE..MAX", value_parser = backoff)]
    pub backoff: Option<(Duration, Duration)>,

    /// Growth of the retry delay per attempt (1..=100).
    #[arg(long, value_name = "X", value_parser = multiplier)]
    pub backoff_multiplier: Option<f64>,

    /// Jitter, a fraction of the retry delay (0..=1; 0.2 is ±20 %).
    #[arg(long, value_name = "X", value_parser = jitter)]
    pub jitter: Option<f64>,

    /// Max run time of one attempt: 30s, 10m (1ms..=7 days).
    #[arg(long, value_name = "DURATION", value_parser = positive_policy_duration)]
    pub timeout: Option<Duration>,

    /// Time after which a running task is flagged slow: 1m (1ms..=7 days).
    #[arg(long, value_name = "DURATION", value_parser = positive_policy_duration)]
    pub slow_after: Option<Duration>,

    /// Snoozes a task may take; the next one dead-letters it (0..=1000000).
    #[arg(
        long,
        value_name = "N",
        value_parser = clap::value_parser!(u32).range(0..=i64::from(MAX_MAX_SNOOZES))
    )]
    pub max_snoozes: Option<u32>,

    /// Return a setting to what it inherits (repeatable).
    #[arg(long, value_name = "SETTING", value_enum)]
    pub clear: Vec<PolicyField>,
}

/// A policy duration: whole milliseconds, at most 7 days.
fn policy_duration(s: &str) -> Result<Duration, String> {
    let d = values::duration(s)?;
    let shown = humantime::format_duration(d);
    if d > MAX_POLICY_DURATION {
        return Err(format!("{shown} is above 7 days"));
    }
    if !d.subsec_nanos().is_multiple_of(1_000_000) {
        return Err(format!("{shown} is not a whole number of milliseconds"));
    }
    Ok(d)
}

/// A policy duration of at least 1 ms.
fn positive_policy_duration(s: &str) -> Result<Duration, String> {
    let d = policy_duration(s)?;
    if d.is_zero() {
        return Err("must be at least 1ms".into());
    }
    Ok(d)
}

/// `BASE..MAX`, BASE ≤ MAX.
pub fn backoff(s: &str) -> Result<(Duration, Duration), String> {
    let (base, max) = s
        .split_once("..")
        .ok_or_else(|| format!("{s:?}: expected BASE..MAX, such as 2s..5m"))?;
    let (base, max) = (policy_duration(base)?, policy_duration(max)?);
    if base > max {
        return Err(format!(
            "the base {} is above the max {}",
            humantime::format_duration(base),
            humantime::format_duration(max)
        ));
    }
    Ok((base, max))
}

fn number(s: &str, range: std::ops::RangeInclusive<f64>) -> Result<f64, String> {
    let x: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("{s:?} is not a number"))?;
    if !range.contains(&x) {
        return Err(format!(
            "{x} is not within {}..={}",
            range.start(),
            range.end()
        ));
    }
    Ok(x)
}

fn multiplier(s: &str) -> Result<f64, String> {
    number(s, 1.0..=100.0)
}

fn jitter(s: &str) -> Result<f64, String> {
    number(s, 0.0..=1.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_takes_base_dot_dot_max() {
        let s = Duration::from_secs;
        assert_eq!(backoff("2s..5m"), Ok((s(2), s(300))));
        assert_eq!(backoff("1s..1s"), Ok((s(1), s(1))));
        assert!(backoff("5m..2s").unwrap_err().contains("above the max"));
        assert!(backoff("2s").is_err());
        assert!(backoff("2s..8d").unwrap_err().contains("7 days"));
        assert!(multiplier("0.5").is_err());
        assert!(multiplier("nan").is_err());
        assert!(jitter("1.5").is_err());
        assert_eq!(jitter("0.25"), Ok(0.25));
        assert!(positive_policy_duration("0s").is_err());
    }
}
