//! The cron expression, [`CronExpr`]: a thin wrapper over croner 2 that parses and validates
//! the six-field text, tells whether it is fixed-time (which decides its DST behaviour), and
//! matches the pattern against naive wall-clock times, forward ([`CronExpr::wall_next`]) and
//! backward ([`CronExpr::wall_prev`]). It knows nothing of zones: `zone` maps its wall-clock
//! matches to instants.

use std::fmt;
use std::hash::{Hash, Hasher};
use std::str::FromStr;

use chrono::{Datelike, NaiveDate, NaiveDateTime, Timelike};
use croner::Cron;
use croner::errors::CronError;

use crate::domain::ids::truncate_for_error;
use crate::domain::validate::ValidationError;

/// Longest cron expression accepted, in bytes.
pub const MAX_CRON_LEN: usize = 200;

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
    /// fields), which decides its DST behaviour (see the `schedule` module docs).
    pub fn is_fixed_time(&self) -> bool {
        self.fixed_time
    }

    /// The first wall-clock time at or after `from` (a whole second) that the pattern matches,
    /// or `None` before croner's limit (the year 5000). A UTC carrier has no DST, so croner's
    /// wall-clock walk is exact here.
    pub(super) fn wall_next(&self, from: NaiveDateTime) -> Option<NaiveDateTime> {
        self.cron
            .find_next_occurrence(&from.and_utc(), true)
            .ok()
            .map(|t| t.naive_utc())
    }

    /// The last wall-clock time at or before `upto` (a whole second) that the pattern matches,
    /// searching no further back than the start of `floor`.
    pub(super) fn wall_prev(&self, upto: NaiveDateTime, floor: NaiveDate) -> Option<NaiveDateTime> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::schedule::fixtures::field_of;

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
}
