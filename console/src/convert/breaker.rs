//! Circuit breakers from the wire (`leasehold breaker`, `leasehold types`, the Types view and
//! the header; see the parent module for conventions).
//!
//! Invariants: a setting is accepted only within the agent's bounds (1..=1,000,000 failures
//! within 1 ms..=24 h, a cooldown of 1 ms..=7 days, [`BreakerPolicy::new`]), so every breaker
//! printed is one `breaker set` could have set; a state is one of `closed`, `open`,
//! `half_open`. Anything else is a [`WireError`] naming the field.

use std::time::Duration;

use leasehold_proto::v1;
use leasehold_shared::domain::{BreakerPolicy, BreakerState};
use serde::Serialize;

use super::{Timestamp, WireError, opt_time};

/// A breaker's setting from its three wire fields, within the bounds.
pub fn policy(failures: u32, within_ms: u64, cooldown_ms: u64) -> Result<BreakerPolicy, WireError> {
    let out = |field: &'static str, value: u64| WireError::OutOfRange {
        field,
        value: i64::try_from(value).unwrap_or(i64::MAX),
    };
    let within = Duration::from_millis(within_ms);
    let cooldown = Duration::from_millis(cooldown_ms);
    BreakerPolicy::new(failures, within, cooldown).map_err(|_| {
        // Say which field broke the bounds: try each alone against a good setting.
        if BreakerPolicy::new(failures, Duration::from_secs(1), Duration::from_secs(1)).is_err() {
            out("failures", u64::from(failures))
        } else if BreakerPolicy::new(1, within, Duration::from_secs(1)).is_err() {
            out("within_ms", within_ms)
        } else {
            out("cooldown_ms", cooldown_ms)
        }
    })
}

/// A breaker's setting as JSON: `{"failures":5,"within_ms":60000,"cooldown_ms":30000,
/// "text":"5 failures within 1m, cooldown 30s"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BreakerView {
    pub failures: u32,
    pub within_ms: u64,
    pub cooldown_ms: u64,
    /// In words, with durations as `breaker set` takes them.
    pub text: String,
}

impl BreakerView {
    pub fn of(b: BreakerPolicy) -> Self {
        Self {
            failures: b.failures,
            within_ms: u64::try_from(b.within.as_millis()).unwrap_or(u64::MAX),
            cooldown_ms: u64::try_from(b.cooldown.as_millis()).unwrap_or(u64::MAX),
            text: b.to_string(),
        }
    }

    pub fn from_wire(b: &v1::Breaker) -> Result<Self, WireError> {
        policy(b.failures, b.within_ms, b.cooldown_ms).map(Self::of)
    }

    /// An optional breaker (`None`: the type has none).
    pub fn from_wire_opt(b: Option<&v1::Breaker>) -> Result<Option<Self>, WireError> {
        b.map(Self::from_wire).transpose()
    }
}

/// A type's breaker and where it stands, as `leasehold types --output json` (`breaker`) and
/// `breaker ls` give it: `{"state":"open","failures":3,"within_ms":60000,"cooldown_ms":2000,
/// "since":"…Z","until":"…Z"}`. `failures` is the setting (how many open it), not a count.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BreakerStatusView {
    pub state: BreakerState,
    pub failures: u32,
    pub within_ms: u64,
    pub cooldown_ms: u64,
    /// When the breaker was set or its state last changed; `null` when not known.
    pub since: Option<Timestamp>,
    /// When an open breaker half-opens; `null` unless open.
    pub until: Option<Timestamp>,
}

impl BreakerStatusView {
    /// Converts a type's breaker; an unknown state, a setting out of bounds or an open breaker
    /// without its end breaks the contract.
    pub fn from_wire(b: &v1::BreakerSummary) -> Result<Self, WireError> {
        let state = state(&b.state)?;
        let setting = policy(b.failures, b.within_ms, b.cooldown_ms)?;
        let until = opt_time("breaker.until_ms", b.until_ms)?;
        if state == BreakerState::Open && until.is_none() {
            return Err(WireError::MissingField(
                "breaker.until_ms of an open breaker",
            ));
        }
        let view = BreakerView::of(setting);
        Ok(Self {
            state,
            failures: view.failures,
            within_ms: view.within_ms,
            cooldown_ms: view.cooldown_ms,
            since: opt_time("breaker.since_ms", b.since_ms)?,
            until,
        })
    }

    /// The setting in words: `5 failures within 1m, cooldown 30s`.
    pub fn setting_text(&self) -> String {
        BreakerPolicy {
            failures: self.failures,
            within: Duration::from_millis(self.within_ms),
            cooldown: Duration::from_millis(self.cooldown_ms),
        }
        .to_string()
    }

    /// A table cell, seen at `now_ms` (database time): `closed`, `half-open`, `open 12s` (the
    /// time left until it half-opens, at most two units), or `open` once that time passed
    /// (it half-opens at the leader's next tick).
    pub fn cell(&self, now_ms: i64) -> String {
        cell(self.state, self.until.map(Timestamp::millis), now_ms)
    }
}

