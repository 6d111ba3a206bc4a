//! How fast each tenant's functions may log, in bytes per second.
//!
//! A log line costs its function one string; it costs the node a copy on
//! the tape, a row in the store, and later the sweep that trims it. The
//! per-invocation cap ([`HostLimits::log_max_bytes`](crate::HostLimits))
//! bounds one call, not a tenant calling back to back: eight callers of a
//! function logging a megabyte a call kept the node's two cores busy
//! with tapes and SQLite writes, and another tenant's p99 went to 8–11×
//! its idle figure. Past its rate (a token bucket per tenant, GCRA from
//! `governor`) a tenant's lines are dropped before they are copied
//! anywhere, and the invocation's log says how much was dropped.

use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use governor::clock::{Clock, DefaultClock};
use governor::middleware::NoOpMiddleware;
use governor::{Quota, RateLimiter, state::keyed::HashMapStateStore};

/// Tenants whose buckets are kept before full ones are forgotten.
const PRUNE_AT: usize = 4096;

/// A bucket per tenant, by name.
type Buckets<C> =
    RateLimiter<Box<str>, HashMapStateStore<Box<str>>, C, NoOpMiddleware<<C as Clock>::Instant>>;

/// Each tenant's log bucket, and what the node dropped.
pub struct LogRates<C: Clock = DefaultClock> {
    limiter: Buckets<C>,
    per_second: u32,
    dropped_bytes: AtomicU64,
    /// Buckets held when full ones are next forgotten: twice what a
    /// pruning left, so a node with more busy tenants than
    /// [`PRUNE_AT`] does not scan them all at every line.
    prune_at: AtomicUsize,
}

impl<C: Clock> std::fmt::Debug for LogRates<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogRates")
            .field("per_second", &self.per_second)
            .field("dropped_bytes", &self.dropped_bytes())
            .finish()
    }
}

impl LogRates {
    /// `per_second` bytes a second per tenant, up to `burst` at once
    /// (at least the rate; at most 4 GiB each).
    pub fn new(per_second: u64, burst: u64) -> LogRates {
        LogRates::with_clock(per_second, burst, DefaultClock::default())
    }
}

impl<C: Clock> LogRates<C> {
    fn with_clock(per_second: u64, burst: u64, clock: C) -> LogRates<C> {
        let clamp =
            |n: u64| NonZeroU32::new(n.clamp(1, u32::MAX as u64) as u32).expect("at least 1");
        let rate = clamp(per_second);
        let burst = clamp(burst.max(per_second));
        let quota = Quota::per_second(rate).allow_burst(burst);
        LogRates {
            limiter: RateLimiter::new(quota, HashMapStateStore::default(), clock),
            per_second: rate.get(),
            dropped_bytes: AtomicU64::new(0),
            prune_at: AtomicUsize::new(PRUNE_AT),
        }
    }

    /// Bytes a second one tenant may log.
    pub fn per_second(&self) -> u32 {
        self.per_second
    }

    /// Takes `bytes` from `tenant`'s bucket: false (and counted as
    /// dropped) when the bucket holds fewer.
    pub fn take(&self, tenant: &str, bytes: usize) -> bool {
        let Some(n) = NonZeroU32::new(bytes.min(u32::MAX as usize) as u32) else {
            return true;
        };
        if self.limiter.len() >= self.prune_at.load(Ordering::Relaxed) {
            self.limiter.retain_recent();
            let left = self.limiter.len();
            self.prune_at
                .store((left * 2).max(PRUNE_AT), Ordering::Relaxed);
        }
        // The store looks keys up by their own type (one allocation a line).
        let allowed = matches!(self.limiter.check_key_n(&Box::from(tenant), n), Ok(Ok(())));
        if !allowed {
            self.dropped_bytes
                .fetch_add(bytes as u64, Ordering::Relaxed);
        }
        allowed
    }

    /// Bytes of log lines dropped over the rate since the node started.
    pub fn dropped_bytes(&self) -> u64 {
        self.dropped_bytes.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tenant_past_its_burst_is_refused_and_others_are_not() {
        let rates = LogRates::new(1000, 4000);
        assert!(rates.take("a", 3000));
        assert!(rates.take("a", 1000));
        assert!(!rates.take("a", 1000), "the burst is spent");
        assert_eq!(rates.dropped_bytes(), 1000);
        assert!(rates.take("b", 4000), "b has a bucket of its own");
        assert!(rates.take("a", 0), "nothing to log costs nothing");
    }

    #[test]
    fn the_bucket_refills_at_the_rate() {
        let clock = governor::clock::FakeRelativeClock::default();
        let rates = LogRates::with_clock(100_000, 100_000, clock.clone());
        assert!(rates.take("a", 100_000));
        assert!(!rates.take("a", 50_000));
        clock.advance(std::time::Duration::from_millis(400));
        assert!(!rates.take("a", 50_000), "0.4 s at 100 kB/s refills 40 kB");
        clock.advance(std::time::Duration::from_millis(200));
        assert!(rates.take("a", 50_000), "0.6 s refills 60 kB");
    }

    #[test]
    fn full_buckets_are_forgotten_and_busy_ones_kept() {
        let clock = governor::clock::FakeRelativeClock::default();
        let rates = LogRates::with_clock(1000, 1000, clock.clone());
        for t in 0..PRUNE_AT {
            assert!(rates.take(&format!("idle{t}"), 10));
        }
        // A second on, the idle buckets are full again: busy's first line
        // finds 4096 buckets and forgets them, then spends its own.
        clock.advance(std::time::Duration::from_secs(1));
        assert!(rates.take("busy", 1000));
        assert_eq!(rates.limiter.len(), 1);
        assert!(!rates.take("busy", 1000), "busy's bucket is kept, empty");
    }

    #[test]
    fn a_line_larger_than_the_burst_is_dropped_not_an_error() {
        let rates = LogRates::new(10, 10);
        assert!(!rates.take("a", 11));
        assert_eq!(rates.dropped_bytes(), 11);
    }
}
