//! Parsers of flag values: durations, times, limits, rate limits, shed-after and breaker
//! durations, task types, keys, lock and shard group names, lock holders, tokens and lease
//! times, and shard counts (names checked as the agent checks them, so bad input costs no
//! call). Each returns a message naming what was wrong; clap prints it with the flag's name
//! and exits 2.
//!
//! Durations are humantime's (`250ms`, `10s`, `5m`, `1h 30m`); times are RFC 3339
//! (`2026-12-01T11:20:00Z`, `2026-12-01T12:20:00+01:00`). A relative time given as a duration
//! is resolved against this host's clock when the command runs (the wire carries absolute
//! times), so it is as right as the host's clock.

use std::time::Duration;

use chrono::{DateTime, Utc};
use leasehold_shared::TaskType;
use leasehold_shared::domain::policy::{
    MAX_BREAKER_WINDOW, MAX_POLICY_DURATION, MAX_RATE_PERIOD, MAX_RATE_STARTS,
};
use leasehold_shared::domain::unique::check_unique_for;
use leasehold_shared::domain::validate::{
    MAX_CONCURRENCY_KEY_LEN, MAX_IDEMPOTENCY_KEY_LEN, check_concurrency_key,
};
use leasehold_shared::domain::{OnConflict, RateLimit, ScheduleName};
use leasehold_shared::store::resources::{
    GroupName, LockName, MAX_GROUP_NAME_LEN as MAX_SHARD_GROUP_LEN, MAX_LOCK_NAME_LEN,
    MAX_SHARDS as MAX_SHARD_COUNT, check_shard_count, check_ttl,
};

/// Longest `--text` filter the agent accepts, in bytes.
pub const MAX_TEXT_FILTER_BYTES: usize = 200;
/// Largest global or per-type limit (the store's), and largest local limit of one agent.
pub use leasehold_shared::domain::policy::{MAX_CONCURRENCY_LIMIT, MAX_LOCAL_CONCURRENCY};

/// A human duration: `250ms`, `10s`, `5m`, `1h 30m`.
pub fn duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s.trim())
        .map_err(|e| format!("{e} (expected a duration such as 250ms, 10s, 5m, 1h 30m)"))
}

/// A duration above zero.
pub fn positive_duration(s: &str) -> Result<Duration, String> {
    let d = duration(s)?;
    if d.is_zero() {
        return Err("must be more than 0".into());
    }
    Ok(d)
}

/// An RFC 3339 time.
pub fn rfc3339(s: &str) -> Result<DateTime<Utc>, String> {
    DateTime::parse_from_rfc3339(s.trim())
        .map(|t| t.with_timezone(&Utc))
        .map_err(|e| format!("{e} (expected an RFC 3339 time such as 2026-12-01T11:20:00Z)"))
}

/// A time given either absolutely or as a duration relative to now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeOrDuration {
    At(DateTime<Utc>),
    Relative(Duration),
}

impl TimeOrDuration {
    /// The time, a relative one counted back from `now` (`--since 1h`).
    pub fn before(self, now: DateTime<Utc>) -> Result<DateTime<Utc>, String> {
        match self {
            TimeOrDuration::At(t) => Ok(t),
            TimeOrDuration::Relative(d) => chrono::Duration::from_std(d)
                .ok()
                .and_then(|d| now.checked_sub_signed(d))
                .ok_or_else(|| format!("{} ago is out of range", humantime::format_duration(d))),
        }
    }

    /// The time, a relative one counted forward from `now` (`--deadline 1h`).
    pub fn after(self, now: DateTime<Utc>) -> Result<DateTime<Utc>, String> {
        match self {
            TimeOrDuration::At(t) => Ok(t),
            TimeOrDuration::Relative(d) => chrono::Duration::from_std(d)
                .ok()
                .and_then(|d| now.checked_add_signed(d))
                .ok_or_else(|| {
                    format!("{} from now is out of range", humantime::format_duration(d))
                }),
        }
    }
}

