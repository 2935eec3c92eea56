//! Why a task is not running: the facts a store reads in one statement, turned into
//! [`Blocker`]s with messages an operator on call can act on.
//!
//! The store only gathers facts (status, due and deadline times, pause flags, limits and running
//! counts, whether a live agent serves the type, how many claimable tasks come first); this
//! module decides which blockers apply and words them, so every store explains alike.
//!
//! ```text
//!   running                         → no blocker
//!   terminal                        → Finished (only)
//!   cancel_requested                → CancelRequested (only)
//!   queued | retry_wait             → RetryWait | NotDue, DeadlinePassed, Paused, TypeLimit,
//!                                     Breaker, KeyLimit, GlobalLimit, RateLimit, GlobalRateLimit, NoAgent,
//!                                     BehindHigherPriority (those that apply, in this order);
//!                                     none apply and due → Claimable
//! ```
//!
//! Every time is the database's: absolute times print as RFC 3339 UTC with seconds, relative
//! ones ("in 42s", "3m ago") are measured from the database's `now()` read with the facts.

use chrono::{DateTime, SecondsFormat, Utc};

use super::outcomes::{Blocker, BlockerKind};
use crate::domain::{RateLimit, TaskError, TaskId, TaskStatus, TaskType};

/// Most claimable tasks counted ahead of one task; more are reported as "more than" this.
pub const EXPLAIN_AHEAD_CAP: u64 = 10_000;

/// Longest piece of an error message quoted in a blocker, in bytes.
const MAX_QUOTED_ERROR: usize = 300;

/// A concurrency limit and what currently counts against it (running + cancel_requested).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LimitUse {
    pub limit: u32,
    pub running: u64,
}

impl LimitUse {
    fn reached(self) -> bool {
        self.running >= u64::from(self.limit)
    }
}

/// A rate limit and the starts its window ending at `now` holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RateUse {
    pub limit: RateLimit,
    pub used: u64,
    /// When the window is full: the time of the start whose leaving the window lets one more
    /// in (the oldest at which the starts so far, oldest first, reach `used - limit + 1`).
    pub frees_at: Option<DateTime<Utc>>,
}

impl RateUse {
    fn reached(self) -> bool {
        self.used >= u64::from(self.limit.starts)
    }

    /// How long until enough starts leave the window for one more to be allowed.
    fn next_start_in(self, now: DateTime<Utc>) -> std::time::Duration {
        let period = chrono::Duration::milliseconds(self.limit.period_ms());
        let free_at = self.frees_at.unwrap_or(now) + period;
        (free_at - now).to_std().unwrap_or_default()
    }
}

/// `120 ms`, `2.5 s`, `60.0 s`, `4m10s`: a short wait as an operator reads it.
fn wait_text(d: std::time::Duration) -> String {
    let ms = d.as_millis();
    if ms < 1_000 {
        format!("{ms} ms")
    } else if ms <= 60_000 {
        format!("{:.1} s", d.as_secs_f64())
    } else {
        span(d.as_secs())
    }
}

/// What a store read about one task and its surroundings, all at database time `now`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ExplainFacts {
    pub id: TaskId,
    pub task_type: TaskType,
    pub status: TaskStatus,
    pub available_at: DateTime<Utc>,
    pub deadline_at: Option<DateTime<Utc>>,
    pub attempt: i32,
    pub max_attempts: i32,
    pub lease_owner: Option<String>,
    pub last_error: Option<TaskError>,
    /// `coalesce(finished_at, updated_at)`: when a terminal task ended.
    pub finished_at: DateTime<Utc>,
    pub now: DateTime<Utc>,
    /// The type's own policy row says paused.
    pub type_paused: bool,
    /// The global policy row says paused.
    pub global_paused: bool,
    /// The type's limit, when it has one.
    pub type_limit: Option<LimitUse>,
    /// Its type's circuit breaker, when it has one.
    pub breaker: Option<crate::store::BreakerStatus>,
    /// Running tasks of its type (when it has a limit or a half-open breaker).
    pub type_running: u64,
    /// The task's concurrency key, when it has one.
    pub concurrency_key: Option<String>,
    /// The type's per-key limit and the running tasks of this task's key (keyed tasks only).
    pub key_limit: Option<LimitUse>,
    /// The global limit, when there is one.
    pub global_limit: Option<LimitUse>,
    /// The type's rate limit, when it has one.
    pub type_rate: Option<RateUse>,
    /// The global rate limit, when there is one.
    pub global_rate: Option<RateUse>,
    /// Some agent in state running with a fresh heartbeat lists the type.
    pub agent_live: bool,
    /// Claimable tasks of the type ahead of this one in claim order (of its key, for a keyed
    /// task; keyless ones for a keyless task), counted up to
    /// [`EXPLAIN_AHEAD_CAP`] + 1 (0 unless this task is due).
    pub ahead: u64,
}

