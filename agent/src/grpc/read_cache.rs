//! Answers of slow reads, kept per request so that consoles polling them cost the database a
//! bounded share of one connection, however deep the queue (the overview and the Tasks view's
//! counts each count every waiting task: about 0.35 s a million).
//!
//! Invariant: for each key, the database answers at most one read per [`max_age`] of the last
//! one — callers of one key wait on the same read (its slot's lock is held across it) and share
//! its answer; keys do not wait on each other. An answer is served for `floor` or
//! [`COST_FACTOR`] times as long as its read took, whichever is longer, so the reads of one key
//! take at most a tenth of a connection's time — or, with no floor, only when its read took at
//! least `slow` (a fast read is read again, so what just changed shows at once). The answers
//! carry the database time they were read at, so a console can tell how old they are.
//!
//! An action that changes tasks or policies through this agent clears every answer
//! ([`ReadCache::clear`]), so the console that acted sees it at its next poll.
//!
//! When things fail: a failed read is not kept. The callers that waited on it then read each on
//! its own, at once and side by side (as without a cache), rather than one after another behind
//! the lock, so a database that times reads out never makes the last of them wait for all.
//! A new key beyond [`MAX_KEYS`] drops the answers no caller is using, stale ones first (keys in
//! use stay, so the map holds at most [`MAX_KEYS`] idle keys).

use std::collections::HashMap;
use std::future::Future;
use std::hash::Hash;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// An answer may be served this many times as long as its read took.
pub const COST_FACTOR: u32 = 10;
/// Keys kept at most.
pub const MAX_KEYS: usize = 64;

/// How long an answer whose read took `took` is served, at least `floor`.
pub fn max_age(floor: Duration, took: Duration) -> Duration {
    floor.max(took.saturating_mul(COST_FACTOR))
}

struct Answer<V> {
    at: Instant,
    took: Duration,
    value: V,
}

/// One key's last answer, and when its last read failed.
struct Kept<V> {
    answer: Option<Answer<V>>,
    failed_at: Option<Instant>,
}

impl<V> Default for Kept<V> {
    fn default() -> Self {
        Kept {
            answer: None,
            failed_at: None,
        }
    }
}

type Slot<V> = Arc<tokio::sync::Mutex<Kept<V>>>;

/// The last answer of each key.
pub struct ReadCache<K, V> {
    floor: Duration,
    slow: Duration,
    slots: std::sync::Mutex<HashMap<K, Slot<V>>>,
}

impl<K: Eq + Hash + Clone, V: Clone> ReadCache<K, V> {
    /// Serves each answer for at least `floor`, and for ten times as long as its read took when
    /// that took at least `slow`.
    pub fn new(floor: Duration, slow: Duration) -> Self {
        ReadCache {
            floor,
            slow,
            slots: std::sync::Mutex::new(HashMap::new()),
        }
    }

    fn fresh(&self, answer: &Answer<V>) -> bool {
        let took = if answer.took >= self.slow {
            answer.took
        } else {
            Duration::ZERO
        };
        answer.at.elapsed() < max_age(self.floor, took)
    }

    fn slot(&self, key: &K) -> Slot<V> {
        // A panic while the map was held cannot leave it half-changed: use it as it is.
        let mut slots = self
            .slots
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(slot) = slots.get(key) {
            return Arc::clone(slot);
        }
        if slots.len() >= MAX_KEYS {
            // Nobody waits on a slot only the map holds; a slot whose lock is taken is in use.
            let idle = |slot: &Slot<V>| Arc::strong_count(slot) == 1;
            slots.retain(|_, slot| {
                !idle(slot)
                    || slot
                        .try_lock()
                        .is_ok_and(|k| k.answer.as_ref().is_some_and(|a| self.fresh(a)))
            });
            if slots.len() >= MAX_KEYS {
                slots.retain(|_, slot| !idle(slot));
            }
        }
        Arc::clone(slots.entry(key.clone()).or_default())
    }

    /// The answer of `key` if fresh, else a new one from `read`.
    pub async fn get<E, F, Fut>(&self, key: K, read: F) -> Result<V, E>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<V, E>>,
    {
        let arrived = Instant::now();
        let slot = self.slot(&key);
        let mut kept = slot.lock().await;
        if let Some(a) = kept.answer.as_ref()
            && self.fresh(a)
        {
            return Ok(a.value.clone());
        }
        if kept.failed_at.is_some_and(|at| at > arrived) {
            // The read this caller waited on failed: its own, unkept and unserialised.
            drop(kept);
            return read().await;
        }
        let started = Instant::now();
        match read().await {
            Ok(value) => {
                kept.answer = Some(Answer {
                    at: Instant::now(),
                    took: started.elapsed(),
                    value: value.clone(),
                });
                Ok(value)
            }
            Err(e) => {
                kept.failed_at = Some(Instant::now());
                Err(e)
            }
        }
    }

    /// Drops every answer (what they counted has changed).
    pub fn clear(&self) {
        self.slots
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clear();
    }

    /// Keys kept now.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.slots
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    #[test]
    fn a_slow_read_is_served_ten_times_as_long_as_it_took() {
        let second = Duration::from_secs(1);
        assert_eq!(max_age(second, Duration::ZERO), second);
        assert_eq!(max_age(second, Duration::from_millis(100)), second);
        assert_eq!(
            max_age(second, Duration::from_millis(340)),
            Duration::from_millis(3400)
        );
        assert_eq!(
            max_age(Duration::ZERO, Duration::from_millis(2)),
            Duration::from_millis(20)
        );
        assert_eq!(max_age(second, Duration::MAX), Duration::MAX);
    }