/// A breaker state from its wire word.
pub fn state(word: &str) -> Result<BreakerState, WireError> {
    word.parse().map_err(|_| {
        WireError::Broken(format!(
            "breaker state {:?}, which this build does not know",
            crate::output::text::shown(word, 32)
        ))
    })
}

/// A breaker cell from a state and the time an open one half-opens (both from the wire):
/// `closed`, `half-open`, `open 12s`, `open`.
pub fn cell(state: BreakerState, until_ms: Option<i64>, now_ms: i64) -> String {
    match state {
        BreakerState::Closed => "closed".to_owned(),
        BreakerState::HalfOpen => "half-open".to_owned(),
        BreakerState::Open => match until_ms.map(|u| u.saturating_sub(now_ms)) {
            Some(left) if left > 0 => {
                format!("open {}", crate::output::text::short_duration(left))
            }
            _ => "open".to_owned(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_764_588_000_000;

    fn summary(state: &str) -> v1::BreakerSummary {
        v1::BreakerSummary {
            failures: 3,
            within_ms: 60_000,
            cooldown_ms: 2_000,
            state: state.into(),
            since_ms: NOW - 1_000,
            until_ms: if state == "open" { NOW + 12_000 } else { 0 },
        }
    }

    #[test]
    fn a_breaker_converts_with_its_times_and_its_cell() {
        let open = BreakerStatusView::from_wire(&summary("open")).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(open.state, BreakerState::Open);
        assert_eq!(open.setting_text(), "3 failures within 1m, cooldown 2s");
        assert_eq!(open.cell(NOW), "open 12s");
        assert_eq!(open.cell(NOW + 12_000), "open");
        assert_eq!(open.cell(NOW - 200_000), "open 3m32s");
        assert_eq!(
            serde_json::to_value(&open).ok(),
            Some(serde_json::json!({
                "state": "open", "failures": 3, "within_ms": 60000, "cooldown_ms": 2000,
                "since": "2025-12-01T11:19:59.000Z", "until": "2025-12-01T11:20:12.000Z"
            }))
        );
        let half = BreakerStatusView::from_wire(&summary("half_open"));
        assert_eq!(half.map(|h| h.cell(NOW)).as_deref(), Ok("half-open"));
        let mut closed = summary("closed");
        closed.since_ms = 0;
        let closed = BreakerStatusView::from_wire(&closed).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(closed.cell(NOW), "closed");
        assert_eq!(closed.since, None);
        assert_eq!(closed.until, None);
    }

    #[test]
    fn a_breaker_the_wire_breaks_is_refused_naming_the_field() {
        let field = |b: v1::BreakerSummary| match BreakerStatusView::from_wire(&b) {
            Err(WireError::OutOfRange { field, .. }) => field,
            other => panic!("{other:?}"),
        };
        let with = |f: &dyn Fn(&mut v1::BreakerSummary)| {
            let mut b = summary("closed");
            f(&mut b);
            b
        };
        assert_eq!(field(with(&|b| b.failures = 0)), "failures");
        assert_eq!(field(with(&|b| b.failures = 1_000_001)), "failures");
        assert_eq!(field(with(&|b| b.within_ms = 0)), "within_ms");
        assert_eq!(field(with(&|b| b.within_ms = 86_400_001)), "within_ms");
        assert_eq!(field(with(&|b| b.cooldown_ms = 0)), "cooldown_ms");
        assert_eq!(field(with(&|b| b.cooldown_ms = 604_800_001)), "cooldown_ms");
        assert!(matches!(
            BreakerStatusView::from_wire(&summary("ajar")),
            Err(WireError::Broken(m)) if m.contains("\"ajar\"")
        ));
        let mut open = summary("open");
        open.until_ms = 0;
        assert!(matches!(
            BreakerStatusView::from_wire(&open),
            Err(WireError::MissingField(_))
        ));
        let mut open = summary("open");
        open.until_ms = -5;
        assert!(matches!(
            BreakerStatusView::from_wire(&open),
            Err(WireError::Time { .. })
        ));
        let shown = state("\u{1b}[2J").err().map(|e| e.to_string());
        assert!(shown.is_some_and(|m| !m.contains('\u{1b}')));
    }

    #[test]
    fn settings_travel_as_json_with_their_words() {
        let b = BreakerView::from_wire(&v1::Breaker {
            failures: 5,
            within_ms: 60_000,
            cooldown_ms: 30_000,
        });
        assert_eq!(
            b.ok()
                .and_then(|b| serde_json::to_string(&b).ok())
                .as_deref(),
            Some(
                r#"{"failures":5,"within_ms":60000,"cooldown_ms":30000,"text":"5 failures within 1m, cooldown 30s"}"#
            )
        );
        assert_eq!(BreakerView::from_wire_opt(None), Ok(None));
    }
}