/// An RFC 3339 time or a duration.
pub fn time_or_duration(s: &str) -> Result<TimeOrDuration, String> {
    if let Ok(d) = humantime::parse_duration(s.trim()) {
        return Ok(TimeOrDuration::Relative(d));
    }
    DateTime::parse_from_rfc3339(s.trim())
        .map(|t| TimeOrDuration::At(t.with_timezone(&Utc)))
        .map_err(|_| {
            "expected an RFC 3339 time (2026-12-01T11:20:00Z) or a duration (30m, 2h)".to_owned()
        })
}

/// Milliseconds since 1970 of a time, refusing times before 1970 (the wire's 0 means none).
pub fn epoch_ms(flag: &str, t: DateTime<Utc>) -> Result<i64, String> {
    let ms = t.timestamp_millis();
    if ms <= 0 {
        return Err(format!("{flag}: {t} is before 1970"));
    }
    Ok(ms)
}

/// Milliseconds of a duration, for the wire's `int64` fields.
pub fn duration_ms(flag: &str, d: Duration) -> Result<i64, String> {
    i64::try_from(d.as_millis()).map_err(|_| format!("{flag}: duration is too long"))
}

/// An enqueue's conflict mode: `skip`, `replace` or `debounce`.
pub fn on_conflict(s: &str) -> Result<OnConflict, String> {
    s.trim().parse::<OnConflict>().map_err(|e| e.to_string())
}

/// A `--unique-for` window: a duration of whole milliseconds within 1ms..=365d.
pub fn unique_for(s: &str) -> Result<Duration, String> {
    let d = duration(s)?;
    check_unique_for(d).map_err(|e| e.to_string())?;
    Ok(d)
}

/// A task type name, checked as the agent checks it.
pub fn task_type(s: &str) -> Result<String, String> {
    TaskType::new(s)
        .map(|t| t.as_str().to_owned())
        .map_err(|e| e.to_string())
}

/// A schedule name, checked as the agent checks it (the task-type alphabet).
pub fn schedule_name(s: &str) -> Result<String, String> {
    ScheduleName::new(s)
        .map(|n| n.as_str().to_owned())
        .map_err(|e| e.to_string())
}

/// The untrusted name quoted back in a message: inert and short.
fn quoted(s: &str) -> String {
    format!("\"{}\"", crate::output::text::shown(s, 40))
}

/// A lock name, checked as the agent checks it: `[a-z0-9][a-z0-9_.:/-]{0,127}`.
pub fn lock_name(s: &str) -> Result<String, String> {
    if LockName::new(s).is_ok() {
        return Ok(s.to_owned());
    }
    Err(format!(
        "invalid lock name {}: use 1-{MAX_LOCK_NAME_LEN} characters of a-z 0-9 _ . : / - \
         starting with a letter or digit",
        quoted(s)
    ))
}

/// Longest lock holder id, in bytes (the API's contract for `holder`).
pub const MAX_LOCK_HOLDER_LEN: usize = 128;
/// Longest `locks acquire --wait`.
pub const MAX_LOCK_WAIT: Duration = Duration::from_secs(86_400);

/// A lock's lease time or ShedLock bound (`--for`, `--at-least-for`, `--at-most-for`):
/// 1 s..=1 day, as the agent checks it.
pub fn lock_duration(s: &str) -> Result<Duration, String> {
    let d = duration(s)?;
    check_ttl("duration", d)
        .map_err(|_| format!("{}: must be from 1s to 1day", humantime::format_duration(d)))?;
    Ok(d)
}

/// `locks acquire --wait`: more than 0, at most a day.
pub fn lock_wait(s: &str) -> Result<Duration, String> {
    let d = positive_duration(s)?;
    if d > MAX_LOCK_WAIT {
        return Err(format!(
            "{}: must be at most 1day",
            humantime::format_duration(d)
        ));
    }
    Ok(d)
}

/// A lock holder id: 1-128 bytes without control characters.
pub fn lock_holder(s: &str) -> Result<String, String> {
    if s.is_empty() || s.len() > MAX_LOCK_HOLDER_LEN || s.chars().any(char::is_control) {
        return Err(format!(
            "invalid holder {}: use 1-{MAX_LOCK_HOLDER_LEN} bytes without control characters",
            quoted(s)
        ));
    }
    Ok(s.to_owned())
}

