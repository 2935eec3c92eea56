//! Run history: the run times of each type's recent successful runs, for the "slow compared
//! with history" rule — an execution is flagged slow once it runs past its type's p95 as
//! well as past the fixed threshold (`slow_after`), whichever comes first.
//!
//! ```text
//!   completion of a success ──▶ record(type, run time)     (this agent's own runs)
//!   registry refresh ─────────▶ seed(type, runs from the database)
//!                                  (only while the type has fewer than HISTORY_MIN_RUNS here:
//!                                   after a start, or for a type this agent rarely runs)
//!   heartbeat check ──────────▶ p95(type), as it stands now, for each execution past 1 s
//! ```
//!
//! Each type keeps its newest [`HISTORY_RUNS`] runs. The p95 (nearest rank) is given only from
//! [`HISTORY_MIN_RUNS`] runs on, and the rule never fires before [`HISTORY_FLOOR`]: the
//! heartbeat checks every quarter beat (at most 250 ms), and a p95 of a few milliseconds would
//! flag one run in twenty of every fast type — noise, not a stuck task. Sub-second work is
//! flagged by the fixed threshold only.
//!
//! The database's runs are the fleet's (claim to completion, database clock), so a restarted
//! agent compares with history at once; its own runs (claim to handler end, monotonic clock)
//! take over once there are [`HISTORY_MIN_RUNS`] of them. The two are never mixed.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use leasehold_shared::TaskType;

/// Runs kept per type.
pub(crate) const HISTORY_RUNS: usize = 200;
/// Runs a type needs before its p95 is used.
pub(crate) const HISTORY_MIN_RUNS: usize = 20;
/// The history rule never flags an execution younger than this.
pub(crate) const HISTORY_FLOOR: Duration = Duration::from_secs(1);
/// Finished tasks a seed looks through (newest first) for its runs.
pub(crate) const HISTORY_SEED_SCAN: u32 = 20_000;
/// Seeds are read at most this often (and only while some served type wants runs).
pub(crate) const HISTORY_SEED_EVERY: Duration = Duration::from_secs(60);

/// A type's p95 and how many runs it was computed from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TypeHistory {
    pub(crate) p95: Duration,
    pub(crate) runs: u32,
}

#[derive(Debug, Default)]
struct Runs {
    /// This agent's newest [`HISTORY_RUNS`] runs; `next` is where the next one goes once full.
    own: Vec<Duration>,
    next: usize,
    /// Runs read from the database, used while `own` has fewer than [`HISTORY_MIN_RUNS`].
    seed: Vec<Duration>,
    /// The p95 of what is used, recomputed on the next read after a change.
    cached: Option<Option<TypeHistory>>,
}

impl Runs {
    fn push(&mut self, run: Duration) {
        if self.own.len() < HISTORY_RUNS {
            self.own.push(run);
        } else {
            self.own[self.next] = run;
            self.next = (self.next + 1) % HISTORY_RUNS;
        }
        if self.own.len() == HISTORY_MIN_RUNS {
            self.seed = Vec::new();
        }
        self.cached = None;
    }

    fn history(&mut self) -> Option<TypeHistory> {
        if let Some(h) = self.cached {
            return h;
        }
        let h = if self.own.len() >= HISTORY_MIN_RUNS {
            p95(&self.own)
        } else {
            p95(&self.seed)
        };
        self.cached = Some(h);
        h
    }
}

/// The p95 of `times` by nearest rank; `None` under [`HISTORY_MIN_RUNS`].
fn p95(times: &[Duration]) -> Option<TypeHistory> {
    if times.len() < HISTORY_MIN_RUNS {
        return None;
    }
    let mut sorted = times.to_vec();
    sorted.sort_unstable();
    // Nearest rank: the smallest value at or above 95 % of the runs.
    let rank = (sorted.len() * 95).div_ceil(100);
    Some(TypeHistory {
        p95: sorted[rank.saturating_sub(1)],
        runs: u32::try_from(sorted.len()).unwrap_or(u32::MAX),
    })
}

/// Every type's recent successful runs (see the module doc).
#[derive(Debug, Default)]
pub(crate) struct RunHistory {
    by_type: Mutex<HashMap<TaskType, Runs>>,
    last_seed: Mutex<Option<Instant>>,
}

impl RunHistory {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<TaskType, Runs>> {
        self.by_type
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// True (and the time noted) when a seed may be read now: none yet, or the last one
    /// [`HISTORY_SEED_EVERY`] ago.
    pub(crate) fn seed_due(&self, now: Instant) -> bool {
        let mut last = self
            .last_seed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if last.is_some_and(|t| now.saturating_duration_since(t) < HISTORY_SEED_EVERY) {
            return false;
        }
        *last = Some(now);
        true
    }

    /// One successful run of this agent's.
    pub(crate) fn record(&self, task_type: &TaskType, run: Duration) {
        let mut map = self.lock();
        match map.get_mut(task_type) {
            Some(runs) => runs.push(run),
            None => map.entry(task_type.clone()).or_default().push(run),
        }
    }