/// The blockers of a task, in [`BlockerKind`] order; empty for a running task.
pub(crate) fn blockers(f: &ExplainFacts) -> Vec<Blocker> {
    let mut out = Vec::new();
    let mut push = |kind, message: String| out.push(Blocker { kind, message });
    let requeue = format!("requeue it to run again (leasehold requeue {})", f.id);
    match f.status {
        TaskStatus::Running => return Vec::new(),
        TaskStatus::Succeeded | TaskStatus::PartiallySucceeded => {
            push(
                BlockerKind::Finished,
                format!(
                    "finished: {} at {}; {requeue}",
                    f.status,
                    at(f.finished_at, f.now)
                ),
            );
            return out;
        }
        TaskStatus::Cancelled => {
            // Load shedding cancels with code `shed` and says why; an operator's cancel has none.
            let why = f
                .last_error
                .as_ref()
                .filter(|e| e.code == "shed")
                .map(|e| format!(" by load shedding ({})", e.message.trim()))
                .unwrap_or_default();
            push(
                BlockerKind::Finished,
                format!("cancelled at {}{why}; {requeue}", at(f.finished_at, f.now)),
            );
            return out;
        }
        TaskStatus::Dead => {
            let why = f
                .last_error
                .as_ref()
                .map(|e| format!(": {}", quote_error(e)))
                .unwrap_or_default();
            push(
                BlockerKind::Finished,
                format!("dead at {}{why}; {requeue}", at(f.finished_at, f.now)),
            );
            return out;
        }
        TaskStatus::CancelRequested => {
            let owner = f.lease_owner.as_deref().unwrap_or("(unknown)");
            push(
                BlockerKind::CancelRequested,
                format!("cancel requested; its holder {owner} stops it within one heartbeat"),
            );
            return out;
        }
        TaskStatus::Queued | TaskStatus::RetryWait => {}
    }

    let due = f.available_at <= f.now;
    let ty = &f.task_type;
    if !due {
        if f.status == TaskStatus::RetryWait {
            let why = f
                .last_error
                .as_ref()
                .map(|e| format!(": {}", quote_error(e)))
                .unwrap_or_default();
            push(
                BlockerKind::RetryWait,
                format!(
                    "waiting to retry at {} after attempt {} of {} failed{why}",
                    at(f.available_at, f.now),
                    f.attempt,
                    f.max_attempts
                ),
            );
        } else {
            push(
                BlockerKind::NotDue,
                format!("not due until {}", at(f.available_at, f.now)),
            );
        }
    }
    if let Some(deadline) = f.deadline_at
        && deadline <= f.now
    {
        push(
            BlockerKind::DeadlinePassed,
            format!(
                "deadline passed at {}; maintenance dead-letters it with code deadline_exceeded",
                at(deadline, f.now)
            ),
        );
    }
    if f.type_paused {
        push(
            BlockerKind::Paused,
            format!("type {ty} is paused (leasehold resume {ty})"),
        );
    }
    if f.global_paused {
        push(
            BlockerKind::Paused,
            "all types are paused (global policy)".to_string(),
        );
    }
    if let Some(b) = f.breaker {
        use crate::domain::BreakerState;
        match b.state {
            BreakerState::Open => push(
                BlockerKind::Breaker,
                format!(
                    "circuit breaker open ({}): not claimed until {} (type {ty})",
                    b.policy,
                    b.until
                        .map_or_else(|| "the next tick".to_string(), |u| at(u, f.now))
                ),
            ),
            BreakerState::HalfOpen if f.type_running > 0 => push(
                BlockerKind::Breaker,
                format!(
                    "circuit breaker half-open: one task at a time tries, {} running (type {ty})",
                    f.type_running
                ),
            ),
            BreakerState::HalfOpen | BreakerState::Closed => {}
        }
    }
    if let Some(used) = f.type_limit
        && used.reached()
    {
        push(
            BlockerKind::TypeLimit,
            format!(
                "type limit reached: {}/{} running (type {ty})",
                used.running, used.limit
            ),
        );
    }
    if let (Some(used), Some(key)) = (f.key_limit, &f.concurrency_key)
        && used.reached()
    {
        push(
            BlockerKind::KeyLimit,
            format!(
                "per-key limit reached: {}/{} running with key {key:?} (type {ty})",
                used.running, used.limit
            ),
        );
    }
    if let Some(used) = f.global_limit
        && used.reached()
    {
        push(
            BlockerKind::GlobalLimit,
            format!(
                "global limit reached: {}/{} running",
                used.running, used.limit
            ),
        );
    }
    if let Some(rate) = f.type_rate
        && rate.reached()
    {
        push(
            BlockerKind::RateLimit,
            format!(
                "rate limit reached ({}), next start in {} (type {ty})",
                rate.limit,
                wait_text(rate.next_start_in(f.now))
            ),
        );
    }
    if let Some(rate) = f.global_rate
        && rate.reached()
    {
        push(
            BlockerKind::GlobalRateLimit,
            format!(
                "global rate limit reached ({}), next start in {}",
                rate.limit,
                wait_text(rate.next_start_in(f.now))
            ),
        );
    }
    if !f.agent_live {
        push(
            BlockerKind::NoAgent,
            format!("no live agent handles type {ty}"),
        );
    }
    if due && f.ahead > 0 {
        let count = if f.ahead > EXPLAIN_AHEAD_CAP {
            format!("more than {EXPLAIN_AHEAD_CAP} tasks")
        } else if f.ahead == 1 {
            "1 task".to_string()
        } else {
            format!("{} tasks", f.ahead)
        };
        let queue = match &f.concurrency_key {
            Some(key) => format!("key {key:?} of type {ty}"),
            None => format!("type {ty}"),
        };
        push(
            BlockerKind::BehindHigherPriority,
            format!("waiting behind {count} of higher priority or earlier due time ({queue})"),
        );
    }
    if due && out.is_empty() {
        out.push(Blocker {
            kind: BlockerKind::Claimable,
            message: format!("due now; the next claim of an agent serving {ty} takes it"),
        });
    }
    out
}

