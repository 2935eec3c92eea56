//! Unique enqueues (issue 24): what an enqueue does when its idempotency key is already held by
//! a task ([`OnConflict`]), and how long a finished holder keeps the key ([`check_unique_for`]).
//!
//! ```text
//!   key free ─────────────────────────────────────────────▶ created
//!   key held, holder waiting (queued | retry_wait)
//!       skip ──▶ existing (unchanged)
//!       replace ──▶ replaced: payload, priority, run time, deadline, timeout, attempts, key
//!       debounce ──▶ debounced: payload, available_at = now() + delay
//!   key held, holder running or finished ─────────────────▶ existing (unchanged)
//!   key held, holder finished ≥ unique_for ago ───────────▶ key released by it, created
//! ```
//!
//! Every mode is exact under concurrency: the key's holder row is locked (PostgreSQL) or the
//! write lock held (SQLite) before it is judged and changed, so a claim and a replace
//! serialise on it and the unique index never lets two tasks hold one key.

use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::ValidationError;

/// Shortest `unique_for`.
pub const MIN_UNIQUE_FOR: Duration = Duration::from_millis(1);
/// Longest `unique_for` (365 days).
pub const MAX_UNIQUE_FOR: Duration = Duration::from_secs(365 * 24 * 3600);

/// What an enqueue does when its idempotency key is held by an existing task.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnConflict {
    /// Return the existing task unchanged (the default).
    #[default]
    Skip,
    /// A waiting holder takes the new enqueue's payload, priority, run time, deadline,
    /// timeout, max attempts and concurrency key.
    Replace,
    /// A waiting holder's start moves to `now() + delay` (or the run-at time) and it takes the
    /// new payload: the last event wins. Its other settings stay.
    Debounce,
}

impl OnConflict {
    /// Every mode, in the order the CLI lists them.
    pub const ALL: [OnConflict; 3] = [OnConflict::Skip, OnConflict::Replace, OnConflict::Debounce];

    /// The mode's word (`skip`, `replace`, `debounce`).
    pub const fn as_str(self) -> &'static str {
        match self {
            OnConflict::Skip => "skip",
            OnConflict::Replace => "replace",
            OnConflict::Debounce => "debounce",
        }
    }
}

impl std::fmt::Display for OnConflict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for OnConflict {
    type Err = ValidationError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        OnConflict::ALL
            .into_iter()
            .find(|m| m.as_str() == s)
            .ok_or_else(|| ValidationError::Invalid {
                field: "on_conflict",
                detail: format!("unknown mode {s:?}: use skip, replace or debounce"),
            })
    }
}

/// Checks a `unique_for` window: whole milliseconds within 1 ms..=365 days. Returns it in ms.
pub fn check_unique_for(d: Duration) -> Result<i64, ValidationError> {
    if !d.subsec_nanos().is_multiple_of(1_000_000) {
        return Err(ValidationError::Invalid {
            field: "unique_for",
            detail: format!("{d:?} is not a whole number of milliseconds"),
        });
    }
    if d < MIN_UNIQUE_FOR || d > MAX_UNIQUE_FOR {
        return Err(ValidationError::OutOfRange {
            field: "unique_for",
            detail: format!("{} ms is not within 1 ms..=365 days", d.as_millis()),
        });
    }
    i64::try_from(d.as_millis()).map_err(|_| ValidationError::OutOfRange {
        field: "unique_for",
        detail: "too long".into(),
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn modes_parse_and_print_their_words() {
        for m in OnConflict::ALL {
            assert_eq!(m.as_str().parse::<OnConflict>().unwrap(), m);
        }
        assert_eq!(OnConflict::default(), OnConflict::Skip);
        let err = "upsert".parse::<OnConflict>().unwrap_err().to_string();
        assert!(err.contains("unknown mode \"upsert\""), "{err}");
        assert!("Replace".parse::<OnConflict>().is_err());
        assert!("".parse::<OnConflict>().is_err());
    }

    #[test]
    fn unique_for_is_whole_ms_within_a_year() {
        assert_eq!(check_unique_for(Duration::from_millis(1)).unwrap(), 1);
        assert_eq!(check_unique_for(MAX_UNIQUE_FOR).unwrap(), 31_536_000_000);
        assert!(check_unique_for(Duration::ZERO).is_err());
        assert!(check_unique_for(MAX_UNIQUE_FOR + Duration::from_millis(1)).is_err());
        assert!(check_unique_for(Duration::from_micros(1500)).is_err());
        assert!(check_unique_for(Duration::from_nanos(1)).is_err());
    }
}
