//! How fast each tenant's functions may log, in bytes per second.
//!
//! A log line costs its function one string; it costs the node a copy on
//! the tape, a row in the store, and later the sweep that trims it. The
//! per-invocation cap ([`HostLimits::log_max_bytes`](crate::HostLimits))
//! bounds one call, not a tenant calling back to back: eight callers of a
//! function logging a megabyte a call kept the node's two cores busy
//! with tapes and SQLite writes, and another tenant's p99 went to 8–11×
//! its idle figure. Past its rate (a token bucket per tenant, GCRA from
//! `governor`, [`crate::rates`]) a tenant's lines are dropped before they are copied
//! anywhere, and the invocation's log says how much was dropped.

use std::sync::atomic::{AtomicU64, Ordering};

use governor::clock::{Clock, DefaultClock};

use crate::rates::Buckets;

/// Each tenant's log bucket, and what the node dropped.
pub struct LogRates<C: Clock = DefaultClock> {
    buckets: Buckets<Box<str>, C>,
    dropped_bytes: AtomicU64,
}

impl<C: Clock + Clone> std::fmt::Debug for LogRates<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogRates")
            .field("per_second", &self.per_second())
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

impl<C: Clock + Clone> LogRates<C> {
    fn with_clock(per_second: u64, burst: u64, clock: C) -> LogRates<C> {
        LogRates {
            buckets: Buckets::with_clock(per_second, burst, clock),
            dropped_bytes: AtomicU64::new(0),
        }
    }

    /// Bytes a second one tenant may log.
    pub fn per_second(&self) -> u32 {
        self.buckets.per_second()
    }

    /// Takes `bytes` from `tenant`'s bucket: false (and counted as
    /// dropped) when the bucket holds fewer.
    pub fn take(&self, tenant: &str, bytes: usize) -> bool {
        let n = bytes.min(u32::MAX as usize) as u32;
        // The store looks keys up by their own type (one allocation a line).
        let allowed = n == 0 || self.buckets.take(&Box::from(tenant), n).is_ok();
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
    fn a_line_larger_than_the_burst_is_dropped_not_an_error() {
        let rates = LogRates::new(10, 10);
        assert!(!rates.take("a", 11));
        assert_eq!(rates.dropped_bytes(), 11);
    }
}
