//! Building a [`Schedule`]: [`Schedule::builder`] collects the raw input in a
//! [`ScheduleBuilder`] and [`ScheduleBuilder::build`] validates every field once, so a built
//! `Schedule` is always storable and its ticks computable.

use chrono_tz::Tz;

use super::{CronExpr, MissedTicks, Schedule, ScheduleName, parse_time_zone};
use crate::domain::ids::TaskType;
use crate::domain::validate::{
    InputLimits, MAX_ATTEMPTS_LIMIT, ValidationError, check_range, payload_text,
};

/// Default priority of a tick's task (that of any enqueued task).
pub const DEFAULT_SCHEDULE_PRIORITY: i16 = 0;

/// Collects a schedule's raw input; [`ScheduleBuilder::build`] validates it. Defaults: zone
/// UTC, payload `{}`, priority [`DEFAULT_SCHEDULE_PRIORITY`], max attempts inherited (see
/// [`Schedule::max_attempts`]), enabled, [`MissedTicks::Skip`].
#[derive(Debug, Clone)]
#[must_use]
pub struct ScheduleBuilder {
    name: String,
    cron: String,
    task_type: String,
    time_zone: Option<String>,
    payload: serde_json::Value,
    priority: i16,
    max_attempts: Option<i32>,
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
        self.max_attempts = Some(attempts);
        self
    }

    /// Attempts each tick's task gets, `None` to inherit them from the type's policy at each
    /// firing (the default; see [`Schedule::max_attempts`]).
    pub fn max_attempts_opt(mut self, attempts: Option<i32>) -> Self {
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
        let max_attempts = self
            .max_attempts
            .map(|n| check_range("max_attempts", n, 1..=MAX_ATTEMPTS_LIMIT))
            .transpose()?;
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
            max_attempts: None,
            enabled: true,
            missed: MissedTicks::Skip,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::schedule::fixtures::{catch_up, field_of};
    use crate::domain::schedule::{DEFAULT_CATCH_UP, MAX_CATCH_UP};

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
        assert_eq!(s.max_attempts(), None, "inherits by default");
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
            (-3, Some(1000), false)
        );
        let inherits = Schedule::builder("n", "@hourly", "x")
            .max_attempts(3)
            .max_attempts_opt(None)
            .build(&InputLimits::default())
            .unwrap();
        assert_eq!(inherits.max_attempts(), None);
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
}
