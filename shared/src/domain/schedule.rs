//! Cron schedules (DESIGN §3 `schedules`): a validated definition — name, cron expression with
//! seconds, IANA time zone, the task each tick enqueues, and what to do with ticks missed while
//! no leader ran — and the pure tick arithmetic a leader uses to fire it. No I/O here: the
//! store keeps `last_fired` and `next_fire`, the leader calls [`Schedule::due_ticks`] and
//! enqueues one task per tick under [`tick_idempotency_key`].
//!
//! ```text
//!     last_fired   next_fire                                   now
//!         │            │                                        │
//!   ──────●────────────○─────○─────○─────○─────○─────○─────○────┼────○──▶ UTC
//!                      └───────────── due (missed) ─────────────┘    └ returned next, > now
//!   Skip:            fire only the latest ○ at or before now
//!   CatchUp{max: 3}: fire the latest three ○, oldest first; older ones are dropped
//! ```
//!
//! Invariants:
//! - A tick is a whole-second UTC instant. The cron is matched against the wall clock of the
//!   schedule's zone; the ticks are exactly what the *forward* search ([`Schedule::next_after`])
//!   yields, so [`Schedule::next_after`] and [`Schedule::due_ticks`] always agree.
//! - [`Schedule::due_ticks`] is pure: the same row and `now` give the same ticks on every
//!   agent, and every tick has one key, so two leaders racing (a stale one, say) enqueue one
//!   task per tick. Its work is bounded by the policy's limit, never by the outage's length.
//!
//! croner 2 (the newest croner that adds no second version of any crate to the lock) only
//! parses the expression and matches it against wall-clock times here: its own zone-aware
//! search works on the naive wall clock and resolves a repeated hour to its first pass, so from
//! inside the second pass it returns an instant *before* the start, and it skips the second pass
//! of interval crons. This module therefore maps wall-clock matches to instants itself, with
//! the OCPS / Vixie-cron daylight saving rules that croner 4 documents:
//!
//! A *fixed-time* cron (one value each in the second, minute and hour fields, e.g.
//! `0 30 2 * * *`) whose time falls in a spring-forward gap fires once, at the first instant
//! after the gap (03:00) — the tick is moved, not lost (unless the gap ends on the next local
//! day, where the pattern's date no longer holds); in a fall-back repeated hour it fires once,
//! on the first pass. So it fires at most once per local day. A cron with a wildcard, list,
//! range or step in any of those fields (e.g. `0 */15 * * * *`, `0 30 * * * *`) skips the
//! wall-clock times a gap removes and fires on both passes of a repeated hour. Either way no
//! instant is ever produced twice, and successive ticks strictly increase.
//!
//! When things fail: bad input is refused with a [`ValidationError`] naming the field, and
//! nothing is built. A cron that can never fire is refused too. Past croner's search range
//! (year 5000) there is no next tick: [`Schedule::next_after`] returns `None` and
//! [`Schedule::due_ticks`] returns [`NEVER`] as the next fire time.

use std::collections::VecDeque;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::str::FromStr;
use std::time::Duration;

use chrono::{
    DateTime, Datelike, LocalResult, NaiveDate, NaiveDateTime, Offset, SecondsFormat, SubsecRound,
    TimeDelta, TimeZone, Timelike, Utc,
};
use chrono_tz::{GapInfo, Tz};
use croner::Cron;
use croner::errors::CronError;

use super::ids::{TaskType, truncate_for_error};
use super::policy::DEFAULT_MAX_ATTEMPTS;
use super::validate::{
    InputLimits, MAX_ATTEMPTS_LIMIT, ValidationError, check_range, payload_text,
};

/// Longest cron expression accepted, in bytes.
pub const MAX_CRON_LEN: usize = 200;
/// Most missed ticks a [`MissedTicks::CatchUp`] policy may fire in one go.
pub const MAX_CATCH_UP: u32 = 1000;
/// Default catch-up bound when a caller asks for `catch_up` without one.
pub const DEFAULT_CATCH_UP: u32 = 10;
/// Default priority of a tick's task (that of any enqueued task).
pub const DEFAULT_SCHEDULE_PRIORITY: i16 = 0;
/// The next fire time of a schedule that will never fire again (croner searches no further
/// than the year 5000). Storable: PostgreSQL's `timestamptz` reaches past it.
pub const NEVER: DateTime<Utc> = DateTime::<Utc>::MAX_UTC;

/// A schedule's name: the task-type alphabet, `[a-z0-9][a-z0-9_.:-]{0,63}`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ScheduleName(TaskType);

impl ScheduleName {
    /// Validates a name with the task-type rules; refused as field `name`.
    pub fn new(name: impl Into<String>) -> Result<Self, ValidationError> {
        let name = name.into();
        TaskType::new(name.as_str())
            .map(Self)
            .map_err(|_| ValidationError::Invalid {
                field: "name",
                detail: format!(
                    "{:?}: use 1-64 characters of a-z 0-9 _ . : - starting with a letter or digit",
                    truncate_for_error(&name)
                ),
            })
    }

    /// The name as text.
    pub fn as_str(&self) -> &str {
        self.0.as_str()
    }
}

impl fmt::Display for ScheduleName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for ScheduleName {
    type Err = ValidationError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        ScheduleName::new(s)
    }
}

/// A parsed cron expression with six fields: `second minute hour day-of-month month
/// day-of-week` (croner syntax: `*`, lists, ranges, `*/n` steps, `L`, `W`, `#`, month and day
/// names, `@daily`-style nicknames). Keeps the text as given, trimmed, for storage and display;
/// two expressions are equal when their texts are.
#[derive(Debug, Clone)]
pub struct CronExpr {
    text: String,
    cron: Cron,
    fixed_time: bool,
}

impl PartialEq for CronExpr {
    fn eq(&self, other: &Self) -> bool {
        self.text == other.text
    }
}

impl Eq for CronExpr {}

impl Hash for CronExpr {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.text.hash(state);
    }
}

impl CronExpr {
    /// Parses `text`. Refused (field `cron`) when longer than [`MAX_CRON_LEN`], not exactly six
    /// fields, not valid croner syntax, or when the pattern matches no date at all
    /// (`0 0 0 30 2 *`).
    pub fn parse(text: &str) -> Result<Self, ValidationError> {
        let text = text.trim();
        let refuse = |why: String| ValidationError::Invalid {
            field: "cron",
            detail: format!("{:?}: {why}", truncate_for_error(text)),
        };
        if text.len() > MAX_CRON_LEN {
            return Err(refuse(format!("longer than {MAX_CRON_LEN} bytes")));
        }
        // croner 2 takes five or six fields; requiring seconds leaves exactly six.
        let cron = Cron::new(text)
            .with_seconds_required()
            .parse()
            .map_err(|e| {
                refuse(format!(
                    "{e} (expected six fields: second minute hour day-of-month month day-of-week)"
                ))
            })?;
        let one_value = |matches: &dyn Fn(u32) -> Result<bool, CronError>, max: u32| {
            (0..=max).filter(|v| matches(*v).unwrap_or(false)).count() == 1
        };
        let pattern = &cron.pattern;
        let fixed_time = one_value(&|v| pattern.second_match(v), 59)
            && one_value(&|v| pattern.minute_match(v), 59)
            && one_value(&|v| pattern.hour_match(v), 23);
        let expr = Self {
            text: text.to_string(),
            cron,
            fixed_time,
        };
        // The pattern looks at the wall clock only, so a wall-clock search from a fixed date
        // tells whether it can ever match, whatever the zone.
        let origin = NaiveDate::from_ymd_opt(2000, 1, 1)
            .and_then(|d| d.and_hms_opt(0, 0, 0))
            .ok_or_else(|| refuse("internal: no search origin".into()))?;
        expr.wall_next(origin)
            .ok_or_else(|| refuse("matches no date, so it would never fire".into()))?;
        Ok(expr)
    }