    /// The types among `types` that have fewer than [`HISTORY_MIN_RUNS`] runs of this agent's.
    pub(crate) fn wanting(&self, types: &[TaskType]) -> Vec<TaskType> {
        let map = self.lock();
        types
            .iter()
            .filter(|t| map.get(*t).is_none_or(|r| r.own.len() < HISTORY_MIN_RUNS))
            .cloned()
            .collect()
    }

    /// Runs of `task_type` read from the database (at most [`HISTORY_RUNS`] are kept), used
    /// while the type has fewer than [`HISTORY_MIN_RUNS`] runs of this agent's. A newer seed
    /// replaces the one held when it is enough for a p95 on its own, or larger; a smaller one
    /// (fewer of the type's runs among the newest finished tasks) leaves it, so a rare type
    /// keeps the last history it had rather than none.
    pub(crate) fn seed(&self, task_type: &TaskType, runs: &[Duration]) {
        let mut map = self.lock();
        let entry = map.entry(task_type.clone()).or_default();
        if entry.own.len() >= HISTORY_MIN_RUNS
            || (runs.len() < HISTORY_MIN_RUNS && runs.len() < entry.seed.len())
        {
            return;
        }
        entry.seed = runs.iter().take(HISTORY_RUNS).copied().collect();
        entry.cached = None;
    }

    /// The type's p95, when it has enough runs.
    pub(crate) fn get(&self, task_type: &TaskType) -> Option<TypeHistory> {
        self.lock().get_mut(task_type).and_then(Runs::history)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn tt(s: &str) -> TaskType {
        TaskType::new(s).unwrap()
    }

    #[test]
    fn no_p95_under_twenty_runs() {
        let h = RunHistory::default();
        for i in 0..19 {
            h.record(&tt("a"), ms(100 + i));
        }
        assert_eq!(h.get(&tt("a")), None);
        h.record(&tt("a"), ms(1000));
        let got = h.get(&tt("a")).unwrap();
        assert_eq!(got.runs, 20);
        // Nearest rank of 20: the 19th smallest.
        assert_eq!(got.p95, ms(118));
    }

    #[test]
    fn p95_by_nearest_rank_over_the_newest_runs() {
        let h = RunHistory::default();
        // 100 runs of 1..=100 ms: p95 is 95 ms.
        for i in 1..=100 {
            h.record(&tt("a"), ms(i));
        }
        assert_eq!(h.get(&tt("a")).unwrap().p95, ms(95));
        // 200 more of 10 s push every older run out of the ring.
        for _ in 0..200 {
            h.record(&tt("a"), ms(10_000));
        }
        let got = h.get(&tt("a")).unwrap();
        assert_eq!((got.p95, got.runs), (ms(10_000), HISTORY_RUNS as u32));
        // Then 189 of 1 ms: eleven of 10 s remain in the newest 200 (more than 5 %), so the
        // p95 is 10 s still; one more and only ten (5 %) remain.
        for _ in 0..189 {
            h.record(&tt("a"), ms(1));
        }
        assert_eq!(h.get(&tt("a")).unwrap().p95, ms(10_000));
        h.record(&tt("a"), ms(1));
        assert_eq!(h.get(&tt("a")).unwrap().p95, ms(1));
    }

    #[test]
    fn a_seed_serves_until_the_agent_has_runs_of_its_own() {
        let h = RunHistory::default();
        let seed: Vec<Duration> = (0..50).map(|_| ms(5_000)).collect();
        h.seed(&tt("a"), &seed);
        assert_eq!(
            h.get(&tt("a")).unwrap(),
            TypeHistory {
                p95: ms(5_000),
                runs: 50
            }
        );
        assert_eq!(h.wanting(&[tt("a"), tt("b")]), [tt("a"), tt("b")]);
        // The seed serves until the agent has twenty runs of its own; then they do.
        for _ in 0..19 {
            h.record(&tt("a"), ms(100));
        }
        assert_eq!(h.get(&tt("a")).unwrap().p95, ms(5_000));
        h.record(&tt("a"), ms(100));
        assert_eq!(
            h.get(&tt("a")).unwrap(),
            TypeHistory {
                p95: ms(100),
                runs: 20
            }
        );
        assert_eq!(h.wanting(&[tt("a"), tt("b")]), [tt("b")]);
        // A later seed changes nothing now.
        h.seed(&tt("a"), &seed);
        assert_eq!(h.get(&tt("a")).unwrap().p95, ms(100));
    }

    #[test]
    fn a_seed_too_small_for_a_p95_does_not_replace_one_that_is_not() {
        let h = RunHistory::default();
        h.seed(&tt("a"), &[ms(7); 30]);
        h.seed(&tt("a"), &[ms(9); 10]);
        assert_eq!(h.get(&tt("a")).unwrap().p95, ms(7));
        h.seed(&tt("a"), &[ms(8); 30]);
        assert_eq!(h.get(&tt("a")).unwrap().p95, ms(8));
        // A newer seed of at least twenty replaces a larger, older one.
        h.seed(&tt("a"), &[ms(6); 20]);
        assert_eq!(
            h.get(&tt("a")).unwrap(),
            TypeHistory {
                p95: ms(6),
                runs: 20
            }
        );
        h.seed(&tt("a"), &[ms(9); 300]);
        assert_eq!(
            h.get(&tt("a")).unwrap(),
            TypeHistory {
                p95: ms(9),
                runs: 200
            }
        );
    }
}
