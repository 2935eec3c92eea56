//! The renewal loop against a fake holder on paused time: one holding with a TTL, renewals
//! that land, fail, hang or report the holding lost, on cue.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use super::*;

const TTL: Duration = Duration::from_secs(2);

/// What a renewal cued to fail fails with: the database out of reach.
fn refused() -> StoreError {
    StoreError::timed_out("renew")
}
const MARGIN: Duration = Duration::from_millis(400);
const CADENCE: Cadence = Cadence {
    every: Duration::from_millis(500),
    timeout: Duration::from_millis(200),
};

/// What the next renewal does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cue {
    Land,
    Fail,
    Hang,
    Lost,
}

/// What the fake saw, shared with the test.
#[derive(Debug, Default)]
struct Seen {
    /// Cues not yet used; when empty, renewals land.
    cues: VecDeque<Cue>,
    /// When each renewal was sent, from the start.
    sent: Vec<Duration>,
    connects: usize,
    failures: Vec<String>,
    /// When the holding was dropped, from the start, and why.
    stopped: Option<(Duration, &'static str)>,
    after_beats: Vec<bool>,
    released: bool,
}

/// One holding with a local deadline, renewed for `TTL` minus `MARGIN` from when sent.
struct Fake {
    start: Instant,
    safe_until: Option<Instant>,
    seen: Arc<Mutex<Seen>>,
}

impl Fake {
    fn stop(&mut self, now: Instant, why: &'static str) {
        if self.safe_until.take().is_some() {
            self.seen.lock().unwrap().stopped = Some((now - self.start, why));
        }
    }
}

impl Renewable for Fake {
    type Conn = Arc<Mutex<Seen>>;
    type Batch = ();
    type Renewed = Cue;

    fn batch(&mut self) -> Option<()> {
        self.safe_until.map(|_| ())
    }

    async fn send(&self, conn: Self::Conn, _batch: &()) -> Result<Cue, StoreError> {
        let cue = {
            let mut seen = conn.lock().unwrap();
            let at = now() - self.start;
            seen.sent.push(at);
            seen.cues.pop_front().unwrap_or(Cue::Land)
        };
        match cue {
            Cue::Fail => Err(refused()),
            Cue::Hang => std::future::pending().await,
            cue => Ok(cue),
        }
    }

    async fn renewed(&mut self, _batch: (), sent: Instant, out: Cue, _line: &mut Line<Self::Conn>) {
        if out == Cue::Lost {
            self.stop(now(), "lost");
        } else if self.safe_until.is_some() {
            self.safe_until = Some(sent + TTL - MARGIN);
        }
    }

    fn failed(&mut self, _batch: (), reason: String) {
        self.seen.lock().unwrap().failures.push(reason);
    }

    fn has_unprovable(&self, now: Instant) -> bool {
        self.safe_until.is_some_and(|at| at <= now)
    }

    fn check(&mut self, now: Instant) {
        if self.has_unprovable(now) {
            self.stop(now, "unprovable");
        }
    }

    async fn after_beat(&mut self, _line: &mut Line<Self::Conn>, renewed: bool) {
        self.seen.lock().unwrap().after_beats.push(renewed);
    }

