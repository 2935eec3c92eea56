//! The database clock as the maintenance loop sees it, checked against monotonic time so a
//! clock jump cannot revoke every lease at once (TESTING T21).
//!
//! ```text
//!   every tick: leader renewal / election returns the database's now()
//!     db advance − monotonic advance (at most) > TTL / 2 ──▶ forward jump:
//!         warn, count, hold recovery for one TTL (live holders renew at the new time)
//!     monotonic advance (at least) − db advance > TTL / 2 ──▶ backward jump: warn, count
//!   recovery statement: takes nothing while now() > last reading + monotonic since + TTL / 2
//! ```
//!
//! Why TTL / 2: a holder renews at least every TTL / 2 (the heartbeat fits twice into the TTL),
//! so a lease renewed on schedule has at least TTL / 2 + grace left; a jump no larger than
//! TTL / 2 cannot take it. Readings carry the monotonic instants just before the statement was
//! sent and just after its answer came back, so a slow round trip never looks like a jump.
//!
//! When things fail: without a fresh reading (a failed renewal) the last one is kept and the
//! bound widens with monotonic time, so recovery is never blocked for good. A backward jump
//! needs no hold: every lease (and the leader lease) just lasts longer by the jump, so dead
//! agents' tasks are recovered that much later. A host suspended with its agent (monotonic
//! time stands still) looks like a forward jump and only delays recovery by one TTL.

use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};

/// A jump of the database clock against monotonic time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ClockJump {
    /// The database clock ran ahead by this much more than monotonic time allows.
    Forward(Duration),
    /// The database clock fell behind monotonic time by this much.
    Backward(Duration),
}

impl ClockJump {
    pub(crate) fn direction(self) -> &'static str {
        match self {
            ClockJump::Forward(_) => "forward",
            ClockJump::Backward(_) => "backward",
        }
    }
}

/// One database time, read between `sent` and `received` (monotonic).
#[derive(Debug, Clone, Copy)]
struct Reading {
    db: DateTime<Utc>,
    sent: Instant,
    received: Instant,
}

/// The last reading of the database clock, and whether recovery is held after a jump.
#[derive(Debug)]
pub(crate) struct DbClock {
    last: Option<Reading>,
    /// Jumps smaller than this are tolerated (TTL / 2).
    tolerance: Duration,
    /// How long recovery is held after a forward jump (one TTL).
    hold: Duration,
    held_until: Option<Instant>,
}

impl DbClock {
    pub(crate) fn new(lease_ttl: Duration) -> Self {
        DbClock {
            last: None,
            tolerance: lease_ttl / 2,
            hold: lease_ttl,
            held_until: None,
        }
    }

    /// Records database time `db`, read by a statement sent at `sent` and answered at
    /// `received`; reports a jump since the previous reading (a forward one holds recovery).
    pub(crate) fn observe(
        &mut self,
        db: DateTime<Utc>,
        sent: Instant,
        received: Instant,
    ) -> Option<ClockJump> {
        let reading = Reading { db, sent, received };
        let jump = self.last.and_then(|last| self.compare(last, reading));
        self.last = Some(reading);
        if let Some(ClockJump::Forward(_)) = jump {
            self.held_until = Some(received + self.hold);
        }
        jump
    }

    fn compare(&self, last: Reading, now: Reading) -> Option<ClockJump> {
        let db_advance = now.db.signed_duration_since(last.db);
        let most =
            chrono::Duration::from_std(now.received.saturating_duration_since(last.sent)).ok()?;
        let least =
            chrono::Duration::from_std(now.sent.saturating_duration_since(last.received)).ok()?;
        let tolerance = chrono::Duration::from_std(self.tolerance).ok()?;
        if db_advance > most + tolerance {
            return (db_advance - most).to_std().ok().map(ClockJump::Forward);
        }
        if db_advance < least - tolerance {
            return (least - db_advance).to_std().ok().map(ClockJump::Backward);
        }
        None
    }

    /// Whether recovery is held (a forward jump was seen less than one TTL ago).
    pub(crate) fn recovery_held(&self, at: Instant) -> bool {
        self.held_until.is_some_and(|until| at < until)
    }

    /// The latest the database clock can read at `at` without having jumped since the last
    /// reading (None before the first reading).
    pub(crate) fn bound(&self, at: Instant) -> Option<DateTime<Utc>> {
        let last = self.last?;
        let since = chrono::Duration::from_std(at.saturating_duration_since(last.sent)).ok()?;
        let tolerance = chrono::Duration::from_std(self.tolerance).ok()?;
        last.db.checked_add_signed(since + tolerance)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TTL: Duration = Duration::from_secs(20);

    fn at(t0: DateTime<Utc>, secs: f64) -> DateTime<Utc> {
        t0 + chrono::Duration::milliseconds((secs * 1000.0) as i64)
    }

    #[test]
    fn steady_ticks_and_slow_round_trips_are_no_jump() {
        let mut clock = DbClock::new(TTL);
        let (db0, m0) = (Utc::now(), Instant::now());
        assert_eq!(clock.observe(db0, m0, m0), None);
        // One second later; the statement took 5 s to answer (read at its start).
        let sent = m0 + Duration::from_secs(1);
        let received = sent + Duration::from_secs(5);
        assert_eq!(clock.observe(at(db0, 1.0), sent, received), None);
        // Read at the end of a slow statement: still within what monotonic time allows.
        let sent2 = received + Duration::from_secs(1);
        let received2 = sent2 + Duration::from_secs(5);
        assert_eq!(clock.observe(at(db0, 12.0), sent2, received2), None);
        assert!(!clock.recovery_held(received2));
    }

    #[test]
    fn a_forward_jump_holds_recovery_for_one_ttl() {
        let mut clock = DbClock::new(TTL);
        let (db0, m0) = (Utc::now(), Instant::now());
        clock.observe(db0, m0, m0);
        let m1 = m0 + Duration::from_secs(1);
        let jump = clock.observe(at(db0, 601.0), m1, m1);
        assert_eq!(jump, Some(ClockJump::Forward(Duration::from_secs(600))));
        assert!(clock.recovery_held(m1));
        assert!(clock.recovery_held(m1 + TTL - Duration::from_millis(1)));
        assert!(!clock.recovery_held(m1 + TTL));
        // The next tick compares against the new time: no second jump.
        let m2 = m1 + Duration::from_secs(1);
        assert_eq!(clock.observe(at(db0, 602.0), m2, m2), None);
    }

    #[test]
    fn jumps_up_to_half_the_ttl_are_tolerated_and_backward_ones_do_not_hold() {
        let mut clock = DbClock::new(TTL);
        let (db0, m0) = (Utc::now(), Instant::now());
        clock.observe(db0, m0, m0);
        let m1 = m0 + Duration::from_secs(1);
        assert_eq!(clock.observe(at(db0, 11.0), m1, m1), None);
        let m2 = m1 + Duration::from_secs(1);
        let jump = clock.observe(at(db0, -600.0), m2, m2);
        assert_eq!(jump.map(ClockJump::direction), Some("backward"));
        assert!(!clock.recovery_held(m2));
    }

    #[test]
    fn the_bound_follows_monotonic_time() {
        let mut clock = DbClock::new(TTL);
        let m0 = Instant::now();
        assert_eq!(clock.bound(m0), None);
        let db0 = Utc::now();
        clock.observe(db0, m0, m0 + Duration::from_millis(3));
        assert_eq!(
            clock.bound(m0 + Duration::from_secs(5)),
            Some(at(db0, 15.0))
        );
    }
}