/// A fencing token as `locks acquire` printed it: a whole number from 1.
pub fn lock_token(s: &str) -> Result<i64, String> {
    match s.trim().parse::<i64>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(format!(
            "invalid token {}: expected the whole number from 1 up that `locks acquire` printed",
            quoted(s)
        )),
    }
}

/// A shard group name, checked as the agent checks it: `[a-z0-9][a-z0-9_.:-]{0,63}`.
pub fn shard_group(s: &str) -> Result<String, String> {
    if GroupName::new(s).is_ok() {
        return Ok(s.to_owned());
    }
    Err(format!(
        "invalid shard group {}: use 1-{MAX_SHARD_GROUP_LEN} characters of a-z 0-9 _ . : - \
         starting with a letter or digit",
        quoted(s)
    ))
}

/// A shard count: 1..=4096.
pub fn shard_count(s: &str) -> Result<u32, String> {
    match s.trim().parse::<u32>() {
        Ok(n) if check_shard_count(n).is_ok() => Ok(n),
        _ => Err(format!(
            "expected a whole number of shards from 1 to {MAX_SHARD_COUNT}"
        )),
    }
}

/// An idempotency key: 1-255 bytes without control characters.
pub fn idempotency_key(s: &str) -> Result<String, String> {
    if s.is_empty() || s.len() > MAX_IDEMPOTENCY_KEY_LEN {
        return Err(format!("must be 1-{MAX_IDEMPOTENCY_KEY_LEN} bytes"));
    }
    if s.chars().any(char::is_control) {
        return Err("must not contain control characters".into());
    }
    Ok(s.to_owned())
}

/// A concurrency key: 1-200 bytes without control characters, as the agent checks it.
pub fn concurrency_key(s: &str) -> Result<String, String> {
    check_concurrency_key(s)
        .map(|()| s.to_owned())
        .map_err(|_| {
            format!("must be 1-{MAX_CONCURRENCY_KEY_LEN} bytes without control characters")
        })
}

/// A `--text` filter: at most 200 bytes.
pub fn text_filter(s: &str) -> Result<String, String> {
    if s.len() > MAX_TEXT_FILTER_BYTES {
        return Err(format!("must be at most {MAX_TEXT_FILTER_BYTES} bytes"));
    }
    Ok(s.to_owned())
}

/// A concurrency limit: a number or `unlimited`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    Max(u32),
    Unlimited,
}

/// `0..=`[`MAX_CONCURRENCY_LIMIT`] or `unlimited`.
pub fn limit(s: &str) -> Result<Limit, String> {
    if s.eq_ignore_ascii_case("unlimited") {
        return Ok(Limit::Unlimited);
    }
    let n: u32 = s
        .parse()
        .map_err(|_| "expected a non-negative integer or `unlimited`".to_owned())?;
    if n > MAX_CONCURRENCY_LIMIT {
        return Err(format!("must be at most {MAX_CONCURRENCY_LIMIT}"));
    }
    Ok(Limit::Max(n))
}

/// What `ratelimit set` takes, said in every refusal.
const RATE_FORM: &str = "N/PERIOD such as 50/1s, 1000/1m, 10/250ms or 5/1h";