    async fn stopped(&mut self, _line: &mut Line<Self::Conn>) {
        self.seen.lock().unwrap().released = true;
    }
}

/// Runs the loop for `run_for` of paused time with `cues`, the holding taken just now.
async fn run(cues: &[Cue], run_for: Duration) -> Seen {
    let seen = Arc::new(Mutex::new(Seen {
        cues: cues.iter().copied().collect(),
        ..Seen::default()
    }));
    let connect: Connect<Arc<Mutex<Seen>>> = {
        let seen = Arc::clone(&seen);
        Arc::new(move || {
            let seen = Arc::clone(&seen);
            Box::pin(async move {
                seen.lock().unwrap().connects += 1;
                Ok(seen)
            })
        })
    };
    let start = now();
    let fake = Fake {
        start,
        safe_until: Some(start + TTL - MARGIN),
        seen: Arc::clone(&seen),
    };
    let stop = CancellationToken::new();
    let renewal = Renewal::new(fake, Line::new("test", connect, None), CADENCE);
    let task = tokio::spawn(renewal.run(stop.clone()));
    tokio::time::sleep(run_for).await;
    stop.cancel();
    task.await.unwrap();
    Arc::try_unwrap(seen).unwrap().into_inner().unwrap()
}

#[tokio::test(start_paused = true)]
async fn renewals_that_land_keep_the_holding() {
    let seen = run(&[], Duration::from_millis(9_900)).await;
    assert_eq!(seen.stopped, None);
    assert!(seen.failures.is_empty());
    // The first beat is at once, then one every `CADENCE.every`, on one connection.
    assert_eq!(seen.sent.first(), Some(&Duration::ZERO));
    assert_eq!(seen.sent.len(), 20, "{:?}", seen.sent);
    assert_eq!(seen.connects, 1);
    assert!(seen.after_beats.iter().all(|ok| *ok));
    assert!(seen.released, "stopped() runs once the loop is stopped");
}

#[tokio::test(start_paused = true)]
async fn a_transient_error_is_retried_within_the_ttl() {
    let seen = run(&[Cue::Fail, Cue::Fail], Duration::from_secs(10)).await;
    assert_eq!(
        seen.stopped, None,
        "two failed beats are well within the TTL"
    );
    assert_eq!(
        seen.failures,
        [
            crate::runtime::queue::chain(&refused()),
            crate::runtime::queue::chain(&refused())
        ]
    );
    // Each failure abandons the connection: the next beat connects afresh.
    assert_eq!(seen.connects, 3);
    assert_eq!(seen.after_beats[..3], [false, false, true]);
}

#[tokio::test(start_paused = true)]
async fn a_renewal_that_hangs_is_cut_off_at_the_timeout() {
    let seen = run(&[Cue::Hang], Duration::from_secs(3)).await;
    assert_eq!(seen.stopped, None);
    assert_eq!(seen.failures, ["renewal timed out after 200ms"]);
    // The next beat is on time and on a new connection.
    assert_eq!(seen.sent[1], CADENCE.every);
    assert_eq!(seen.connects, 2);
}

#[tokio::test(start_paused = true)]
async fn a_loss_stops_the_holder_at_once() {
    let seen = run(&[Cue::Land, Cue::Lost], Duration::from_secs(3)).await;
    assert_eq!(seen.stopped, Some((CADENCE.every, "lost")));
    // Nothing held: nothing more is sent.
    assert_eq!(seen.sent.len(), 2);
}

#[tokio::test(start_paused = true)]
async fn a_holding_that_cannot_be_proven_is_dropped_within_the_ttl() {
    // Every renewal hangs: the holding is dropped at its local deadline (sent + TTL − margin),
    // before the lease could expire at the database.
    let seen = run(&[Cue::Hang; 20], Duration::from_secs(10)).await;
    let (at, why) = seen.stopped.expect("the holding was dropped");
    assert_eq!(why, "unprovable");
    assert!(at < TTL, "dropped at {at:?}, past the TTL");
    assert!(at >= TTL - MARGIN, "dropped at {at:?}, before its deadline");
    // At most one renewal timeout late (a beat in flight at the deadline); the timeout is never
    // longer than the margin, so that is still before the TTL.
    assert!(at <= TTL - MARGIN + CADENCE.timeout, "dropped late: {at:?}");
    assert!(seen.failures.len() >= 3);
}

#[tokio::test(start_paused = true)]
async fn a_holding_past_its_deadline_is_renewed_once_before_it_is_dropped() {
    // The beats fail until the deadline; the check's extra renewal then lands and keeps it.
    let seen = run(
        &[Cue::Fail, Cue::Fail, Cue::Fail, Cue::Fail],
        Duration::from_secs(4),
    )
    .await;
    assert_eq!(seen.stopped, None, "{:?}", seen.sent);
    let deadline = TTL - MARGIN;
    assert!(
        seen.sent
            .iter()
            .any(|at| *at >= deadline && *at < deadline + CADENCE.every / 4),
        "no renewal at the deadline: {:?}",
        seen.sent
    );
}
