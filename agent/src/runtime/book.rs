//! The lease book: every lease this agent holds, from claim until its completion (or release)
//! commits, and the local concurrency slots.
//!
//! ```text
//!   claim ──▶ executing ──handler ends──▶ completing ──commit──▶ (removed)
//!                 │                           │
//!                 └── lease lost ─────────────┴──▶ (removed; execution dropped, writes fenced)
//! ```
//!
//! A lease's *local safety deadline* is the monotonic instant of the last renewal that landed
//! (taken before the statement was sent) plus the TTL minus a margin. The database computed the
//! lease's expiry later than that instant, so past the local deadline the agent can no longer
//! prove it holds the lease and stops the execution — whatever the host clock says.
//!
//! Slots count executing handlers (the local concurrency limit, resizable at run time). Leases
//! waiting for their completion to commit do not hold a slot, so claims and completions overlap;
//! the book as a whole is capped at twice the limit so completions can never pile up unbounded.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use leasehold_shared::{LeaseEpoch, TaskId, TaskType};

use super::events::SlowRule;
use super::history::{HISTORY_FLOOR, RunHistory, TypeHistory};
use crate::handler::StopSignal;

/// One held lease.
#[derive(Debug)]
pub(crate) struct Lease {
    pub(crate) epoch: LeaseEpoch,
    pub(crate) task_type: TaskType,
    pub(crate) started: Instant,
    pub(crate) safe_until: Instant,
    pub(crate) slow_after: Duration,
    pub(crate) stop: Arc<StopSignal>,
    pub(crate) executing: bool,
    pub(crate) flagged_slow: bool,
    pub(crate) cancel_seen: bool,
}

/// The rule an execution running for `running` has passed, if any: its fixed threshold, or
/// its type's p95 (not before [`HISTORY_FLOOR`]); the lower limit when both have.
fn slow_rule(lease: &Lease, running: Duration, history: Option<TypeHistory>) -> Option<SlowRule> {
    let threshold = SlowRule::Threshold {
        after: lease.slow_after,
    };
    let history = history
        .map(|h| SlowRule::History {
            p95: h.p95.max(HISTORY_FLOOR),
            runs: h.runs,
        })
        .filter(|rule| rule.limit() < lease.slow_after);
    [history, Some(threshold)]
        .into_iter()
        .flatten()
        .find(|rule| running >= rule.limit())
}

/// A lease that just became something the runtime must act on.
#[derive(Debug)]
pub(crate) struct Noted {
    pub(crate) id: TaskId,
    pub(crate) epoch: LeaseEpoch,
    pub(crate) task_type: TaskType,
    pub(crate) running_for: Duration,
    pub(crate) stop: Arc<StopSignal>,
}

/// Hashes task ids for the book. They are database sequence numbers, never chosen by a client,
/// so a multiplicative hash spreads them well and costs a fraction of the default SipHash
/// (three book operations per task).
#[derive(Debug, Default)]
pub(crate) struct IdHasher(u64);

