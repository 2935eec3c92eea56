//! The schedule's time zone: parsing an IANA name ([`parse_time_zone`]), and mapping the cron's
//! wall-clock matches to UTC instants in that zone — the forward tick search
//! [`Schedule::next_after`] with the daylight saving rules described in the parent module's
//! docs (a fixed-time cron moves out of a spring-forward gap and fires once in a repeated hour;
//! an interval cron skips the gap and fires on both passes).

use std::str::FromStr;

use chrono::{DateTime, LocalResult, NaiveDateTime, Offset, SubsecRound, TimeDelta, TimeZone, Utc};
use chrono_tz::{GapInfo, Tz};

use super::Schedule;
use crate::domain::ids::truncate_for_error;
use crate::domain::validate::ValidationError;

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

impl Schedule {
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
        if self.cron.is_fixed_time() {
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
    pub(super) fn resolve(
        &self,
        wall: NaiveDateTime,
    ) -> (Option<DateTime<Utc>>, Option<DateTime<Utc>>) {
        let utc = |t: DateTime<Tz>| t.with_timezone(&Utc);
        match self.time_zone.from_local_datetime(&wall) {
            LocalResult::Single(t) => (Some(utc(t)), None),
            LocalResult::Ambiguous(a, b) => {
                let (earlier, later) = (utc(a.min(b)), utc(a.max(b)));
                (Some(earlier), (!self.cron.is_fixed_time()).then_some(later))
            }
            LocalResult::None if self.cron.is_fixed_time() => {
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::schedule::MissedTicks;
    use crate::domain::schedule::fixtures::{catch_up, field_of, schedule, utc, walk_until};

    /// The first `n` ticks after `from`, by the forward search alone.
    fn walk(s: &Schedule, from: DateTime<Utc>, n: usize) -> Vec<DateTime<Utc>> {
        std::iter::successors(s.next_after(from), |t| s.next_after(*t))
            .take(n)
            .collect()
    }

    fn local(s: &Schedule, t: DateTime<Utc>) -> String {
        t.with_timezone(&s.time_zone())
            .format("%Y-%m-%d %H:%M:%S %Z")
            .to_string()
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
}