    /// The expression as given (trimmed).
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// A field-by-field description in English, e.g. for the console: `0 30 2 * * MON-FRI`
    /// gives `second 0, minute 30, hour 2, day of month *, month *, day of week 1-5` (nicknames
    /// expanded, names as numbers; croner 2 has no describer of its own).
    pub fn describe(&self) -> String {
        let expanded = self.cron.pattern.to_string();
        let fields: Vec<&str> = expanded.split_whitespace().collect();
        match fields.as_slice() {
            [s, m, h, dom, mon, dow] => format!(
                "second {s}, minute {m}, hour {h}, day of month {dom}, month {mon}, day of week {dow}"
            ),
            _ => self.text.clone(),
        }
    }

    /// Whether the expression is fixed-time (one value each in the second, minute and hour
    /// fields), which decides its DST behaviour (see the module docs).
    pub fn is_fixed_time(&self) -> bool {
        self.fixed_time
    }

    /// The first wall-clock time at or after `from` (a whole second) that the pattern matches,
    /// or `None` before croner's limit (the year 5000). A UTC carrier has no DST, so croner's
    /// wall-clock walk is exact here.
    fn wall_next(&self, from: NaiveDateTime) -> Option<NaiveDateTime> {
        self.cron
            .find_next_occurrence(&from.and_utc(), true)
            .ok()
            .map(|t| t.naive_utc())
    }

    /// The last wall-clock time at or before `upto` (a whole second) that the pattern matches,
    /// searching no further back than the start of `floor`.
    fn wall_prev(&self, upto: NaiveDateTime, floor: NaiveDate) -> Option<NaiveDateTime> {
        let pattern = &self.cron.pattern;
        let yes = |r: Result<bool, CronError>| r.unwrap_or(false);
        let mut day = upto.date();
        let mut top = (upto.hour(), upto.minute(), upto.second());
        while day >= floor {
            if yes(pattern.month_match(day.month()))
                && yes(pattern.day_match(day.year(), day.month(), day.day()))
            {
                let (top_h, top_m, top_s) = top;
                for h in (0..=top_h).rev().filter(|h| yes(pattern.hour_match(*h))) {
                    let m_top = if h == top_h { top_m } else { 59 };
                    for m in (0..=m_top).rev().filter(|m| yes(pattern.minute_match(*m))) {
                        let s_top = if (h, m) == (top_h, top_m) { top_s } else { 59 };
                        if let Some(s) = (0..=s_top).rev().find(|s| yes(pattern.second_match(*s))) {
                            return day.and_hms_opt(h, m, s);
                        }
                    }
                }
            }
            day = day.pred_opt()?;
            top = (23, 59, 59);
        }
        None
    }
}

impl fmt::Display for CronExpr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl FromStr for CronExpr {
    type Err = ValidationError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        CronExpr::parse(s)
    }
}

/// Parses an IANA time zone name (`Europe/Berlin`, `UTC`; case-sensitive). Refused as field
/// `time_zone` when unknown.
pub fn parse_time_zone(name: &str) -> Result<Tz, ValidationError> {
    Tz::from_str(name.trim()).map_err(|_| ValidationError::Invalid {
        field: "time_zone",
        detail: format!(
            "unknown time zone {:?}: use an IANA name such as UTC or Europe/Berlin (case-sensitive)",
            truncate_for_error(name)
        ),
    })
}

/// What a leader does with ticks that passed while no leader fired them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum MissedTicks {
    /// Fire only the latest due tick; older ones are dropped.
    #[default]
    Skip,
    /// Fire the latest `max` due ticks, oldest first; older ones are dropped. Build with
    /// [`MissedTicks::catch_up`], which bounds `max` to `1..=`[`MAX_CATCH_UP`].
    CatchUp { max: u32 },
}

impl MissedTicks {
    /// A catch-up policy, refused (field `catch_up_max`) unless `max` is in
    /// `1..=`[`MAX_CATCH_UP`].
    pub fn catch_up(max: u32) -> Result<Self, ValidationError> {
        check_range("catch_up_max", max, 1..=MAX_CATCH_UP).map(|max| Self::CatchUp { max })
    }

    /// Most ticks fired in one go: 1 for `Skip`, `max` (clamped to `1..=MAX_CATCH_UP`, in case
    /// the variant was built directly) for `CatchUp`.
    pub fn limit(self) -> u32 {
        match self {
            MissedTicks::Skip => 1,
            MissedTicks::CatchUp { max } => max.clamp(1, MAX_CATCH_UP),
        }
    }

    /// The stored and CLI name: `skip` or `catch_up`.
    pub fn as_str(self) -> &'static str {
        match self {
            MissedTicks::Skip => "skip",
            MissedTicks::CatchUp { .. } => "catch_up",
        }
    }
}

/// A validated schedule definition. Build with [`Schedule::builder`]; every field is checked
/// once there, so a `Schedule` is always storable and its ticks computable.
#[derive(Debug, Clone, PartialEq)]
pub struct Schedule {
    name: ScheduleName,
    cron: CronExpr,
    time_zone: Tz,
    task_type: TaskType,
    payload: serde_json::Value,
    priority: i16,
    max_attempts: i32,
    enabled: bool,
    missed: MissedTicks,
}

/// Collects a schedule's raw input; [`ScheduleBuilder::build`] validates it. Defaults: zone
/// UTC, payload `{}`, priority [`DEFAULT_SCHEDULE_PRIORITY`], max attempts
/// [`DEFAULT_MAX_ATTEMPTS`], enabled, [`MissedTicks::Skip`].
#[derive(Debug, Clone)]
#[must_use]
pub struct ScheduleBuilder {
    name: String,
    cron: String,
    task_type: String,
    time_zone: Option<String>,
    payload: serde_json::Value,
    priority: i16,
    max_attempts: i32,
    enabled: bool,
    missed: MissedTicks,
}

impl ScheduleBuilder {
    /// The IANA zone the cron is evaluated in (default UTC).
    pub fn time_zone(mut self, zone: impl Into<String>) -> Self {
        self.time_zone = Some(zone.into());
        self
    }

    /// The payload of every tick's task (default `{}`).
    pub fn payload(mut self, payload: serde_json::Value) -> Self {
        self.payload = payload;
        self
    }

    /// The priority of every tick's task (higher runs first).
    pub fn priority(mut self, priority: i16) -> Self {
        self.priority = priority;
        self
    }

