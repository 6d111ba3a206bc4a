//! A token bucket per key (GCRA from `governor`), for rates the node
//! holds many parties to: each tenant's log bytes
//! ([`crate::log_rate`]), each client's request bodies (`hearth-api`).
//!
//! A bucket is kept while it is not full; full ones are forgotten (a
//! fresh bucket is full), so the map holds only parties that spent
//! something lately. Whether to forget is asked every [`CHECK_EVERY`]
//! takes, not at each: the map's size is behind the same lock as the
//! take.

use std::hash::Hash;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use governor::clock::{Clock, DefaultClock};
use governor::middleware::NoOpMiddleware;
use governor::{Quota, RateLimiter, state::keyed::HashMapStateStore};

/// Buckets kept before full ones are forgotten.
const PRUNE_AT: usize = 4096;

/// Takes between two looks at how many buckets are kept.
const CHECK_EVERY: usize = 256;

/// A bucket per key of `per_second` units a second, `burst` at once.
pub struct Buckets<K: Hash + Eq + Clone, C: Clock = DefaultClock> {
    limiter: RateLimiter<K, HashMapStateStore<K>, C, NoOpMiddleware<C::Instant>>,
    clock: C,
    per_second: u32,
    takes: AtomicUsize,
    /// Buckets kept when full ones are next forgotten: twice what a
    /// pruning left, so a node with more busy parties than [`PRUNE_AT`]
    /// does not scan them all at each check.
    prune_at: AtomicUsize,
}

impl<K: Hash + Eq + Clone> Buckets<K> {
    /// `per_second` units a second per key, up to `burst` at once (at
    /// least the rate; each at least 1 and at most `u32::MAX`).
    pub fn new(per_second: u64, burst: u64) -> Self {
        Buckets::with_clock(per_second, burst, DefaultClock::default())
    }
}

impl<K: Hash + Eq + Clone, C: Clock + Clone> Buckets<K, C> {
    /// [`Buckets::new`] on `clock` (a test's fake one).
    pub fn with_clock(per_second: u64, burst: u64, clock: C) -> Self {
        let clamp =
            |n: u64| NonZeroU32::new(n.clamp(1, u32::MAX as u64) as u32).expect("at least 1");
        let rate = clamp(per_second);
        let quota = Quota::per_second(rate).allow_burst(clamp(burst.max(per_second)));
        Buckets {
            limiter: RateLimiter::new(quota, HashMapStateStore::default(), clock.clone()),
            clock,
            per_second: rate.get(),
            takes: AtomicUsize::new(0),
            prune_at: AtomicUsize::new(PRUNE_AT),
        }
    }

    /// Units a second per key.
    pub fn per_second(&self) -> u32 {
        self.per_second
    }

    /// Takes `n` units from `key`'s bucket. Refused: how long until it
    /// holds them, or `None` when `n` is more than a bucket holds.
    pub fn take(&self, key: &K, n: u32) -> Result<(), Option<Duration>> {
        let Some(n) = NonZeroU32::new(n) else {
            return Ok(());
        };
        if self
            .takes
            .fetch_add(1, Ordering::Relaxed)
            .is_multiple_of(CHECK_EVERY)
            && self.limiter.len() >= self.prune_at.load(Ordering::Relaxed)
        {
            self.limiter.retain_recent();
            let left = self.limiter.len();
            self.prune_at
                .store((left * 2).max(PRUNE_AT), Ordering::Relaxed);
        }
        match self.limiter.check_key_n(key, n) {
            Ok(Ok(())) => Ok(()),
            Ok(Err(not_until)) => Err(Some(not_until.wait_time_from(self.clock.now()))),
            Err(_) => Err(None),
        }
    }

    /// Buckets kept now.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.limiter.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use governor::clock::FakeRelativeClock;

    #[test]
    fn a_key_past_its_burst_waits_and_others_do_not() {
        let clock = FakeRelativeClock::default();
        let b = Buckets::with_clock(100, 300, clock.clone());
        assert_eq!(b.take(&"a", 300), Ok(()));
        let wait = b.take(&"a", 50).unwrap_err().expect("it fits a bucket");
        assert_eq!(wait, Duration::from_millis(500), "50 at 100 a second");
        assert_eq!(b.take(&"b", 300), Ok(()), "b has a bucket of its own");
        clock.advance(wait);
        assert_eq!(b.take(&"a", 50), Ok(()));
        assert_eq!(b.take(&"a", 0), Ok(()), "nothing costs nothing");
        assert_eq!(b.take(&"a", 301), Err(None), "more than a bucket holds");
    }

    #[test]
    fn full_buckets_are_forgotten_and_busy_ones_kept() {
        let clock = FakeRelativeClock::default();
        let b = Buckets::with_clock(1000, 1000, clock.clone());
        for t in 0..PRUNE_AT {
            assert!(b.take(&format!("idle{t}"), 10).is_ok());
        }
        // A second on, the idle buckets are full again: busy's take is
        // the one that checks, finds 4096 and forgets them.
        clock.advance(Duration::from_secs(1));
        assert!(b.take(&"busy".to_string(), 1000).is_ok());
        assert_eq!(b.len(), 1);
        assert!(
            b.take(&"busy".to_string(), 1000).is_err(),
            "busy's bucket is kept, empty"
        );
    }
}