impl Hasher for IdHasher {
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(*b);
        }
    }

    fn write_i64(&mut self, n: i64) {
        self.0 = (self.0.rotate_left(5) ^ n as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

type Leases = HashMap<TaskId, Lease, BuildHasherDefault<IdHasher>>;

#[derive(Debug, Default)]
pub(crate) struct LeaseBook {
    leases: Mutex<Leases>,
    limit: AtomicUsize,
    executing: AtomicUsize,
    /// Slots promised to claims in flight (changed only under the `leases` lock).
    reserved: AtomicUsize,
}

impl LeaseBook {
    pub(crate) fn new(limit: u32) -> Self {
        Self {
            leases: Mutex::new(Leases::default()),
            limit: AtomicUsize::new(limit as usize),
            executing: AtomicUsize::new(0),
            reserved: AtomicUsize::new(0),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Leases> {
        // A panic while holding this lock cannot leave a half-made entry (every critical section
        // is a single insert/remove/field write), so a poisoned lock is still consistent.
        self.leases.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn limit(&self) -> usize {
        self.limit.load(Ordering::Relaxed)
    }

    pub(crate) fn set_limit(&self, limit: u32) {
        self.limit.store(limit as usize, Ordering::Relaxed);
    }

    pub(crate) fn executing(&self) -> usize {
        self.executing.load(Ordering::Relaxed)
    }

    pub(crate) fn len(&self) -> usize {
        self.lock().len()
    }

    /// How many tasks a claim may take now.
    pub(crate) fn free(&self) -> usize {
        let book = self.lock();
        self.free_locked(book.len())
    }

    fn free_locked(&self, held: usize) -> usize {
        let limit = self.limit();
        let reserved = self.reserved.load(Ordering::Relaxed);
        let executing = self.executing() + reserved;
        limit
            .saturating_sub(executing)
            .min((limit * 2).saturating_sub(held + reserved))
    }

    /// Promises up to `max` free slots to a claim about to run; returns how many. Claims in
    /// flight at once can never promise more than the limit between them.
    pub(crate) fn reserve(&self, max: usize) -> usize {
        let book = self.lock();
        let n = self.free_locked(book.len()).min(max);
        self.reserved.fetch_add(n, Ordering::Relaxed);
        n
    }

    /// Slots promised to claims in flight.
    pub(crate) fn reserved(&self) -> usize {
        self.reserved.load(Ordering::Relaxed)
    }

    /// Returns a claim's promise (after its tasks were inserted as executing).
    pub(crate) fn unreserve(&self, n: usize) {
        let _book = self.lock();
        self.reserved.fetch_sub(n, Ordering::Relaxed);
    }

    pub(crate) fn insert(&self, id: TaskId, lease: Lease) {
        let mut book = self.lock();
        if lease.executing {
            self.executing.fetch_add(1, Ordering::Relaxed);
        }
        if let Some(old) = book.insert(id, lease)
            && old.executing
        {
            // A newer claim of the same task (the old lease was lost meanwhile).
            self.executing.fetch_sub(1, Ordering::Relaxed);
            old.stop.stop(crate::handler::StopReason::LeaseLost);
        }
    }

    /// The handler ended: the slot is free; the lease stays until its completion commits.
    /// Returns false when the lease is no longer in the book (lost meanwhile).
    pub(crate) fn finish_execution(&self, id: TaskId, epoch: LeaseEpoch) -> bool {
        let mut book = self.lock();
        match book.get_mut(&id) {
            Some(lease) if lease.epoch == epoch => {
                if lease.executing {
                    lease.executing = false;
                    self.executing.fetch_sub(1, Ordering::Relaxed);
                }
                true
            }
            _ => false,
        }
    }

    /// Removes an executing lease the database says is gone (a lease whose handler already
    /// ended is left to the completer, whose own write says what became of it).
    pub(crate) fn remove_lost(&self, id: TaskId, epoch: LeaseEpoch) -> Option<Lease> {
        let mut book = self.lock();
        if book
            .get(&id)
            .is_some_and(|l| l.epoch == epoch && l.executing)
        {
            let lease = book.remove(&id)?;
            self.executing.fetch_sub(1, Ordering::Relaxed);
            return Some(lease);
        }
        None
    }

    /// Removes a lease (completion committed, fenced, released or lost).
    pub(crate) fn remove(&self, id: TaskId, epoch: LeaseEpoch) -> Option<Lease> {
        let mut book = self.lock();
        if book.get(&id).is_some_and(|l| l.epoch == epoch) {
            let lease = book.remove(&id)?;
            if lease.executing {
                self.executing.fetch_sub(1, Ordering::Relaxed);
            }
            return Some(lease);
        }
        None
    }

    /// The local safety deadline of the lease of `id`, if held.
    #[cfg(test)]
    pub(crate) fn safe_until(&self, id: TaskId) -> Option<Instant> {
        self.lock().get(&id).map(|l| l.safe_until)
    }

    /// Every held lease, for the batch renewal.
    pub(crate) fn keys(&self) -> Vec<(TaskId, LeaseEpoch)> {
        self.lock().iter().map(|(id, l)| (*id, l.epoch)).collect()
    }

    /// Extends the local safety deadline of renewed leases; returns the ones newly found
    /// cancel-requested.
    pub(crate) fn renewed(
        &self,
        renewed: &[(TaskId, LeaseEpoch, bool)],
        safe_until: Instant,
    ) -> Vec<Noted> {
        let now = Instant::now();
        let mut book = self.lock();
        let mut cancels = Vec::new();
        for (id, epoch, cancel) in renewed {
            if let Some(lease) = book.get_mut(id)
                && lease.epoch == *epoch
            {
                lease.safe_until = lease.safe_until.max(safe_until);
                if *cancel && !lease.cancel_seen {
                    lease.cancel_seen = true;
                    cancels.push(noted(*id, lease, now));
                }
            }
        }
        cancels
    }

    /// True when some executing lease is past its local safety deadline.
    pub(crate) fn has_unprovable(&self, now: Instant) -> bool {
        self.lock()
            .values()
            .any(|l| l.executing && l.safe_until <= now)
    }

    /// Removes and returns the executing leases whose local safety deadline has passed (a
    /// lease whose handler already ended stays: its completion is fenced if it came too late).
    pub(crate) fn take_unprovable(&self, now: Instant) -> Vec<Noted> {
        let mut book = self.lock();
        let gone: Vec<TaskId> = book
            .iter()
            .filter(|(_, l)| l.executing && l.safe_until <= now)
            .map(|(id, _)| *id)
            .collect();
        let mut out = Vec::with_capacity(gone.len());
        for id in gone {
            if let Some(lease) = book.remove(&id) {
                if lease.executing {
                    self.executing.fetch_sub(1, Ordering::Relaxed);
                }
                out.push(noted(id, &lease, now));
            }
        }
        out
    }

    /// Executions that just passed their slow threshold or their type's p95 (each reported
    /// once, with the rule that fired: the one with the lower limit when both have passed).
    /// The p95 is the type's as it stands now (so a lease taken before the history was read
    /// is judged by it too).
    pub(crate) fn newly_slow(&self, now: Instant, history: &RunHistory) -> Vec<(Noted, SlowRule)> {
        let mut book = self.lock();
        let mut out = Vec::new();
        for (id, lease) in book.iter_mut() {
            if !lease.executing || lease.flagged_slow {
                continue;
            }
            let running = now.saturating_duration_since(lease.started);
            if running < HISTORY_FLOOR.min(lease.slow_after) {
                continue;
            }
            if let Some(rule) = slow_rule(lease, running, history.get(&lease.task_type)) {
                lease.flagged_slow = true;
                out.push((noted(*id, lease, now), rule));
            }
        }
        out
    }

    /// Every held lease with its type and running time, for the Watch aggregator's
    /// reconciliation.
    pub(crate) fn brief(&self) -> Vec<(TaskId, LeaseEpoch, TaskType, Duration)> {
        let now = Instant::now();
        self.lock()
            .iter()
            .map(|(id, l)| (*id, l.epoch, l.task_type.clone(), now - l.started))
            .collect()
    }

    /// The stop signal of the lease on `id` at `epoch` if it is executing (operator cancel).
    ///
    /// The cancel counts as seen, so the next renewal that reports it does not stop (and log)
    /// the execution a second time. `None` when this epoch is not executing here or its
    /// cancel was already seen (by a renewal or an earlier call).
    pub(crate) fn cancel_here(&self, id: TaskId, epoch: LeaseEpoch) -> Option<Arc<StopSignal>> {
        let mut book = self.lock();
        let lease = book
            .get_mut(&id)
            .filter(|l| l.epoch == epoch && l.executing && !l.cancel_seen)?;
        lease.cancel_seen = true;
        Some(Arc::clone(&lease.stop))
    }

    /// Stop signals of every executing lease (shutdown).
    pub(crate) fn executing_stops(&self) -> Vec<Arc<StopSignal>> {
        self.lock()
            .values()
            .filter(|l| l.executing)
            .map(|l| Arc::clone(&l.stop))
            .collect()
    }

    /// Every lease, for a forced shutdown's release.
    pub(crate) fn drain_all(&self) -> Vec<(TaskId, Lease)> {
        let mut book = self.lock();
        let out = book.drain().collect();
        self.executing.store(0, Ordering::Relaxed);
        out
    }
}

fn noted(id: TaskId, lease: &Lease, now: Instant) -> Noted {
    Noted {
        id,
        epoch: lease.epoch,
        task_type: lease.task_type.clone(),
        running_for: now.saturating_duration_since(lease.started),
        stop: Arc::clone(&lease.stop),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(epoch: i64, safe_in: Duration) -> Lease {
        Lease {
            epoch: LeaseEpoch(epoch),
            task_type: TaskType::new("t").unwrap_or_else(|_| unreachable!()),
            started: Instant::now(),
            safe_until: Instant::now() + safe_in,
            slow_after: Duration::from_secs(60),
            stop: Arc::new(StopSignal::default()),
            executing: true,
            flagged_slow: false,
            cancel_seen: false,
        }
    }

    #[test]
    fn slow_rules_fire_once_the_lower_limit_is_passed() {
        let s = Duration::from_secs;
        let ms = Duration::from_millis;
        let l = lease(1, s(10));
        let h = |p95, runs| Some(TypeHistory { p95, runs });
        // No history: the threshold only.
        assert_eq!(slow_rule(&l, s(59), None), None);
        assert_eq!(
            slow_rule(&l, s(60), None),
            Some(SlowRule::Threshold { after: s(60) })
        );
        // A p95 under the threshold fires first, and is reported when both have passed.
        assert_eq!(slow_rule(&l, ms(4_999), h(s(5), 40)), None);
        let history = Some(SlowRule::History {
            p95: s(5),
            runs: 40,
        });
        assert_eq!(slow_rule(&l, s(5), h(s(5), 40)), history);
        assert_eq!(slow_rule(&l, s(90), h(s(5), 40)), history);
        // A p95 above the threshold never fires: the threshold comes first.
        assert_eq!(
            slow_rule(&l, s(400), h(s(300), 40)),
            Some(SlowRule::Threshold { after: s(60) })
        );
        // A p95 of milliseconds waits for the floor.
        assert_eq!(slow_rule(&l, ms(999), h(ms(3), 200)), None);
        assert_eq!(
            slow_rule(&l, HISTORY_FLOOR, h(ms(3), 200)),
            Some(SlowRule::History {
                p95: HISTORY_FLOOR,
                runs: 200
            })
        );
    }

    #[test]
    fn a_slow_execution_is_reported_once_by_the_history_it_has_now() {
        let book = LeaseBook::new(2);
        let history = RunHistory::default();
        let t = TaskType::new("t").unwrap_or_else(|_| unreachable!());
        let mut l = lease(1, Duration::from_secs(10));
        l.started = Instant::now() - Duration::from_secs(2);
        book.insert(TaskId(1), l);
        book.insert(TaskId(2), lease(1, Duration::from_secs(10)));
        // No history yet: two seconds is not slow.
        assert!(book.newly_slow(Instant::now(), &history).is_empty());
        // The history arrives after the claim: it applies.
        history.seed(&t, &[Duration::from_millis(1_500); 20]);
        let first = book.newly_slow(Instant::now(), &history);
        assert_eq!(first.len(), 1);
        assert_eq!(first[0].0.id, TaskId(1));
        assert!(matches!(first[0].1, SlowRule::History { runs: 20, .. }));
        assert!(book.newly_slow(Instant::now(), &history).is_empty());
    }

    #[test]
    fn slots_free_on_finish_and_the_book_caps_pending_completions() {
        let book = LeaseBook::new(2);
        assert_eq!(book.free(), 2);
        book.insert(TaskId(1), lease(1, Duration::from_secs(10)));
        book.insert(TaskId(2), lease(1, Duration::from_secs(10)));
        assert_eq!(book.free(), 0);
        assert!(book.finish_execution(TaskId(1), LeaseEpoch(1)));
        assert!(book.finish_execution(TaskId(2), LeaseEpoch(1)));
        assert_eq!(book.free(), 2);
        book.insert(TaskId(3), lease(1, Duration::from_secs(10)));
        book.insert(TaskId(4), lease(1, Duration::from_secs(10)));
        // Four leases held (two completing): the cap of 2 × limit is reached.
        assert_eq!(book.free(), 0);
        assert!(book.remove(TaskId(1), LeaseEpoch(1)).is_some());
        assert_eq!(book.free(), 0);
        assert!(book.finish_execution(TaskId(3), LeaseEpoch(1)));
        assert_eq!(book.free(), 1);
    }

    #[test]
    fn a_stale_epoch_never_touches_the_current_lease() {
        let book = LeaseBook::new(2);
        book.insert(TaskId(1), lease(2, Duration::from_secs(10)));
        assert!(!book.finish_execution(TaskId(1), LeaseEpoch(1)));
        assert!(book.remove(TaskId(1), LeaseEpoch(1)).is_none());
        assert_eq!(book.executing(), 1);
    }

    #[test]
    fn unprovable_leases_are_taken_out() {
        let book = LeaseBook::new(4);
        book.insert(TaskId(1), lease(1, Duration::ZERO));
        book.insert(TaskId(2), lease(1, Duration::from_secs(60)));
        let gone = book.take_unprovable(Instant::now());
        assert_eq!(gone.len(), 1);
        assert_eq!(gone[0].id, TaskId(1));
        assert_eq!(book.executing(), 1);
        let renewed = book.renewed(&[(TaskId(2), LeaseEpoch(1), true)], Instant::now());
        assert_eq!(renewed.len(), 1, "cancel seen once");
        assert!(
            book.renewed(&[(TaskId(2), LeaseEpoch(1), true)], Instant::now())
                .is_empty()
        );
    }
}