    /// Attempts each tick's task gets (`1..=1000`, as for any task).
    pub fn max_attempts(mut self, attempts: i32) -> Self {
        self.max_attempts = attempts;
        self
    }

    /// Whether the schedule fires (default true).
    pub fn enabled(mut self, enabled: bool) -> Self {
        self.enabled = enabled;
        self
    }

    /// The missed-tick policy (default [`MissedTicks::Skip`]).
    pub fn missed(mut self, missed: MissedTicks) -> Self {
        self.missed = missed;
        self
    }

    /// Validates every field, the payload against `limits`, and returns the schedule or the
    /// first refusal: `name`, `cron`, `time_zone`, the task type, the payload's size,
    /// `max_attempts`, `catch_up_max`, in that order.
    pub fn build(self, limits: &InputLimits) -> Result<Schedule, ValidationError> {
        let name = ScheduleName::new(self.name)?;
        let cron = CronExpr::parse(&self.cron)?;
        let time_zone = match self.time_zone.as_deref() {
            Some(zone) => parse_time_zone(zone)?,
            None => Tz::UTC,
        };
        let task_type = TaskType::new(self.task_type)?;
        payload_text(&self.payload, limits)?;
        let max_attempts = check_range("max_attempts", self.max_attempts, 1..=MAX_ATTEMPTS_LIMIT)?;
        let missed = match self.missed {
            MissedTicks::Skip => MissedTicks::Skip,
            MissedTicks::CatchUp { max } => MissedTicks::catch_up(max)?,
        };
        Ok(Schedule {
            name,
            cron,
            time_zone,
            task_type,
            payload: self.payload,
            priority: self.priority,
            max_attempts,
            enabled: self.enabled,
            missed,
        })
    }
}

impl Schedule {
    /// Starts a schedule named `name` that enqueues a `task_type` task on every tick of `cron`.
    /// Nothing is checked until [`ScheduleBuilder::build`].
    pub fn builder(
        name: impl Into<String>,
        cron: impl Into<String>,
        task_type: impl Into<String>,
    ) -> ScheduleBuilder {
        ScheduleBuilder {
            name: name.into(),
            cron: cron.into(),
            task_type: task_type.into(),
            time_zone: None,
            payload: serde_json::Value::Object(serde_json::Map::new()),
            priority: DEFAULT_SCHEDULE_PRIORITY,
            max_attempts: DEFAULT_MAX_ATTEMPTS,
            enabled: true,
            missed: MissedTicks::Skip,
        }
    }

    /// The schedule's name.
    pub fn name(&self) -> &ScheduleName {
        &self.name
    }

    /// The cron expression.
    pub fn cron(&self) -> &CronExpr {
        &self.cron
    }

    /// The zone the cron is evaluated in.
    pub fn time_zone(&self) -> Tz {
        self.time_zone
    }

    /// The type of every tick's task.
    pub fn task_type(&self) -> &TaskType {
        &self.task_type
    }

    /// The payload of every tick's task (its size was checked at build).
    pub fn payload(&self) -> &serde_json::Value {
        &self.payload
    }

    /// The priority of every tick's task.
    pub fn priority(&self) -> i16 {
        self.priority
    }

    /// Attempts every tick's task gets, in `1..=1000`.
    pub fn max_attempts(&self) -> i32 {
        self.max_attempts
    }

    /// Whether the schedule fires.
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// Sets whether the schedule fires.
    pub fn set_enabled(&mut self, enabled: bool) {
        self.enabled = enabled;
    }

    /// The missed-tick policy.
    pub fn missed(&self) -> MissedTicks {
        self.missed
    }

    /// The idempotency key of this schedule's task for `tick` (see [`tick_idempotency_key`]).
    pub fn idempotency_key(&self, tick: DateTime<Utc>) -> String {
        tick_idempotency_key(&self.name, tick)
    }

    /// The first tick strictly after `t`, or `None` when there is none before croner's search
    /// limit (the year 5000). Ticks are whole seconds, so a `t` with a fraction is passed by
    /// the next whole-second tick.
    ///
    /// It walks the wall clock forward from `t`'s and resolves each match in the zone (see
    /// [`Schedule::resolve`]). Outside a repeated hour wall-clock order is instant order. When
    /// `t` is on the first pass of a repeated hour, the second pass still lies ahead with
    /// earlier wall-clock times, so an interval cron also walks it from its first instant and
    /// keeps the nearer tick (as croner 4 does).
    pub fn next_after(&self, t: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let wall = t.with_timezone(&self.time_zone).naive_local();
        let from = wall
            .trunc_subsecs(0)
            .checked_add_signed(TimeDelta::seconds(1))?;
        let first = self.walk(from, t, false);
        if self.cron.fixed_time {
            // A fixed-time cron never fires on a second pass.
            return first;
        }
        let LocalResult::Ambiguous(a, b) = self.time_zone.from_local_datetime(&wall) else {
            return first;
        };
        let (earlier, later) = (a.min(b), a.max(b));
        if earlier != t {
            // On the second pass already: the first pass is behind.
            return first;
        }
        let edge = self.second_pass_start(t, later.with_timezone(&Utc));
        if first.is_some_and(|f| f < edge) {
            return first;
        }
        let second = self.walk(
            edge.with_timezone(&self.time_zone).naive_local(),
            edge,
            true,
        );
        match (first, second) {
            (Some(f), Some(s)) => Some(f.min(s)),
            (f, s) => f.or(s),
        }
    }

    /// Walks the wall clock from `from` (a whole second, inclusive) to the first match whose
    /// instant is after `bound` (or at it, when `inclusive`).
    fn walk(
        &self,
        from: NaiveDateTime,
        bound: DateTime<Utc>,
        inclusive: bool,
    ) -> Option<DateTime<Utc>> {
        let ahead = |x: &DateTime<Utc>| if inclusive { *x >= bound } else { *x > bound };
        let mut wall = from;
        loop {
            let matched = self.cron.wall_next(wall)?;
            let (first, second) = self.resolve(matched);
            if let Some(tick) = first.filter(ahead).or(second.filter(ahead)) {
                return Some(tick);
            }
            wall = matched.checked_add_signed(TimeDelta::seconds(1))?;
        }
    }

    /// The ticks of one matching wall-clock time, earlier first: one instant for an ordinary
    /// time; both passes of a repeated time for an interval cron, the first only for a
    /// fixed-time one; for a time a gap removes, the first instant after the gap for a
    /// fixed-time cron (if it is still the same local date), nothing for an interval cron.
    fn resolve(&self, wall: NaiveDateTime) -> (Option<DateTime<Utc>>, Option<DateTime<Utc>>) {
        let utc = |t: DateTime<Tz>| t.with_timezone(&Utc);
        match self.time_zone.from_local_datetime(&wall) {
            LocalResult::Single(t) => (Some(utc(t)), None),
            LocalResult::Ambiguous(a, b) => {
                let (earlier, later) = (utc(a.min(b)), utc(a.max(b)));
                (Some(earlier), (!self.cron.fixed_time).then_some(later))
            }
            LocalResult::None if self.cron.fixed_time => {
                let end = GapInfo::new(&wall, &self.time_zone)
                    .and_then(|gap| gap.end)
                    .filter(|end| end.date_naive() == wall.date());
                (end.map(utc), None)
            }
            LocalResult::None => (None, None),
        }
    }