/// A rate limit `N/PERIOD`: at most N starts (1..=[`MAX_RATE_STARTS`]) in any window of
/// PERIOD, a humantime duration of whole milliseconds from 1ms to 24h (`50/1s`, `1000/1m`,
/// `10/250ms`, `5/1h`; a bare unit counts one of it: `50/s` is `50/1s`). The bounds are the
/// agent's ([`RateLimit::new`]); a refusal names the part that is wrong.
pub fn rate(s: &str) -> Result<RateLimit, String> {
    let Some((n, period)) = s.trim().split_once('/') else {
        return Err(format!("expected {RATE_FORM}"));
    };
    let (n, period) = (n.trim(), period.trim());
    let starts = n.parse::<u64>().map_err(|_| {
        format!(
            "starts {}: expected a whole number from 1 to {MAX_RATE_STARTS} before the / \
             ({RATE_FORM})",
            quoted(n)
        )
    })?;
    if starts == 0 {
        return Err(format!(
            "starts: 0 is not within 1..={MAX_RATE_STARTS} (to stop a type, pause it)"
        ));
    }
    let starts = u32::try_from(starts)
        .ok()
        .filter(|s| *s <= MAX_RATE_STARTS)
        .ok_or_else(|| format!("starts: {starts} is above {MAX_RATE_STARTS}"))?;
    let bare_unit = !period.is_empty() && period.chars().all(|c| c.is_ascii_alphabetic());
    let parsed = if bare_unit {
        humantime::parse_duration(&format!("1{period}"))
    } else {
        humantime::parse_duration(period)
    };
    let period = parsed.map_err(|e| {
        format!(
            "period {}: {e} (expected a duration such as 250ms, 1s, 1m or 1h)",
            quoted(period)
        )
    })?;
    let shown = humantime::format_duration(period);
    if period < Duration::from_millis(1) {
        return Err(format!("period: {shown} is below 1ms"));
    }
    if period > MAX_RATE_PERIOD {
        return Err(format!("period: {shown} is above 24h"));
    }
    if !period.subsec_nanos().is_multiple_of(1_000_000) {
        return Err(format!(
            "period: {shown} is not a whole number of milliseconds"
        ));
    }
    RateLimit::new(starts, period).map_err(|e| e.to_string())
}

/// How long a waiting task may be overdue before `shed set` has it shed: a humantime duration
/// of whole milliseconds from 1ms to 7 days (`30s`, `5m`, `1h`, `1h 30m`), the agent's bounds.
/// A refusal says the duration as it was understood.
pub fn shed_after(s: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(s.trim()).map_err(|e| {
        format!(
            "{}: {e} (expected a duration such as 30s, 5m or 1h)",
            quoted(s.trim())
        )
    })?;
    let shown = humantime::format_duration(d);
    if d.is_zero() {
        return Err("0s: must be more than 0 (to stop shedding, `shed clear TYPE`)".to_owned());
    }
    if d < Duration::from_millis(1) {
        return Err(format!("{shown} is below 1ms"));
    }
    if d > MAX_POLICY_DURATION {
        return Err(format!("{shown} is above 7 days"));
    }
    if !d.subsec_nanos().is_multiple_of(1_000_000) {
        return Err(format!("{shown} is not a whole number of milliseconds"));
    }
    Ok(d)
}

/// The failure window of `breaker set --within`: a humantime duration of whole milliseconds
/// from 1ms to 24h (`10s`, `1m`, `1h`), the agent's bounds.
pub fn breaker_within(s: &str) -> Result<Duration, String> {
    breaker_duration(s, MAX_BREAKER_WINDOW, "24h")
}

/// How long an open breaker keeps its type from being claimed (`breaker set --cooldown`): a
/// humantime duration of whole milliseconds from 1ms to 7 days (`30s`, `5m`, `1h`).
pub fn breaker_cooldown(s: &str) -> Result<Duration, String> {
    breaker_duration(s, MAX_POLICY_DURATION, "7 days")
}