/// `2026-12-01T10:00:00Z (in 42s)` / `(3m ago)`.
fn at(time: DateTime<Utc>, now: DateTime<Utc>) -> String {
    format!(
        "{} ({})",
        time.to_rfc3339_opts(SecondsFormat::Secs, true),
        relative(time, now)
    )
}

/// "in 42s", "3m ago", "now": the distance of `time` from `now`, in at most two units.
fn relative(time: DateTime<Utc>, now: DateTime<Utc>) -> String {
    let secs = (time - now).num_seconds();
    if secs == 0 {
        return "now".to_string();
    }
    let span = span(secs.unsigned_abs());
    if secs > 0 {
        format!("in {span}")
    } else {
        format!("{span} ago")
    }
}

/// `42s`, `3m`, `3m12s`, `2h5m`, `4d1h`.
fn span(secs: u64) -> String {
    const UNITS: [(u64, &str); 4] = [(86_400, "d"), (3_600, "h"), (60, "m"), (1, "s")];
    for (i, (size, name)) in UNITS.iter().enumerate() {
        if secs >= *size {
            let major = secs / size;
            let rest = secs % size;
            let minor = UNITS
                .get(i + 1)
                .filter(|(next, _)| rest / next > 0)
                .map(|(next, next_name)| format!("{}{next_name}", rest / next))
                .unwrap_or_default();
            return format!("{major}{name}{minor}");
        }
    }
    "0s".to_string()
}