    #[tokio::test]
    async fn one_read_per_key_while_fresh_and_a_failed_read_is_not_kept() {
        let cache: ReadCache<u32, u32> = ReadCache::new(Duration::from_secs(60), Duration::ZERO);
        let reads = AtomicU32::new(0);
        let read = |v: u32| {
            reads.fetch_add(1, Ordering::SeqCst);
            async move { Ok::<u32, String>(v) }
        };
        assert_eq!(cache.get(1, || read(10)).await, Ok(10));
        assert_eq!(
            cache.get(1, || read(11)).await,
            Ok(10),
            "served from the cache"
        );
        assert_eq!(cache.get(2, || read(20)).await, Ok(20), "another key reads");
        assert_eq!(reads.load(Ordering::SeqCst), 2);
        let failed = cache
            .get(3, || async { Err::<u32, String>("down".into()) })
            .await;
        assert_eq!(failed, Err("down".to_string()));
        assert_eq!(
            cache.get(3, || read(30)).await,
            Ok(30),
            "a failure is not kept"
        );
    }

    #[tokio::test]
    async fn without_a_floor_only_a_slow_read_is_kept() {
        let cache: ReadCache<u32, u32> = ReadCache::new(Duration::ZERO, Duration::from_millis(50));
        assert_eq!(cache.get(1, || async { Ok::<u32, ()>(1) }).await, Ok(1));
        assert_eq!(
            cache.get(1, || async { Ok::<u32, ()>(2) }).await,
            Ok(2),
            "fast: read again"
        );
        let slow = || async {
            tokio::time::sleep(Duration::from_millis(60)).await;
            Ok::<u32, ()>(3)
        };
        assert_eq!(cache.get(1, slow).await, Ok(3));
        assert_eq!(
            cache.get(1, || async { Ok::<u32, ()>(4) }).await,
            Ok(3),
            "slow: kept"
        );
    }

    // Tokio's clock is paused (sleeps end in order, at once): the side-by-side reads are timed
    // on it, so a loaded machine cannot make the test fail.
    #[tokio::test(start_paused = true)]
    async fn callers_share_one_read_and_after_a_failure_read_side_by_side() {
        let cache: Arc<ReadCache<u32, u32>> =
            Arc::new(ReadCache::new(Duration::from_secs(60), Duration::ZERO));
        let reads = Arc::new(AtomicU32::new(0));
        let slow = |v: u32, ok: bool| {
            let reads = Arc::clone(&reads);
            move || async move {
                reads.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(200)).await;
                if ok { Ok(v) } else { Err(format!("down {v}")) }
            }
        };
        // Three callers at once: one read, one answer for all.
        let (a, b, c) = tokio::join!(
            cache.get(1, slow(1, true)),
            cache.get(1, slow(2, true)),
            cache.get(1, slow(3, true))
        );
        assert_eq!((a, b, c), (Ok(1), Ok(1), Ok(1)));
        assert_eq!(reads.load(Ordering::SeqCst), 1);
        // A failing read: the two that waited on it then read side by side (200 ms each, not
        // one after the other), and nothing is kept.
        let started = tokio::time::Instant::now();
        let (a, b, c) = tokio::join!(
            cache.get(2, slow(1, false)),
            cache.get(2, slow(2, false)),
            cache.get(2, slow(3, false))
        );
        assert_eq!(a, Err("down 1".to_string()));
        assert_eq!(
            (b, c),
            (Err("down 2".to_string()), Err("down 3".to_string()))
        );
        assert_eq!(started.elapsed(), Duration::from_millis(400));
        assert_eq!(cache.get(2, slow(4, true)).await, Ok(4));
        // An action cleared the answers: read again.
        cache.clear();
        assert_eq!(cache.get(1, slow(5, true)).await, Ok(5));
    }

    #[tokio::test]
    async fn a_key_in_use_is_kept_and_fresh_answers_outlast_stale_ones() {
        // No floor: an answer is fresh for ten times as long as its read took.
        let cache: ReadCache<usize, usize> = ReadCache::new(Duration::ZERO, Duration::ZERO);
        let held = cache.slot(&0);
        for k in 1..MAX_KEYS {
            let read = || async move {
                if k <= 3 {
                    // Slow reads: fresh for two seconds.
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Ok::<usize, ()>(k)
            };
            assert_eq!(cache.get(k, read).await, Ok(k));
        }
        // The fast answers (fresh for ten times a few microseconds) are stale by now.
        tokio::time::sleep(Duration::from_millis(100)).await;
        // Full: a new key drops the idle keys with stale answers; key 0 (no answer) stays, a
        // caller holds it; the fresh answers of keys 1 to 3 stay.
        assert_eq!(
            cache.get(MAX_KEYS, || async { Ok::<usize, ()>(0) }).await,
            Ok(0)
        );
        assert!(cache.len() < MAX_KEYS, "{}", cache.len());
        assert!(
            Arc::ptr_eq(&held, &cache.slot(&0)),
            "the slot in use was dropped"
        );
        for k in 1..=3 {
            assert_eq!(cache.get(k, || async { Ok::<usize, ()>(99) }).await, Ok(k));
        }
    }

    #[tokio::test]
    async fn keys_beyond_the_bound_drop_idle_answers() {
        let cache: ReadCache<usize, usize> = ReadCache::new(Duration::ZERO, Duration::ZERO);
        for k in 0..MAX_KEYS * 2 {
            assert_eq!(cache.get(k, || async { Ok::<usize, ()>(k) }).await, Ok(k));
        }
        assert!(cache.len() <= MAX_KEYS, "{}", cache.len());
    }
}
