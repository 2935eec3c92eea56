//! Rate limits from the wire (`leasehold ratelimit`, `leasehold types`, the Types view; see the
//! parent module for conventions).
//!
//! Invariant: a limit is accepted only within the bounds the agent keeps (1..=1,000,000 starts
//! per 1 ms..=24 h, [`RateLimit::new`]), so every limit printed is one the agent could have
//! set; anything else is a [`WireError`] naming `starts` or `period_ms`. A fill's `used` may
//! exceed its `starts` (a limit lowered under a full window) and is shown as it is.

use std::time::Duration;

use leasehold_proto::v1;
use leasehold_shared::domain::RateLimit;
use leasehold_shared::domain::policy::MAX_RATE_STARTS;
use serde::Serialize;

use super::WireError;

/// A rate limit from the wire, within its bounds.
pub fn rate_limit(r: &v1::RateLimit) -> Result<RateLimit, WireError> {
    if !(1..=MAX_RATE_STARTS).contains(&r.starts) {
        return Err(WireError::OutOfRange {
            field: "starts",
            value: i64::from(r.starts),
        });
    }
    RateLimit::new(r.starts, Duration::from_millis(r.period_ms)).map_err(|_| {
        WireError::OutOfRange {
            field: "period_ms",
            value: i64::try_from(r.period_ms).unwrap_or(i64::MAX),
        }
    })
}

/// A rate limit as JSON: `{"starts":50,"period_ms":1000,"text":"50/1s"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RateView {
    pub starts: u32,
    pub period_ms: u64,
    /// The form `leasehold ratelimit set` takes.
    pub text: String,
}

impl RateView {
    pub fn of(limit: RateLimit) -> Self {
        Self {
            starts: limit.starts,
            period_ms: u64::try_from(limit.period.as_millis()).unwrap_or(u64::MAX),
            text: limit.to_string(),
        }
    }

    pub fn from_wire(r: &v1::RateLimit) -> Result<Self, WireError> {
        rate_limit(r).map(Self::of)
    }

    /// An optional limit (`None`: no limit).
    pub fn from_wire_opt(r: Option<&v1::RateLimit>) -> Result<Option<Self>, WireError> {
        r.map(Self::from_wire).transpose()
    }
}

/// A rate limit and the starts its window ending at the reply's `now` holds, as the JSON of
/// `leasehold types` says it: `{"starts":50,"period_ms":1000,"used":12}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FillView {
    pub starts: u32,
    pub period_ms: u64,
    /// Starts in the current window.
    pub used: u64,
    #[serde(skip)]
    limit: RateLimit,
}

impl FillView {
    /// A fill; one without its limit breaks the contract.
    pub fn from_wire(f: &v1::RateFill) -> Result<Self, WireError> {
        let limit = rate_limit(
            f.limit
                .as_ref()
                .ok_or(WireError::MissingField("rate limit"))?,
        )?;
        Ok(Self {
            starts: limit.starts,
            period_ms: u64::try_from(limit.period.as_millis()).unwrap_or(u64::MAX),
            used: f.used,
            limit,
        })
    }

    /// The limit alone.
    pub fn limit(&self) -> RateLimit {
        self.limit
    }

    /// The window holds as many starts as the limit allows: nothing more starts until it
    /// moves on.
    pub fn full(&self) -> bool {
        self.used >= u64::from(self.starts)
    }

    /// `12/50/1s`: used of the limit as `ratelimit set` takes it (`50/1s`), as RUNNING is
    /// running of the concurrency limit: the compact form of the types table and the Types
    /// view.
    pub fn text(&self) -> String {
        format!("{}/{}", self.used, self.limit)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wire(starts: u32, period_ms: u64) -> v1::RateLimit {
        v1::RateLimit { starts, period_ms }
    }

    #[test]
    fn a_limit_shows_in_its_largest_whole_unit() {
        let view = |s, ms| RateView::from_wire(&wire(s, ms)).map(|v| v.text);
        assert_eq!(view(50, 1_000).as_deref(), Ok("50/1s"));
        assert_eq!(view(1000, 60_000).as_deref(), Ok("1000/1m"));
        assert_eq!(view(10, 250).as_deref(), Ok("10/250ms"));
        assert_eq!(view(5, 3_600_000).as_deref(), Ok("5/1h"));
        assert_eq!(
            serde_json::to_value(RateView::from_wire(&wire(50, 1_000)).ok()).ok(),
            Some(serde_json::json!({"starts": 50, "period_ms": 1000, "text": "50/1s"}))
        );
    }

    #[test]
    fn a_limit_outside_the_agents_bounds_is_refused_by_field() {
        for (starts, ms, field) in [
            (0, 1_000, "starts"),
            (1_000_001, 1_000, "starts"),
            (5, 0, "period_ms"),
            (5, 86_400_001, "period_ms"),
            (5, u64::MAX, "period_ms"),
        ] {
            assert!(
                matches!(
                    RateView::from_wire(&wire(starts, ms)),
                    Err(WireError::OutOfRange { field: f, .. }) if f == field
                ),
                "{starts}/{ms}ms"
            );
        }
        assert_eq!(
            FillView::from_wire(&v1::RateFill {
                limit: None,
                used: 3
            }),
            Err(WireError::MissingField("rate limit"))
        );
    }

    #[test]
    fn a_fill_says_used_of_allowed_per_period_and_when_it_is_full() {
        let fill = |used| {
            FillView::from_wire(&v1::RateFill {
                limit: Some(wire(50, 1_000)),
                used,
            })
            .unwrap_or_else(|e| panic!("{e}"))
        };
        assert_eq!(fill(12).text(), "12/50/1s");
        assert!(!fill(49).full());
        assert!(fill(50).full());
        // A limit lowered under a full window: more used than allowed, shown as it is.
        assert_eq!(fill(70).text(), "70/50/1s");
        assert!(fill(70).full());
        assert_eq!(
            serde_json::to_value(fill(12)).ok(),
            Some(serde_json::json!({"starts": 50, "period_ms": 1000, "used": 12}))
        );
    }
}
