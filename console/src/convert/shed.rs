//! Load shedding from the wire (`leasehold shed`, `leasehold types`, the Types view; see the
//! parent module for conventions).
//!
//! Invariant: a shed-after duration is accepted only within the agent's bounds (1 ms..=7 days,
//! whole milliseconds on the wire), so every one printed is one `shed set` could have set;
//! anything else is a [`WireError`] naming the field.

use leasehold_shared::domain::policy::MAX_POLICY_DURATION;

use super::WireError;

/// The longest shed-after duration, in milliseconds (7 days).
const MAX_SHED_AFTER_MS: u64 = MAX_POLICY_DURATION.as_secs() * 1_000;

/// A shed-after duration from the wire, within its bounds.
pub fn shed_after_ms(field: &'static str, ms: u64) -> Result<u64, WireError> {
    if (1..=MAX_SHED_AFTER_MS).contains(&ms) {
        Ok(ms)
    } else {
        Err(WireError::OutOfRange {
            field,
            value: i64::try_from(ms).unwrap_or(i64::MAX),
        })
    }
}

/// An optional shed-after duration (`None`: the type does not shed).
pub fn shed_after_opt(field: &'static str, ms: Option<u64>) -> Result<Option<u64>, WireError> {
    ms.map(|ms| shed_after_ms(field, ms)).transpose()
}

/// A duration in its largest whole unit, as `shed set` takes it: `30s`, `5m`, `90s`, `1h`,
/// `7d`, `1500ms`. One word, so it fits a table cell.
pub fn after_text(ms: u64) -> String {
    leasehold_shared::domain::policy::duration_text(std::time::Duration::from_millis(ms))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_are_said_in_their_largest_whole_unit() {
        for (ms, text) in [
            (1, "1ms"),
            (1_500, "1500ms"),
            (30_000, "30s"),
            (90_000, "90s"),
            (300_000, "5m"),
            (5_400_000, "90m"),
            (3_600_000, "1h"),
            (604_800_000, "7d"),
        ] {
            assert_eq!(after_text(ms), text, "{ms}");
        }
    }

    #[test]
    fn only_the_agents_bounds_are_accepted() {
        assert_eq!(shed_after_ms("shed_after_ms", 1), Ok(1));
        assert_eq!(shed_after_ms("shed_after_ms", 604_800_000), Ok(604_800_000));
        for ms in [0, 604_800_001, u64::MAX] {
            assert!(matches!(
                shed_after_ms("shed_after_ms", ms),
                Err(WireError::OutOfRange {
                    field: "shed_after_ms",
                    ..
                })
            ));
        }
        assert_eq!(shed_after_opt("previous_ms", None), Ok(None));
        assert!(shed_after_opt("previous_ms", Some(0)).is_err());
    }
}