/// `code: message`, the message cut to [`MAX_QUOTED_ERROR`] bytes on a character boundary.
fn quote_error(e: &TaskError) -> String {
    let message = e.message.trim();
    if message.len() <= MAX_QUOTED_ERROR {
        return format!("{}: {message}", e.code);
    }
    let mut cut = MAX_QUOTED_ERROR;
    while !message.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}: {}…", e.code, &message[..cut])
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn now() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 12, 1, 10, 0, 0).unwrap()
    }

    fn facts(status: TaskStatus) -> ExplainFacts {
        ExplainFacts {
            id: TaskId(42),
            task_type: TaskType::new("email.send").unwrap(),
            status,
            available_at: now(),
            deadline_at: None,
            attempt: 0,
            max_attempts: 25,
            lease_owner: None,
            last_error: None,
            finished_at: now(),
            now: now(),
            type_paused: false,
            global_paused: false,
            type_limit: None,
            breaker: None,
            type_running: 0,
            concurrency_key: None,
            key_limit: None,
            global_limit: None,
            type_rate: None,
            global_rate: None,
            agent_live: true,
            ahead: 0,
        }
    }

    fn kinds(b: &[Blocker]) -> Vec<&'static str> {
        b.iter().map(|b| b.kind.as_str()).collect()
    }

    #[test]
    fn spans_use_at_most_two_units() {
        assert_eq!(span(42), "42s");
        assert_eq!(span(180), "3m");
        assert_eq!(span(192), "3m12s");
        assert_eq!(span(7_500), "2h5m");
        assert_eq!(span(90_000), "1d1h");
        let later = now() + chrono::Duration::seconds(42);
        assert_eq!(relative(later, now()), "in 42s");
        assert_eq!(
            relative(now() - chrono::Duration::minutes(3), now()),
            "3m ago"
        );
        assert_eq!(relative(now(), now()), "now");
        assert_eq!(at(later, now()), "2026-12-01T10:00:42Z (in 42s)");
    }

    #[test]
    fn running_has_none_and_terminal_only_finished() {
        assert!(blockers(&facts(TaskStatus::Running)).is_empty());
        let mut dead = facts(TaskStatus::Dead);
        dead.finished_at = now() - chrono::Duration::minutes(3);
        dead.last_error = Some(TaskError::permanent("boom", "disk full"));
        dead.type_paused = true;
        dead.agent_live = false;
        let b = blockers(&dead);
        assert_eq!(kinds(&b), ["finished"]);
        assert_eq!(
            b[0].message,
            "dead at 2026-12-01T09:57:00Z (3m ago): boom: disk full; \
             requeue it to run again (leasehold requeue 42)"
        );
        let done = blockers(&facts(TaskStatus::PartiallySucceeded));
        assert!(
            done[0]
                .message
                .starts_with("finished: partially_succeeded at 2026-12-01T10:00:00Z (now)")
        );
    }

    #[test]
    fn every_waiting_reason_is_listed_in_order() {
        let mut f = facts(TaskStatus::RetryWait);
        f.available_at = now() + chrono::Duration::seconds(42);
        f.attempt = 2;
        f.max_attempts = 5;
        f.last_error = Some(TaskError::retryable("smtp", "x".repeat(1000)));
        f.deadline_at = Some(now() - chrono::Duration::seconds(5));
        f.type_paused = true;
        f.global_paused = true;
        f.type_limit = Some(LimitUse {
            limit: 3,
            running: 3,
        });
        f.global_limit = Some(LimitUse {
            limit: 10,
            running: 12,
        });
        f.breaker = Some(crate::store::BreakerStatus {
            policy: crate::domain::BreakerPolicy::new(
                5,
                std::time::Duration::from_secs(60),
                std::time::Duration::from_secs(30),
            )
            .unwrap(),
            state: crate::domain::BreakerState::Open,
            since: Some(now() - chrono::Duration::seconds(10)),
            until: Some(now() + chrono::Duration::seconds(20)),
        });
        f.agent_live = false;
        f.ahead = 7; // not due: being behind others is not a reason yet
        let b = blockers(&f);
        assert_eq!(
            b[4].message,
            "circuit breaker open (5 failures within 1m, cooldown 30s): not claimed until \
             2026-12-01T10:00:20Z (in 20s) (type email.send)"
        );
        assert_eq!(
            kinds(&b),
            [
                "retry_wait",
                "deadline_passed",
                "paused",
                "paused",
                "breaker",
                "type_limit",
                "global_limit",
                "no_agent"
            ]
        );
        assert!(b[0].message.starts_with(
            "waiting to retry at 2026-12-01T10:00:42Z (in 42s) after attempt 2 of 5 failed: smtp: xxx"
        ));
        assert!(b[0].message.ends_with("x…") && b[0].message.len() < 400);
        assert_eq!(
            b[5].message,
            "type limit reached: 3/3 running (type email.send)"
        );
        assert_eq!(b[6].message, "global limit reached: 12/10 running");
    }

    #[test]
    fn a_shed_task_says_it_was_shed_and_why() {
        let mut f = facts(TaskStatus::Cancelled);
        f.last_error = Some(TaskError {
            code: "shed".into(),
            message: "waited 45.2 s past its due time; type email.send sheds after 30 s".into(),
            retryable: false,
            trace_id: None,
        });
        assert_eq!(
            blockers(&f)[0].message,
            "cancelled at 2026-12-01T10:00:00Z (now) by load shedding (waited 45.2 s past its \
             due time; type email.send sheds after 30 s); requeue it to run again (leasehold \
             requeue 42)"
        );
        f.last_error = Some(TaskError::permanent("other", "not a shed"));
        assert_eq!(
            blockers(&f)[0].message,
            "cancelled at 2026-12-01T10:00:00Z (now); requeue it to run again (leasehold requeue 42)"
        );
    }

    #[test]
    fn a_full_rate_window_says_when_the_next_start_is_allowed() {
        let mut f = facts(TaskStatus::Queued);
        let rate = |starts, period_ms, used, frees_ms_ago: Option<i64>| RateUse {
            limit: RateLimit::new(starts, std::time::Duration::from_millis(period_ms)).unwrap(),
            used,
            frees_at: frees_ms_ago.map(|ms| now() - chrono::Duration::milliseconds(ms)),
        };
        f.type_rate = Some(rate(50, 1_000, 49, Some(500)));
        assert_eq!(kinds(&blockers(&f)), ["claimable"], "one start left");
        f.type_rate = Some(rate(50, 1_000, 50, Some(880)));
        f.global_rate = Some(rate(1000, 60_000, 1000, Some(57_500)));
        let b = blockers(&f);
        assert_eq!(kinds(&b), ["rate_limit", "global_rate_limit"]);
        assert_eq!(
            b[0].message,
            "rate limit reached (50/1s), next start in 120 ms (type email.send)"
        );
        assert_eq!(
            b[1].message,
            "global rate limit reached (1000/1m), next start in 2.5 s"
        );
        // A window emptied since the count (clock read later) says "0 ms", never a negative.
        f.global_rate = None;
        f.type_rate = Some(rate(2, 60_000, 2, Some(61_000)));
        assert!(blockers(&f)[0].message.contains("next start in 0 ms"));
        f.type_rate = Some(rate(2, 3_600_000, 2, Some(60_000)));
        assert!(blockers(&f)[0].message.contains("next start in 59m"));
    }

    #[test]
    fn a_due_task_is_behind_others_or_claimable() {
        let mut f = facts(TaskStatus::Queued);
        assert_eq!(kinds(&blockers(&f)), ["claimable"]);
        f.type_limit = Some(LimitUse {
            limit: 3,
            running: 2,
        });
        assert_eq!(kinds(&blockers(&f)), ["claimable"], "limit not reached");
        f.ahead = EXPLAIN_AHEAD_CAP + 1;
        let b = blockers(&f);
        assert_eq!(kinds(&b), ["behind_higher_priority"]);
        assert!(b[0].message.contains("more than 10000 tasks"));
        f.ahead = 1;
        assert!(blockers(&f)[0].message.contains("behind 1 task of"));
        // A keyed task waits behind its key's tasks, and under its key's limit.
        f.concurrency_key = Some("acme".into());
        assert!(
            blockers(&f)[0]
                .message
                .ends_with("(key \"acme\" of type email.send)"),
            "{:?}",
            blockers(&f)
        );
        f.ahead = 0;
        f.key_limit = Some(LimitUse {
            limit: 1,
            running: 1,
        });
        let b = blockers(&f);
        assert_eq!(kinds(&b), ["key_limit"]);
        assert_eq!(
            b[0].message,
            "per-key limit reached: 1/1 running with key \"acme\" (type email.send)"
        );
        f.concurrency_key = None;
        assert_eq!(
            kinds(&blockers(&f)),
            ["claimable"],
            "a keyless task has no key limit"
        );
        let mut later = facts(TaskStatus::Queued);
        later.available_at = now() + chrono::Duration::hours(2);
        assert_eq!(
            blockers(&later)[0].message,
            "not due until 2026-12-01T12:00:00Z (in 2h)"
        );
    }

    #[test]
    fn kinds_have_snake_case_names_in_order() {
        let names: Vec<_> = BlockerKind::ALL.iter().map(|k| k.as_str()).collect();
        assert_eq!(
            names,
            [
                "finished",
                "cancel_requested",
                "retry_wait",
                "not_due",
                "deadline_passed",
                "paused",
                "breaker",
                "type_limit",
                "key_limit",
                "global_limit",
                "rate_limit",
                "global_rate_limit",
                "no_agent",
                "behind_higher_priority",
                "claimable"
            ]
        );
        for k in BlockerKind::ALL {
            assert_eq!(
                serde_json::to_value(k).unwrap(),
                serde_json::json!(k.as_str())
            );
        }
    }
}
