//! What a leader fires: [`Schedule::due_ticks`] (the ticks due at `now` under the missed-tick
//! policy, and the next fire time) and [`Schedule::fire_plan`] (those plus the ticks that are
//! merely late by less than an on-time window). Pure and bounded by the policy's limit, never
//! by the outage's length; every tick is one [`Schedule::next_after`] yields.

use std::collections::VecDeque;
use std::time::Duration;

use chrono::{DateTime, NaiveDate, SubsecRound, TimeDelta, Utc};

use super::Schedule;

/// The next fire time of a schedule that will never fire again (croner searches no further
/// than the year 5000). Storable: PostgreSQL's `timestamptz` reaches past it.
pub const NEVER: DateTime<Utc> = DateTime::<Utc>::MAX_UTC;

impl Schedule {
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
    ///
    /// [`MissedTicks::limit`]: super::MissedTicks::limit
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::schedule::MissedTicks;
    use crate::domain::schedule::fixtures::{catch_up, schedule, utc, walk_until};
    use crate::domain::validate::InputLimits;
    use proptest::prelude::*;

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