    /// The first instant of the second pass of the repeated hour that `first_pass` (on the
    /// first pass) and `second_pass` (the same wall-clock time on the second) lie in: the
    /// first whole second, after `first_pass`, with `second_pass`'s offset. Zone offsets change
    /// on whole seconds, so a binary search over seconds finds it.
    fn second_pass_start(
        &self,
        first_pass: DateTime<Utc>,
        second_pass: DateTime<Utc>,
    ) -> DateTime<Utc> {
        let offset_at = |secs: i64| {
            DateTime::from_timestamp(secs, 0).map(|t| {
                self.time_zone
                    .offset_from_utc_datetime(&t.naive_utc())
                    .fix()
            })
        };
        let later = offset_at(second_pass.timestamp());
        let (mut lo, mut hi) = (first_pass.timestamp(), second_pass.timestamp());
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            if offset_at(mid) == later {
                hi = mid;
            } else {
                lo = mid;
            }
        }
        DateTime::from_timestamp(hi, 0).unwrap_or(second_pass)
    }

    /// The ticks due at `now` and the next fire time after them.
    ///
    /// A tick is due when it is at or after `next_fire`, strictly after `last_fired` (when
    /// set), and at or before `now` (a tick exactly at `now` is due). Of the due ticks the
    /// latest [`MissedTicks::limit`] are returned, oldest first, strictly increasing; older ones
    /// are dropped, not deferred. The returned next fire time is the first tick after `now`
    /// that is also after `last_fired` and not before `next_fire` — always later than `now`
    /// and than every returned tick — or [`NEVER`].
    ///
    /// `next_fire` is a lower bound, not itself a tick: ticks always come from the cron, so
    /// every leader derives the same instants (and keys) from the same row. After the cron or
    /// zone changes, the caller resets `next_fire` with [`Schedule::next_after`].
    ///
    /// The work is bounded by the policy limit, not the length of the outage: it searches
    /// back from `now` for `limit + 1` ticks, then walks forward from the earliest of them and
    /// keeps what the forward walk yields, so the result is made of [`Schedule::next_after`]
    /// ticks. The backward search only needs to start the walk early enough: it counts the
    /// first instant of each matching wall-clock time, which is always a real tick and never
    /// later than the ones after it, and leaves out the second passes of repeated hours and
    /// the interval-cron times a gap removes — counting too few only starts the walk earlier
    /// (one spare tick of margin; the tests check both agree). Whatever `enabled` says, this
    /// computes; not firing a disabled schedule is the caller's choice.
    pub fn due_ticks(
        &self,
        last_fired: Option<DateTime<Utc>>,
        next_fire: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> (Vec<DateTime<Utc>>, DateTime<Utc>) {
        // Ticks must be strictly after `after`.
        let before_next = next_fire
            .checked_sub_signed(TimeDelta::nanoseconds(1))
            .unwrap_or(next_fire);
        let after = last_fired.map_or(before_next, |l| l.max(before_next));
        let limit = self.missed.limit() as usize;

        // Back from `now`: the latest `limit + 1` ticks after `after`, or as many as there are.
        // Wall-clock times before `after`'s local date, less a margin wider than any offset
        // change, map to instants before `after`.
        let floor = after
            .with_timezone(&self.time_zone)
            .date_naive()
            .checked_sub_days(chrono::Days::new(2))
            .unwrap_or(NaiveDate::MIN);
        let mut start = after;
        let mut found = 0;
        let mut upto = Some(
            now.with_timezone(&self.time_zone)
                .naive_local()
                .trunc_subsecs(0),
        );
        while let Some(wall) = upto.and_then(|u| self.cron.wall_prev(u, floor)) {
            upto = wall.checked_sub_signed(TimeDelta::seconds(1));
            let Some(tick) = self.resolve(wall).0.filter(|t| *t <= now) else {
                continue;
            };
            if tick <= after {
                break;
            }
            found += 1;
            if found > limit {
                // Walk forward from just before it, so a tick the backward search saw
                // differently from the forward one is still counted once.
                start = tick
                    .checked_sub_signed(TimeDelta::nanoseconds(1))
                    .map_or(after, |t| t.max(after));
                break;
            }
        }

        // Forward to `now`, keeping the latest `limit`.
        let mut due = VecDeque::with_capacity(limit + 1);
        let mut next = self.next_after(start);
        while let Some(tick) = next {
            if tick > now {
                break;
            }
            due.push_back(tick);
            if due.len() > limit {
                due.pop_front();
            }
            next = self.next_after(tick);
        }
        (due.into(), next.unwrap_or(NEVER))
    }
}

impl Schedule {
    /// What a leader fires at `now`: every tick within `on_time` of `now` (late by less than
    /// that: a leader's ordinary lateness, never "missed"), plus the ticks before that window
    /// as the missed-tick policy says ([`Schedule::due_ticks`] at `now - on_time`); oldest
    /// first, strictly increasing, and the next fire time (the first tick after `now`, or
    /// [`NEVER`]).
    ///
    /// So `Skip` drops ticks only when a leader was away for more than one period plus
    /// `on_time`, and an every-second schedule on a healthy leader fires every tick even when
    /// one firing runs a little late. The work is bounded by the policy limit plus the ticks
    /// that fit in `on_time`.
    pub fn fire_plan(
        &self,
        last_fired: Option<DateTime<Utc>>,
        next_fire: DateTime<Utc>,
        now: DateTime<Utc>,
        on_time: Duration,
    ) -> (Vec<DateTime<Utc>>, DateTime<Utc>) {
        let window = TimeDelta::from_std(on_time).unwrap_or(TimeDelta::zero());
        let cutoff = now.checked_sub_signed(window).unwrap_or(now);
        let mut ticks = if next_fire <= cutoff {
            self.due_ticks(last_fired, next_fire, cutoff).0
        } else {
            Vec::new()
        };
        let before_next = next_fire
            .checked_sub_signed(TimeDelta::nanoseconds(1))
            .unwrap_or(next_fire);
        let mut after = last_fired.map_or(before_next, |l| l.max(before_next));
        after = after.max(cutoff);
        if let Some(last) = ticks.last() {
            after = after.max(*last);
        }
        let mut next = self.next_after(after);
        while let Some(tick) = next {
            if tick > now {
                break;
            }
            ticks.push(tick);
            next = self.next_after(tick);
        }
        (ticks, next.unwrap_or(NEVER))
    }
}