/// A breaker duration from 1ms to `max`, whole milliseconds; a refusal says the duration as
/// it was understood.
fn breaker_duration(s: &str, max: Duration, max_text: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(s.trim()).map_err(|e| {
        format!(
            "{}: {e} (expected a duration such as 30s, 1m or 1h)",
            quoted(s.trim())
        )
    })?;
    let shown = humantime::format_duration(d);
    if d.is_zero() {
        return Err(
            "0s: must be more than 0 (to remove a breaker, `breaker clear TYPE`)".to_owned(),
        );
    }
    if d < Duration::from_millis(1) {
        return Err(format!("{shown} is below 1ms"));
    }
    if d > max {
        return Err(format!("{shown} is above {max_text}"));
    }
    if !d.subsec_nanos().is_multiple_of(1_000_000) {
        return Err(format!("{shown} is not a whole number of milliseconds"));
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> DateTime<Utc> {
        DateTime::from_timestamp_millis(1_764_588_000_000).unwrap_or_default()
    }

    #[test]
    fn durations() {
        assert_eq!(duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(duration("1h 30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(duration(" 10s "), Ok(Duration::from_secs(10)));
        assert!(duration("10").is_err());
        assert!(duration("soon").is_err());
        assert!(duration("-5s").is_err());
        assert_eq!(duration("0s"), Ok(Duration::ZERO));
        assert!(positive_duration("0s").is_err());
    }

    #[test]
    fn times() {
        let t = rfc3339("2025-12-01T12:20:00+01:00").ok();
        assert_eq!(t, Some(now()));
        assert!(rfc3339("2025-12-01").is_err());
        assert!(rfc3339("yesterday").is_err());
    }

    #[test]
    fn time_or_duration_resolves_against_now() {
        let since = time_or_duration("1h").and_then(|t| t.before(now()));
        assert_eq!(since.map(|t| t.timestamp_millis()), Ok(1_764_584_400_000));
        let deadline = time_or_duration("30m").and_then(|t| t.after(now()));
        assert_eq!(
            deadline.map(|t| t.timestamp_millis()),
            Ok(1_764_589_800_000)
        );
        let at = time_or_duration("2025-12-01T11:20:00Z").and_then(|t| t.before(now()));
        assert_eq!(at, Ok(now()));
        assert!(time_or_duration("tomorrow").is_err());
        let far = time_or_duration("9999999999years").and_then(|t| t.before(now()));
        assert!(far.is_err());
        assert!(epoch_ms("--since", DateTime::<Utc>::UNIX_EPOCH).is_err());
    }

    #[test]
    fn task_types_and_keys() {
        assert_eq!(task_type("email.send").as_deref(), Ok("email.send"));
        assert!(task_type("Email").is_err());
        assert!(task_type("").is_err());
        assert!(task_type("a\u{1b}b").is_err());
        assert_eq!(
            schedule_name("nightly.report").as_deref(),
            Ok("nightly.report")
        );
        assert!(schedule_name("Nightly").is_err());
        assert!(schedule_name(&"n".repeat(65)).is_err());
        assert!(idempotency_key("order-17").is_ok());
        assert!(idempotency_key("").is_err());
        assert!(idempotency_key(&"k".repeat(256)).is_err());
        assert!(idempotency_key("a\nb").is_err());
        assert_eq!(concurrency_key("acme").as_deref(), Ok("acme"));
        assert!(concurrency_key(&"k".repeat(200)).is_ok());
        assert!(concurrency_key("").is_err());
        assert!(concurrency_key(&"k".repeat(201)).is_err());
        assert!(concurrency_key("a\u{1b}b").is_err());
        assert!(concurrency_key("a\0b").is_err());
        assert!(text_filter(&"t".repeat(200)).is_ok());
        assert!(text_filter(&"t".repeat(201)).is_err());
    }

    #[test]
    fn lock_and_group_names_mirror_the_agent() {
        for good in [
            "a",
            "0",
            "deploy/prod",
            "ci:job-17.step_2",
            &"l".repeat(128),
        ] {
            assert_eq!(lock_name(good).as_deref(), Ok(good), "{good}");
        }
        for bad in [
            "",
            "Deploy",
            "-lead",
            "/root",
            "_x",
            "a b",
            "a#b",
            "é",
            "a\u{1b}[2J",
            &"l".repeat(129),
        ] {
            let err = lock_name(bad).err().unwrap_or_default();
            assert!(err.contains("invalid lock name"), "{bad:?}: {err}");
            assert!(!err.contains('\u{1b}'), "the name is quoted inert: {err}");
        }
        for good in ["orders", "0", "eu-west.orders:v2", &"g".repeat(64)] {
            assert_eq!(shard_group(good).as_deref(), Ok(good), "{good}");
        }
        for bad in ["", "Orders", "a/b", ".x", "a#1", &"g".repeat(65)] {
            let err = shard_group(bad).err().unwrap_or_default();
            assert!(err.contains("invalid shard group"), "{bad:?}: {err}");
        }
        assert_eq!(shard_count("1"), Ok(1));
        assert_eq!(shard_count("4096"), Ok(4096));
        for bad in ["0", "4097", "-1", "eight", "", "1.5"] {
            assert!(shard_count(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn lock_durations_holders_and_tokens_mirror_the_agent() {
        assert_eq!(lock_duration("1s"), Ok(Duration::from_secs(1)));
        assert_eq!(lock_duration("10m"), Ok(Duration::from_secs(600)));
        assert_eq!(lock_duration("1day"), Ok(Duration::from_secs(86_400)));
        for bad in ["0s", "999ms", "1day 1ms", "2days", "soon", ""] {
            let err = lock_duration(bad).err().unwrap_or_default();
            assert!(!err.is_empty(), "{bad:?} accepted");
        }
        assert!(
            lock_duration("0s")
                .err()
                .unwrap_or_default()
                .contains("1s to 1day")
        );
        assert_eq!(lock_wait("1ms"), Ok(Duration::from_millis(1)));
        assert_eq!(lock_wait("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(lock_wait("1day"), Ok(MAX_LOCK_WAIT));
        for bad in ["0s", "1day 1s", "later"] {
            assert!(lock_wait(bad).is_err(), "{bad:?}");
        }
        for good in [
            "ci-job-17",
            "cli:ops@web-1:4242",
            "Ops Team #3",
            &"h".repeat(128),
        ] {
            assert_eq!(lock_holder(good).as_deref(), Ok(good), "{good}");
        }
        for bad in ["", "a\nb", "a\u{1b}[2J", &"h".repeat(129)] {
            let err = lock_holder(bad).err().unwrap_or_default();
            assert!(err.contains("invalid holder"), "{bad:?}: {err}");
            assert!(!err.contains('\u{1b}'), "quoted inert: {err}");
        }
        assert_eq!(lock_token("7"), Ok(7));
        assert_eq!(lock_token("9223372036854775807"), Ok(i64::MAX));
        for bad in ["0", "-1", "1.5", "seven", "", "9223372036854775808"] {
            let err = lock_token(bad).err().unwrap_or_default();
            assert!(err.contains("invalid token"), "{bad:?}: {err}");
        }
    }

    #[test]
    fn rates_parse_as_starts_per_period() {
        let ok = |s: &str| rate(s).map(|r| (r.starts, r.period.as_millis(), r.to_string()));
        assert_eq!(ok("50/1s"), Ok((50, 1_000, "50/1s".into())));
        assert_eq!(ok("1000/1m"), Ok((1000, 60_000, "1000/1m".into())));
        assert_eq!(ok("10/250ms"), Ok((10, 250, "10/250ms".into())));
        assert_eq!(ok("5/1h"), Ok((5, 3_600_000, "5/1h".into())));
        assert_eq!(ok(" 7 / 90s "), Ok((7, 90_000, "7/90s".into())));
        assert_eq!(ok("50/s"), Ok((50, 1_000, "50/1s".into())));
        assert_eq!(ok("1/1m 30s"), Ok((1, 90_000, "1/90s".into())));
        // The bounds themselves.
        assert_eq!(ok("1/1ms"), Ok((1, 1, "1/1ms".into())));
        assert_eq!(
            ok("1000000/24h"),
            Ok((1_000_000, 86_400_000, "1000000/1d".into()))
        );
    }

    #[test]
    fn bad_rates_are_refused_naming_the_bad_part() {
        let err = |s: &str| match rate(s) {
            Ok(r) => panic!("{s:?} accepted as {r}"),
            Err(e) => e,
        };
        for (input, says) in [
            ("50", "expected N/PERIOD"),
            ("", "expected N/PERIOD"),
            ("50 per second", "expected N/PERIOD"),
            ("0/1s", "starts: 0 is not within 1..=1000000"),
            ("1000001/1s", "starts: 1000001 is above 1000000"),
            (
                "99999999999999999999/1s",
                "starts \"99999999999999999999\": expected a whole number",
            ),
            ("-1/1s", "starts \"-1\": expected a whole number"),
            ("1.5/1s", "starts \"1.5\": expected"),
            ("/1s", "starts \"\": expected"),
            ("fifty/1s", "starts \"fifty\""),
            ("50/", "period \"\":"),
            ("50/soon", "period \"soon\":"),
            ("50/10", "period \"10\":"),
            ("50/1s/2", "period \"1s/2\":"),
            ("50/0s", "period: 0s is below 1ms"),
            ("50/500us", "period: 500us is below 1ms"),
            ("50/25h", "period: 1day 1h is above 24h"),
            ("50/2d", "is above 24h"),
            (
                "50/1500us",
                "period: 1ms 500us is not a whole number of milliseconds",
            ),
        ] {
            let e = err(input);
            assert!(e.contains(says), "{input:?}: {e}");
        }
        // Untrusted text comes back inert.
        assert!(!err("\u{1b}[2J/1s").contains('\u{1b}'));
        assert!(!err("1/\u{1b}[2J").contains('\u{1b}'));
    }

    #[test]
    fn shed_after_takes_a_duration_from_1ms_to_7_days() {
        let ms = |s: &str| shed_after(s).map(|d| d.as_millis());
        assert_eq!(ms("30s"), Ok(30_000));
        assert_eq!(ms("5m"), Ok(300_000));
        assert_eq!(ms(" 1h "), Ok(3_600_000));
        assert_eq!(ms("1h 30m"), Ok(5_400_000));
        assert_eq!(ms("1ms"), Ok(1));
        assert_eq!(ms("7d"), Ok(604_800_000));
        assert_eq!(ms("168h"), Ok(604_800_000));
    }

    #[test]
    fn breaker_windows_go_to_24h_and_cooldowns_to_7_days() {
        let within = |s: &str| breaker_within(s).map(|d| d.as_millis());
        let cooldown = |s: &str| breaker_cooldown(s).map(|d| d.as_millis());
        assert_eq!(within("1m"), Ok(60_000));
        assert_eq!(within("1ms"), Ok(1));
        assert_eq!(within("24h"), Ok(86_400_000));
        assert_eq!(cooldown("30s"), Ok(30_000));
        assert_eq!(cooldown("250ms"), Ok(250));
        assert_eq!(cooldown("7d"), Ok(604_800_000));
        let err = |r: Result<Duration, String>| r.err().unwrap_or_default();
        assert!(err(breaker_within("24h 1ms")).contains("is above 24h"));
        assert!(err(breaker_within("25h")).contains("1day 1h is above 24h"));
        assert!(err(breaker_cooldown("8d")).contains("8days is above 7 days"));
        for f in [breaker_within, breaker_cooldown] {
            assert!(err(f("0s")).contains("must be more than 0 (to remove a breaker"));
            assert!(err(f("500us")).contains("500us is below 1ms"));
            assert!(err(f("1500us")).contains("is not a whole number of milliseconds"));
            assert!(err(f("soon")).contains("\"soon\": "));
            assert!(!err(f("\u{1b}[2J")).contains('\u{1b}'));
        }
    }

    #[test]
    fn bad_shed_after_durations_are_refused_saying_why() {
        let err = |s: &str| match shed_after(s) {
            Ok(d) => panic!("{s:?} accepted as {d:?}"),
            Err(e) => e,
        };
        for (input, says) in [
            ("0s", "must be more than 0"),
            ("0", "must be more than 0"),
            ("500us", "500us is below 1ms"),
            ("1ns", "is below 1ms"),
            ("1500us", "1ms 500us is not a whole number of milliseconds"),
            ("7d 1ms", "is above 7 days"),
            ("8d", "8days is above 7 days"),
            ("30", "\"30\": "),
            ("soon", "\"soon\": "),
            ("", "expected a duration such as 30s"),
            ("-5s", "\"-5s\""),
        ] {
            let e = err(input);
            assert!(e.contains(says), "{input:?}: {e}");
        }
        assert!(!err("\u{1b}[2J").contains('\u{1b}'));
    }

    #[test]
    fn limits() {
        assert_eq!(limit("0"), Ok(Limit::Max(0)));
        assert_eq!(limit("100000"), Ok(Limit::Max(100_000)));
        // The store's bound, which the console's prompt and the agent use too.
        assert_eq!(limit("1000000"), Ok(Limit::Max(1_000_000)));
        assert_eq!(limit("unlimited"), Ok(Limit::Unlimited));
        assert_eq!(limit("Unlimited"), Ok(Limit::Unlimited));
        assert!(limit("1000001").is_err());
        assert!(limit("-1").is_err());
        assert!(limit("many").is_err());
    }
}