/// The idempotency key of the task a schedule enqueues for one tick:
/// `schedule:<name>:<tick in RFC 3339 UTC, milliseconds>`, e.g.
/// `schedule:nightly:2025-03-30T01:00:00.000Z`. Same name and tick, same key, on every agent;
/// at most 98 bytes, within the idempotency key limit.
pub fn tick_idempotency_key(name: &ScheduleName, tick: DateTime<Utc>) -> String {
    format!(
        "schedule:{}:{}",
        name.as_str(),
        tick.to_rfc3339_opts(SecondsFormat::Millis, true)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn utc(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s)
            .unwrap_or_else(|e| panic!("{s}: {e}"))
            .with_timezone(&Utc)
    }

    fn schedule(cron: &str, zone: &str, missed: MissedTicks) -> Schedule {
        Schedule::builder("nightly", cron, "report.build")
            .time_zone(zone)
            .missed(missed)
            .build(&InputLimits::default())
            .unwrap_or_else(|e| panic!("{cron} in {zone}: {e}"))
    }

    fn catch_up(max: u32) -> MissedTicks {
        MissedTicks::catch_up(max).unwrap()
    }

    /// The first `n` ticks after `from`, by the forward search alone.
    fn walk(s: &Schedule, from: DateTime<Utc>, n: usize) -> Vec<DateTime<Utc>> {
        std::iter::successors(s.next_after(from), |t| s.next_after(*t))
            .take(n)
            .collect()
    }

    /// Every tick in `(after, until]`, by the forward search alone.
    fn walk_until(
        s: &Schedule,
        after: DateTime<Utc>,
        until: DateTime<Utc>,
    ) -> (Vec<DateTime<Utc>>, DateTime<Utc>) {
        let mut ticks = Vec::new();
        let mut next = s.next_after(after);
        while let Some(t) = next.filter(|t| *t <= until) {
            ticks.push(t);
            next = s.next_after(t);
        }
        (ticks, next.unwrap_or(NEVER))
    }

    /// What `due_ticks` must return, computed the slow way: walk every tick forward.
    fn due_by_walking(
        s: &Schedule,
        last_fired: Option<DateTime<Utc>>,
        next_fire: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> (Vec<DateTime<Utc>>, DateTime<Utc>) {
        let after = last_fired
            .unwrap_or(DateTime::<Utc>::MIN_UTC)
            .max(next_fire - TimeDelta::nanoseconds(1));
        let (all, next) = walk_until(s, after, now);
        let keep = all.len().saturating_sub(s.missed().limit() as usize);
        (all[keep..].to_vec(), next)
    }

    fn local(s: &Schedule, t: DateTime<Utc>) -> String {
        t.with_timezone(&s.time_zone())
            .format("%Y-%m-%d %H:%M:%S %Z")
            .to_string()
    }

    fn field_of(err: &ValidationError) -> &'static str {
        match err {
            ValidationError::Invalid { field, .. } | ValidationError::OutOfRange { field, .. } => {
                field
            }
            ValidationError::TaskType { .. } => "task_type",
            ValidationError::PayloadTooLarge { .. } => "payload",
            other => panic!("unexpected error {other:?}"),
        }
    }

    #[test]
    fn fire_plan_fires_late_ticks_within_the_window_and_applies_the_policy_before_it() {
        let every_second = |missed| {
            Schedule::builder("tick", "* * * * * *", "noop")
                .missed(missed)
                .build(&InputLimits::default())
                .unwrap()
        };
        let on_time = Duration::from_secs(1);
        let skip = every_second(MissedTicks::Skip);
        let t0 = utc("2026-06-01T12:00:00Z");
        // A healthy leader 1.5 s late: both ticks fire, none is "missed".
        let (ticks, next) = skip.fire_plan(
            Some(t0),
            t0 + TimeDelta::seconds(1),
            t0 + TimeDelta::milliseconds(2500),
            on_time,
        );
        assert_eq!(
            ticks,
            vec![t0 + TimeDelta::seconds(1), t0 + TimeDelta::seconds(2)]
        );
        assert_eq!(next, t0 + TimeDelta::seconds(3));
        // Away 10 s: skip fires the latest missed tick and the on-time one.
        let now = t0 + TimeDelta::milliseconds(10_200);
        let (ticks, next) = skip.fire_plan(Some(t0), t0 + TimeDelta::seconds(1), now, on_time);
        assert_eq!(
            ticks,
            vec![t0 + TimeDelta::seconds(9), t0 + TimeDelta::seconds(10)]
        );
        assert_eq!(next, t0 + TimeDelta::seconds(11));
        // catch_up(3): the latest three missed ones, then the on-time one.
        let catch_up = every_second(MissedTicks::catch_up(3).unwrap());
        let (ticks, _) = catch_up.fire_plan(Some(t0), t0 + TimeDelta::seconds(1), now, on_time);
        let want: Vec<_> = (7..=10).map(|s| t0 + TimeDelta::seconds(s)).collect();
        assert_eq!(ticks, want);
        // Nothing due yet.
        let (ticks, next) = skip.fire_plan(
            Some(t0),
            t0 + TimeDelta::seconds(1),
            t0 + TimeDelta::milliseconds(900),
            on_time,
        );
        assert!(ticks.is_empty());
        assert_eq!(next, t0 + TimeDelta::seconds(1));
        // Ticks never repeat: a plan made from its own result yields nothing more.
        let (again, _) = skip.fire_plan(
            Some(t0 + TimeDelta::seconds(10)),
            t0 + TimeDelta::seconds(11),
            now,
            on_time,
        );
        assert!(again.is_empty());
    }

    #[test]
    fn cron_accepts_six_field_expressions() {
        for ok in [
            "* * * * * *",
            "*/5 * * * * *",
            "0 */15 * * * *",
            "0 30 2 * * *",
            "  0 0 9 * * MON-FRI ",
            "0 0 0 L * *",
            "0 0 0 29 2 *",
            "@daily",
        ] {
            let cron = CronExpr::parse(ok).unwrap_or_else(|e| panic!("{ok:?}: {e}"));
            assert_eq!(cron.as_str(), ok.trim());
        }
        assert!(CronExpr::parse("0 30 2 * * *").unwrap().is_fixed_time());
        assert!(!CronExpr::parse("0 30 * * * *").unwrap().is_fixed_time());
    }

    #[test]
    fn cron_refuses_bad_expressions_naming_the_field() {
        let long = format!("0 0 0 1 1 {}", "1,".repeat(200));
        for (bad, says) in [
            ("", "empty"),
            ("* * * * *", "six fields"),
            ("0 0 0 1 1 * 2030", "six fields"),
            ("61 * * * * *", "six fields"),
            ("every day", "six fields"),
            ("0 0 0 30 2 *", "never fire"),
            ("0 0 0 31 4 *", "never fire"),
            (long.as_str(), "longer than"),
        ] {
            let err = CronExpr::parse(bad).expect_err(bad);
            assert_eq!(field_of(&err), "cron", "{bad:?}");
            let text = err.to_string();
            assert!(text.starts_with("cron is invalid: "), "{text}");
            assert!(text.to_lowercase().contains(says), "{bad:?}: {text}");
        }
    }

    #[test]
    fn time_zones_are_iana_names() {
        assert_eq!(parse_time_zone("UTC").unwrap(), Tz::UTC);
        assert_eq!(
            parse_time_zone("Europe/Berlin").unwrap(),
            Tz::Europe__Berlin
        );
        assert_eq!(
            parse_time_zone("America/New_York").unwrap(),
            Tz::America__New_York
        );
        for bad in ["", "europe/berlin", "Europe/Atlantis", "CEST", "+02:00"] {
            let err = parse_time_zone(bad).expect_err(bad);
            assert_eq!(field_of(&err), "time_zone");
            assert!(err.to_string().contains("IANA"), "{err}");
        }
    }

    #[test]
    fn builder_has_defaults_and_refuses_each_bad_field() {
        let s = Schedule::builder("nightly", "0 30 2 * * *", "report.build")
            .build(&InputLimits::default())
            .unwrap();
        assert_eq!(s.name().as_str(), "nightly");
        assert_eq!(s.cron().as_str(), "0 30 2 * * *");
        assert_eq!(s.time_zone(), Tz::UTC);
        assert_eq!(s.task_type().as_str(), "report.build");
        assert_eq!(s.payload(), &serde_json::json!({}));
        assert_eq!(s.priority(), 0);
        assert_eq!(s.max_attempts(), DEFAULT_MAX_ATTEMPTS);
        assert!(s.enabled());
        assert_eq!(s.missed(), MissedTicks::Skip);

        let s = Schedule::builder("a:b-c_d.e", "@hourly", "x")
            .time_zone("Europe/Berlin")
            .payload(serde_json::json!({"k": 1}))
            .priority(-3)
            .max_attempts(1000)
            .enabled(false)
            .missed(catch_up(1000))
            .build(&InputLimits::default())
            .unwrap();
        assert_eq!(
            (s.priority(), s.max_attempts(), s.enabled()),
            (-3, 1000, false)
        );
        assert_eq!(s.missed().limit(), 1000);

        let ok = || Schedule::builder("nightly", "0 30 2 * * *", "report.build");
        let tiny = InputLimits::with_max_payload_bytes(16).unwrap();
        let big = serde_json::json!({"text": "x".repeat(32)});
        let cases = [
            (Schedule::builder("Nightly", "* * * * * *", "t"), "name"),
            (Schedule::builder("", "* * * * * *", "t"), "name"),
            (
                Schedule::builder("n".repeat(65), "* * * * * *", "t"),
                "name",
            ),
            (ok().time_zone("Mars/Olympus"), "time_zone"),
            (
                Schedule::builder("n", "* * * * * *", "Bad Type"),
                "task_type",
            ),
            (Schedule::builder("n", "0 0 * * *", "t"), "cron"),
            (ok().payload(big), "payload"),
            (ok().max_attempts(0), "max_attempts"),
            (ok().max_attempts(1001), "max_attempts"),
            (ok().missed(MissedTicks::CatchUp { max: 0 }), "catch_up_max"),
            (
                ok().missed(MissedTicks::CatchUp { max: 1001 }),
                "catch_up_max",
            ),
        ];
        for (builder, field) in cases {
            let err = builder.clone().build(&tiny).expect_err(field);
            assert_eq!(field_of(&err), field, "{builder:?}: {err}");
        }
        assert!(MissedTicks::catch_up(0).is_err());
        assert!(MissedTicks::catch_up(MAX_CATCH_UP + 1).is_err());
        assert_eq!(MissedTicks::CatchUp { max: 0 }.limit(), 1);
        assert_eq!(MissedTicks::Skip.as_str(), "skip");
        assert_eq!(catch_up(DEFAULT_CATCH_UP).as_str(), "catch_up");
    }

    #[test]
    fn idempotency_key_is_the_name_and_the_tick_in_utc_milliseconds() {
        let s = schedule("0 30 2 * * *", "Europe/Berlin", MissedTicks::Skip);
        let tick = utc("2025-03-30T03:00:00+02:00");
        assert_eq!(
            s.idempotency_key(tick),
            "schedule:nightly:2025-03-30T01:00:00.000Z"
        );
        // Same instant however it is written: same key.
        assert_eq!(
            s.idempotency_key(utc("2025-03-30T01:00:00Z")),
            s.idempotency_key(tick)
        );
        let longest = ScheduleName::new("n".repeat(64)).unwrap();
        let key = tick_idempotency_key(&longest, utc("4999-12-31T23:59:59Z"));
        assert_eq!(key.len(), 98, "{key}");
        assert!(crate::domain::validate::check_idempotency_key(&key).is_ok());
    }

    #[test]
    fn every_second_schedule_ticks_on_each_whole_second() {
        let s = schedule("* * * * * *", "UTC", MissedTicks::Skip);
        let t = utc("2025-06-01T12:00:00Z");
        assert_eq!(s.next_after(t), Some(utc("2025-06-01T12:00:01Z")));
        assert_eq!(
            s.next_after(utc("2025-06-01T12:00:00.999Z")),
            Some(utc("2025-06-01T12:00:01Z"))
        );
        let ticks = walk(&s, t, 120);
        for (i, tick) in ticks.iter().enumerate() {
            assert_eq!(*tick, t + TimeDelta::seconds(i as i64 + 1));
        }
    }

    #[test]
    fn every_minute_schedule_ticks_on_minute_boundaries() {
        let s = schedule("0 * * * * *", "Asia/Kolkata", MissedTicks::Skip);
        let t = utc("2025-06-01T12:00:30.250Z");
        assert_eq!(
            walk(&s, t, 3),
            [
                utc("2025-06-01T12:01:00Z"),
                utc("2025-06-01T12:02:00Z"),
                utc("2025-06-01T12:03:00Z")
            ]
        );
        assert_eq!(
            s.next_after(utc("2025-06-01T12:01:00Z")),
            Some(utc("2025-06-01T12:02:00Z"))
        );
    }

    #[test]
    fn a_tick_exactly_at_now_is_due() {
        let s = schedule("0 * * * * *", "UTC", MissedTicks::Skip);
        let now = utc("2025-06-01T12:01:00Z");
        assert_eq!(
            s.due_ticks(None, now, now),
            (vec![now], utc("2025-06-01T12:02:00Z"))
        );
        let (due, next) = s.due_ticks(None, now, now - TimeDelta::milliseconds(1));
        assert_eq!((due.len(), next), (0, now));
        // A millisecond late it is still due, and the next is the minute after.
        let (due, next) = s.due_ticks(None, now, now + TimeDelta::milliseconds(1));
        assert_eq!((due, next), (vec![now], utc("2025-06-01T12:02:00Z")));
    }

    #[test]
    fn nothing_is_due_before_next_fire_and_nothing_twice() {
        let s = schedule("0 * * * * *", "UTC", catch_up(10));
        let now = utc("2025-06-01T12:00:30Z");
        let next_fire = utc("2025-06-01T12:01:00Z");
        assert_eq!(s.due_ticks(None, next_fire, now), (vec![], next_fire));
        // A stale next_fire does not bring back a tick already fired.
        let last = utc("2025-06-01T12:00:00Z");
        assert_eq!(
            s.due_ticks(Some(last), utc("2025-06-01T11:55:00Z"), now),
            (vec![], next_fire)
        );
        assert_eq!(
            s.due_ticks(Some(last), utc("2025-06-01T11:58:00Z"), last),
            (vec![], next_fire)
        );
        // A next_fire between ticks is a bound, not a tick.
        assert_eq!(
            s.due_ticks(None, utc("2025-06-01T11:59:30Z"), now),
            (vec![last], next_fire)
        );
    }

    #[test]
    fn skip_and_catch_up_after_a_day_long_outage_of_an_every_second_schedule() {
        let last = utc("2025-06-01T00:00:00Z");
        let next_fire = last + TimeDelta::seconds(1);
        let now = utc("2025-06-02T00:00:00.400Z");
        let whole_now = utc("2025-06-02T00:00:00Z");
        let after = whole_now + TimeDelta::seconds(1);

        let skip = schedule("* * * * * *", "Europe/Berlin", MissedTicks::Skip);
        assert_eq!(
            skip.due_ticks(Some(last), next_fire, now),
            (vec![whole_now], after)
        );

        let ten = schedule("* * * * * *", "Europe/Berlin", catch_up(10));
        let (due, next) = ten.due_ticks(Some(last), next_fire, now);
        let expected: Vec<_> = (0..10)
            .rev()
            .map(|i| whole_now - TimeDelta::seconds(i))
            .collect();
        assert_eq!(due, expected, "the latest ten, oldest first, not 86,400");
        assert_eq!(next, after);
        assert_eq!(
            (due, next),
            due_by_walking(&ten, Some(last), next_fire, now)
        );

        // Ten years down: the work depends on the policy, not on the outage.
        let decade = utc("2035-06-01T00:00:00Z");
        let (due, next) = ten.due_ticks(Some(last), next_fire, decade);
        assert_eq!(due.len(), 10);
        assert_eq!(due.last(), Some(&decade));
        assert_eq!(next, decade + TimeDelta::seconds(1));
    }

    #[test]
    fn catch_up_fires_every_missed_tick_when_fewer_than_max() {
        let s = schedule("0 * * * * *", "UTC", catch_up(10));
        let last = utc("2025-06-01T12:00:00Z");
        let now = utc("2025-06-01T12:03:10Z");
        let (due, next) = s.due_ticks(Some(last), utc("2025-06-01T12:01:00Z"), now);
        assert_eq!(
            due,
            [
                utc("2025-06-01T12:01:00Z"),
                utc("2025-06-01T12:02:00Z"),
                utc("2025-06-01T12:03:00Z")
            ]
        );
        assert_eq!(next, utc("2025-06-01T12:04:00Z"));
        let skip = schedule("0 * * * * *", "UTC", MissedTicks::Skip);
        assert_eq!(
            skip.due_ticks(Some(last), utc("2025-06-01T12:01:00Z"), now),
            (vec![utc("2025-06-01T12:03:00Z")], next)
        );
    }

    // Europe/Berlin, 2025: clocks jump 02:00 CET → 03:00 CEST on 30 March (01:00 UTC) and
    // fall back 03:00 CEST → 02:00 CET on 26 October (01:00 UTC).

    #[test]
    fn berlin_spring_forward_moves_a_daily_0230_to_the_end_of_the_gap_once() {
        let s = schedule("0 30 2 * * *", "Europe/Berlin", catch_up(10));
        let ticks = walk(&s, utc("2025-03-28T12:00:00Z"), 3);
        // croner: a fixed-time job whose time does not exist runs at the first instant after
        // the gap, the same day; it is not skipped, and not run again at 03:30.
        assert_eq!(
            ticks,
            [
                utc("2025-03-29T01:30:00Z"), // 02:30 CET
                utc("2025-03-30T01:00:00Z"), // 03:00 CEST, the end of the gap
                utc("2025-03-31T00:30:00Z"), // 02:30 CEST
            ]
        );
        assert_eq!(local(&s, ticks[1]), "2025-03-30 03:00:00 CEST");
        // A leader down across the gap catches up the same ticks, each once.
        let (due, next) = s.due_ticks(None, ticks[0], utc("2025-03-31T06:00:00Z"));
        assert_eq!((due, next), (ticks.to_vec(), utc("2025-04-01T00:30:00Z")));
    }

    #[test]
    fn berlin_fall_back_fires_a_daily_0230_once_on_the_first_pass() {
        let s = schedule("0 30 2 * * *", "Europe/Berlin", catch_up(10));
        let ticks = walk(&s, utc("2025-10-24T12:00:00Z"), 3);
        // croner: a fixed-time job in a repeated hour runs once, at the first occurrence.
        assert_eq!(
            ticks,
            [
                utc("2025-10-25T00:30:00Z"), // 02:30 CEST
                utc("2025-10-26T00:30:00Z"), // 02:30 CEST, first pass; not 01:30Z (CET)
                utc("2025-10-27T01:30:00Z"), // 02:30 CET
            ]
        );
        assert_eq!(local(&s, ticks[1]), "2025-10-26 02:30:00 CEST");
        // From inside the repeated hour, on either pass, the next tick is tomorrow's.
        for inside in [
            "2025-10-26T00:45:00Z",
            "2025-10-26T01:29:59Z",
            "2025-10-26T01:30:00Z",
        ] {
            assert_eq!(s.next_after(utc(inside)), Some(ticks[2]), "{inside}");
        }
        let (due, _) = s.due_ticks(None, ticks[0], utc("2025-10-27T06:00:00Z"));
        assert_eq!(due, ticks);
        // A leader waking on the second pass of 02:30 fires nothing new.
        let (due, next) = s.due_ticks(Some(ticks[1]), ticks[2], utc("2025-10-26T01:30:00Z"));
        assert_eq!((due.len(), next), (0, ticks[2]));
    }

    #[test]
    fn berlin_fall_back_fires_an_hourly_half_past_on_both_passes() {
        let s = schedule("0 30 * * * *", "Europe/Berlin", catch_up(10));
        let ticks = walk(&s, utc("2025-10-25T23:00:00Z"), 4);
        // croner: a job with a wildcard hour runs on both passes of the repeated hour.
        assert_eq!(
            ticks,
            [
                utc("2025-10-25T23:30:00Z"), // 01:30 CEST
                utc("2025-10-26T00:30:00Z"), // 02:30 CEST
                utc("2025-10-26T01:30:00Z"), // 02:30 CET
                utc("2025-10-26T02:30:00Z"), // 03:30 CET
            ]
        );
        assert_eq!(local(&s, ticks[1]), "2025-10-26 02:30:00 CEST");
        assert_eq!(local(&s, ticks[2]), "2025-10-26 02:30:00 CET");
        let (due, _) = s.due_ticks(None, ticks[0], ticks[3]);
        assert_eq!(due, ticks, "twice at 02:30 local, never three times");
    }

    #[test]
    fn from_the_first_pass_an_interval_cron_still_finds_the_earlier_minute_of_the_second() {
        // 00:20Z is 02:20 CEST; the next :10 is 02:10 CET (01:10Z), a wall-clock time before
        // the start's, which a plain wall-clock walk (croner 2's own search) would skip.
        let s = schedule("0 10 * * * *", "Europe/Berlin", MissedTicks::Skip);
        let ticks = walk(&s, utc("2025-10-26T00:20:00Z"), 2);
        assert_eq!(
            ticks,
            [utc("2025-10-26T01:10:00Z"), utc("2025-10-26T02:10:00Z")]
        );
        assert_eq!(local(&s, ticks[0]), "2025-10-26 02:10:00 CET");
        // From the second pass nothing earlier comes back.
        assert_eq!(
            s.next_after(utc("2025-10-26T01:40:00Z")),
            Some(utc("2025-10-26T02:10:00Z"))
        );
    }

    #[test]
    fn describe_lists_the_expanded_fields() {
        assert_eq!(
            CronExpr::parse("0 30 2 * * MON-FRI").unwrap().describe(),
            "second 0, minute 30, hour 2, day of month *, month *, day of week 1-5"
        );
        assert_eq!(
            CronExpr::parse("@daily").unwrap().describe(),
            "second 0, minute 0, hour 0, day of month *, month *, day of week *"
        );
    }

    #[test]
    fn a_sparse_cron_after_a_long_outage_catches_up_only_the_latest() {
        let s = schedule("0 0 12 29 2 *", "Europe/Berlin", catch_up(2));
        let last = utc("2000-02-29T11:00:00Z");
        let (due, next) = s.due_ticks(
            Some(last),
            utc("2004-02-29T11:00:00Z"),
            utc("2025-06-01T00:00:00Z"),
        );
        assert_eq!(
            due,
            [utc("2020-02-29T11:00:00Z"), utc("2024-02-29T11:00:00Z")]
        );
        assert_eq!(next, utc("2028-02-29T11:00:00Z"));
    }

    #[test]
    fn quarter_hourly_ticks_strictly_increase_across_both_berlin_transitions() {
        let s = schedule("0 */15 * * * *", "Europe/Berlin", MissedTicks::Skip);
        for day_before in ["2025-03-29T00:00:00Z", "2025-10-25T00:00:00Z"] {
            let from = utc(day_before);
            let ticks = walk(&s, from, 3 * 96);
            assert_eq!(ticks[0], from + TimeDelta::minutes(15));
            // Whole-hour offsets: in real time the ticks stay exactly 15 minutes apart, so
            // the gap loses no instant and the repeated hour doubles none.
            for pair in ticks.windows(2) {
                assert_eq!(pair[1] - pair[0], TimeDelta::minutes(15), "{pair:?}");
            }
        }
    }

    #[test]
    fn every_second_across_berlin_fall_back_yields_each_real_second_once() {
        let s = schedule("* * * * * *", "Europe/Berlin", MissedTicks::Skip);
        let from = utc("2025-10-25T23:59:00Z");
        let (ticks, next) = walk_until(&s, from, utc("2025-10-26T02:00:00Z"));
        assert_eq!(ticks.len(), 2 * 3600 + 60);
        for pair in ticks.windows(2) {
            assert_eq!(pair[1] - pair[0], TimeDelta::seconds(1), "{pair:?}");
        }
        assert_eq!(next, utc("2025-10-26T02:00:01Z"));
    }

    #[test]
    fn new_york_daily_ticks_at_both_transitions() {
        // 2025: 02:00 EST → 03:00 EDT on 9 March; 02:00 EDT → 01:00 EST on 2 November.
        let s = schedule("0 30 2 * * *", "America/New_York", MissedTicks::Skip);
        assert_eq!(
            walk(&s, utc("2025-03-08T12:00:00Z"), 2),
            [utc("2025-03-09T07:00:00Z"), utc("2025-03-10T06:30:00Z")]
        );
        let s = schedule("0 30 1 * * *", "America/New_York", MissedTicks::Skip);
        assert_eq!(
            walk(&s, utc("2025-11-01T12:00:00Z"), 2),
            [utc("2025-11-02T05:30:00Z"), utc("2025-11-03T06:30:00Z")],
            "01:30 EDT once; 01:30 EST that night is not a tick"
        );
    }

    /// Zones with and without DST (Lord Howe moves by 30 minutes), crons of each DST class.
    const ZONES: [&str; 5] = [
        "UTC",
        "Europe/Berlin",
        "America/New_York",
        "Australia/Lord_Howe",
        "Asia/Kolkata",
    ];
    const CRONS: [&str; 7] = [
        "* * * * * *",
        "*/7 * * * * *",
        "0 * * * * *",
        "0 */15 * * * *",
        "0 30 * * * *",
        "0 30 2 * * *",
        "0 0 1,2 * * *",
    ];

    #[test]
    fn due_ticks_agree_with_a_forward_walk_around_every_dst_edge() {
        let edges = [
            "2025-03-30T01:00:00Z",
            "2025-10-26T01:00:00Z",
            "2025-03-09T07:00:00Z",
            "2025-11-02T06:00:00Z",
        ];
        for cron in CRONS
            .iter()
            .filter(|c| !c.starts_with("* ") && !c.starts_with("*/"))
        {
            for zone in ["Europe/Berlin", "America/New_York"] {
                for missed in [MissedTicks::Skip, catch_up(3)] {
                    let s = schedule(cron, zone, missed);
                    for edge in edges {
                        let edge = utc(edge);
                        let next_fire = edge - TimeDelta::hours(4);
                        for step in 0..=(8 * 12) {
                            let now = next_fire + TimeDelta::minutes(5 * step);
                            assert_eq!(
                                s.due_ticks(None, next_fire, now),
                                due_by_walking(&s, None, next_fire, now),
                                "{cron} in {zone}, {missed:?}, now {now}"
                            );
                        }
                    }
                }
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

        #[test]
        fn due_ticks_are_increasing_due_bounded_and_match_a_forward_walk(
            zone in prop::sample::select(&ZONES[..]),
            cron in prop::sample::select(&CRONS[..]),
            max in prop::option::of(1u32..=20),
            // Around the 2025 transitions of Berlin, New York and Lord Howe.
            base in prop::sample::select(&[
                "2025-03-30T00:00:00Z", "2025-10-26T00:00:00Z", "2025-03-09T06:00:00Z",
                "2025-11-02T05:00:00Z", "2025-04-05T14:00:00Z", "2025-10-04T15:00:00Z",
            ][..]),
            now_ms in 0i64..(4 * 3600 * 1000),
            outage_ms in 0i64..(3 * 3600 * 1000),
            fired_back_ms in prop::option::of(0i64..(4 * 3600 * 1000)),
        ) {
            let missed = max.map_or(MissedTicks::Skip, |m| MissedTicks::CatchUp { max: m });
            let s = schedule(cron, zone, missed);
            let now = utc(base) + TimeDelta::milliseconds(now_ms);
            let next_fire = now - TimeDelta::milliseconds(outage_ms);
            let last_fired = fired_back_ms.map(|b| next_fire - TimeDelta::milliseconds(b));
            let (due, next) = s.due_ticks(last_fired, next_fire, now);

            prop_assert!(due.len() <= missed.limit() as usize);
            prop_assert!(due.windows(2).all(|p| p[0] < p[1]), "not increasing: {due:?}");
            for t in &due {
                prop_assert!(*t <= now && *t >= next_fire);
                prop_assert!(last_fired.is_none_or(|l| *t > l));
                prop_assert_eq!(t.timestamp_subsec_nanos(), 0);
            }
            prop_assert!(next > now);
            prop_assert!(due.last().is_none_or(|t| next > *t));
            prop_assert_eq!((due, next), due_by_walking(&s, last_fired, next_fire, now));
        }
    }
}
